"""Feeding in pieces: any split gives the same entries and report; memory does not grow with the document."""

from __future__ import annotations

import gc
import gzip
import re
import tracemalloc
from datetime import UTC, datetime

import pytest

from harvester.sitemap import SitemapKind, SitemapParser, parse_bytes, parse_file

from .helpers import FIXTURES, feed_in_pieces, fixture, urlset

ALL_FIXTURES = sorted(path.name for path in FIXTURES.iterdir())


def url_for(name: str) -> str:
    return f"https://example.org/{name}"


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_byte_at_a_time_equals_one_chunk(name):
    data = fixture(name)
    whole = parse_bytes(url_for(name), data)
    assert feed_in_pieces(url_for(name), data, 1) == whole


@pytest.mark.parametrize("name", ALL_FIXTURES)
@pytest.mark.parametrize("size", [2, 3, 7, 64, 1000])
def test_any_chunk_size_equals_one_chunk(name, size):
    data = fixture(name)
    assert feed_in_pieces(url_for(name), data, size) == parse_bytes(url_for(name), data)


@pytest.mark.parametrize("name", ["urlset_extensions.xml", "robots.txt", "list.txt", "urlset_utf16.xml"])
def test_gzipped_byte_at_a_time_splits_the_gzip_header_too(name):
    data = gzip.compress(fixture(name))
    assert feed_in_pieces(url_for(name), data, 1) == parse_bytes(url_for(name), fixture(name))


def test_entries_come_out_as_soon_as_their_end_tag_arrives():
    parser = SitemapParser("https://example.org/sitemap.xml")
    assert parser.feed(b"<urlset><url><loc>https://example.org/a</loc>") == []
    [entry] = parser.feed(b"</url><url><loc>https://example.org/b")
    assert entry.url == "https://example.org/a"
    assert [e.url for e in parser.feed(b"</loc></url>")] == ["https://example.org/b"]
    assert parser.close() == []  # the document never closed its root ...
    assert parser.report.truncated is not None  # ... which is reported


def test_split_inside_a_multibyte_character_and_inside_the_bom():
    text = "\ufeffhttps://example.org/ünï/日本\n".encode()
    for cut in range(1, len(text)):
        parser = SitemapParser("https://example.org/list.txt")
        entries = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.close()
        assert [e.url for e in entries] == ["https://example.org/ünï/日本"]


def test_parse_file_streams_and_recognises_robots_txt(tmp_path):
    robots = tmp_path / "robots.txt"
    robots.write_bytes(fixture("robots.txt"))
    entries, report = parse_file(robots)
    assert report.kind is None  # nothing has been read yet: the iterator is lazy
    assert len(list(entries)) == 7
    assert report.kind is SitemapKind.ROBOTS


@pytest.mark.parametrize(("make", "error"), [("missing", FileNotFoundError), ("directory", IsADirectoryError)])
def test_parse_file_raises_at_the_call_when_the_file_cannot_be_opened(tmp_path, make, error):
    """Nothing to read is an error where parse_file is called, naming the file; not an empty iterator
    that fails (or says nothing) later."""
    path = tmp_path / "sitemap.xml.gz"
    if make == "directory":
        path.mkdir()
    with pytest.raises(error, match=re.escape(str(path))):
        parse_file(path)


def test_parse_file_entries_name_their_fields_as_every_output_does(tmp_path):
    path = tmp_path / "sitemap.xml"
    path.write_bytes(
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://example.org/a</loc>'
        b"<lastmod>2024-03-05</lastmod><changefreq>weekly</changefreq><priority>0.8</priority></url></urlset>"
    )
    entries, report = parse_file(path)
    (entry,) = list(entries)
    assert (entry.last_modified, entry.change_frequency, entry.priority) == (
        datetime(2024, 3, 5, tzinfo=UTC),
        "weekly",
        0.8,
    )
    assert set(entry.to_json()) == {"url", "last_modified", "change_frequency", "priority"}
    assert report.kind is SitemapKind.URLSET


def test_parse_file_closes_a_file_whose_entries_are_never_read(tmp_path):
    path = tmp_path / "sitemap.xml"
    path.write_bytes(urlset(3))
    entries, _ = parse_file(path)
    handle = entries.gi_frame.f_locals["handle"]
    del entries
    gc.collect()
    assert handle.closed


def test_parse_file_of_a_gzipped_sitemap(tmp_path):
    path = tmp_path / "sitemap.xml.gz"
    path.write_bytes(gzip.compress(urlset(2000)))
    entries, report = parse_file(path)
    assert sum(1 for _ in entries) == 2000
    assert report.kind is SitemapKind.URLSET
    assert report.truncated is None


def test_parse_file_stops_reading_at_the_limit(tmp_path):
    path = tmp_path / "big.xml"
    path.write_bytes(urlset(3000))
    entries, report = parse_file(path, max_entries=10)
    assert len(list(entries)) == 10
    assert report.truncated == "more than 10 entries"


def test_memory_does_not_grow_with_the_document():
    """Streaming 20,000 URLs holds no more than streaming 2,000 (entries are handed out as they come)."""

    def peak(count: int) -> int:
        parser = SitemapParser("https://example.org/sitemap.xml")
        chunk = 64 * 1024
        tracemalloc.start()
        try:
            for start in range(0, count, 500):
                block = urlset(500, start=start)
                if start:
                    block = block[block.index(b"<url>") :]
                if start + 500 < count:
                    block = block[: block.rindex(b"</urlset>")]
                for offset in range(0, len(block), chunk):
                    parser.feed(block[offset : offset + chunk])
            parser.close()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert parser.report.truncated is None

    small, large = peak(2_000), peak(20_000)
    assert large < small * 1.5 + 256 * 1024
