"""Re-crawl cost: an unchanged site crawled twice, on this machine and on the AWS path (moto), in one run.

The first crawl is the baseline: it fetches every page. The second runs right after, as a scheduled job
would on a site that did not change: every sitemap is asked conditionally (304) and replayed from its
listing, every page is recorded as not due, nothing is fetched or stored. Printed: the requests the site
received and the wall time of each crawl, their ratios (targets: the second crawl at most 1 % of the
first's requests and 10 % of its wall time), and, on the AWS path, the AWS requests the handlers made per
listed URL on the unchanged re-crawl (target: at most 0.3), by operation.

    python bench/recrawl.py [--pages 20000] [--aws-pages 2000] [--concurrency 16] [--no-aws]

The local crawls are the real `harvest crawl` command against the live demo site (ETag and Last-Modified on
every page, served from memory by Python's threading server on 127.0.0.1). The AWS path is template.yaml
created in moto with the real handlers driven as Lambda's poller drives them; its site is smaller by
default because moto, not Harvester, is the slow part there (requests per URL do not depend on the size).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _aws_path import aws_path, by_operation

from harvester.demo.live import LiveSite


def crawl_locally(site: LiveSite, state: Path, concurrency: int) -> dict[str, Any]:
    site.reset_log()
    command = [
        sys.executable, "-m", "harvester", "crawl", site.url("/"), "--state-dir", str(state),
        "--allow-network", "127.0.0.0/8", "--rate-limit-delay", "0.00001", "--concurrency", str(concurrency),
        "--quiet", "--json",
    ]  # fmt: skip
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"harvest crawl failed ({run.returncode}):\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout)
    return {
        "seconds": seconds,
        "requests": len(site.hits),
        "pages": len(site.page_hits()),
        "conditional": sum(h.conditional for h in site.hits),
        "not_modified": sum(h.status == 304 for h in site.hits),
        "listed": result["total_urls"],
        "changes": result["changes"],
    }


def local_leg(pages: int, concurrency: int) -> tuple[dict[str, Any], dict[str, Any], int]:
    with LiveSite(pages=pages, sitemaps=max(1, pages // 5000)).serving() as site, tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        first = crawl_locally(site, state, concurrency)
        second = crawl_locally(site, state, concurrency)
        size = sum(p.stat().st_size for p in state.rglob("*") if p.is_file())
    return first, second, size


def aws_leg(pages: int) -> dict[str, Any]:
    from harvester.model.messages import JobRequest

    with LiveSite(pages=pages, sitemaps=max(1, pages // 5000)).serving() as site, aws_path() as aws:
        legs = []
        for _ in range(2):
            site.reset_log()
            leg = aws.run(JobRequest(site=site.url("/"), rate_limit_delay=0.00001))
            legs.append({**leg, "site_requests": len(site.hits)})
    return {"pages": pages, "first": legs[0], "second": legs[1]}


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--aws-pages", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-aws", action="store_true")
    args = parser.parse_args()

    first, second, size = local_leg(args.pages, args.concurrency)
    print(f"Local: `harvest crawl` of an unchanged {args.pages:,}-page site, twice (concurrency {args.concurrency})")
    for name, leg in (("crawl 1", first), ("crawl 2", second)):
        print(
            f"  {name}: {leg['requests']:>6,} requests ({leg['pages']:,} pages, {leg['conditional']:,} conditional,"
            f" {leg['not_modified']:,} answered 304)  {leg['seconds']:7.2f} s   changes {leg['changes']}"
        )
    request_ratio = second["requests"] / first["requests"]
    time_ratio = second["seconds"] / first["seconds"]
    print(f"  requests: crawl 2 / crawl 1 = {request_ratio:.4f}  (target <= 0.01: {verdict(request_ratio <= 0.01)})")
    print(f"  wall time: crawl 2 / crawl 1 = {time_ratio:.4f}  (target <= 0.10: {verdict(time_ratio <= 0.10)})")
    print(f"  state directory after both crawls: {size / 2**20:.1f} MiB")
    if args.no_aws:
        return
    aws = aws_leg(args.aws_pages)
    print(f"\nAWS path (moto, template.yaml, real handlers): an unchanged {aws['pages']:,}-page site, twice")
    for name in ("first", "second"):
        leg = aws[name]
        total = sum(leg["aws"].values())
        print(
            f"  {name} crawl: {leg['site_requests']:,} site requests, {total:,} AWS requests by the handlers"
            f" ({total / aws['pages']:.3f} per listed URL), {leg['seconds']:.1f} s in moto"
        )
    second_leg = aws["second"]
    per_url = sum(second_leg["aws"].values()) / aws["pages"]
    print(f"  unchanged re-crawl: {per_url:.3f} AWS requests per listed URL (target <= 0.3: {verdict(per_url <= 0.3)})")
    print("\n".join(by_operation(second_leg["aws"], aws["pages"])))
    poller = sum(second_leg["poller"].values())
    print(f"  (Lambda's SQS poller, played by the test harness, made {poller:,} more: {second_leg['poller']})")


if __name__ == "__main__":
    main()
