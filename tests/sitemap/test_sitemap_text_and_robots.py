"""Line-based documents: plain-text sitemaps and robots.txt."""

from __future__ import annotations

import pytest

from harvester.sitemap import ChildSitemap, PageEntry, SitemapKind, SitemapParser

from .helpers import feed_in_pieces, fixture, urls

ROBOTS = "https://example.org/robots.txt"


def test_plain_text_sitemap_skips_junk_lines_with_a_warning(parse):
    entries, report = parse("https://example.org/sitemap.txt", fixture("list.txt"))
    assert report.kind is SitemapKind.TEXT
    assert report.error is None
    assert all(type(entry) is PageEntry for entry in entries)
    assert urls(entries) == [
        "https://example.org/text/1",
        "https://example.org/text/2",
        "http://example.org/text/3",
        "HTTPS://EXAMPLE.ORG/TEXT/4",
    ]
    # The title, ftp:, mailto:, HTML, the URL with a space and the comment; blank lines are not junk.
    assert report.warnings == {"not_a_url": 6}


def test_plain_text_crlf_and_last_line_without_newline(parse):
    entries, report = parse("https://example.org/sitemap.txt", fixture("list_crlf_no_final_newline.txt"))
    assert urls(entries) == [f"https://example.org/crlf/{n}" for n in (1, 2, 3)]
    assert report.truncated is None


def test_plain_text_in_utf16_with_bom(parse):
    body = "https://example.org/ünïcode\nhttps://example.org/2\n".encode("utf-16")
    entries, _ = parse("https://example.org/sitemap.txt", body)
    assert urls(entries) == ["https://example.org/ünïcode", "https://example.org/2"]


def test_cut_download_drops_the_unfinished_last_line():
    parser = SitemapParser("https://example.org/sitemap.txt")
    entries = parser.feed(b"https://example.org/1\nhttps://example.org/2\nhttps://exa")
    entries += parser.close(complete=False)
    assert urls(entries) == ["https://example.org/1", "https://example.org/2"]
    assert parser.report.truncated == "download cut before the end of the document"
    assert parser.report.error is None


@pytest.mark.parametrize("size", [1 << 10, 1 << 20])
def test_overlong_line_is_dropped_however_it_arrives(size):
    body = b"https://example.org/" + b"a" * 100_000 + b"\nhttps://example.org/after\n"
    entries, report = feed_in_pieces("https://example.org/sitemap.txt", body, size)
    assert urls(entries) == ["https://example.org/after"]
    assert report.warnings == {"line_too_long": 1}


def test_overlong_line_is_dropped_without_being_held():
    parser = SitemapParser("https://example.org/sitemap.txt")
    entries = parser.feed(b"https://example.org/" + b"a" * 200_000)
    entries += parser.feed(b"a" * 200_000 + b"\nhttps://example.org/after\n")
    entries += parser.close()
    assert urls(entries) == ["https://example.org/after"]
    assert parser.report.warnings == {"line_too_long": 1}


def test_robots_txt_sitemap_lines(parse):
    entries, report = parse(ROBOTS, fixture("robots.txt"))
    assert report.kind is SitemapKind.ROBOTS
    assert all(type(entry) is ChildSitemap for entry in entries)
    assert urls(entries) == [
        "https://example.org/sitemap.xml",
        "https://example.org/sitemap-lower.xml",
        "https://example.org/sitemap-upper.xml",
        "https://example.org/sitemap-spaced.xml",
        "https://example.org/sitemap-hyphen.xml",
        "https://example.org/relative-sitemap.xml",
        "https://example.org/news/sitemap.xml",
    ]
    assert report.warnings == {}


@pytest.mark.parametrize(
    "body",
    [
        b"\xef\xbb\xbfSitemap: https://example.org/from-bom.xml\n",
        "Sitemap: https://example.org/from-bom.xml\r\n".encode("utf-16"),
        b"\n\n   Sitemap:https://example.org/from-bom.xml",
        b"User-agent: *\rSitemap: https://example.org/from-bom.xml\rDisallow:",
    ],
)
def test_robots_txt_encodings_and_line_breaks(parse, body):
    entries, _ = parse(ROBOTS, body)
    assert urls(entries) == ["https://example.org/from-bom.xml"]


def test_robots_txt_utf16_fixture(parse):
    entries, _ = parse(ROBOTS, fixture("robots_utf16.txt"))
    assert urls(entries) == ["https://example.org/from-utf16.xml"]


def test_robots_txt_relative_urls_resolve_against_the_robots_url(parse):
    body = b"Sitemap: /a.xml\nSitemap: b.xml\nSitemap: //cdn.example.net/c.xml\n"
    entries, _ = parse("https://www.example.org:8443/robots.txt", body)
    assert urls(entries) == [
        "https://www.example.org:8443/a.xml",
        "https://www.example.org:8443/b.xml",
        "https://cdn.example.net/c.xml",
    ]


def test_robots_txt_without_sitemaps_is_a_valid_empty_index(parse):
    entries, report = parse(ROBOTS, b"User-agent: *\nDisallow: /private\n")
    assert entries == []
    assert report.kind is SitemapKind.ROBOTS
    assert report.error is None


def test_a_byte_that_is_not_utf8_in_a_url_line_is_percent_escaped_not_replaced():
    """``Sitemap: /s\\xff.xml`` names the URL ``/s%FF.xml``; U+FFFD made it ``/s%EF%BF%BD.xml``, which the site
    never wrote. Text sitemaps read their lines the same way; valid UTF-8 is kept as it is."""
    from harvester.sitemap import parse_bytes

    robots, _ = parse_bytes(
        "https://e.x/robots.txt", b"User-agent: *\nSitemap: /s\xff.xml\nSitemap: https://e.x/caf\xc3\xa9.xml\n"
    )
    assert [c.url for c in robots] == ["https://e.x/s%FF.xml", "https://e.x/caf\u00e9.xml"]
    listed, _ = parse_bytes("https://e.x/list.txt", b"https://e.x/a\xfe\xffb\nhttps://e.x/c\n")
    assert [p.url for p in listed] == ["https://e.x/a%FE%FFb", "https://e.x/c"]
