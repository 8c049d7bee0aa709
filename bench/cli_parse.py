"""`harvest parse FILE` against the parse it does: how much of the command's wall time is the parsing.

Generates the 50,000-URL urlset of bench/parser.py (lastmod, changefreq, priority, an image and an
hreflang link per URL; about 25 MB) and measures, each the best of ``--repeat`` runs after a warm-up:

* total: the wall time of the `harvest parse FILE` command as a user runs it (the console script next to
  this Python, else ``python -m harvester``), its output into /dev/null: the interpreter's start, the
  imports, the parse, the serialisation of every entry and the writes;
* parse-only (the baseline): in a child process that has imported ``harvester.sitemap`` already,
  ``parse_file`` read to the end, every entry built and dropped: the work the command cannot avoid;
* start-up (information): the same command on a urlset with one URL: the interpreter and the imports;
* engine imports (information): ``import harvester.adapters.local.runner, harvester.api.pages`` in a fresh
  interpreter, less a bare interpreter's start: what every command loaded before `harvest parse` imported
  only the parser.

Printed: the three times, and total / parse-only. Before the command loaded only what it uses (issue 10),
on the 2-core VM of the figures in docs/performance.md: total 1.10-1.29 s, parse-only 0.25-0.28 s, so the command
took 4.4-5 times its parse (0.42 s of imports, json.dumps per entry); after: total 0.56-0.60 s, 2.0-2.2
times the parse. The script always exits 0: it measures, it does not test (tests/cli/test_cli.py checks
what `harvest parse` imports).

    python bench/cli_parse.py [--urls 50000] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from parser import generate  # bench/parser.py: the same urlset, byte for byte

#: What every command imported before each imported only what it uses.
ENGINE = ("harvester.adapters.local.runner", "harvester.api.pages")


def harvest_command() -> list[str]:
    """`harvest` as installed beside this interpreter (a virtual environment's bin/), else the module."""
    script = Path(sys.executable).with_name("harvest")
    if script.exists():
        return [str(script)]
    found = shutil.which("harvest")
    return [found] if found else [sys.executable, "-m", "harvester"]


def best_wall_time(command: list[str], repeat: int) -> tuple[float, list[float]]:
    """The best of ``repeat`` runs of ``command`` after one warm-up, its stdout into /dev/null."""
    times = []
    for run in range(repeat + 1):
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
        if run:
            times.append(elapsed)
    return min(times), times


def child(path: Path, repeat: int) -> dict[str, object]:
    """Parse-only, timed in this (child) process after the parser's imports."""
    import gc

    from harvester.sitemap import parse_file

    times = []
    found = 0
    for run in range(repeat + 1):
        gc.collect()
        start = time.perf_counter()
        entries, report = parse_file(path)
        found = sum(1 for _ in entries)
        elapsed = time.perf_counter() - start
        if report.error or report.truncated:
            raise RuntimeError(f"{path}: {report.error or report.truncated}")
        if run:
            times.append(elapsed)
    return {"seconds": min(times), "times": times, "found": found}


def parse_only(path: Path, repeat: int) -> dict[str, object]:
    command = [sys.executable, __file__, "--child", str(path), "--repeat", str(repeat)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options.add_argument("--urls", type=int, default=50_000)
    options.add_argument("--repeat", type=int, default=5, help="timed runs of each, after one warm-up")
    options.add_argument("--keep", type=Path, help="write the urlsets here and keep them")
    options.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return
    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        report(folder, args.urls, args.repeat)


def report(folder: Path, urls: int, repeat: int) -> None:
    big, small = folder / f"urlset-{urls}.xml", folder / "urlset-1.xml"
    generate(big, urls)
    generate(small, 1)
    command = harvest_command()
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs; {' '.join(command)}")
    print(f"urlset {urls} URLs: {big.stat().st_size:,} bytes; best of {repeat} runs after a warm-up (wall clock)")

    total, totals = best_wall_time([*command, "parse", str(big)], repeat)
    parsed = parse_only(big, repeat)
    startup, _ = best_wall_time([*command, "parse", str(small)], repeat)
    bare, _ = best_wall_time([sys.executable, "-c", "pass"], repeat)
    engine, _ = best_wall_time([sys.executable, "-c", f"import {', '.join(ENGINE)}"], repeat)
    found = parsed["found"]
    flag = "" if found == urls else f"  WRONG COUNT (expected {urls})"

    def line(label: str, value: str, note: str = "") -> None:
        print(f"  {label:<44} {value:>9}   {note}")

    print()
    line("total: harvest parse FILE > /dev/null", f"{total:.3f} s", f"(runs: {', '.join(f'{t:.3f}' for t in totals)})")
    line("parse-only: parse_file, every entry built", f"{parsed['seconds']:.3f} s", f"{found} entries{flag}")
    line("total / parse-only", f"{total / parsed['seconds']:.2f}x", "(before issue 10: 4.4-5x)")
    line("start-up: harvest parse on a 1-URL urlset", f"{startup:.3f} s", "(information)")
    line("engine imports harvest parse does without", f"{engine - bare:.3f} s", "(information)")
    line("serialisation and writes (total - start-up - parse)", f"{total - startup - parsed['seconds']:.3f} s")


if __name__ == "__main__":
    main()
