"""WARC writing: CPU a fetched page's records cost, Harvester's WarcFile against warcio's own gzip, in one run.

Why: a fetched page becomes three WARC records (request, metadata, response), each its own gzip member, on
the one event loop of a local crawl and in a page function's billed time on AWS. warcio's writer gzips at
level 9; Harvester writes the same records through warcio uncompressed and gzips each at
``harvester.archive.warc.COMPRESSION_LEVEL`` (zlib's default, 6, as Heritrix and Common Crawl write). This
script shows what that buys and what it costs in size.

    python bench/warc_write.py [--pages 2000]

Pages: the demo site's page (under 1 KB: what bench/local_crawl.py fetches, where the records' own overhead
dominates) and the same page padded to 100 KB (a typical page's HTML, uncompressed) with the demo's filler
markup (``SiteSpec.page_bytes``: navigation lists, class names, prose). The named baseline "warcio gzip
(level 9)" is the same WarcFile with warcio's own gzip writer (as it was before), so the records are byte
for byte the same before compression; both write into memory, so no disk is timed. Each figure is the
best of three passes over ``--pages`` captures (a tenth of them for the large page).
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from datetime import UTC, datetime

from warcio.warcwriter import WARCWriter

from harvester.archive.warc import COMPRESSION_LEVEL, Capture, WarcFile
from harvester.demo.site import _page_html


def captures(body: bytes, n: int) -> list[Capture]:
    fetched = datetime(2026, 11, 26, tzinfo=UTC)
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body))), ("ETag", '"v1"')]
    return [
        Capture(
            url=f"https://example.com/pages/{i}.html",
            fetched_at=fetched,
            method="GET",
            request_headers=[("User-Agent", "Harvester"), ("Accept", "*/*"), ("Accept-Encoding", "gzip")],
            status=200,
            reason="OK",
            response_headers=headers,
            body=body,
            metadata={"job": "job-1", "sitemap": "https://example.com/sitemap.xml", "priority": 0.5},
        )
        for i in range(n)
    ]


def harvester(batch: list[Capture]) -> int:
    out = io.BytesIO()
    archive = WarcFile(out, "bench.warc.gz", warcinfo=False)
    for capture in batch:
        archive.add(capture)
    return out.tell()


def warcio_gzip(batch: list[Capture]) -> int:
    """The same records, written by the same code, gzipped by warcio (WarcFile as it was before)."""
    out = io.BytesIO()
    archive = WarcFile(out, "bench.warc.gz", warcinfo=False)
    archive.writer = WARCWriter(out, gzip=True, warc_version="WARC/1.1")
    for capture in batch:
        archive.add(capture)
    return out.tell()


def best_of(write: Callable[[list[Capture]], int], batch: list[Capture]) -> tuple[float, int]:
    """Microseconds a page (best of three passes) and the bytes written."""
    timings, size = [], 0
    for _ in range(3):
        started = time.perf_counter()
        size = write(batch)
        timings.append(time.perf_counter() - started)
    return min(timings) / len(batch) * 1e6, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    args = parser.parse_args()
    pages = {
        "demo page": _page_html(17, "http://127.0.0.1:8080").encode(),
        "100 KB HTML page": _page_html(17, "http://127.0.0.1:8080", 100_000).encode(),
    }
    print(f"WARC records of {args.pages} fetched pages (request, metadata, response), written into memory")
    print(f"{'':30} {'writer':34} {'us/page':>9} {'KB/page':>8} {'time vs baseline':>17}")
    for name, body in pages.items():
        n = args.pages if len(body) < 10_000 else max(1, args.pages // 10)
        batch = captures(body, n)
        base_us, base_size = best_of(warcio_gzip, batch)
        ours_us, ours_size = best_of(harvester, batch)
        label = f"{name} ({len(body):,} B)"
        baseline = "warcio gzip (level 9, baseline)"
        print(f"{label:30} {baseline:34} {base_us:9.1f} {base_size / n / 1024:8.2f} {1.0:17.2f}")
        ours = f"Harvester WarcFile (level {COMPRESSION_LEVEL})"
        ratio = ours_us / base_us
        print(f"{'':30} {ours:34} {ours_us:9.1f} {ours_size / n / 1024:8.2f} {ratio:17.2f}")


if __name__ == "__main__":
    main()
