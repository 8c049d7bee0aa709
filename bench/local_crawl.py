"""Local crawl throughput: `harvest crawl` against a plain fetch-and-store loop, on the same site, in one run.

The baseline is what any crawler has to do at the least: fetch every listed page with the same number of
concurrent httpx requests and write each body to a file, with no state, no robots.txt, no guard and no
accounting. The ratio is what Harvester's durability (SQLite queue and state, per-page claims and
counted outcomes, the SSRF guard, bounded decoding) costs on top of that. Both run against the demo site
served on 127.0.0.1 by Python's threading HTTP server, which is the shared ceiling of both.

    python bench/local_crawl.py [--pages 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import tempfile
import time
from pathlib import Path

import httpx

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo import SiteSpec, build_site, serve
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest
from harvester.settings import EngineSettings


async def baseline(urls: list[str], out: Path, concurrency: int) -> float:
    """Fetch every URL with ``concurrency`` requests in flight and write each body to a file."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    start = time.perf_counter()
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

        async def worker() -> None:
            while not queue.empty():
                url = queue.get_nowait()
                response = await client.get(url)
                (out / hashlib.sha256(url.encode()).hexdigest()[:32]).write_bytes(response.content)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


async def harvester_crawl(site: str, state: Path, concurrency: int) -> tuple[float, int]:
    policy = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))
    request = JobRequest(site=site, rate_limit_delay=0.00001)
    # As many requests to the one host at once as the baseline has (Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN).
    settings = dataclasses.replace(EngineSettings.from_env(), host_max_in_flight=concurrency)
    with LocalHarvest.open(state) as harvest:
        runner = LocalRunner(harvest, policy=policy, settings=settings, concurrency=concurrency)
        start = time.perf_counter()
        outcome = await runner.crawl(request)
        return time.perf_counter() - start, outcome.result.successful_processing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "site"
        root.mkdir()
        with serve(root) as base:
            site = build_site(root, base, SiteSpec(pages=args.pages, broken=0))
            out = Path(tmp) / "baseline"
            out.mkdir()
            base_seconds = asyncio.run(baseline(list(site.page_urls), out, args.concurrency))
            seconds, fetched = asyncio.run(harvester_crawl(f"{base}/", Path(tmp) / "state", args.concurrency))
    assert fetched == args.pages, f"harvest crawl fetched {fetched} of {args.pages} pages"
    print(f"site: {args.pages} pages on 127.0.0.1, {args.concurrency} concurrent requests")
    print(f"{'':32} {'seconds':>8} {'pages/s':>8}")
    print(f"{'baseline (httpx fetch + write)':32} {base_seconds:8.2f} {args.pages / base_seconds:8.0f}")
    print(f"{'harvest crawl (end to end)':32} {seconds:8.2f} {args.pages / seconds:8.0f}")
    print(f"harvest crawl / baseline throughput: {base_seconds / seconds:.2f}")
    print("(harvest crawl also discovers and parses the sitemaps, and writes the result, inside its time)")


if __name__ == "__main__":
    main()
