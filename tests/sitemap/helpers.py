"""Helpers shared by the sitemap parser tests: fixture files, documents, and feeding in pieces."""

from __future__ import annotations

from pathlib import Path

from harvester.sitemap import Entry, ParseReport, SitemapParser

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def feed_in_pieces(url: str, data: bytes, size: int = 1, **limits: int) -> tuple[list[Entry], ParseReport]:
    """Feeds ``data`` in pieces of ``size`` bytes (1: byte at a time), as a slow network would."""
    parser = SitemapParser(url, **limits)
    entries: list[Entry] = []
    for start in range(0, len(data), size):
        entries += parser.feed(data[start : start + size])
    entries += parser.close()
    return entries, parser.report


def urls(entries: list[Entry]) -> list[str]:
    return [entry.url for entry in entries]


def urlset(count: int, *, start: int = 0, close: bool = True) -> bytes:
    """A urlset of ``count`` URLs, https://example.org/page/<n>."""
    body = "".join(
        f"  <url>\n    <loc>https://example.org/page/{n}</loc>\n    <lastmod>2024-01-01</lastmod>\n  </url>\n"
        for n in range(start, start + count)
    )
    tail = "</urlset>\n" if close else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{body}{tail}'
    ).encode()
