"""Re-crawl cost as it follows what changed: a site crawled once, then again unchanged, then with 1 % and 10 %
of its entries changed (lastmod advanced, content changed), then with 1 % removed and 1 % added (those spread
over every urlset), then with 1 % changed in one urlset (as a site's new and changed pages sit in its latest
sitemap); on this
machine (the real `harvest crawl` command) and on the AWS path (template.yaml in moto, the real handlers
driven as Lambda's poller drives them), in one run.

Printed for each cycle: the requests the site received, the wall time, the state directory's size after it
(locally: the state, and apart the jobs' own outputs, ``urls.jsonl``, feed and index, which every job writes
whole), and on the AWS path the handlers' AWS requests and DynamoDB write units (table and index) per
listed URL, with the unchanged cycle's requests by operation. The targets (issue 39): an unchanged cycle at
most 0.01 AWS requests and 0.01 write units per listed URL on a 20,000-URL site, at most 100 AWS requests on a
300-URL site, and locally at most 10 % of the first crawl's wall time.

``--baseline REF`` runs the same bench (this script, on that commit's engine, handlers, template and test
harness: ``git archive REF``) first, and prints its figures beside this tree's.

    python bench/recrawl.py [--pages 400000] [--aws-pages 300,20000] [--urlset 5000] [--no-pages] [--no-aws]
                            [--no-local] [--baseline REF] [--json]

The local site is the live demo site (ETag and Last-Modified on every page, served from memory by Python's
threading server on 127.0.0.1), in urlsets of 5,000 URLs (``--urlset``: one urlset of 25,000 has the 10 %
cycle change 2,500 entries of one sitemap).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _aws_path import REPO, aws_path

from harvester.demo.live import LiveSite

#: The cycles, in the order they run on one site.
CYCLES = ("first crawl", "unchanged", "1% changed", "10% changed", "1% removed, 1% added", "1% changed, one urlset")
URLSET = 5000


def alter(site: LiveSite, cycle: str, rng: random.Random) -> int:
    """What changes on the site before ``cycle`` runs; returns how many entries changed."""
    paths = site.page_paths()
    share = {"1% changed": 100, "10% changed": 10}.get(cycle)
    if cycle == "1% changed, one urlset":  # (as a site's new and changed pages sit in its latest sitemap)
        first = [path for path in paths if site.site[path].sitemap == 0]
        for path in rng.sample(first, min(len(first), max(1, len(paths) // 100))):
            site.change(path)
        return min(len(first), max(1, len(paths) // 100))
    if share:
        for path in rng.sample(paths, max(1, len(paths) // share)):
            site.change(path)
        return max(1, len(paths) // share)
    if cycle.startswith("1% removed"):
        for path in rng.sample(paths, max(1, len(paths) // 100)):
            site.unlist(path)
        for n in range(max(1, len(paths) // 100)):
            site.add(f"/pages/added-{n}.html")
        return 2 * max(1, len(paths) // 100)
    return 0


def state_size(state: Path) -> int:
    return sum(p.stat().st_size for p in state.rglob("*") if p.is_file())


def built(site: LiveSite) -> None:
    """The site's documents made now, as a site serves what it made before it is crawled (the demo site makes
    them on the first request after a change: 0.9 s for 400,000 URLs, which is not the crawler's time)."""
    site.answer("/robots.txt", {})


def crawl_locally(site: LiveSite, state: Path, *, fetch_pages: bool) -> dict[str, Any]:
    built(site)
    site.reset_log()
    command = [
        sys.executable, "-m", "harvester", "crawl", site.url("/"), "--state-dir", str(state),
        "--allow-network", "127.0.0.0/8", "--rate-limit-delay", "0.00001", "--concurrency", "16",
        "--quiet", "--json", *([] if fetch_pages else ["--no-pages"]),
    ]  # fmt: skip
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"harvest crawl failed ({run.returncode}):\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout)
    if not result.get("url_index"):  # (logged, not failed: a cycle without its index would be cheaper)
        raise SystemExit(f"harvest crawl wrote no URL index:\n{run.stderr[-3000:]}")
    return {
        "listed": result["total_urls"],
        "seconds": seconds,
        "site_requests": len(site.hits),
        "pages_fetched": sum(1 for hit in site.page_hits() if hit.status == 200),
        "state_bytes": state_size(state),
        "output_bytes": state_size(state / "documents" / "jobs"),
    }


def local_cycles(pages: int, *, fetch_pages: bool, urlset: int = URLSET) -> list[dict[str, Any]]:
    rng = random.Random(39)
    site = LiveSite(pages=pages, sitemaps=max(1, pages // urlset))
    with site.serving(), tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        cycles = []
        for cycle in CYCLES:
            changed = alter(site, cycle, rng)
            cycles.append(
                {
                    "cycle": cycle,
                    "changed": changed,
                    "sitemaps": max(1, pages // urlset),
                    **crawl_locally(site, state, fetch_pages=fetch_pages),
                }
            )
    return cycles


def aws_cycles(pages: int, *, fetch_pages: bool, urlset: int = URLSET) -> list[dict[str, Any]]:
    from aws_cost import Meter, Tally

    from harvester.model.messages import JobRequest

    rng = random.Random(39)
    site = LiveSite(pages=pages, sitemaps=max(1, pages // urlset))
    with site.serving(), aws_path() as aws:
        meter = Meter(aws, where=False)
        aws.requests.observer = meter
        cycles = []
        for cycle in CYCLES:
            changed = alter(site, cycle, rng)
            built(site)
            site.reset_log()
            meter.tally = Tally()
            leg = aws.run(JobRequest(site=site.url("/"), rate_limit_delay=0.00001, fetch_pages=fetch_pages))
            print(f"aws {pages:,}: {cycle} ran in {leg['seconds']:.1f} s", file=sys.stderr, flush=True)
            tally = meter.tally
            cycles.append(
                {
                    "cycle": cycle,
                    "changed": changed,
                    "sitemaps": max(1, pages // urlset),
                    "listed": len(site.page_paths()),
                    "seconds": leg["seconds"],
                    "site_requests": len(site.hits),
                    "pages_fetched": sum(1 for hit in site.page_hits() if hit.status == 200),
                    "aws_requests": sum(tally.calls.values()),
                    "write_units": tally.unit("WRU") + tally.unit("WRU index"),
                    "by_operation": dict(tally.calls),
                }
            )
    return cycles


def measure(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    if not args.no_local:
        figures[f"local {args.pages:,}"] = local_cycles(args.pages, fetch_pages=not args.no_pages, urlset=args.urlset)
    if not args.no_aws:
        for pages in args.aws_pages:
            figures[f"aws {pages:,}"] = aws_cycles(pages, fetch_pages=not args.no_pages, urlset=args.urlset)
    return figures


def baseline(ref: str, forwarded: list[str]) -> dict[str, Any]:
    """This bench on the engine, handlers, template and test harness of ``ref``, in a process of its own."""
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        for script in ("recrawl.py", "aws_cost.py", "_aws_path.py"):
            shutil.copy(REPO / "bench" / script, tree / "bench" / script)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "layers" / "harvester"), str(tree)])}
        run = subprocess.run(
            [sys.executable, str(tree / "bench" / "recrawl.py"), *forwarded, "--json"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if run.returncode != 0:
        raise SystemExit(f"the baseline ({ref}) failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def report(figures: dict[str, Any], before: dict[str, Any] | None, ref: str | None) -> None:
    def pair(name: str, n: int, value: Callable[[dict[str, Any]], float], fmt: str) -> str:
        now = fmt.format(value(figures[name][n]))
        if before is None or name not in before:
            return f"{now:>12}"
        return f"{fmt.format(value(before[name][n])):>12} -> {now:<12}"

    print("Re-crawl cost as it follows what changed" + (f" (baseline {ref} -> this tree)" if ref else ""))
    for name, cycles in figures.items():
        aws = name.startswith("aws")
        print(f"\n{name}-page site ({'template.yaml in moto, the real handlers' if aws else '`harvest crawl`'})")
        columns = ["site requests", "wall s"] + (
            ["AWS req / URL", "WRU / URL", "AWS requests"] if aws else ["state MiB", "job outputs MiB"]
        )
        print(f"  {'cycle':<24}" + "".join(f"{c:>28}" for c in columns))
        for n, cycle in enumerate(cycles):
            cells = [
                pair(name, n, lambda c: c["site_requests"], "{:,}"),
                pair(name, n, lambda c: c["seconds"], "{:.1f}"),
            ]
            if aws:
                cells += [
                    pair(name, n, lambda c: c["aws_requests"] / c["listed"], "{:.3f}"),
                    pair(name, n, lambda c: c["write_units"] / c["listed"], "{:.3f}"),
                    pair(name, n, lambda c: c["aws_requests"], "{:,}"),
                ]
            else:
                state = lambda c: (c["state_bytes"] - c.get("output_bytes", 0)) / 2**20  # noqa: E731
                cells.append(pair(name, n, state, "{:.1f}"))
                cells.append(pair(name, n, lambda c: c.get("output_bytes", 0) / 2**20, "{:.1f}"))
            print(f"  {cycle['cycle']:<24}" + "".join(f"{c:>28}" for c in cells))
        unchanged = cycles[1]
        first = cycles[0]
        if aws:
            per_url = unchanged["aws_requests"] / unchanged["listed"]
            wru = unchanged["write_units"] / unchanged["listed"]
            print(
                f"  unchanged cycle: {unchanged['aws_requests']:,} AWS requests, {per_url:.3f} a listed URL, "
                f"{wru:.3f} write units a listed URL (targets: 0.01 and 0.01 a URL; 100 requests on 300 URLs)"
            )
            for operation, count in sorted(unchanged["by_operation"].items(), key=lambda item: -item[1]):
                print(f"    {operation:<40} {count:>8,}  ({count / unchanged['listed']:.4f} a URL)")
        else:
            ratio = unchanged["seconds"] / first["seconds"]
            print(f"  unchanged cycle: {ratio:.2f} of the first crawl's wall time (target: 0.10)")
        per_entry(cycles, aws=aws)


def per_entry(cycles: list[dict[str, Any]], *, aws: bool) -> None:
    """Each changed cycle's cost above the unchanged cycle's, per entry changed, beside the first crawl's per
    listed URL (the target: at most that)."""
    first, unchanged = cycles[0], cycles[1]
    measures = (
        [("AWS requests", "aws_requests", "{:.2f}"), ("write units", "write_units", "{:.2f}")]
        if aws
        else [("ms", "seconds", "{:.3f}")]
    )
    scale = 1 if aws else 1000
    firsts = ", ".join(f"{fmt.format(first[key] * scale / first['listed'])} {name}" for name, key, fmt in measures)
    print(f"  per changed entry, above the unchanged cycle (first crawl: {firsts} a listed URL)")
    for cycle in cycles[2:]:
        if not cycle.get("changed"):
            continue
        above = {key: (cycle[key] - unchanged[key]) * scale / cycle["changed"] for _, key, _ in measures}
        costs = ", ".join(f"{fmt.format(above[key])} {name}" for name, key, fmt in measures)
        print(f"    {cycle['cycle']:<24} ({cycle['changed']:,} entries): {costs}")
    margin(cycles, measures, scale)


def margin(cycles: list[dict[str, Any]], measures: list[tuple[str, str, str]], scale: int) -> None:
    """What a changed entry costs at the margin, and what each changed sitemap costs whatever its number of
    changed entries, from the two cycles whose changes fall over every urlset (1 % and 10 %): a cycle's cost
    above the unchanged one is ``entries x slope + sitemaps x constant``."""
    by_name = {c["cycle"]: c for c in cycles}
    low, high, unchanged = by_name.get("1% changed"), by_name.get("10% changed"), by_name.get("unchanged")
    if not (low and high and unchanged and "sitemaps" in low) or high["changed"] == low["changed"]:
        return
    parts = []
    for name, key, fmt in measures:
        above_low, above_high = low[key] - unchanged[key], high[key] - unchanged[key]
        slope = (above_high - above_low) / (high["changed"] - low["changed"])
        constant = (above_low - slope * low["changed"]) / low["sitemaps"]
        parts.append((name, fmt.format(slope * scale), fmt.format(constant * scale)))
    slopes = ", ".join(f"{slope} {name}" for name, slope, _ in parts)
    constants = ", ".join(f"{constant} {name}" for name, _, constant in parts)
    print(f"    at the margin (1 % and 10 %): {slopes} an entry, plus {constants} a changed sitemap")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=400_000, help="the local site's pages")
    parser.add_argument(
        "--aws-pages", type=lambda s: [int(n) for n in s.split(",")], default=[300, 20_000], help="the AWS sites' pages"
    )
    parser.add_argument(
        "--urlset", type=int, default=URLSET, help="URLs a urlset lists (a sitemap holds 50,000 at most)"
    )
    parser.add_argument("--no-pages", action="store_true", help="list the URLs without fetching the pages")
    parser.add_argument("--no-aws", action="store_true")
    parser.add_argument("--no-local", action="store_true")
    parser.add_argument("--baseline", metavar="REF", help="a commit to measure first, side by side")
    parser.add_argument("--json", action="store_true", help="print the figures as one line of JSON")
    args = parser.parse_args()
    forwarded = [
        "--pages", str(args.pages), "--aws-pages", ",".join(map(str, args.aws_pages)), "--urlset", str(args.urlset),
        *(["--no-pages"] if args.no_pages else []), *(["--no-aws"] if args.no_aws else []),
        *(["--no-local"] if args.no_local else []),
    ]  # fmt: skip
    before = baseline(args.baseline, forwarded) if args.baseline else None
    figures = measure(args)
    if args.json:
        print(json.dumps(figures))
        return
    report(figures, before, args.baseline)


if __name__ == "__main__":
    main()
