"""Entries run together: a document cut off in the middle of an entry and going on with another, so that one
element holds two. No value of one entry may be given to another, whatever the breakage: a value belongs
to the ``<loc>`` it follows (the first ``<loc>`` of an element also takes what stands before it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvester.sitemap import Alternate, ChildSitemap, Image, NewsStory, PageEntry, PageMapObject, Video, parse_bytes
from harvester.sitemap.xml_parser import XmlParser

URL = "https://example.org/sitemap.xml"
SETTINGS = settings(
    max_examples=int(os.environ.get("SITEMAP_PROPERTY_EXAMPLES", "120")) * 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
URLSET = (
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:image="http://www.google.com/schemas/'
    'sitemap-image/1.1" xmlns:xhtml="http://www.w3.org/1999/xhtml">'
)


def both_readers(monkeypatch: pytest.MonkeyPatch, document: bytes) -> tuple[list, dict[str, int]]:
    """The parse of a urlset, the same with and without the plain-block reader."""
    read = []
    for plain in (True, False):
        monkeypatch.setattr(XmlParser, "read_plain_blocks", plain)
        entries, report = parse_bytes(URL, document)
        read.append((entries, report.warnings))
    assert read[0] == read[1]
    return read[0]


def day(n: int) -> datetime:
    return datetime(2024, 1, n, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # The case: <sitemap> A's end tag and B's start tag lost; B has no lastmod of its own.
        (
            "<sitemap><loc>https://e.x/a.xml</loc><lastmod>2024-01-01</lastmod>"
            "<loc>https://e.x/b.xml</loc></sitemap><sitemap><loc>https://e.x/c.xml</loc></sitemap>",
            [("a", day(1)), ("b", None), ("c", None)],
        ),
        # A cut before its lastmod: B's lastmod is B's.
        (
            "<sitemap><loc>https://e.x/a.xml</loc><loc>https://e.x/b.xml</loc><lastmod>2024-01-02</lastmod></sitemap>",
            [("a", None), ("b", day(2))],
        ),
        # Each its own, the first's given twice.
        (
            "<sitemap><lastmod>2024-01-01</lastmod><loc>https://e.x/a.xml</loc><lastmod>2024-01-03</lastmod>"
            "<loc>https://e.x/b.xml</loc><lastmod>2024-01-02</lastmod></sitemap>",
            [("a", day(1)), ("b", day(2))],
        ),
        # Three in one: what follows the second may be the second's or the third's; neither gets it.
        (
            "<sitemap><loc>https://e.x/a.xml</loc><lastmod>2024-01-01</lastmod><loc>https://e.x/b.xml</loc>"
            "<lastmod>2024-01-02</lastmod><loc>https://e.x/c.xml</loc></sitemap>",
            [("a", day(1)), ("b", None), ("c", None)],
        ),
    ],
    ids=["lastmod-before-second", "lastmod-after-second", "each-its-own", "three"],
)
def test_index_entries_run_together_keep_their_own_lastmod(parse, body, expected):
    entries, report = parse(URL, f"<sitemapindex>{body}</sitemapindex>".encode())
    assert entries == [ChildSitemap(f"https://e.x/{name}.xml", when) for name, when in expected]
    assert report.error is None and report.warnings == {}


def test_urlset_fields_and_extensions_after_a_second_loc_are_not_the_firsts(monkeypatch):
    """The plain form (images and links: the plain-block reader reads it) and every other extension
    (expat's handlers): what follows the second ``<loc>`` is dropped with it."""
    image = "<image:image><image:loc>https://e.x/{}.png</image:loc></image:image>"
    link = '<xhtml:link rel="alternate" hreflang="{}" href="https://e.x/{}"/>'
    plain = (
        f"<url><loc>https://e.x/a</loc><lastmod>2024-01-01</lastmod>{image.format('a')}{link.format('de', 'a')}"
        f"<loc>https://e.x/b</loc><lastmod>2024-01-02</lastmod><changefreq>daily</changefreq>"
        f"<priority>0.9</priority>{image.format('b')}{link.format('fr', 'b')}</url>"
    )
    entries, warnings = both_readers(monkeypatch, f"{URLSET}{plain}</urlset>".encode())
    assert entries == [
        PageEntry(
            "https://e.x/a",
            day(1),
            images=(Image("https://e.x/a.png"),),
            alternates=(Alternate("de", "https://e.x/a"),),
        )
    ]
    assert warnings == {"repeated_loc": 1}

    def extensions(n: str) -> str:
        return (
            f"{image.format(n)}<video:video><video:title>{n}</video:title></video:video>{link.format(n, n)}"
            f"<news:news><news:title>{n}</news:title></news:news>"
            f'<PageMap><DataObject type="{n}"/></PageMap>'
        )

    for first, second, kept in ((extensions("a"), extensions("b"), True), ("", extensions("b") + "<mobile/>", False)):
        document = f"{URLSET}<url><loc>https://e.x/a</loc>{first}<loc>https://e.x/b</loc>{second}</url></urlset>"
        entries, warnings = both_readers(monkeypatch, document.encode())
        assert entries == [
            PageEntry(
                "https://e.x/a",
                images=(Image("https://e.x/a.png"),),
                news=NewsStory("a"),
                videos=(Video(title="a"),),
                alternates=(Alternate("a", "https://e.x/a"),),
                pagemap=(PageMapObject("a"),),
            )
            if kept
            else PageEntry("https://e.x/a")
        ]
        assert warnings == {"repeated_loc": 1}


def test_a_feed_item_run_into_the_next_keeps_only_what_came_before_the_second_link(parse):
    document = (
        b"<rss><channel><item><title>A</title><link>https://e.x/a</link>"
        b"<link>https://e.x/b</link><pubDate>Tue, 05 Mar 2024 10:00:00 GMT</pubDate></item>"
        b'</channel></rss><feed xmlns="http://www.w3.org/2005/Atom"/>'
    )
    entries, _ = parse(URL, document)
    assert entries == [PageEntry("https://e.x/a", news=NewsStory("A"))]
    atom = (
        b'<feed xmlns="http://www.w3.org/2005/Atom"><entry><title>A</title><id>https://e.x/a</id>'
        b'<id>https://e.x/b</id><link href="https://e.x/b"/><updated>2024-03-05</updated></entry></feed>'
    )
    entries, _ = parse(URL, atom)
    assert entries == [PageEntry("https://e.x/a", news=NewsStory("A"))]


# The property: entries written with values all different, then cut at random and spliced, as a document
# cut off in the middle of an entry and going on with another.


@dataclass(frozen=True)
class Token:
    role: str  # "start" / "end" (an entry's tags), "loc", "lastmod", "image"
    text: str
    value: str = ""


@st.composite
def spliced(draw: st.DrawFn, record: str) -> list[Token]:
    tokens: list[Token] = []
    for n in range(draw(st.integers(1, 6))):
        parts = [Token("loc", f"<loc>https://e.x/{n}</loc>", f"https://e.x/{n}")]
        for k in range(draw(st.integers(0, 2))):
            when = (date(2001, 1, 1) + timedelta(days=n * 10 + k)).isoformat()
            parts.append(Token("lastmod", f"<lastmod>{when}</lastmod>", when))
        if record == "url":
            for k in range(draw(st.integers(0, 2))):
                loc = f"https://e.x/{n}-{k}.png"
                parts.append(Token("image", f"<image:image><image:loc>{loc}</image:loc></image:image>", loc))
        tokens += [Token("start", f"<{record}>"), *draw(st.permutations(parts)), Token("end", f"</{record}>")]
    for _ in range(draw(st.integers(0, 3))):  # stretches lost
        start = draw(st.integers(0, len(tokens)))
        del tokens[start : draw(st.integers(start, len(tokens)))]
    return tokens


def stretch(tokens: list[Token], at: int) -> tuple[int, int]:
    """Where the values of the <loc> at ``at`` may stand (exclusive bounds): after it up to the next <loc> or
    entry tag; before it too, back to the entry's start tag, when it is the first <loc> of its element."""
    end = next((i for i in range(at + 1, len(tokens)) if tokens[i].role in ("loc", "start", "end")), len(tokens))
    start = -1
    for i in range(at - 1, -1, -1):
        if tokens[i].role == "loc":
            start = at
            break
        if tokens[i].role in ("start", "end"):
            start = i
            break
    return start, end


def assert_no_value_strays(tokens: list[Token], entries: list) -> None:
    where = {(t.role, t.value): i for i, t in enumerate(tokens)}
    for entry in entries:
        url = entry.url
        start, end = stretch(tokens, where["loc", url])
        values = [("lastmod", entry.last_modified.date().isoformat())] if entry.last_modified else []
        values += [("image", image.loc) for image in getattr(entry, "images", ())]
        for value in values:
            assert start < where[value] < end, (url, value)


@SETTINGS
@given(tokens=spliced("sitemap"))
def test_no_index_entry_takes_a_lastmod_from_outside_its_locs_stretch(tokens):
    document = "<sitemapindex>" + "".join(t.text for t in tokens) + "</sitemapindex>"
    entries, _ = parse_bytes(URL, document.encode())
    assert_no_value_strays(tokens, entries)


@SETTINGS
@given(tokens=spliced("url"))
def test_no_page_takes_a_value_from_outside_its_locs_stretch(tokens):
    document = (URLSET + "".join(t.text for t in tokens) + "</urlset>").encode()
    read = []
    for plain in (True, False):
        saved = XmlParser.read_plain_blocks
        XmlParser.read_plain_blocks = plain
        try:
            read.append(parse_bytes(URL, document))
        finally:
            XmlParser.read_plain_blocks = saved
    assert read[0] == read[1]
    assert_no_value_strays(tokens, read[0][0])
