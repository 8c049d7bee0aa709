"""The parser's side of a job's reading rules (``ReadingRules``): documents with a DOCTYPE (``allow_doctype``),
the size warning (``warn_bytes``), and text lines without a scheme (``schemeless``); and the URL rules the
screen applies (``harvester.url_rules``: repair, the sitemaps.org location rule). Cases from crawler-commons'
own tests name their source (crawler-commons/crawler-commons, src/test/java/crawlercommons/sitemaps/)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from harvester.limits import SITEMAP_MAX_BYTES
from harvester.sitemap import SitemapParser, parse_bytes
from harvester.sitemap.entries import OVER_WARN_SIZE
from harvester.url_rules import SitemapLocation, directory_of, repaired

from .helpers import feed_in_pieces, fixture, urls, urlset

URL = "http://www.example.com/sitemap.xxe.xml"


def _xxe(target: Path) -> bytes:
    """crawler-commons' document: an external entity naming a local file, referenced as a <loc>."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<!DOCTYPE urlset [\n"
        f'  <!ENTITY test SYSTEM "file://{target}">\n'
        "]>\n"
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        "  <url>\n    <loc>http://www.example.com/visit-here</loc>\n    <lastmod>2019-06-19</lastmod>\n   </url>\n"
        "  <url>\n    <loc>&test;</loc>\n    <lastmod>2019-06-19</lastmod>\n  </url>\n"
        "</urlset>"
    ).encode()


@pytest.fixture
def do_not_visit(tmp_path: Path) -> Path:
    """crawler-commons' do-not-visit.txt: a file that would be read were external entities resolved."""
    path = tmp_path / "do-not-visit.txt"
    path.write_text("http://www.example.com/do-not-visit\n")
    return path


# Documents with a DOCTYPE.


def test_an_external_entity_refuses_the_document_without_the_rule(do_not_visit: Path) -> None:
    # crawler-commons SiteMapParserTest.testSitemapXXE: an UnknownFormatException there, not a sitemap here.
    entries, report = parse_bytes(URL, _xxe(do_not_visit))
    assert entries == []
    assert report.error is not None and report.error.startswith("not a sitemap: it declares an entity")


def test_with_the_rule_the_document_is_read_and_the_external_entity_never(do_not_visit: Path) -> None:
    # crawler-commons SiteMapParserTest.testSitemapXXEWithDocTypeAllowed: one URL, the entity ignored.
    for entries, report in (
        parse_bytes(URL, _xxe(do_not_visit), allow_doctype=True),
        feed_in_pieces(URL, _xxe(do_not_visit), allow_doctype=True),
    ):
        assert report.error is None and report.truncated is None
        assert urls(entries) == ["http://www.example.com/visit-here"]
        assert report.warnings == {"external_entity": 1, "missing_loc": 1}


def test_with_the_rule_an_external_dtd_is_named_and_never_fetched() -> None:
    document = (
        b'<?xml version="1.0"?>\n<!DOCTYPE urlset PUBLIC "-//Example//DTD Sitemap//EN" "http://evil.example/x.dtd">\n'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://www.example.org/a</loc></url>'
        b"</urlset>"
    )
    _, refused = parse_bytes(URL, document)
    assert refused.error is not None and "external DTD" in refused.error
    entries, report = parse_bytes(URL, document, allow_doctype=True)
    assert report.error is None
    assert urls(entries) == ["https://www.example.org/a"]


def test_with_the_rule_an_unparsed_entity_and_a_notation_are_read_past() -> None:
    document = (
        b'<!DOCTYPE urlset [<!NOTATION gif SYSTEM "image/gif"><!ENTITY logo SYSTEM "http://evil.example/l.gif" NDATA'
        b" gif>]><urlset><url><loc>https://www.example.org/a</loc></url></urlset>"
    )
    assert parse_bytes(URL, document)[1].error is not None
    entries, report = parse_bytes(URL, document, allow_doctype=True)
    assert report.error is None
    assert urls(entries) == ["https://www.example.org/a"]


@pytest.mark.parametrize(
    ("name", "document"),
    [
        ("billion laughs", fixture("billion_laughs.xml")),
        (
            "an internal entity",
            b'<!DOCTYPE urlset [<!ENTITY host "www.example.org">]><urlset><url><loc>https://&host;/a</loc></url>'
            b"</urlset>",
        ),
        (
            "a parameter entity",
            b'<!DOCTYPE urlset [<!ENTITY % dtd SYSTEM "http://evil.example/p.dtd"> %dtd;]><urlset><url>'
            b"<loc>https://www.example.org/a</loc></url></urlset>",
        ),
        (
            "an internal parameter entity",
            b"<!DOCTYPE urlset [<!ENTITY % e \"<!ENTITY x 'y'>\"> %e;]><urlset><url><loc>https://www.example.org/&x;"
            b"</loc></url></urlset>",
        ),
    ],
)
def test_with_the_rule_an_entity_that_would_expand_still_refuses_the_document(name: str, document: bytes) -> None:
    for entries, report in (
        parse_bytes(URL, document, allow_doctype=True),
        feed_in_pieces(URL, document, allow_doctype=True),
    ):
        assert entries == [], name
        assert report.error is not None and report.error.startswith("not a sitemap: it declares an entity"), name


def test_with_the_rule_an_html_page_is_still_not_a_sitemap() -> None:
    document = b'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN" "http://www.w3.org/x.dtd"><html></html>'
    _, report = parse_bytes(URL, document, allow_doctype=True)
    assert report.error == "not a sitemap: root element <html> (an HTML page)"


# The size warning.


def test_a_sitemap_past_the_warning_size_is_warned_of_once_and_read_whole() -> None:
    document = urlset(200)
    entries, report = feed_in_pieces(URL, document, size=1000, warn_bytes=len(document) // 3)
    assert len(entries) == 200
    assert report.truncated is None
    assert report.warnings == {OVER_WARN_SIZE: 1}


def test_the_warning_size_counts_uncompressed_bytes() -> None:
    document = urlset(200)
    squeezed = gzip.compress(document)
    assert len(squeezed) < len(document) // 4
    _, report = parse_bytes(URL, squeezed, warn_bytes=len(document) // 2)
    assert report.warnings == {OVER_WARN_SIZE: 1}
    _, under = parse_bytes(URL, squeezed, warn_bytes=len(document))
    assert under.warnings == {}


def test_no_warning_at_the_size_or_with_none() -> None:
    document = urlset(50)
    assert parse_bytes(URL, document, warn_bytes=len(document))[1].warnings == {}
    assert parse_bytes(URL, document, warn_bytes=0)[1].warnings == {}


def test_a_sitemap_cut_at_the_limit_was_warned_of_before() -> None:
    document = urlset(200)
    parser = SitemapParser(URL, max_bytes=len(document) // 2, warn_bytes=len(document) // 4)
    parser.feed(document)
    parser.close()
    assert parser.report.truncated is not None
    assert parser.report.warnings == {OVER_WARN_SIZE: 1}


def test_the_default_limit_is_above_any_warning_size_a_job_may_set() -> None:
    from harvester.model.reading import DEFAULT_WARN_SIZE, ReadingRules

    assert DEFAULT_WARN_SIZE < SITEMAP_MAX_BYTES
    with pytest.raises(ValueError, match="warn_size"):
        ReadingRules(warn_size=SITEMAP_MAX_BYTES)


# Text lines without a scheme, for the screen to repair.


def test_a_text_line_without_a_scheme_is_an_entry_only_for_repair() -> None:
    # crawler-commons SiteMapParserTest.testSitemapTXTfilterUrls (with BasicURLNormalizer as URL filter).
    text = b"www.example.com/catalog?item=1\nhttp://www.example.com/catalog?item=11#anchor\nnot a url\nmailto:x@y.z"
    entries, report = parse_bytes("http://www.example.com/sitemap.txt", text)
    assert urls(entries) == ["http://www.example.com/catalog?item=11#anchor"]
    assert report.warnings == {"not_a_url": 3}
    parser = SitemapParser("http://www.example.com/sitemap.txt", schemeless=True)
    entries = parser.feed(text) + parser.close()
    assert urls(entries) == ["www.example.com/catalog?item=1", "http://www.example.com/catalog?item=11#anchor"]
    assert parser.report.warnings == {"not_a_url": 2}


# The URL rules.


@pytest.mark.parametrize(
    ("written", "fixed"),
    [
        # crawler-commons SiteMapParserTest.testSitemapXMLfilterUrls: "http://" removed from the first URL.
        (
            "www.example.com/catalog?item=12&desc=vacation_hawaii",
            "https://www.example.com/catalog?item=12&desc=vacation_hawaii",
        ),
        ("www.example.com", "https://www.example.com"),
        ("127.0.0.1:8080/a", "https://127.0.0.1:8080/a"),
        ("localhost/a", "https://localhost/a"),
        ("//cdn.example.com/x", "https://cdn.example.com/x"),
        ("/catalog/a?b=1", "https://www.example.com:8443/catalog/a?b=1"),
        ("mailto:someone@example.com", None),
        ("javascript:void(0)", None),
        ("catalog", None),
        ("www.example.com/a b", None),
        ("", None),
    ],
)
def test_repair_gives_a_url_the_sitemaps_scheme(written: str, fixed: str | None) -> None:
    assert repaired(written, "https://www.example.com:8443/sitemaps/s.xml") == fixed


def test_the_location_rule_of_sitemaps_org() -> None:
    # crawler-commons SiteMapParserTest.testFileLocationValidation (sitemaps.org's own examples).
    location = SitemapLocation(["http://example.com/catalog/sitemap.xml"], declared_host=None)
    assert location.allows("http://example.com/catalog/show?item=233&user=3453")
    assert not location.allows("http://example.com/image/show?item=233&user=3453")
    assert not location.allows("https://example.com/catalog/page1.php")
    # ("do not use / in query part to determine base location")
    assert directory_of("https://example.com/index.php?route=path/sitemap") == "https://example.com/"
    location = SitemapLocation(["https://example.com/index.php?route=path/sitemap"], declared_host=None)
    assert location.allows("https://example.com/catalog/page1.php")


def test_a_redirect_adds_the_directory_read_from() -> None:
    location = SitemapLocation(["http://example.com/catalog/sitemap.xml"], declared_host=None)
    location.at("https://example.com/catalog/sitemap.xml")
    assert location.allows("https://example.com/catalog/page1.php")
    assert not location.allows("https://example.com/other/page1.php")


def test_a_sitemap_robots_txt_declared_may_list_any_url_of_its_host() -> None:
    # crawler-commons SiteMapCrossSubmitValidatorTest.testValidateCrossSubmitHost: a sitemap on www. announced in
    # blog.'s robots.txt lists blog.'s URLs; announced in another host's robots.txt, none.
    content = ["https://blog.example.com/blog-1.html", "https://blog.example.com/blog-2.html"]
    declared = SitemapLocation(["https://www.example.com/sitemap.txt"], declared_host="blog.example.com")
    assert all(declared.allows(url) for url in content)
    other = SitemapLocation(["https://www.example.com/sitemap.txt"], declared_host="www.otherdomain.com")
    assert not any(other.allows(url) for url in content)
    # SiteMapCrossSubmitValidatorTest.testValidateURLs: a sitemap's own host and directory need no declaration.
    own = SitemapLocation(["https://blog.example.com/sitemap.txt"], declared_host=None)
    assert all(own.allows(url) for url in content)
