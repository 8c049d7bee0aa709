"""The registry of scheduled sites at scale: 10,000 and 100,000 sites registered, 1,000 of them due, and one
scheduler look that starts their jobs; in a state directory and on the stack from template.yaml in moto (the
real scheduler handler, invoked as its EventBridge rule invokes it).

Printed for each size: the registration's wall time (and AWS requests), the look's wall time, AWS requests
by operation, and whether it started exactly the 1,000 due sites' jobs; then the ratio of the look's requests
at 100,000 to those at 10,000 registered. Target (issue 40): the look's requests do not grow with the sites
registered (ratio 1.0). Wall times in moto are moto's (an index query walks the whole table there), not
DynamoDB's.

    python bench/scheduled_sites.py [--sizes 10000,100000] [--due 1000] [--no-aws] [--no-local] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _aws_path import aws_path

from harvester.model.messages import JobRequest
from harvester.model.records import utcnow
from harvester.model.scheduled_site import ScheduledSite

REQUEST = JobRequest(site="https://example.com/", fetch_pages=False)


def sites(registered: int, due: int) -> tuple[list[ScheduledSite], set[str]]:
    """``registered`` sites of which ``due`` are due now; the rest are due from two hours on (not at their own
    slots, some of which would come while the bench registers them)."""
    now = utcnow()
    made = [
        ScheduledSite.new(
            REQUEST.model_copy(update={"site": f"https://site-{i}.example/"}),
            timedelta(days=1),
            now=now,
            name=f"site-{i}",
            at_once=i < due,
        )
        for i in range(registered)
    ]
    made[due:] = [
        site.model_copy(update={"next_due": now + timedelta(hours=2, seconds=i % 72_000)})
        for i, site in enumerate(made[due:])
    ]
    expected = {s.job_id() for s in made[:due]}
    return made, expected


def local(registered: int, due: int) -> dict[str, Any]:
    from harvester.adapters.local.runner import LocalHarvest
    from harvester.pipeline.scheduler import start_due

    made, expected = sites(registered, due)
    with tempfile.TemporaryDirectory() as state, LocalHarvest.open(Path(state)) as harvest:
        start = time.perf_counter()
        harvest.scheduled_sites.add(made)
        added = time.perf_counter() - start
        start = time.perf_counter()
        report = start_due(harvest, harvest.scheduled_sites, now=utcnow())  # type: ignore[arg-type]
        look = time.perf_counter() - start
    return {"added_s": added, "look_s": look, "exact": set(report.started) == expected, "requests": {}}


def aws(registered: int, due: int) -> dict[str, Any]:
    from harvester.adapters.aws import AwsAdapters

    made, expected = sites(registered, due)
    with aws_path() as path:
        adapters = AwsAdapters.from_env(path.stack.function("SchedulerFunction").environment)
        requests = path.requests
        requests.counts.clear()
        requests.active = True
        start = time.perf_counter()
        adapters.scheduled_sites.add(made)
        added, registering = time.perf_counter() - start, dict(requests.counts)
        requests.counts.clear()
        logging.disable(logging.INFO)
        start = time.perf_counter()
        summary = path.poller.invoke_schedule("SchedulerFunction")
        look = time.perf_counter() - start
        logging.disable(logging.NOTSET)
        requests.active = False
    return {
        "added_s": added,
        "added_requests": sum(registering.values()),
        "look_s": look,
        "exact": set(summary["started"]) == expected,
        "requests": dict(requests.counts),
    }


def report(figures: dict[str, dict[int, dict[str, Any]]], due: int) -> None:
    for backend, by_size in figures.items():
        print(f"\n{backend}: a look with {due:,} sites due")
        for size, figure in by_size.items():
            added = f", {figure['added_requests']:,} requests" if "added_requests" in figure else ""
            total = sum(figure["requests"].values())
            requests = f", {total:,} AWS requests" if figure["requests"] else ""
            print(
                f"  {size:>9,} registered: added in {figure['added_s']:.2f} s{added}; the look"
                f" {figure['look_s']:.2f} s{requests}; started exactly the due sites' jobs: {figure['exact']}"
            )
            for operation, count in sorted(figure["requests"].items(), key=lambda item: -item[1]):
                print(f"      {operation:<32} {count:>6,}")
        sizes = sorted(by_size)
        if len(sizes) > 1 and by_size[sizes[0]]["requests"]:
            small, large = (sum(by_size[s]["requests"].values()) for s in (sizes[0], sizes[-1]))
            ratio = f"{large / small:.2f} (target 1.00)"
            print(f"  the look's requests at {sizes[-1]:,} / at {sizes[0]:,} registered: {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="the sites registered, comma-separated")
    parser.add_argument("--due", type=int, default=1000, help="how many of them are due")
    parser.add_argument("--no-aws", action="store_true")
    parser.add_argument("--no-local", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the figures as one line of JSON")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    figures: dict[str, dict[int, dict[str, Any]]] = {}
    for backend, measure in (("local", local), ("aws (moto)", aws)):
        if (backend == "local" and args.no_local) or (backend != "local" and args.no_aws):
            continue
        figures[backend] = {}
        for size in sizes:
            figures[backend][size] = measure(size, args.due)
            print(f"{backend} {size:,}: done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(figures))
    else:
        report(figures, args.due)


if __name__ == "__main__":
    main()
