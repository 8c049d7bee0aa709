"""Discovery speed: from the site's home page to every listed URL, against ultimate-sitemap-parser, in one run.

Two sites are written to disk and served by a real HTTP server on 127.0.0.1 (Python's threading server):

* ``20k``: an index of 4 urlsets of 5,000 pages (lastmod, changefreq, priority);
* ``400k``: an index of 8 gzipped urlsets of 50,000 URLs, each with lastmod, changefreq, priority, an
  hreflang ``<xhtml:link>`` and an ``<image:image>`` (the link before the image, an order real generators
  write).

Each contender runs in a fresh child process (its time includes the interpreter start and imports, the
same for all), reading everything and keeping nothing but a count:

* ``harvest sitemaps --format jsonl`` (output to /dev/null);
* ``harvest crawl --no-pages`` (durable state: every URL recorded in the state directory);
* the Python API, ``for page in iter_pages(site)``;
* USP: ``sitemap_tree_for_homepage(site)`` then ``for page in tree.all_pages()`` (the baseline);
* the parser floor: httpx and Harvester's parser alone, from robots.txt to the last urlset (what no
  discovery can beat: the ratio of a contender's time to it is what the per-URL path costs on top).

Every contender runs ``--rounds`` times (3), round-robin, so that a slow spell of the (virtual) machine
falls on all of them alike; its best round is its figure, since noise only ever adds time, and every
round's seconds are printed beside it. Printed: seconds, URLs/s, the highest peak RSS of its children,
and the ratios the issue sets as targets. With
``--aws`` (the default), also the AWS requests per listed URL of a ``fetch_pages: false`` job on the AWS
path (template.yaml in moto, the real handlers).

    python bench/discovery.py [--sites 20k,400k] [--rounds 3] [--no-aws] [--aws-pages 20000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harvester.demo import serve

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
RICH_NS = (
    f'{NS} xmlns:xhtml="http://www.w3.org/1999/xhtml" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"'
)

SITES = {
    # name: (urlsets, URLs per urlset, rich entries, gzipped)
    "20k": (4, 5_000, False, False),
    "400k": (8, 50_000, True, True),
}


def write_site(root: Path, base: str, name: str) -> int:
    """Writes robots.txt, the index and the urlsets; returns the number of URLs listed."""
    urlsets, per, rich, gzipped = SITES[name]
    locs = []
    for n in range(urlsets):
        entries = []
        for i in range(per):
            url = f"{base}/{'products' if rich else 'pages'}/{n}/item-{i}.html"
            entry = (
                f"<url><loc>{url}</loc><lastmod>2026-0{1 + i % 9}-1{i % 10}T10:00:00+00:00</lastmod>"
                f"<changefreq>{('daily', 'weekly', 'monthly')[i % 3]}</changefreq><priority>0.{1 + i % 9}</priority>"
            )
            if rich:
                entry += (
                    f'<xhtml:link rel="alternate" hreflang="de" href="{base}/de/{n}/item-{i}.html"/>'
                    f"<image:image><image:loc>{base}/img/{n}/{i}.jpg</image:loc></image:image>"
                )
            entries.append(entry + "</url>")
        body = (HEAD + f"<urlset {RICH_NS if rich else NS}>\n" + "\n".join(entries) + "\n</urlset>\n").encode()
        path = f"sitemaps/{n}.xml" + (".gz" if gzipped else "")
        (root / path).write_bytes(gzip.compress(body, mtime=0) if gzipped else body)
        locs.append(f"{base}/{path}")
    index = HEAD + f"<sitemapindex {NS}>\n" + "".join(f"<sitemap><loc>{u}</loc></sitemap>\n" for u in locs)
    (root / "sitemap_index.xml").write_text(index + "</sitemapindex>\n")
    (root / "robots.txt").write_text(f"User-agent: *\nAllow: /\n\nSitemap: {base}/sitemap_index.xml\n")
    return urlsets * per


# The contenders: each a child process printing the number of page URLs it saw on its last line.
ITER_PAGES = """
import sys
from harvester import iter_pages
n = sum(1 for _ in iter_pages(sys.argv[1], allow_networks=["127.0.0.0/8"], rate_limit_delay=0.001))
print(n)
"""
USP = """
import logging, sys
logging.disable(logging.CRITICAL)
from usp.tree import sitemap_tree_for_homepage
tree = sitemap_tree_for_homepage(sys.argv[1])
print(sum(1 for _ in tree.all_pages()))
"""

# Not a contender but the floor under them: robots.txt and every sitemap fetched with httpx and parsed
# with Harvester's parser, nothing else (no hygiene, no de-duplication, no records, no output, no probes of
# the well-known paths). No discovery can be faster than its parser: what a target asks beyond this is
# not reachable by work on the per-URL path.
PARSER_FLOOR = """
import sys
import httpx
from harvester.sitemap import ChildSitemap, SitemapParser
todo, pages = [sys.argv[1] + "robots.txt"], 0
with httpx.Client() as client:
    while todo:
        url = todo.pop()
        parser = SitemapParser(url)
        for entry in parser.feed(client.get(url).content) + parser.close():
            if isinstance(entry, ChildSitemap):
                todo.append(entry.url)
            else:
                pages += 1
print(pages)
"""
FLOOR = "parser floor (httpx + SitemapParser only)"


def contenders(site: str, state: Path) -> dict[str, list[str]]:
    harvest = [sys.executable, "-m", "harvester"]
    # USP paces nothing; Harvester spaces its requests to a host (0.05 s by default, robots.txt and the 14
    # well-known paths included): the contenders are compared at the same, near-zero pace.
    net = ["--allow-network", "127.0.0.0/8", "--rate-limit-delay", "0.001"]
    return {
        "harvest sitemaps --format jsonl": [*harvest, "sitemaps", site, *net, "--format", "jsonl"],
        "harvest crawl --no-pages": [*harvest, "crawl", site, *net, "--no-pages", "--state-dir", str(state), "--json"],
        "iter_pages (Python API)": [sys.executable, "-c", ITER_PAGES, site],
        "USP sitemap_tree_for_homepage + all_pages": [sys.executable, "-c", USP, site],
        FLOOR: [sys.executable, "-c", PARSER_FLOOR, site],
    }


def run(command: list[str]) -> dict[str, Any]:
    """Runs one contender in a child of its own (via a fork, so the peak RSS is that child's alone)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run the command and report its rusage
        os.close(read)
        with tempfile.TemporaryFile() as out:
            start = time.perf_counter()
            done = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, check=False)
            seconds = time.perf_counter() - start
            peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            out.seek(0)
            count = _count(out.read().decode(errors="replace"))
        line = f"{done.returncode}\t{seconds}\t{peak_kib}\t{count}\t{done.stderr.decode(errors='replace')[-400:]!r}"
        os.write(write, line.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    code, seconds, peak, count, stderr = report.split("\t", 4)
    return {"rc": int(code), "seconds": float(seconds), "peak_mib": int(peak) / 1024, "urls": int(count), "err": stderr}


def _count(out: str) -> int:
    """URLs seen: the JSON result's total_urls, the number of JSON lines, or the count printed last."""
    text = out.strip()
    if text.startswith("{\n"):  # harvest crawl --json: one indented result
        return int(json.loads(text)["total_urls"])
    lines = text.splitlines()
    if lines and lines[-1].isdigit():
        return int(lines[-1])
    return sum(1 for line in lines if line.startswith("{"))


def local(names: list[str], rounds: int) -> dict[str, dict[str, dict[str, Any]]]:
    # Imported once before any timing, bytecode written (even where PYTHONDONTWRITEBYTECODE is set, as on
    # some CI images): an installed package has its .pyc files, and each contender would otherwise compile
    # the modules edited since (an editable install is never compiled ahead).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import harvester.cli, harvester.api, usp.tree"], check=True, env=env)
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            root = Path(tmp) / name
            (root / "sitemaps").mkdir(parents=True)
            with serve(root) as base:
                listed = write_site(root, base, name)
                print(f"\n{name}: {listed:,} URLs in {SITES[name][0]} urlsets on {base}", flush=True)
                print(f"  {'':44} {'seconds':>8} {'URLs/s':>9} {'peak MiB':>9} {'URLs':>8}  each round's seconds")
                runs: dict[str, list[dict[str, Any]]] = {}
                # Round-robin, so that a slow spell of the machine falls on every contender alike; each
                # one's best round is its figure (noise only ever adds time).
                for n in range(rounds):
                    state = Path(tmp) / f"state-{name}-{n}"
                    for label, command in contenders(f"{base}/", state).items():
                        runs.setdefault(label, []).append(run(command))
                    shutil.rmtree(state, ignore_errors=True)
                figures[name] = {}
                for label, tries in runs.items():
                    # (A round that failed or saw other URLs is no contender's best.)
                    whole = [t for t in tries if t["rc"] == 0 and t["urls"] == listed] or tries
                    best = min(whole, key=lambda figure: figure["seconds"])
                    figure = {**best, "peak_mib": max(t["peak_mib"] for t in tries)}
                    figures[name][label] = figure
                    failed = [t for t in tries if t["rc"] != 0]
                    note = f"  exit {failed[0]['rc']}: {failed[0]['err']}" if failed else ""
                    each = " / ".join(f"{t['seconds']:.2f}" for t in tries)
                    print(
                        f"  {label:44} {figure['seconds']:8.2f} {figure['urls'] / figure['seconds']:9,.0f}"
                        f" {figure['peak_mib']:9.1f} {figure['urls']:8,}  {each}{note}",
                        flush=True,
                    )
                    for t in tries:
                        if t["urls"] != listed:
                            print(f"  !! {label} saw {t['urls']:,} URLs, not {listed:,}")
    return figures


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def report(figures: dict[str, dict[str, dict[str, Any]]]) -> None:
    usp = "USP sitemap_tree_for_homepage + all_pages"
    print("\nTargets (speed = USP seconds / ours):")
    for name, rows in figures.items():
        base = rows[usp]["seconds"]
        floor = base / rows[FLOOR]["seconds"]
        for label, target in (
            ("harvest sitemaps --format jsonl", 3.0),
            ("iter_pages (Python API)", 3.0),
            ("harvest crawl --no-pages", 2.0),
        ):
            ratio = base / rows[label]["seconds"]
            over = rows[label]["seconds"] / rows[FLOOR]["seconds"]
            met = verdict(ratio >= target) + (", beyond the parser floor" if floor < target else "")
            print(
                f"  {name:5} {label:34} {ratio:5.2f}x USP  (target >= {target:.0f}x: {met})"
                f"  {over:5.2f}x the parser floor's time"
            )
        print(f"  {name:5} {'(the parser floor itself)':34} {floor:5.2f}x USP  (no target: the most any could reach)")
    for label in ("harvest sitemaps --format jsonl", "iter_pages (Python API)", "harvest crawl --no-pages"):
        peaks = [rows[label]["peak_mib"] for rows in figures.values()]
        line = f"  peak memory {label:34} " + " / ".join(f"{p:.1f}" for p in peaks) + " MiB"
        ok = max(peaks) < 100 and (len(peaks) < 2 or peaks[-1] - peaks[0] <= 20)
        print(line + f"  (target < 100 MiB, +20 MiB at most from the smaller site: {verdict(ok)})")


def aws_leg(pages: int) -> dict[str, Any]:
    """A ``fetch_pages: false`` job over a ``pages``-page site on the AWS path: the requests per listed URL."""
    from _aws_path import aws_path

    from harvester.demo.live import LiveSite
    from harvester.model.messages import JobRequest

    with LiveSite(pages=pages, sitemaps=max(1, pages // 5000)).serving() as site, aws_path() as aws:
        leg = aws.run(JobRequest(site=site.url("/"), fetch_pages=False))
        leg["site_requests"] = len(site.hits)
    return leg


def report_aws(leg: dict[str, Any], pages: int) -> None:
    from _aws_path import by_operation

    total = sum(leg["aws"].values())
    per_url = total / pages
    print(f"\nAWS path (moto, template.yaml, the real handlers): a fetch_pages=false job over {pages:,} pages")
    seconds, hits = leg["seconds"], leg["site_requests"]
    print(f"  {total:,} AWS requests by the handlers in {seconds:.1f} s of moto, {hits} site requests")
    print(f"  {per_url:.3f} AWS requests per listed URL (target <= 0.2: {verdict(per_url <= 0.2)})")
    print("\n".join(by_operation(leg["aws"], pages)))
    print(f"  (Lambda's SQS poller, played by the test harness, made {sum(leg['poller'].values()):,} more)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sites", default="20k,400k")
    parser.add_argument("--no-aws", action="store_true")
    parser.add_argument("--aws-pages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of every contender, round-robin (best kept)")
    args = parser.parse_args()
    figures = local([s for s in args.sites.split(",") if s], max(1, args.rounds))
    if figures:
        report(figures)
    if not args.no_aws:
        report_aws(aws_leg(args.aws_pages), args.aws_pages)


if __name__ == "__main__":
    main()
