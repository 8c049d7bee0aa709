"""Sitemap parser speed and memory: Harvester's streaming parser against USP, Scrapy and a bare expat pass.

Generates two urlsets (50,000 and 10,000 URLs; every URL has a <lastmod> W3C datetime, a <changefreq>, a
<priority>, one <image:image> and one <xhtml:link rel="alternate" hreflang>) into a temporary directory and
measures, at each size, in one run:

* harvester: ``harvester.sitemap.SitemapParser`` fed the file in 64 KiB chunks; every entry is built (its
  URL, lastmod datetime, changefreq, priority, image and alternate are counted) and dropped. The file's
  ``<url>`` blocks are written the canonical way, so the parser's plain-block reader takes them.
* harvester-exact (for information, no target): the same with the plain-block reader off, every element
  through expat's callbacks: how fast a sitemap written some other way (another element order, comments,
  CDATA) is read.
* usp: ultimate-sitemap-parser's ``usp.tree.sitemap_from_str`` on the decoded file (its API for parsing
  a document without fetching it). It pickles its pages to a temporary file; the timed part ends when
  ``sitemap_from_str`` returns, and the pages are loaded afterwards, untimed, only to count them.
* scrapy: ``scrapy.utils.sitemap.Sitemap(body)`` iterated (lxml iterparse), ``body`` the file's bytes.
* expat: a bare ``xml.parsers.expat`` pass over the same 64 KiB chunks that collects the text of every
  page ``<loc>`` and nothing else. It is written to be fast, not a straw man: text is buffered by expat
  and the character data handler is a list's ``append``, installed only inside ``<loc>``. This is the
  baseline of the 1.5x target.
* expat-naive (for information, no target): the same pass written the obvious way, with a Python character
  data handler that checks an "inside <loc>" flag for every piece of text, whitespace included.

Each measurement starts from the file on disk (read once before, so it is in the page cache) and runs in
a fresh child interpreter, so that one parser's imports and heap do not weigh on another's:

* seconds: the best of ``--repeat`` runs after one warm-up run, wall clock (``time.perf_counter``).
* peak MiB: a second child that imports the parser, reads its own resident-set high-water mark
  (``ru_maxrss``), does exactly one parse, and reads it again. "peak MiB" is the whole child's peak RSS
  (the interpreter and the imports included, as a process running the parser would see it); "parse MiB"
  is how much the parse raised it above the high-water mark of the imported-but-idle interpreter.

Targets (from the issue): Harvester at least 4x faster than USP and 2x faster than Scrapy, within 1.5x of
the bare expat pass, peak memory under 64 MiB, and all of it at 10,000 as at 50,000 URLs, with a peak that
does not grow with the sitemap (the 50,000-URL peak at most 2 MiB above the 10,000-URL one, where the file
grows by about 16 MB). The script always exits 0: it measures, it does not test.

    python bench/parser.py [--urls 50000 10000] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PARSERS = ("harvester", "harvester-exact", "usp", "scrapy", "expat", "expat-naive")
CHUNK = 64 * 1024
MIB = 1024 * 1024
SITEMAP_URL = "https://www.example.com/sitemap.xml"

TARGET_USP = 4.0  # Harvester at least this many times faster than USP
TARGET_SCRAPY = 2.0  # ... than Scrapy
TARGET_EXPAT = 1.5  # Harvester's time at most this multiple of the bare expat pass
TARGET_PEAK_MIB = 64.0
TARGET_GROWTH_MIB = 2.0  # the largest sitemap's peak at most this much above the smallest's

# The documents.

_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"\n'
    '        xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"\n'
    '        xmlns:xhtml="http://www.w3.org/1999/xhtml">\n'
)
_URL = (
    "  <url>\n"
    "    <loc>https://www.example.com/{section}/{slug}-{n}.html</loc>\n"
    "    <lastmod>{lastmod}</lastmod>\n"
    "    <changefreq>{changefreq}</changefreq>\n"
    "    <priority>{priority}</priority>\n"
    "    <image:image>\n"
    "      <image:loc>https://cdn.example.com/images/{section}/{n}/{slug}-1200x800.jpg</image:loc>\n"
    "    </image:image>\n"
    '    <xhtml:link rel="alternate" hreflang="{lang}" href="https://www.example.com/{lang}/{section}/{slug}-{n}.html"/>\n'
    "  </url>\n"
)
_SECTIONS = ("products", "blog", "news", "guides", "category/garden", "category/kitchen", "stores", "help")
_WORDS = (
    *("outdoor", "summer", "sale", "stainless", "steel", "chair", "table", "lamp", "wooden", "classic"),
    *("modern", "compact", "portable", "premium", "organic", "cotton", "wireless", "kitchen", "garden"),
    *("storage", "travel", "winter", "indoor", "rustic", "vintage"),
)
_CHANGEFREQS = ("always", "hourly", "daily", "weekly", "monthly", "yearly", "never")
_PRIORITIES = ("0.1", "0.3", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0")
_LANGS = ("de", "fr", "es", "it", "nl", "pt-br", "en-gb", "ja")


def generate(path: Path, count: int) -> None:
    """A urlset of ``count`` URLs, the same bytes every run (a seeded generator)."""
    rng = random.Random(count)
    start = datetime(2021, 1, 1, tzinfo=UTC)
    with path.open("w", encoding="utf-8") as out:
        out.write(_HEAD)
        for n in range(count):
            lastmod = start + timedelta(seconds=rng.randrange(4 * 365 * 86400))
            out.write(
                _URL.format(
                    n=n,
                    section=rng.choice(_SECTIONS),
                    slug="-".join(rng.sample(_WORDS, rng.randint(2, 5))),
                    lastmod=lastmod.isoformat(),  # 2023-06-14T09:21:07+00:00
                    changefreq=rng.choice(_CHANGEFREQS),
                    priority=rng.choice(_PRIORITIES),
                    lang=rng.choice(_LANGS),
                )
            )
        out.write("</urlset>\n")


# The parsers, as run in a child process. Each returns (entries found, a short check of what was built).


def run_harvester(path: Path) -> tuple[int, str]:
    from harvester.sitemap import SitemapParser

    parser = SitemapParser(SITEMAP_URL)
    found = url_chars = dated = images = alternates = 0
    priority = 0.0
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            entries = parser.feed(chunk) if chunk else parser.close()
            for entry in entries:
                found += 1
                url_chars += len(entry.url)
                dated += entry.last_modified is not None and entry.change_frequency is not None
                priority += entry.priority
                images += len(entry.images)
                alternates += len(entry.alternates)
            if not chunk:
                break
    report = parser.report
    problem = report.error or report.truncated or (report.warnings and str(report.warnings))
    check = f"url chars {url_chars}, dated {dated}, images {images}, alternates {alternates}"
    return found, f"{check}, PROBLEM: {problem}" if problem else check


def run_harvester_exact(path: Path) -> tuple[int, str]:
    from harvester.sitemap.xml_parser import XmlParser

    XmlParser.read_plain_blocks = False
    return run_harvester(path)


def run_usp(path: Path) -> tuple[int, str]:
    from usp.tree import sitemap_from_str

    sitemap = sitemap_from_str(path.read_text(encoding="utf-8"))
    _STOP.append(time.perf_counter())
    _PEAKS.append(_maxrss())
    pages = sitemap.pages
    dated = sum(page.last_modified is not None for page in pages)
    images = sum(len(page.images or ()) for page in pages)
    return len(pages), f"{type(sitemap).__name__}, dated {dated}, images {images}"


def run_scrapy(path: Path) -> tuple[int, str]:
    from scrapy.utils.sitemap import Sitemap

    found = url_chars = alternates = 0
    for entry in Sitemap(path.read_bytes()):
        if "loc" in entry:
            found += 1
            url_chars += len(entry["loc"])
            alternates += len(entry.get("alternate", ()))
    return found, f"url chars {url_chars}, alternates {alternates}"


def _expat_over(parser: Any, path: Path) -> None:
    """The file through ``parser`` in the same 64 KiB chunks the Harvester parser is fed."""
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            parser.Parse(chunk, False)
    parser.Parse(b"", True)


def run_expat(path: Path) -> tuple[int, str]:
    from xml.parsers import expat

    parser = expat.ParserCreate()
    parser.buffer_text = True
    locs: list[str] = []
    text: list[str] = []
    collect = text.append

    def start(name: str, attrs: dict[str, str]) -> None:
        if name == "loc":
            parser.CharacterDataHandler = collect

    def end(name: str) -> None:
        if name == "loc":
            parser.CharacterDataHandler = None
            locs.append("".join(text).strip())
            text.clear()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    _expat_over(parser, path)
    return len(locs), f"url chars {sum(map(len, locs))}"


def run_expat_naive(path: Path) -> tuple[int, str]:
    from xml.parsers import expat

    parser = expat.ParserCreate()
    parser.buffer_text = True
    locs: list[str] = []
    text: list[str] = []
    inside = False

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal inside
        inside = name == "loc"

    def data(piece: str) -> None:
        if inside:
            text.append(piece)

    def end(name: str) -> None:
        nonlocal inside
        if name == "loc":
            locs.append("".join(text).strip())
            text.clear()
        inside = False

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = data
    _expat_over(parser, path)
    return len(locs), f"url chars {sum(map(len, locs))}"


RUNNERS = {
    "harvester": run_harvester,
    "harvester-exact": run_harvester_exact,
    "usp": run_usp,
    "scrapy": run_scrapy,
    "expat": run_expat,
    "expat-naive": run_expat_naive,
}
_STOP: list[float] = []  # a runner whose timed part ends before it returns puts the moment here
_PEAKS: list[int] = []  # ... and the peak RSS reached by then


def _maxrss() -> int:
    """This process's peak resident set so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _import(name: str) -> None:
    """Everything a parser imports, so that the baseline taken afterwards holds the imports."""
    if name.startswith("harvester"):
        import harvester.sitemap  # noqa: F401
    elif name == "usp":
        import usp.tree  # noqa: F401
    elif name == "scrapy":
        import scrapy.utils.sitemap  # noqa: F401


def child(mode: str, name: str, path: Path, repeat: int) -> dict[str, object]:
    runner = RUNNERS[name]
    _import(name)
    if mode == "memory":
        gc.collect()
        baseline = _maxrss()
        found, check = runner(path)
        peak = _PEAKS[0] if _PEAKS else _maxrss()
        return {"found": found, "check": check, "peak": peak, "baseline": baseline}
    times = []
    for run in range(repeat + 1):
        gc.collect()
        _STOP.clear()
        start = time.perf_counter()
        found, check = runner(path)
        elapsed = (_STOP[0] if _STOP else time.perf_counter()) - start
        if run:  # the first run warms up
            times.append(elapsed)
    return {"found": found, "check": check, "seconds": min(times), "times": times}


def measure(mode: str, name: str, path: Path, repeat: int) -> dict[str, object]:
    command = [sys.executable, __file__, "--child", mode, name, str(path), "--repeat", str(repeat)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# The report.


def mark(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options.add_argument("--urls", type=int, nargs="+", default=[50_000, 10_000])
    options.add_argument("--repeat", type=int, default=5, help="timed runs per parser, after one warm-up")
    options.add_argument("--keep", type=Path, help="write the urlsets here and keep them")
    options.add_argument("--child", nargs=3, metavar=("MODE", "PARSER", "FILE"), help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.child:
        mode, name, file = args.child
        print(json.dumps(child(mode, name, Path(file), args.repeat)))
        return

    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        report(folder, sorted(set(args.urls), reverse=True), args.repeat)


def report(folder: Path, sizes: list[int], repeat: int) -> None:
    print(f"python {sys.version.split()[0]}; {_versions()}")
    print(f"{os.cpu_count()} CPUs; every measurement in a fresh child process")
    print(f"best s, median s: of {repeat} runs after a warm-up (wall clock)")
    print("peak MiB: the child's peak RSS; parse MiB: how much its one parse raised that peak")
    files = {}
    for size in sizes:
        files[size] = folder / f"urlset-{size}.xml"
        generate(files[size], size)
        print(f"urlset {size:>6} URLs: {files[size].stat().st_size:>11,} bytes")

    results: dict[tuple[str, int], dict[str, object]] = {}
    for size in sizes:
        for name in PARSERS:
            timing = measure("time", name, files[size], repeat)
            memory = measure("memory", name, files[size], 0)
            failed = timing.get("error") or memory.get("error")
            results[name, size] = {"error": failed} if failed else {**memory, **timing}

    print()
    header = ("parser", "URLs", "best s", "median s", "peak MiB", "parse MiB", "found")
    print("{:<15} {:>6} {:>7} {:>8} {:>8} {:>9} {:>6}  check".format(*header))
    for size in sizes:
        for name in PARSERS:
            r = results[name, size]
            if "error" in r:
                print(f"{name:<15} {size:>6} ERROR: {r['error']}")
                continue
            peak, parse = r["peak"] / MIB, (r["peak"] - r["baseline"]) / MIB
            flag = "" if r["found"] == size else f"  WRONG COUNT (expected {size})"
            print(
                f"{name:<15} {size:>6} {r['seconds']:>7.3f} {statistics.median(r['times']):>8.3f} {peak:>8.1f}"
                f" {parse:>9.1f} {r['found']:>6}  {r['check']}{flag}"
            )

    def line(label: str, value: str, target: str, ok: bool | None) -> None:
        verdict = "(information)" if ok is None else mark(ok)
        print(f"  {label:<38} {value:>9}   {target:<16} {verdict}")

    def ratio(size: int, numerator: str, denominator: str) -> float | None:
        top, bottom = results[numerator, size], results[denominator, size]
        if "error" in top or "error" in bottom or top["found"] != size or bottom["found"] != size:
            return None  # a failed or miscounting parser has no ratio
        return top["seconds"] / bottom["seconds"]

    print()
    print("targets (best seconds against best seconds)")
    for size in sizes:
        for label, numerator, denominator, target, wanted in (
            ("usp / harvester", "usp", "harvester", ">=", TARGET_USP),
            ("scrapy / harvester", "scrapy", "harvester", ">=", TARGET_SCRAPY),
            ("harvester / expat", "harvester", "expat", "<=", TARGET_EXPAT),
        ):
            value = ratio(size, numerator, denominator)
            if value is None:
                line(f"{size:>6} URLs: {label}", "n/a", f"{target} {wanted:.1f}x", False)
            else:
                ok = value >= wanted if target == ">=" else value <= wanted
                line(f"{size:>6} URLs: {label}", f"{value:.2f}x", f"{target} {wanted:.1f}x", ok)
        own = results["harvester", size]
        if "error" in own:
            line(f"{size:>6} URLs: harvester", "failed", "", False)
            continue
        peak = own["peak"] / MIB
        limit = f"< {TARGET_PEAK_MIB:.0f} MiB"
        line(f"{size:>6} URLs: harvester peak RSS", f"{peak:.1f} MiB", limit, peak < TARGET_PEAK_MIB)
        line(f"{size:>6} URLs: harvester entries", str(own["found"]), f"= {size}", own["found"] == size)
    measured = [size for size in sizes if "error" not in results["harvester", size]]
    if len(measured) > 1:
        small, large = measured[-1], measured[0]
        growth = (results["harvester", large]["peak"] - results["harvester", small]["peak"]) / MIB
        line(
            f"harvester peak RSS {small} -> {large} URLs",
            f"{growth:+.1f} MiB",
            f"<= +{TARGET_GROWTH_MIB:.0f} MiB",
            growth <= TARGET_GROWTH_MIB,
        )
    for size in sizes:
        for numerator, denominator in (
            ("harvester", "expat-naive"),
            ("harvester-exact", "expat"),
            ("scrapy", "harvester-exact"),
            ("usp", "harvester-exact"),
        ):
            value = ratio(size, numerator, denominator)
            if value is not None:
                line(f"{size:>6} URLs: {numerator} / {denominator}", f"{value:.2f}x", "", None)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for package in ("harvester", "ultimate-sitemap-parser", "scrapy", "lxml"):
        try:
            out.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            out.append(f"{package} not installed")
    from xml.parsers import expat

    return ", ".join([*out, expat.EXPAT_VERSION])


if __name__ == "__main__":
    main()
