"""A static demo site in a folder, served on 127.0.0.1: what most end-to-end tests crawl.

The site is what a real one looks like to Harvester: robots.txt declares a sitemap index, the index lists
several urlsets (the last one gzipped), pages carry lastmod / changefreq / priority and some images, and a
few listed pages do not exist. Python's file server answers ``If-Modified-Since``; sites that change
between crawls are :mod:`harvester.demo.live`'s.
"""

from __future__ import annotations

import contextlib
import gzip
import random
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

CHANGEFREQS = ("daily", "weekly", "monthly")


@dataclass(frozen=True)
class SiteSpec:
    pages: int = 300
    broken: int = 5
    sitemaps: int = 4
    gzip_last: bool = True
    images_every: int = 10
    #: Pad each page to about this many bytes of markup (0: the short page); for measuring what a page's
    #: size costs a crawl (compression, digests, storage), as real pages of 50-100 KB do.
    page_bytes: int = 0


@dataclass(frozen=True)
class BuiltSite:
    base_url: str
    page_urls: tuple[str, ...]
    broken_urls: tuple[str, ...]
    sitemap_urls: tuple[str, ...]

    @property
    def listed(self) -> int:
        return len(self.page_urls) + len(self.broken_urls)


def build_site(root: Path, base_url: str, spec: SiteSpec = SiteSpec()) -> BuiltSite:
    """Writes the site under ``root``; every URL in it is absolute under ``base_url``."""
    base_url = base_url.rstrip("/")
    (root / "pages").mkdir(parents=True, exist_ok=True)
    (root / "sitemaps").mkdir(exist_ok=True)
    pages = [f"{base_url}/pages/{n}.html" for n in range(1, spec.pages + 1)]
    broken = [f"{base_url}/pages/missing-{n}.html" for n in range(1, spec.broken + 1)]
    for n in range(1, spec.pages + 1):
        (root / "pages" / f"{n}.html").write_text(_page_html(n, base_url, spec.page_bytes), encoding="utf-8")
    listed = list(pages)
    # Broken links are spread through the listing rather than bunched at its end.
    for i, url in enumerate(broken):
        listed.insert((i + 1) * len(listed) // (len(broken) + 1), url)
    chunks = [listed[i :: spec.sitemaps] for i in range(spec.sitemaps)]
    sitemap_urls = []
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i, chunk in enumerate(chunks, start=1):
        body = _urlset(chunk, start, spec.images_every, base_url).encode("utf-8")
        name = f"pages-{i}.xml"
        if spec.gzip_last and i == spec.sitemaps:
            name += ".gz"
            body = gzip.compress(body, mtime=0)
        (root / "sitemaps" / name).write_bytes(body)
        sitemap_urls.append(f"{base_url}/sitemaps/{name}")
    index = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">',
    ]
    for url in sitemap_urls:
        index.append(f"  <sitemap><loc>{escape(url)}</loc><lastmod>2026-11-01</lastmod></sitemap>")
    index.append("</sitemapindex>")
    (root / "sitemap_index.xml").write_text("\n".join(index) + "\n", encoding="utf-8")
    (root / "robots.txt").write_text(
        f"User-agent: *\nDisallow: /private/\n\nSitemap: {base_url}/sitemap_index.xml\n", encoding="utf-8"
    )
    (root / "index.html").write_text(_page_html(0, base_url), encoding="utf-8")
    return BuiltSite(base_url, tuple(pages), tuple(broken), (f"{base_url}/sitemap_index.xml", *sitemap_urls))


def _urlset(urls: list[str], start: datetime, images_every: int, base_url: str) -> str:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">',
    ]
    for n, url in enumerate(urls):
        lastmod = (start + timedelta(hours=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
        entry = [f"  <url><loc>{escape(url)}</loc><lastmod>{lastmod}</lastmod>"]
        entry.append(f"<changefreq>{CHANGEFREQS[n % 3]}</changefreq><priority>{(n % 10) / 10:.1f}</priority>")
        if images_every and n % images_every == 0:
            entry.append(f"<image:image><image:loc>{base_url}/img/{n}.jpg</image:loc></image:image>")
        entry.append("</url>")
        out.append("".join(entry))
    out.append("</urlset>")
    return "\n".join(out) + "\n"


def _page_html(n: int, base_url: str, size: int = 0) -> str:
    return (
        f"<!doctype html><html><head><title>Demo page {n}</title></head>"
        f"<body><h1>Demo page {n}</h1><p>Served by the Harvester demo site at {base_url}.</p>"
        f"<p>{'Lorem ipsum dolor sit amet. ' * (1 + n % 20)}</p>{filler_html(size, seed=n)}</body></html>\n"
    )


def filler_html(size: int, *, seed: int) -> str:
    """About ``size`` bytes of markup with the repetition real pages have (navigation lists, class names,
    prose from a small vocabulary): what compresses and digests like a page. One of 16 blocks made once
    per size, by ``seed``: a site of 20,000 such pages is written in seconds."""
    return _fillers(size)[seed % 16] if size > 0 else ""


@lru_cache(maxsize=4)
def _fillers(size: int) -> tuple[str, ...]:
    rng = random.Random(size)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(2500)]
    blocks = []
    for _ in range(16):
        parts: list[str] = []
        length = 0
        while length < size:
            if rng.random() < 0.3:
                hrefs = [f"/section/{rng.randint(1, 400)}/" for _ in range(6)]
                links = "".join(f'<li><a href="{href}">{rng.choice(words)}</a></li>' for href in hrefs)
                part = f'<nav class="menu menu-{rng.randint(1, 9)}"><ul>{links}</ul></nav>\n'
            else:
                prose = " ".join(rng.choice(words) for _ in range(rng.randint(20, 60)))
                part = f'<div class="post-body c{rng.randint(1, 30)}"><p>{prose}.</p></div>\n'
            parts.append(part)
            length += len(part)
        blocks.append("".join(parts))
    return tuple(blocks)


class _QuietHandler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    disable_nagle_algorithm = True  # (headers and body are two writes: Nagle would hold the body 40 ms)

    def log_message(self, format: str, *args: object) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    """A crawler that exits leaves keep-alive connections to reset: normal here, not an error to print."""

    daemon_threads = True
    #: Connections waiting to be accepted (socketserver's default is 5): a crawler opens eight at once, and a
    #: connection beyond the backlog waits a second for its SYN to be sent again.
    request_queue_size = 64

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(root: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serves ``root`` over HTTP on ``host``; yields the base URL (the port is picked by the OS)."""
    server = QuietServer((host, port), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="demo-site", daemon=True
    )
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
