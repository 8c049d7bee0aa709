"""Sitemap indexes, RSS 2.0 / 1.0 and Atom 1.0 / 0.3 feeds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from harvester.sitemap import ChildSitemap, PageEntry, SitemapKind
from harvester.sitemap.entries import NewsStory

from .helpers import fixture, urls

URL = "https://example.org/feed"


def test_index_children_with_lastmod(parse):
    entries, report = parse(URL, fixture("index.xml"))
    assert report.kind is SitemapKind.INDEX
    assert entries == [
        ChildSitemap("https://example.org/sitemap-pages.xml", datetime(2024, 1, 15, 8, tzinfo=UTC)),
        ChildSitemap("https://example.org/sitemap-posts.xml.gz"),
        ChildSitemap("https://example.org/sitemap-news.xml"),
    ]
    assert report.warnings == {"invalid_lastmod": 1}


def test_index_entries_without_loc_hold_the_url_as_bare_text(parse):
    """crawler-commons' leniency: <sitemap>URL</sitemap> still names a child."""
    entries, report = parse(URL, fixture("index_without_loc.xml"))
    assert entries == [
        ChildSitemap("https://example.org/sitemap-1.xml"),
        ChildSitemap("https://example.org/sitemap-2.xml"),
        ChildSitemap("https://example.org/sitemap-3.xml", datetime(2023, 6, 1, tzinfo=UTC)),
        ChildSitemap("https://example.org/sitemap-4.xml"),
    ]
    assert report.warnings == {"missing_loc": 1}


def test_urlset_elements_inside_an_index_are_not_children(parse):
    document = (
        b"<sitemapindex><url><loc>https://example.org/page</loc></url>"
        b"<sitemap><loc>https://example.org/child.xml</loc></sitemap></sitemapindex>"
    )
    entries, _ = parse(URL, document)
    assert entries == [ChildSitemap("https://example.org/child.xml")]


def test_rss2_items_link_then_permalink_guid(parse):
    entries, report = parse(URL, fixture("rss2.xml"))
    assert report.kind is SitemapKind.RSS
    assert all(isinstance(entry, PageEntry) for entry in entries)
    assert urls(entries) == [
        "https://blog.example.org/posts/with-link",
        "https://blog.example.org/posts/guid-only",
        "https://blog.example.org/posts/atom-link-first",
        "https://blog.example.org/posts/bad-date",
    ]
    with_link, guid_only, atom_link, bad_date = entries
    assert with_link.last_modified == datetime(2024, 3, 5, 10, tzinfo=UTC)
    # RFC 822 with a two-digit year and a numeric offset.
    assert guid_only.last_modified == datetime(2024, 3, 4, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    assert atom_link.last_modified == datetime(2024, 3, 1, 12, tzinfo=UTC)  # dc:date
    assert bad_date.last_modified is None
    assert with_link.priority == 0.5
    # An item's title and date are its news story (ultimate-sitemap-parser's reading); without a title, none.
    assert with_link.news == NewsStory(title="With a link", publication_date=with_link.last_modified)
    assert guid_only.news == NewsStory(title="Only a permalink guid", publication_date=guid_only.last_modified)
    assert atom_link.news is None and bad_date.news is None
    # The item with a non-URL guid and no link has nothing to fetch.
    assert report.warnings == {"missing_loc": 1, "invalid_lastmod": 1}


def test_rss1_items(parse):
    entries, report = parse(URL, fixture("rss1.xml"))
    assert report.kind is SitemapKind.RSS
    date = datetime(2023, 12, 24, 18, tzinfo=timezone(timedelta(hours=1)))
    assert entries == [
        PageEntry("https://journal.example.org/entries/1", date, news=NewsStory("First entry", publication_date=date)),
        PageEntry(  # named only by rdf:about
            "https://journal.example.org/entries/2", news=NewsStory("An entry named only by rdf:about")
        ),
    ]


def test_atom1_entries(parse):
    entries, report = parse(URL, fixture("atom1.xml"))
    assert report.kind is SitemapKind.ATOM
    second = datetime(2024, 3, 4, 8, tzinfo=timezone(timedelta(hours=-5)))
    third = datetime(2024, 3, 3, tzinfo=UTC)
    assert entries == [
        # The news story's date is the publication's (<published>), the entry's the update's.
        PageEntry(
            "https://atom.example.org/2024/03/05/first",
            datetime(2024, 3, 5, 18, 30, 2, tzinfo=UTC),
            news=NewsStory("Alternate and self links", publication_date=datetime(2024, 3, 1, 10, tzinfo=UTC)),
        ),
        PageEntry(
            "https://atom.example.org/2024/03/04/second",
            second,
            news=NewsStory("A link without rel", publication_date=second),
        ),
        # No link: an http(s) <id> stands in; the <source>'s link and date belong to another feed.
        PageEntry(
            "https://atom.example.org/2024/03/03/third",
            third,
            news=NewsStory("No link, an http id", publication_date=third),
        ),
    ]
    assert report.warnings == {"missing_loc": 1}


def test_atom03_entries(parse):
    entries, report = parse(URL, fixture("atom03.xml"))
    assert report.kind is SitemapKind.ATOM
    issued = datetime(2005, 7, 1, 8, tzinfo=timezone(timedelta(hours=-4)))
    assert entries == [
        PageEntry(
            "https://old.example.org/2005/07/31/entry",
            datetime(2005, 7, 31, 12, 29, 29, tzinfo=UTC),
            news=NewsStory("Modified and issued", publication_date=datetime(2005, 7, 30, 8, tzinfo=UTC)),
        ),
        PageEntry(
            "https://old.example.org/2005/07/01/entry", issued, news=NewsStory("Issued only", publication_date=issued)
        ),
    ]


def test_every_loc_of_an_index_sitemap_element_is_a_child_to_read():
    """Two ``<loc>`` in one ``<sitemap>``: both are sitemaps the site lists (only the first was read); the
    ``<lastmod>`` after the second is the second's alone."""
    from harvester.sitemap import parse_bytes

    document = (
        b"<sitemapindex><sitemap><loc>https://www.example.org/sitemap1.xml</loc>"
        b"<loc>https://www.example.org/sitemap2.xml</loc><lastmod>2024-01-01</lastmod></sitemap></sitemapindex>"
    )
    entries, report = parse_bytes("https://www.example.org/sitemap_index.xml", document)
    assert entries == [
        ChildSitemap("https://www.example.org/sitemap1.xml"),
        ChildSitemap("https://www.example.org/sitemap2.xml", datetime(2024, 1, 1, tzinfo=UTC)),
    ]
    assert report.error is None


def test_a_second_loc_in_a_url_is_warned_of_and_the_first_kept(monkeypatch):
    """Which of two URLs a ``<url>`` meant cannot be known: the first is kept, the second said, not lost in
    silence; the plain-block reader and expat's callbacks agree."""
    from harvester.sitemap import parse_bytes
    from harvester.sitemap.xml_parser import XmlParser

    document = (
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://www.example.org/a</loc>'
        b"<loc>https://www.example.org/b</loc></url><url><loc>https://www.example.org/c</loc></url></urlset>"
    )
    for plain in (True, False):
        monkeypatch.setattr(XmlParser, "read_plain_blocks", plain)
        entries, report = parse_bytes("https://www.example.org/sitemap.xml", document)
        assert [e.url for e in entries] == ["https://www.example.org/a", "https://www.example.org/c"], plain
        assert report.warnings == {"repeated_loc": 1}, plain
