"""A urlset's ``<url>`` elements told apart as bytes (harvester.sitemap.elements): which elements two versions
share, and that an element parses alone (in a document of the head and the changed elements) as it did in
its own version; documents whose elements cannot be cut safely are refused."""

from __future__ import annotations

import gzip

import pytest

from harvester.inflate import inflated
from harvester.sitemap import SitemapParser
from harvester.sitemap.elements import ElementDiff, element_loc, element_locs, url_elements

HEAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    b' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">\n'
)


def element(n: int, lastmod: str = "2026-01-01") -> bytes:
    image = b"<image:image><image:loc>https://example.com/i/%d.jpg</image:loc></image:image>" % n if n % 3 else b""
    return b"<url><loc>https://example.com/p/%d?a=1&amp;b=2</loc><lastmod>%s</lastmod>%s</url>" % (
        n,
        lastmod.encode(),
        image,
    )


def urlset(elements: list[bytes], *, between: bytes = b"\n") -> bytes:
    return HEAD + between.join(elements) + b"\n</urlset>\n"


def entries(document: bytes) -> list[object]:
    parser = SitemapParser("https://example.com/sitemap.xml")
    found = [*parser.feed(document), *parser.close()]
    assert parser.report.error is None and parser.report.truncated is None
    return found


def test_two_versions_share_their_unchanged_elements_and_the_others_parse_alone_as_they_did():
    old = [element(n) for n in range(20)]
    new = [e for n, e in enumerate(old) if n not in (3, 7)]  # two removed
    new[5] = element(6, "2026-02-02")  # one changed
    new.insert(0, element(100))  # one added, first
    diff = ElementDiff.of(urlset(old), urlset(new))
    assert diff is not None
    assert diff.kept == 17
    assert diff.added == [element(100), element(6, "2026-02-02")]
    assert diff.removed == [element(3), element(6), element(7)]
    # Alone, the added elements give what they gave in the new version, in its order.
    alone = entries(ElementDiff.document(diff.head, diff.added))
    everything = entries(urlset(new))
    assert alone == [everything[0], everything[6]]
    # And the kept ones are, entry for entry, entries of the old version.
    kept = [e for e in everything if e not in alone]
    assert len(kept) == diff.kept and all(e in entries(urlset(old)) for e in kept)


def test_an_element_repeated_in_the_new_version_is_kept_once_and_read_again():
    old = [element(n) for n in range(5)]
    diff = ElementDiff.of(urlset(old), urlset([*old, old[2]]))
    assert diff is not None and diff.kept == 5 and diff.added == [old[2]] and diff.removed == []


@pytest.mark.parametrize(
    "new",
    [
        urlset([element(0), b"<!-- </url> -->", element(1)]),
        urlset([element(0), b"<url><loc><![CDATA[https://example.com/x</url>]]></loc></url>"]),
        urlset([element(0), element(1)], between=b"\ntext\n"),
        urlset([element(0), b'<url xml:lang="en"><loc>https://example.com/x</loc></url>']),
        urlset([element(0), b"<url><loc>https://example.com/x</loc><url></url></url>"]),
        urlset([element(0), b"<?pi x?>", element(1)]),
        HEAD.replace(b"urlset", b"sm:urlset") + element(0) + b"</sm:urlset>",
        urlset([element(0)]).replace(b"</urlset>", b"</urlset><x/>"),
        urlset([element(0)]).replace(b"\n</urlset>", b"\x0c</urlset>"),
        b'<?xml version="1.0"?>\n<!-- '
        + element(0).replace(b"<url>", b"<url> -->" + HEAD[39:] + b"<url >", 1)
        + b"\n</urlset>",
        urlset([element(0), b"<url><loc>https://example.com/x</loc></url> --> <url><loc>y</loc></url>"]),
    ],
    ids=[
        "comment",
        "cdata",
        "text between",
        "attribute",
        "nested",
        "instruction",
        "prefixed",
        "after the end",
        "form feed",
        "head in a comment",
        "comment end",
    ],
)
def test_a_document_whose_elements_cannot_be_cut_safely_is_refused(new):
    assert ElementDiff.of(urlset([element(0), element(1)]), new) is None


def test_versions_with_other_heads_or_an_old_element_twice_are_refused():
    old = [element(0), element(1)]
    other_head = urlset(old).replace(b' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"', b"")
    assert ElementDiff.of(urlset(old), other_head) is None
    assert ElementDiff.of(urlset([*old, old[0]]), urlset(old)) is None
    assert url_elements(b"<urlset></urlset>") is None


def test_a_body_is_read_inflated_if_gzipped_within_the_limit():
    body = urlset([element(n) for n in range(50)])
    assert inflated(body, limit=len(body)) == body
    assert inflated(gzip.compress(body), limit=len(body)) == body
    assert inflated(gzip.compress(body), limit=len(body) - 1) is None
    assert inflated(body, limit=len(body) - 1) is None
    assert inflated(gzip.compress(body)[:-20], limit=len(body)) is None


def test_the_kept_elements_urls_are_read_without_parsing_where_their_loc_is_plain():
    old = [element(n) for n in range(4)]
    diff = ElementDiff.of(urlset(old), urlset(old[:3]))
    assert diff is not None and diff.urls == {f"https://example.com/p/{n}?a=1&b=2" for n in range(3)}
    assert element_loc(b"<url><loc>\n  https://example.com/a \n</loc></url>") == "https://example.com/a"
    assert element_loc(b"<url><loc>https://example.com/&#97;</loc></url>") is None
    assert element_loc(b"<url><loc>a</loc><x:y><loc>b</loc></x:y></url>") is None
    odd = [element(0), b"<url><loc>https://example.com/&lt;</loc></url>"]
    found = ElementDiff.of(urlset(odd), urlset(odd))
    assert found is not None and found.kept == 2 and found.urls is None


ODD_ELEMENTS = [
    b"<url><loc> https://example.com/spaced \n</loc></url>",
    b"<url><loc>https://example.com/q?a=1&amp;b=2</loc></url>",
    b"<url><loc>https://example.com/caf\xc3\xa9</loc></url>",
    b"<url><loc></loc></url>",
    b"<url><loc>https://example.com/line\nbreak</loc></url>",  # (a break inside the text)
    b"<url><loc>https://example.com/<b>bold</b></loc></url>",  # (markup inside the text)
    b"<url><loc>https://example.com/lt&lt;</loc></url>",  # (another reference)
    b"<url><loc>https://example.com/a</loc><loc>https://example.com/b</loc></url>",  # (two)
    b"<url><lastmod>2026-01-01</lastmod></url>",  # (none)
    b"<url><loc>https://example.com/\xff</loc></url>",  # (not UTF-8)
]


@pytest.mark.parametrize("odd", range(len(ODD_ELEMENTS)))
def test_the_urls_of_many_elements_are_read_at_once_as_one_at_a_time(odd: int) -> None:
    elements = [element(n).removesuffix(b"</url>") for n in range(20)]
    elements.insert(7, ODD_ELEMENTS[odd].removesuffix(b"</url>"))
    one_by_one = [element_loc(e) for e in elements]
    expected = None if None in one_by_one else set(one_by_one)
    assert element_locs(elements) == expected
    assert element_locs([]) == set()
