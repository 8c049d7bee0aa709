"""How hot a job's DynamoDB partitions run while its sitemaps are listed (issue 40, part 4: the job's
counters, its listed batches, the site's URL pointers and crawl batches, against 1,000 write units a second
a partition).

A listing (``fetch_pages: false``) of a generated site on the AWS path in moto (bench/_aws_path.py: the
stack from template.yaml, the real handlers driven by the test harness's poller), with bench/aws_cost.py's
meter pricing each write in write units, booked here by the partition key it lands on: the units per URL
listed that each kind of partition takes (its job, site or shard part generalised) and the hottest single
partition's; from those, the listing rate (URLs a second, all the job's sitemap functions together) at which
each partition reaches 1,000 write units a second. Against it, the rate one sitemap function lists at here
(URLs over the wall time of its invocations, moto's requests included: they are in-process calls, where a
real DynamoDB request is a 5-10 ms round trip made from several threads at once) times ``SitemapConcurrency``
5, 10 and 20: the headroom of each partition.

    python bench/hot_keys.py [--pages 20000] [--urlset 5000] [--concurrency 5,10,20] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from typing import Any

from _aws_path import aws_path
from aws_cost import Meter, Tally, item_size, timed_handlers, write_units
from recrawl import built

from harvester.demo.live import LiveSite

#: DynamoDB's write throughput a partition.
PARTITION_WCU = 1000


def kind_of(pk: str) -> str:
    """A partition key with its job, site and shard generalised: the kind of partition it is."""
    kind = re.sub(r"job-[0-9a-f]+", "<job>", pk)
    kind = re.sub(r"https?://[^#]+", "<site>", kind)
    return re.sub(r"#[0-9a-f]{1,2}$", "#<shard>", kind)


class PartitionMeter(Meter):
    """aws_cost's meter, which also books each write's units by the partition key it lands on, and by the
    function whose invocation made it."""

    def __init__(self, aws: Any) -> None:
        super().__init__(aws, where=False)
        self.function = ""
        self.partitions: collections.Counter[tuple[str, str]] = collections.Counter()  # (function, pk) -> units

    def _write_units(self, before: list[tuple[str, dict[str, Any], float, Any]]) -> list[tuple[str, float]]:
        for table_name, key, factor, old in before:
            new = self._stored(table_name, key)
            units = factor * write_units(max(item_size(old), item_size(new)))
            self.partitions[self.function, key["pk"]["S"]] += units
        return super()._write_units(before)


def attributed(aws: Any, meter: PartitionMeter) -> None:
    """Each handler's writes booked to its function (the poller runs one invocation at a time)."""
    load = aws.poller.handler

    def handler(function_id: str) -> Any:
        inner = load(function_id)

        def invoke(event: Any, context: Any) -> Any:
            meter.function = function_id
            try:
                return inner(event, context)
            finally:
                meter.function = ""

        return invoke

    aws.poller.handler = handler  # type: ignore[method-assign]


def measure(pages: int, urlset: int) -> dict[str, Any]:
    from harvester.model.messages import JobRequest

    site = LiveSite(pages=pages, sitemaps=max(1, pages // urlset))
    with site.serving(), aws_path() as aws:
        meter = PartitionMeter(aws)
        aws.requests.observer = meter
        timed_handlers(aws, meter)
        attributed(aws, meter)
        built(site)
        meter.tally = Tally()
        leg = aws.run(JobRequest(site=site.url("/"), fetch_pages=False))
        tally = meter.tally
    listing = [i for i in tally.invocations if i.function == "SitemapFunction"]
    kinds: collections.Counter[str] = collections.Counter()
    hottest: collections.Counter[str] = collections.Counter()
    for (function, pk), units in meter.partitions.items():
        if function == "SitemapFunction":
            kinds[kind_of(pk)] += units
            hottest[pk] += units
    return {
        "pages": pages,
        "urlset": urlset,
        "seconds": leg["seconds"],
        "sitemap_invocations": len(listing),
        "sitemap_seconds": sum(i.seconds for i in listing),
        "units_by_kind": dict(kinds),
        "hottest": hottest.most_common(5),
    }


def report(figures: dict[str, Any], concurrency: list[int]) -> None:
    pages = figures["pages"]
    rate = pages / figures["sitemap_seconds"]
    print(f"listing {pages:,} URLs in urlsets of {figures['urlset']:,} (moto, {figures['seconds']:.0f} s)")
    print(f"  one sitemap function lists {rate:,.0f} URLs a second here ({figures['sitemap_invocations']} invocations)")
    columns = "".join(f"{'x' + str(n):>9}" for n in concurrency)
    print(f"    {'partition':<36} {'':<14} {'WRU/URL':>8}  {'limit at URLs/s':>15}  headroom at SitemapConcurrency")
    print(f"    {'':<36} {'':<14} {'':>8}  {'':>15}  {columns}")
    for kind, units in sorted(figures["units_by_kind"].items(), key=lambda item: -item[1]):
        shards = 16 if kind.endswith("#<shard>") else 1
        each = units / pages / shards  # (a kind spread over shards: each shard's share)
        limit = PARTITION_WCU / each
        headroom = "".join(f"{limit / (rate * n):>9.1f}" for n in concurrency)
        spread = f"(each of {shards})" if shards > 1 else ""
        print(f"    {kind:<36} {spread:<14} {each:8.3f}  {limit:>15,.0f}  {headroom}")
    print("  hottest single partitions (WRU over the listing):")
    for pk, units in figures["hottest"]:
        print(f"    {kind_of(pk):<36} {units:>10,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--urlset", type=int, default=5_000)
    parser.add_argument("--concurrency", default="5,10,20")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = measure(args.pages, args.urlset)
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        print()
        return
    report(figures, [int(n) for n in args.concurrency.split(",")])


if __name__ == "__main__":
    main()
