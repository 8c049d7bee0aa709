"""Page batch items: the write units a page's records would cost kept a batch to an item, against one item each.

Why: issue 11's $2 a million pages needs the job's per-URL state kept per page batch on AWS (see its notes):
DynamoDB bills a write per started KB of the item, so what a batch item costs a page is its deflated size
over the pages it holds. This measures that size on real records: the demo site is crawled locally (its
pages, sitemaps and records as any crawl makes them), and the job records and crawl records it wrote are
deflated as the state table stores a body (``adapters/aws/item_body.py``: raw deflate against its preset
dictionary; a job record without what its crawl record repeats, ``page_body.pack``).

    python bench/batch_items.py [--pages 500] [--batch 25 49 100]

Named baseline: **one item per record** (each record deflated alone, one write unit while
it stays under 1 KB). Figures per record: bytes, and write units of one write of the item (a transaction
bills each twice).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import zlib
from pathlib import Path

from local_crawl import free_port

from harvester.adapters.aws.item_body import stored_body
from harvester.adapters.aws.page_body import pack
from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo.site import SiteSpec, build_site, serve
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest
from harvester.model.records import body_of
from harvester.settings import EngineSettings


def stored_size(text: str) -> int:
    """Bytes of a body as the state table stores it (deflated against the dictionary, or plain if longer)."""
    value = stored_body(text)
    return len(value["B"]) if "B" in value else len(value["S"].encode())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def crawl(pages: int, root: Path) -> tuple[list[str], list[str]]:
    """The job records (as the AWS store packs them) and crawl records of a local crawl of the demo site."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    build_site(root / "site", base, SiteSpec(pages=pages, broken=0))
    request = JobRequest(site=f"{base}/", rate_limit_delay=0.00001)
    policy = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))

    async def run() -> str:
        with LocalHarvest.open(root / "state") as harvest:
            runner = LocalRunner(harvest, policy=policy, settings=EngineSettings.from_env(), concurrency=8)
            outcome = await runner.crawl(request)
            return outcome.job.job_id

    with serve(root / "site", port=port):
        job_id = asyncio.run(run())
    with LocalHarvest.open(root / "state") as harvest:
        jobs = [pack(body, job_id) for body in harvest.store.page_bodies(job_id)]
        crawls = [body_of(record) for record in harvest.crawldb.site_urls(request.origin)]
    return jobs, crawls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=500, help="pages of the demo site (default 500)")
    parser.add_argument("--batch", type=int, nargs="+", default=[25, 49, 100], help="pages a batch item holds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        jobs, crawls = crawl(args.pages, Path(tmp))
    kinds = {
        "job record": jobs,
        "crawl record": crawls,
        "both": [job + "\n" + known for job, known in zip(jobs, crawls, strict=False)],
    }
    print(f"records of a crawl of {args.pages} demo pages: {len(jobs)} job records, {len(crawls)} crawl records")
    print(f"  {'record':<14}{'layout':<28}{'bytes a record':>16}{'write units a record':>22}")
    for name, rows in kinds.items():
        raw = statistics.mean(len(row.encode()) for row in rows)
        alone = [stored_size(row) for row in rows]
        print(f"  {name:<14}{'JSON':<28}{raw:>16.0f}{'':>22}")
        baseline = statistics.mean(write_units(size) for size in alone)
        print(f"  {'':<14}{'one item per record (today)':<28}{statistics.mean(alone):>16.0f}{baseline:>22.2f}")
        for size in args.batch:
            items = [stored_size("\n".join(rows[i : i + size])) for i in range(0, len(rows) - size + 1, size)]
            if not items:
                continue
            per_record = statistics.mean(items) / size
            units = statistics.mean(write_units(item) for item in items) / size
            label = f"a batch item of {size}"
            print(f"  {'':<14}{label:<28}{per_record:>16.0f}{units:>22.2f}  ({units / baseline:.2f}x)")
    print("(zlib", zlib.ZLIB_VERSION + ")")


if __name__ == "__main__":
    main()
