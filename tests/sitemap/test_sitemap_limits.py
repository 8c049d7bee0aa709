"""Truncation, the entry and size limits, gzip bombs and hostile XML."""

from __future__ import annotations

import gzip
import time
import zlib

import pytest

from harvester.inflate import DEFAULT_STEP
from harvester.limits import SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES
from harvester.sitemap import SitemapKind, SitemapParser, parse_bytes
from harvester.words import size

from .helpers import feed_in_pieces, fixture, urls, urlset

URL = "https://example.org/sitemap.xml"


# Truncated documents: every complete entry, never a cut-off one.


def test_cut_in_the_middle_of_the_50th_url_yields_49():
    document = urlset(50)
    cut = document.rindex(b"<loc>https://example.org/page/49") + len(b"<loc>https://example.org/pa")
    entries, report = parse_bytes(URL, document[:cut])
    assert urls(entries) == [f"https://example.org/page/{n}" for n in range(49)]
    assert report.kind is SitemapKind.URLSET
    assert report.error is None
    assert report.truncated is not None
    assert "</urlset>" in report.truncated


def test_missing_close_tag_yields_all_50():
    entries, report = parse_bytes(URL, urlset(50, close=False))
    assert len(entries) == 50
    assert report.truncated is not None
    assert report.truncated.startswith("document ends before </urlset>")


@pytest.mark.parametrize("cut", [1, 7, 25, 60, 99, 133, 200, 380, 391])
def test_every_cut_keeps_only_complete_entries(cut):
    document = urlset(5)
    complete = {f"https://example.org/page/{n}" for n in range(5)}
    for end in range(cut, len(document) - len(b"</urlset>\n"), 97):
        entries, report = parse_bytes(URL, document[:end])
        assert set(urls(entries)) <= complete
        assert report.error is not None or report.truncated is not None


def test_cut_download_reported_by_the_caller():
    document = urlset(3)
    parser = SitemapParser(URL)
    entries = parser.feed(document[: -len(b"</urlset>\n")])
    entries += parser.close(complete=False)
    assert len(entries) == 3
    assert parser.report.truncated == "download cut before the end of the document"


def test_cut_download_after_the_root_closed_is_complete():
    parser = SitemapParser(URL)
    entries = parser.feed(urlset(3))
    assert parser.finished  # the root element closed: nothing more to read
    entries += parser.close(complete=False)
    assert len(entries) == 3
    assert parser.report.truncated is None


def test_syntax_error_after_entries_truncates_with_the_line_number():
    document = urlset(3).replace(b"</urlset>", b"<url><loc>https://example.org/x</loc></lurl>\n</urlset>")
    entries, report = parse_bytes(URL, document)
    assert len(entries) == 3
    assert report.error is None
    assert report.truncated is not None
    assert "mismatched tag" in report.truncated
    assert "line 15" in report.truncated


def test_junk_after_the_root_element_is_not_read():
    entries, report = parse_bytes(URL, urlset(2) + b"<p>Generated in 0.2 s</p><p>")
    assert len(entries) == 2
    assert report.truncated is None
    assert report.error is None


# The entry limit.


def test_50001_entries_give_50000_and_truncated():
    parser = SitemapParser(URL)
    document = urlset(SITEMAP_MAX_ENTRIES + 1)
    entries = []
    for start in range(0, len(document), 1 << 16):
        entries += parser.feed(document[start : start + (1 << 16)])
        if parser.finished:
            break
    assert parser.finished
    entries += parser.close()
    assert len(entries) == SITEMAP_MAX_ENTRIES
    assert entries[-1].url == f"https://example.org/page/{SITEMAP_MAX_ENTRIES - 1}"
    assert parser.report.truncated == "more than 50,000 entries"


def test_exactly_the_limit_is_not_truncated():
    entries, report = parse_bytes(URL, urlset(10), max_entries=10)
    assert len(entries) == 10
    assert report.truncated is None


def test_entry_limit_applies_to_children_and_text():
    index = b"<sitemapindex>" + b"<sitemap><loc>https://example.org/s.xml</loc></sitemap>" * 3 + b"</sitemapindex>"
    entries, report = parse_bytes(URL, index, max_entries=2)
    assert len(entries) == 2
    assert report.truncated == "more than 2 entries"
    lines = b"".join(b"https://example.org/%d\n" % n for n in range(5))
    entries, report = parse_bytes("https://example.org/list.txt", lines, max_entries=3)
    assert len(entries) == 3
    assert report.truncated == "more than 3 entries"


def test_feeding_after_the_limit_is_ignored():
    parser = SitemapParser(URL, max_entries=1)
    assert len(parser.feed(urlset(3, close=False))) == 1
    assert parser.finished
    assert parser.feed(b"<url><loc>https://example.org/more</loc></url>") == []
    assert parser.close() == []
    assert parser.report.truncated == "more than 1 entry"


# The size limit, plain and gzipped.


def test_byte_limit_on_a_plain_body():
    document = urlset(100)
    limit = len(urlset(10)) + 40  # the middle of the 11th URL or so
    parser = SitemapParser(URL, max_bytes=limit)
    entries = parser.feed(document)
    assert parser.finished
    entries += parser.close()
    assert 9 <= len(entries) <= 11
    assert parser.report.truncated == f"larger than {size(limit)} uncompressed"
    assert parser.bytes_decoded == limit


def test_byte_limit_counts_uncompressed_bytes_of_a_gzipped_body():
    document = urlset(1000)
    limit = len(document) // 2
    entries, report = parse_bytes(URL, gzip.compress(document), max_bytes=limit)
    assert 0 < len(entries) < 1000
    assert report.truncated == f"larger than {size(limit)} uncompressed"


def test_a_document_of_exactly_the_limit_is_complete():
    document = urlset(10)
    for body in (document, gzip.compress(document)):
        entries, report = parse_bytes(URL, body, max_bytes=len(document))
        assert len(entries) == 10
        assert report.truncated is None


def test_byte_limit_on_text_drops_the_cut_line():
    lines = b"".join(b"https://example.org/%d\n" % n for n in range(100))
    entries, report = parse_bytes("https://example.org/list.txt", lines, max_bytes=50)
    assert urls(entries) == ["https://example.org/0", "https://example.org/1"]
    assert report.truncated == "larger than 50 bytes uncompressed"


@pytest.fixture(scope="module")
def gigabyte_of_zeros_gzipped() -> bytes:
    """1 GiB of zeros, gzipped (about 4.5 MiB at level 1), compressed a MiB at a time."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(1024)]
    parts.append(compressor.flush())
    return b"".join(parts)


def test_gzip_bomb_is_never_inflated_past_the_limit(gigabyte_of_zeros_gzipped):
    bomb = gigabyte_of_zeros_gzipped
    parser = SitemapParser("https://example.org/sitemap.xml.gz")
    started = time.perf_counter()
    for start in range(0, len(bomb), 1 << 16):
        parser.feed(bomb[start : start + (1 << 16)])
        if parser.finished:
            break
    parser.close()
    elapsed = time.perf_counter() - started
    assert parser.finished
    assert parser.bytes_decoded <= SITEMAP_MAX_BYTES + DEFAULT_STEP
    assert parser.report.truncated == "larger than 50 MiB uncompressed"
    assert elapsed < 10


def test_gzip_bomb_in_one_chunk_stops_at_the_limit_too(gigabyte_of_zeros_gzipped):
    limit = 1 << 20
    parser = SitemapParser("https://example.org/sitemap.xml", max_bytes=limit)
    parser.feed(gigabyte_of_zeros_gzipped)
    assert parser.finished
    assert parser.bytes_decoded <= limit + DEFAULT_STEP
    assert parser.report.truncated == f"larger than {size(limit)} uncompressed"


def test_xml_gzip_bomb_keeps_the_entries_before_the_limit():
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = urlset(3, close=False)
    parts = [compressor.compress(head)]
    parts += [compressor.compress(b" " * (1 << 20)) for _ in range(64)]
    parts.append(compressor.flush())
    entries, report = parse_bytes(URL, b"".join(parts), max_bytes=4 << 20)
    assert len(entries) == 3
    assert report.truncated == "larger than 4 MiB uncompressed"


def test_gzip_cut_mid_stream_keeps_complete_entries():
    compressed = gzip.compress(urlset(200))
    parser = SitemapParser(URL)
    entries = parser.feed(compressed[: len(compressed) // 2])
    entries += parser.close()  # the caller believed the body complete; the gzip trailer says otherwise
    assert 0 < len(entries) < 200
    assert parser.report.truncated == "gzip stream ends before its end marker"


# Hostile XML.


def test_billion_laughs_is_refused_quickly():
    started = time.perf_counter()
    entries, report = parse_bytes(URL, fixture("billion_laughs.xml"))
    assert time.perf_counter() - started < 1
    assert entries == []
    assert report.kind is None
    assert report.error is not None
    # (refused at its first entity declaration, before expansion; in words, not the exception's repr)
    assert report.error.startswith("not a sitemap: it declares an entity (<!ENTITY lol ...>), which is never read")


def test_external_entity_is_refused_and_never_read():
    entries, report = parse_bytes(URL, fixture("external_entity.xml"))
    assert entries == []
    assert report.error is not None
    assert report.error.startswith("not a sitemap: it declares an entity"), report.error
    assert "root:" not in report.error and "Forbidden(" not in report.error


def test_doctype_without_internal_subset_is_refused_too():
    document = b'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "http://evil.example/x.dtd"><urlset/>'
    _, report = parse_bytes(URL, document)
    assert report.error is not None
    assert report.error.startswith("not a sitemap: it names an external DTD (http://evil.example/x.dtd)")
    assert "http://evil.example/x.dtd" in report.error
    assert "--allow-doctype" in report.error  # (the way to read it, named)


def test_hostile_xml_fed_byte_by_byte_is_refused_the_same_way():
    for name in ("billion_laughs.xml", "external_entity.xml"):
        assert feed_in_pieces(URL, fixture(name)) == parse_bytes(URL, fixture(name))


def test_a_doctype_without_entities_or_an_external_dtd_is_read_past():
    """Only what could hurt is refused: a bare DOCTYPE, or one declaring elements, leaves the sitemap valid."""
    for doctype in ("<!DOCTYPE urlset>", "<!DOCTYPE urlset [<!ELEMENT urlset ANY><!ATTLIST url id CDATA #IMPLIED>]>"):
        document = (
            f'<?xml version="1.0"?>{doctype}<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            "<url><loc>https://www.example.org/a</loc></url></urlset>"
        ).encode()
        entries, report = parse_bytes(URL, document)
        assert report.error is None, (doctype, report.error)
        assert [e.url for e in entries] == ["https://www.example.org/a"]
