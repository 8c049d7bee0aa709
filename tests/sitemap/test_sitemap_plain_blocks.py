"""The plain-block reader (``sitemap/plain_urls.py``) against expat's callbacks.

The reader is only an optimisation: for any document, chunking, limit and cut, a parse with it must give
exactly what a parse without it gives (the same entries, warnings, and error or truncation reason, line
and column included). The documents are built from canonical blocks, which the reader takes, and every
variation real sitemaps show, which it must leave to expat, then corrupted at random.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harvester.sitemap import Entry, ParseReport, SitemapParser
from harvester.sitemap.plain_urls import PlainUrls
from harvester.sitemap.xml_parser import XmlParser

from .helpers import urlset

SETTINGS = settings(
    max_examples=int(os.environ.get("SITEMAP_PROPERTY_EXAMPLES", "120")) * 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
URL = "https://example.org/sitemap.xml"


@dataclass
class Taken:
    """What the plain-block reader took during a parse."""

    characters: int = 0
    entries: int = 0


@contextmanager
def plain_blocks(enabled: bool) -> Iterator[Taken]:
    """Parses in the block are made with or without the reader; counts what it takes."""
    saved, read = XmlParser.read_plain_blocks, PlainUrls.read
    taken = Taken()

    def counting(self: PlainUrls, text: str, start: int, *, plain: bool) -> int:
        before = self._sink.count
        took = 0
        try:
            took = read(self, text, start, plain=plain)
            return took
        finally:
            taken.characters += took
            taken.entries += self._sink.count - before

    XmlParser.read_plain_blocks = enabled
    PlainUrls.read = counting  # type: ignore[method-assign]
    try:
        yield taken
    finally:
        XmlParser.read_plain_blocks = saved
        PlainUrls.read = read  # type: ignore[method-assign]


def parse(
    document: bytes,
    cuts: list[int],
    *,
    complete: bool = True,
    max_entries: int = 50_000,
    max_bytes: int = 50 * 1024 * 1024,
    plain: bool,
):
    with plain_blocks(plain) as taken:
        parser = SitemapParser(URL, max_entries=max_entries, max_bytes=max_bytes)
        entries: list[Entry] = []
        previous = 0
        for cut in [*sorted(cuts), len(document)]:
            entries += parser.feed(document[previous:cut])
            previous = max(previous, cut)
        entries += parser.close(complete=complete)
    report: ParseReport = parser.report
    return entries, (report.kind, report.error, report.truncated, report.warnings), taken


# Pieces of text, weighted towards what sitemaps hold, with every character class the reader must either
# read exactly as expat does or refuse.
TEXT = st.sampled_from(
    [
        *["https://example.org/", "page/", "a", "b-1.html", "?q=1", "2024-01-01", "2023-06-14T09:21:07+00:00"],
        *["daily", "weekly", "0.8", "1.0", "de", "pt-br", "x"] * 2,
        *["é", "中", "𝄞", "\u00a0", "\u2028", "\ufeff", " ", "\t", "\n", "\r\n", "\r"],
        *["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&nbsp;", "&#x41;", "&#65;", "&#1;", "&bogus;", "&"],
        *["<", ">", '"', "'", "]]>", "]]", "]", "\x01", "\x0b", "\x7f", "\ufffe"],
        *["<![CDATA[x]]>", "<!-- c -->", "<?pi x?>", "<b>", "</b>", "<br/>"],
    ]
)
PLAIN_TEXT = st.sampled_from(
    ["https://example.org/", "page/", "a", "b-1.html", "?q=1&amp;r=2", "2024-01-01", "daily", "0.5", "é"]
)
SPACE = st.sampled_from(["", " ", "\n  ", "\n\t\t", "\r\n  ", "\t", "\r"])


@st.composite
def texts(draw: st.DrawFn, wild: bool) -> str:
    if not wild or draw(st.integers(0, 3)) < 3:
        return "".join(draw(st.lists(PLAIN_TEXT, min_size=0, max_size=4)))
    return "".join(draw(st.lists(TEXT, min_size=0, max_size=5)))


@st.composite
def leaf(draw: st.DrawFn, name: str, wild: bool) -> str:
    text = draw(texts(wild))
    form = draw(st.integers(0, 12)) if wild else 0
    if form == 9:
        return f"<{name}/>"
    if form == 10:
        return f"<{name.upper()}>{text}</{name.upper()}>"
    if form == 11:
        return f"<{name} >{text}</{name}>"
    if form == 12:
        return f"<{name}>{text}</{name}x>"  # mismatched end tag
    return f"<{name}>{text}</{name}>"


@st.composite
def image(draw: st.DrawFn, wild: bool) -> str:
    if wild:
        choices = ["loc", "loc", "loc", "caption", "title", "geo_location", "license", "foo"]
        names = draw(st.lists(st.sampled_from(choices), min_size=0, max_size=3))
    else:
        names = draw(st.sampled_from([["loc"], ["loc"], ["loc", "title"], ["loc", "caption", "license"]]))
    space = draw(SPACE)
    fields = [draw(leaf(f"image:{name}", wild)) for name in names]
    opening = "<image:image>"
    if wild:
        opening = draw(st.sampled_from(["<image:image>"] * 6 + ["<image:image >", "<img:image>", "<IMAGE:IMAGE>"]))
    closing = "</" + opening[1:].replace(" ", "")
    return opening + space + space.join(fields) + space + closing


@st.composite
def link(draw: st.DrawFn, wild: bool) -> str:
    hreflang, href = draw(texts(wild)), draw(texts(wild))
    rel = draw(st.sampled_from(["alternate"] * 5 + ["Alternate", " alternate", "canonical"])) if wild else "alternate"
    attributes = [f'rel="{rel}"', f'hreflang="{hreflang}"', f'href="{href}"']
    form = draw(st.integers(0, 10)) if wild else 0
    if form == 7:
        attributes = draw(st.permutations(attributes))
    elif form == 8:
        attributes = [attribute.replace('"', "'") for attribute in attributes]
    elif form == 9:
        attributes.append(attributes[0])  # a duplicate attribute: an XML error
    elif form == 10:
        attributes.pop(draw(st.integers(0, 2)))
    separator = draw(st.sampled_from([" ", " ", "\n  ", "\t", "  "]))
    name, end = "xhtml:link", draw(st.sampled_from(["/>", " />", "\n/>"]))
    if wild:
        name = draw(st.sampled_from(["xhtml:link"] * 6 + ["link", "xhtml:LINK"]))
        end = draw(st.sampled_from(["/>"] * 6 + [" />", f"></{name}>", ">"]))
    return f"<{name}{separator}{separator.join(attributes)}{end}"


#: Prefixes real generators put on a urlset's children (the exact reader goes by local names only).
PREFIXES = {"image:": ["image:", "image:", "img:", "i:", "ns1:"], "xhtml:": ["xhtml:", "xhtml:", "x:", "html:"]}


def prefixed(draw: st.DrawFn, part: str) -> str:
    """``part`` with its prefixes swapped for others (consistently within each tag pair)."""
    for usual, others in PREFIXES.items():
        if usual in part:
            part = part.replace(usual, draw(st.sampled_from(others)))
    if draw(st.integers(0, 4)) == 4:  # a prefixed page field, as namespace-minded writers emit
        for name in ("loc", "lastmod", "changefreq", "priority"):
            part = part.replace(f"<{name}>", f"<sm:{name}>").replace(f"</{name}>", f"</sm:{name}>")
    return part


@st.composite
def block(draw: st.DrawFn) -> str:
    """A ``<url>``: mostly written the canonical way (with all sorts of values), else in another order
    and with other prefixes (as generators write them), else any way at all."""
    way = draw(st.integers(0, 5))  # (hypothesis draws small numbers most: 0 is the canonical way)
    wild, reordered = way == 5, way in (3, 4)
    parts = []
    for name, chance in (("loc", 10), ("lastmod", 6), ("changefreq", 4), ("priority", 4)):
        if draw(st.integers(0, 10)) < chance:
            parts.append(draw(leaf(name, wild)))
    if reordered and draw(st.booleans()):  # a field given twice: the first non-empty text counts
        parts.append(draw(leaf(draw(st.sampled_from(["loc", "lastmod", "priority"])), False)))
    parts += draw(st.lists(image(wild), max_size=3))
    parts += draw(st.lists(link(wild), max_size=3))
    space = draw(SPACE)
    if reordered:
        parts = [prefixed(draw, part) for part in draw(st.permutations(parts))]
        return "<url>" + space + space.join(parts) + space + "</url>"
    if not wild:
        return "<url>" + space + space.join(parts) + space + "</url>"
    if draw(st.integers(0, 4)) == 4:
        parts.insert(
            draw(st.integers(0, len(parts))),
            draw(
                st.sampled_from(
                    [
                        *["<mobile:mobile/>", "<!-- x -->", "<news:news><news:title>t</news:title></news:news>"],
                        '<PageMap><DataObject type="d"><Attribute name="n">v</Attribute></DataObject></PageMap>',
                        "<video:video><video:tvshow><video:season_number>2</video:season_number></video:tvshow>"
                        '<video:content_segment_loc duration="5">https://example.org/s</video:content_segment_loc>'
                        "</video:video>",
                    ]
                )
            ),
        )
    if draw(st.integers(0, 4)) == 4:
        parts = draw(st.permutations(parts))
    opening = draw(st.sampled_from(["<url>"] * 6 + ["<URL>", "<url >", "<sm:url>", "<url/>", "<url><url>"]))
    closing = {"<URL>": "</URL>", "<sm:url>": "</sm:url>", "<url/>": "", "<url><url>": "</url></url>"}
    return opening + space + space.join(parts) + space + closing.get(opening, "</url>")


HEADS = [
    '<?xml version="1.0" encoding="UTF-8"?>\n',
    '<?xml version="1.0" encoding="utf-8"?>',
    "",
    "\ufeff",
    '<?xml version="1.0" encoding="ISO-8859-1"?>\n',
    '<?xml version="1.0"?>\n<!-- generator -->\n',
    '<?xml version="1.0" encoding="utf8"?>',  # not a name expat knows: a single-byte encoding to it
]
ROOT = (
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1" xmlns:xhtml="http://www.w3.org/1999/xhtml">'
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    head = draw(st.sampled_from(HEADS))
    between = st.sampled_from(
        [
            *["\n", "\n  ", "", " ", "\r\n", "\n<!-- c -->\n", "text", "<?pi?>", "<!-- </url> -->"],
            *["<![CDATA[</url>]]>", "<![CDATA[</url><url><loc>a</loc></url>]]>", "<x:url><loc>b</loc></x:url>"],
        ]
    )
    body = []
    for item in draw(st.lists(block(), min_size=1, max_size=14)):
        body += [item, draw(between) if draw(st.integers(0, 5)) == 5 else "\n"]
    tail = draw(st.sampled_from(["</urlset>\n", "</urlset>", "", "</urlset><url><loc>x</loc></url>"]))
    text = head + ROOT + draw(between) + "".join(body) + tail
    encoding = "latin-1" if "ISO-8859-1" in head else "utf-8"
    return text.encode(encoding, errors="replace")


def corrupt(draw: st.DrawFn, document: bytes) -> bytes:
    mutable = bytearray(document)
    for _ in range(draw(st.integers(0, 3))):
        if not mutable:
            break
        position = draw(st.integers(0, len(mutable) - 1))
        action = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        if action == "flip":
            mutable[position] = draw(st.integers(0, 255))
        elif action == "delete":
            del mutable[position]
        elif action == "insert":
            mutable[position:position] = draw(st.sampled_from([b"<", b"&", b"</url>", b"\xc3", b"]]>", b"\r"]))
        else:
            del mutable[position:]
    return bytes(mutable)


@SETTINGS
@given(document=documents(), data=st.data())
def test_the_plain_block_reader_reads_exactly_what_expat_reads(document, data):
    if data.draw(st.integers(0, 2)) == 2:
        document = corrupt(data.draw, document)
    # The parse stopped from outside the XML parser: a size limit, a gzip stream broken after the document.
    max_bytes = 50 * 1024 * 1024
    if data.draw(st.integers(0, 5)) == 5:
        max_bytes = data.draw(st.integers(0, len(document)))
    if data.draw(st.integers(0, 7)) == 7:
        document = gzip.compress(document) + data.draw(st.sampled_from([b"", b"garbage", b"\x1f\x8b\x08"]))
    cuts = data.draw(st.lists(st.integers(0, len(document)), max_size=8))
    options = {
        "complete": data.draw(st.booleans()),
        "max_entries": data.draw(st.sampled_from([50_000, 50_000, 1, 3])),
        "max_bytes": max_bytes,
    }
    entries, report, taken = parse(document, cuts, plain=True, **options)
    event(f"blocks taken by the plain-block reader: {'some' if taken.characters else 'none'}")
    assert (entries, report) == parse(document, cuts, plain=False, **options)[:2]


def test_canonical_blocks_are_read_by_the_plain_block_reader():
    """The property above would pass vacuously if the reader never took a block: count what it takes."""
    document = urlset(300)
    for size in (len(document), 4096, 97):
        with plain_blocks(True) as taken:
            parser = SitemapParser(URL)
            entries = [entry for at in range(0, len(document), size) for entry in parser.feed(document[at : at + size])]
            entries += parser.close()
        assert len(entries) == 300
        assert taken.entries == 300, size  # every block, the first one included, read without callbacks
        assert parser.report.truncated is None


def test_blocks_in_any_order_and_with_other_prefixes_are_read_by_the_plain_block_reader():
    """Links before images, images between fields, prefixed children, a field given twice: all read
    without callbacks, and read as expat's callbacks read them."""
    blocks = [
        f'<url><xhtml:link rel="alternate" hreflang="de" href="https://example.org/de/{i}"/>'
        f"<img:image><img:title>T{i}</img:title><img:loc>https://example.org/{i}.jpg</img:loc></img:image>"
        f"<priority>0.{i % 9 + 1}</priority><sm:loc>https://example.org/page/{i}</sm:loc>"
        f'<x:link rel="alternate" hreflang="fr" href="https://example.org/fr/{i}"/>'
        f"<lastmod></lastmod><lastmod>2024-01-0{i % 9 + 1}</lastmod><changefreq>daily</changefreq>"
        f"<loc>https://example.org/second/{i}</loc></url>"
        for i in range(300)
    ]
    document = (ROOT + "\n" + "\n".join(blocks) + "\n</urlset>\n").encode()
    for size in (len(document), 4096, 97):
        cuts = list(range(size, len(document), size))
        entries, report, taken = parse(document, cuts, plain=True)
        assert taken.entries == 300, size
        assert (entries, report) == parse(document, cuts, plain=False)[:2]
    first = entries[0]
    assert first.url == "https://example.org/page/0" and first.last_modified is not None and first.priority == 0.1
    assert [a.hreflang for a in first.alternates] == ["de", "fr"] and first.images[0].title == "T0"


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("<loc>\x01</loc>", "not well-formed (invalid token): line 8, column 9"),
        ("<lastmod>]]></lastmod>", "not well-formed (invalid token): line 8, column 15"),
        ('<xhtml:link rel="a" rel="b"/>', "duplicate attribute: line 8, column 24"),
        ("<loc>é</loc>é<", "unclosed token: line 8, column 17"),
    ],
)
def test_an_error_after_plain_blocks_is_placed_where_it_is_in_the_document(damage, error):
    """Expat is given blanks for the blocks it did not read; its line and column must still be right."""
    lines = urlset(3, close=False).decode().splitlines()
    assert lines[2:7] == [
        "  <url>",
        "    <loc>https://example.org/page/0</loc>",
        "    <lastmod>2024-01-01</lastmod>",
        "  </url>",
        "  <url>",
    ]
    document = "\n".join([*lines[:7], f"    {damage}"]).encode()  # line 8, in the second block
    for plain in (True, False):
        with plain_blocks(plain):
            parser = SitemapParser(URL)
            entries = parser.feed(document) + parser.close()
        assert [entry.url for entry in entries] == ["https://example.org/page/0"]
        assert parser.report.truncated in (f"XML syntax error: {error}", f"document ends before </urlset> ({error})")


HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset>'


@pytest.mark.parametrize(
    ("name", "document", "cuts", "max_bytes"),
    [
        # Expat takes a CDATA section's text as it comes: a </url> in it is no place to read a block from.
        ("cdata", HEAD + b"<![CDATA[</url><url><loc>a</loc></url>]]></urlset>", [], None),
        ("cdata cut", HEAD + b"<![CDATA[</url><url><loc>a</loc></url>", [40, 60], None),
        # "utf8" is an unknown single-byte encoding to expat, so é is an error, not a URL.
        ("utf8", b'<?xml version="1.0" encoding="utf8"?><urlset><url><loc>\xc3\xa9</loc></url></urlset>', [], None),
        # The unfinished block held back for the reader says something before a gzip error or a size limit.
        ("gzip error", gzip.compress(HEAD + b"<url><loc>a</loc></url><url><loc>b&</loc>", mtime=0) + b"junk", [], None),
        (
            "gzip entry",
            gzip.compress(HEAD + b"<url><loc>a</loc></url><url><x:url><loc>b</loc></x:url>", mtime=0) + b"junk",
            [],
            None,
        ),
        ("size limit", HEAD + b"<url><loc>a</loc></url><url><loc>b&</loc>yy", [90], 91),
        # Blanks held back, then the root's end: the document is complete before the junk after it.
        (
            "held blanks",
            gzip.compress(HEAD + b"<url><loc>a</loc></url>" + b"\n" * 70_000 + b"</urlset>", mtime=0) + b"junk",
            [],
            None,
        ),
    ],
)
def test_what_the_reviewers_found(name, document, cuts, max_bytes):
    """Cases a second review found where the reader once disagreed with expat's callbacks."""
    options = {"max_bytes": max_bytes} if max_bytes else {}
    entries, report, _ = parse(document, cuts, plain=True, **options)
    assert (entries, report) == parse(document, cuts, plain=False, **options)[:2]
    truncated = report[2]
    expected = {
        "cdata": ([], None),
        "cdata cut": ([], "document ends before </urlset> (unclosed CDATA section: line 2, column 46)"),
        "utf8": ([], "XML syntax error: not well-formed (invalid token): line 1, column 55"),
        "gzip error": (["a"], "XML syntax error: not well-formed (invalid token): line 2, column 43"),
        "gzip entry": (["a", "b"], None),
        "size limit": (["a"], "XML syntax error: not well-formed (invalid token): line 2, column 43"),
        "held blanks": (["a"], None),
    }[name]
    assert ([entry.url for entry in entries], truncated if name != "gzip entry" else None) == expected
