"""Where a job's end (``pipeline/completion.end_step``) spends its time, memory and AWS requests, by
phase, as the site grows: the measure the job's end in bounded steps (issue 40) is held to.

For each site size: a first crawl, an unchanged crawl and a crawl with 10 % of the entries changed
(bench/recrawl.py's ``alter``), with ``--no-pages``, on the AWS path in moto (bench/_aws_path.py: the
job-end function runs in this process) and locally (``harvest crawl`` in-process). The end's phases are
wrapped by monkeypatching (the product is not changed): the records pass (its store reads, the PartMaker's
per-record calls), the orphan pass, the index (DuckDB), the parts, the site's trust, the collection, the
uploads; memory is the process's RSS sampled every 5 ms (on AWS moto's own objects are in it too). Printed:
one block per end, and with ``--report FILE`` a table of a run's JSON Lines (``--out``).

    python bench/job_end.py [--aws 20000,100000] [--local 100000,400000] [--step-seconds S] [--piece-urls N]
                            [--out end.jsonl]
    python bench/job_end.py --report end.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _aws_path import aws_path
from recrawl import alter, built

from harvester.demo.live import LiveSite
from harvester.pipeline import collection, completion, job_index, records_pass
from harvester.pipeline import parts as pipeline_parts
from harvester.pipeline.records_pass import RecordsPass

PAGE = os.sysconf("SC_PAGE_SIZE")
CYCLES = ("first crawl", "unchanged", "10% changed")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Profiler:
    """One write_result call at a time: a stack of phases, exclusive time per phase, AWS requests per phase."""

    def __init__(self) -> None:
        self.call: dict[str, Any] | None = None
        self.thread: int | None = None
        self.stack: list[list[Any]] = []  # [name, start, child seconds]
        self.region = "before loop"
        self.calls: list[dict[str, Any]] = []
        self.label: dict[str, Any] = {}
        self.top = 0.0

    def active(self) -> bool:
        return self.call is not None and threading.get_ident() == self.thread

    def bucket(self, name: str) -> dict[str, Any]:
        assert self.call is not None
        return self.call["phases"].setdefault(
            name, {"s": 0.0, "incl": 0.0, "n": 0, "aws": 0, "aws_s": 0.0, "ops": collections.Counter()}
        )

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.active():
            yield
            return
        entry = [name, time.perf_counter(), 0.0]
        self.stack.append(entry)
        try:
            yield
        finally:
            self.stack.pop()
            took = time.perf_counter() - entry[1]
            b = self.bucket(name)
            b["incl"] += took
            b["s"] += took - entry[2]
            b["n"] += 1
            if self.stack:
                self.stack[-1][2] += took
            else:
                self.top += took

    def current(self) -> str:
        return self.stack[-1][0] if self.stack else f"rest: {self.region}"


P = Profiler()


def phased(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with P.phase(name):
            return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """The wrappers, once: completion's module attributes (end_step calls them by name) and PartMaker's."""
    original_end_step = completion.end_step

    def end_step(ctx: Any, job_id: str, **options: Any) -> Any:
        return measured_end(original_end_step, ctx, job_id, **options)

    completion.end_step = end_step
    original_collect_on = completion.collect_on

    def collect_on(ctx: Any, job: Any, stored: str, **options: Any) -> Any:
        """A step of the collection after the result (a step of the end of its own)."""
        return measured_end(lambda c, _, **o: original_collect_on(c, job, stored, **o), ctx, job.job_id, **options)

    completion.collect_on = collect_on
    completion.mark_orphans = phased("mark_orphans", completion.mark_orphans)
    records_pass.build_step_index = phased("write_index (S3 get/put, rest)", records_pass.build_step_index)
    completion.store_index = phased("write_index (S3 get/put, rest)", completion.store_index)
    job_index.build_index = phased("build_index (DuckDB)", job_index.build_index)
    completion._update_site = phased("_update_site", completion._update_site)
    completion.collect = phased("collect", completion.collect)
    collection.collect = phased("collect", collection.collect)  # (what a step of the collection calls)
    maker = pipeline_parts.PartMaker
    maker.finish = phased("PartMaker.finish", maker.finish)
    for method in ("adopted", "listed_block", "listed_line", "fetched_line"):
        setattr(maker, method, phased("PartMaker per record (in loop)", getattr(maker, method)))


def install_api_counter() -> None:
    """Every botocore request made inside write_result, by the phase making it (innermost), with its time."""
    from botocore.client import BaseClient

    original = BaseClient._make_api_call

    def counted(client: Any, operation: str, params: Any) -> Any:
        if not P.active():
            return original(client, operation, params)
        start = time.perf_counter()
        response = None
        try:
            response = original(client, operation, params)
            return response
        finally:
            b = P.bucket(P.current())
            if isinstance(response, dict) and "ScannedCount" in response:
                b["items_scanned"] = b.get("items_scanned", 0) + response["ScannedCount"]
            b["aws"] += 1
            b["aws_s"] += time.perf_counter() - start
            b["ops"][f"{client.meta.service_model.service_name}:{operation}"] += 1

    BaseClient._make_api_call = counted


def measured_end(original: Callable[..., Any], ctx: Any, job_id: str, **options: Any) -> Any:
    store_cls, crawldb_cls = type(ctx.store), type(ctx.crawldb)
    saved = {
        (store_cls, "job_record_pages"): store_cls.job_record_pages,
        (crawldb_cls, "url_pages"): crawldb_cls.url_pages,
        (RecordsPass, "join"): RecordsPass.join,
    }
    call: dict[str, Any] = {
        **P.label,
        "job_id": job_id,
        "function": os.environ.get("AWS_LAMBDA_FUNCTION_NAME"),
        "phases": {},
        "job_items": 0,
        "job_urls": 0,
        "crawl_records_read": 0,
        "loop_s": 0.0,
    }
    P.call, P.thread, P.stack, P.region, P.top = call, threading.get_ident(), [], "before loop", 0.0

    def job_record_pages(self: Any, jid: str, **kw: Any) -> Iterator[Any]:
        inner = saved[(store_cls, "job_record_pages")](self, jid, **kw)
        P.region = "records loop body"
        start = time.perf_counter()
        try:
            while True:
                with P.phase("job_records (store reads)"):
                    try:
                        page = next(inner)
                    except StopIteration:
                        return
                for item in page.items:
                    call["job_items"] += 1
                    count = getattr(item, "count", None) or getattr(item, "urls", 0)
                    call["job_urls"] += 1 if isinstance(item, str | bytes) else int(count)
                yield page
        finally:
            call["loop_s"] = time.perf_counter() - start
            P.region = "after loop"

    def url_pages(self: Any, site: str, **kw: Any) -> Iterator[Any]:
        for page in saved[(crawldb_cls, "url_pages")](self, site, **kw):
            call["crawl_records_read"] += len(page.records)
            yield page

    def join(self: Any, *args: Any, **kw: Any) -> None:
        with P.phase("records/feed upload (writer exit)"):
            saved[(RecordsPass, "join")](self, *args, **kw)

    store_cls.job_record_pages, crawldb_cls.url_pages, RecordsPass.join = job_record_pages, url_pages, join
    peak = [rss()]
    stop = threading.Event()

    by_phase: dict[str, float] = {}

    def sample() -> None:
        while not stop.is_set():
            now = rss()
            where = P.current()
            by_phase[where] = max(by_phase.get(where, 0), (now - before_rss) / 2**20)
            peak[0] = max(peak[0], now)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    before_rss, before_max = rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sampler.start()
    start = time.perf_counter()
    try:
        return original(ctx, job_id, **options)
    finally:
        wall = time.perf_counter() - start
        stop.set()
        sampler.join()
        peak[0] = max(peak[0], rss())
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)
        rest = wall - P.top
        b = P.bucket("rest (outside named phases)")
        b["s"] += rest
        call.update(
            wall_s=wall,
            rss_before_mib=before_rss / 2**20,
            rss_peak_growth_mib=(peak[0] - before_rss) / 2**20,
            rss_after_growth_mib=(rss() - before_rss) / 2**20,
            maxrss_growth_mib=(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_max) / 1024,
            rss_growth_by_phase_mib={k: round(v, 1) for k, v in sorted(by_phase.items(), key=lambda kv: -kv[1])},
            aws_total=sum(p["aws"] for p in call["phases"].values()),
        )
        for p in call["phases"].values():
            p["ops"] = dict(p["ops"])
        P.call = None
        P.calls.append(call)
        emit(call)


OUT: Path | None = None


def emit(call: dict[str, Any]) -> None:
    print(
        f"[end] {call.get('backend')} {call.get('pages'):,} {call.get('cycle')}: {call['wall_s']:.2f} s, "
        f"peak RSS +{call['rss_peak_growth_mib']:.0f} MiB, {call['aws_total']} AWS requests, "
        f"{call['job_urls']:,} job URLs ({call['job_items']:,} items), {call['crawl_records_read']:,} crawl records"
        f"\n      RSS growth by phase (MiB, sampled): {call['rss_growth_by_phase_mib']}",
        file=sys.stderr,
        flush=True,
    )
    for name, p in sorted(call["phases"].items(), key=lambda kv: -kv[1]["s"]):
        print(
            f"      {name:<40} {p['s']:8.2f} s excl ({p['incl']:.2f} incl, {p['n']} calls)  "
            f"{p['aws']:>6} req ({p['aws_s']:.2f} s, {p.get('items_scanned', 0)} scanned)  "
            f"{dict(sorted(p['ops'].items(), key=lambda kv: -kv[1])[:4])}",
            file=sys.stderr,
            flush=True,
        )
    if OUT is not None:
        with OUT.open("a") as f:
            f.write(json.dumps(call) + "\n")


def aws_sizes(
    sizes: list[int], cycles: tuple[str, ...], *, step_seconds: float | None = None, piece_urls: int | None = None
) -> None:
    from harvester.model.messages import JobRequest

    for pages in sizes:
        rng = random.Random(39)
        site = LiveSite(pages=pages, sitemaps=max(1, pages // 5000))
        with site.serving(), aws_path() as aws:
            install_api_counter()
            environment = aws.stack.function("JobEndFunction").environment
            if step_seconds is not None:  # (each step of the end measured as a call of its own)
                environment["HARVEST_END_STEP_SECONDS"] = str(step_seconds)
            if piece_urls is not None:
                environment["HARVEST_END_PIECE_URLS"] = str(piece_urls)
            for cycle in cycles:
                alter(site, cycle, rng)
                built(site)
                site.reset_log()
                P.label = {"backend": "aws", "pages": pages, "cycle": cycle}
                leg = aws.run(JobRequest(site=site.url("/"), rate_limit_delay=0.00001, fetch_pages=False))
                print(
                    f"aws {pages:,} {cycle}: job {leg['seconds']:.1f} s, {sum(leg['aws'].values())} requests",
                    file=sys.stderr,
                    flush=True,
                )
                record_job("aws", pages, cycle, leg["seconds"], sum(leg["aws"].values()))


def local_sizes(sizes: list[int], cycles: tuple[str, ...]) -> None:
    from harvester.cli import main

    for pages in sizes:
        rng = random.Random(39)
        site = LiveSite(pages=pages, sitemaps=max(1, pages // 5000))
        with site.serving(), tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            state = Path(tmp) / "state"
            for cycle in cycles:
                alter(site, cycle, rng)
                built(site)
                site.reset_log()
                P.label = {"backend": "local", "pages": pages, "cycle": cycle}
                argv = [
                    "crawl",
                    site.url("/"),
                    "--state-dir",
                    str(state),
                    "--allow-network",
                    "127.0.0.0/8",
                    "--rate-limit-delay",
                    "0.00001",
                    "--concurrency",
                    "16",
                    "--quiet",
                    "--no-pages",
                ]
                start = time.perf_counter()
                code = main(argv)
                seconds = time.perf_counter() - start
                print(f"local {pages:,} {cycle}: crawl {seconds:.1f} s (exit {code})", file=sys.stderr, flush=True)
                record_job("local", pages, cycle, seconds, None)


def record_job(backend: str, pages: int, cycle: str, seconds: float, requests: int | None) -> None:
    if OUT is not None:
        with OUT.open("a") as f:
            f.write(
                json.dumps(
                    {
                        "job": True,
                        "backend": backend,
                        "pages": pages,
                        "cycle": cycle,
                        "job_s": seconds,
                        "job_aws": requests,
                    }
                )
                + "\n"
            )


GROUPS = {
    "store reads": ["job_records (store reads)"],
    "loop body": None,  # the records loop less its store reads and PartMaker calls
    "maker/rec": ["PartMaker per record (in loop)"],
    "orphans": ["mark_orphans"],
    "index": ["write_index (S3 get/put, rest)", "build_index (DuckDB)"],
    "parts": ["PartMaker.finish"],
    "upload": ["records/feed upload (writer exit)"],
    "site": ["_update_site"],
    "collect": ["collect"],
}


def report(path: Path) -> None:
    calls = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    jobs = {(c["backend"], c["pages"], c["cycle"]): c for c in calls if c.get("job")}
    head = f"{'backend':<6} {'URLs':>8} {'cycle':<12} {'end s':>6} {'RSS+':>5}"
    print(head + "".join(f" {g:>11}" for g in GROUPS) + f" {'other':>6} {'AWS':>5} {'moto s':>6} {'job s':>6}")
    for c in calls:
        if c.get("job"):
            continue
        ph = c["phases"]
        cells = []
        named = 0.0
        for names in GROUPS.values():
            if names is None:
                sec = c["loop_s"] - sum(ph.get(n, {}).get("incl", 0) for n in ("job_records (store reads)",))
                sec -= sum(ph.get(n, {}).get("s", 0) for n in ("PartMaker per record (in loop)",))
                req = ph.get("rest: records loop body", {}).get("aws", 0)
            else:
                sec = sum(ph.get(n, {}).get("s", 0) for n in names)
                req = sum(ph.get(n, {}).get("aws", 0) for n in names)
            named += sec
            cells.append(f"{sec:6.2f}" + (f"/{req:<4}" if c["backend"] == "aws" else "     "))
        other = c["wall_s"] - named
        moto = sum(p["aws_s"] for p in ph.values())
        job = jobs.get((c["backend"], c["pages"], c["cycle"]), {})
        print(
            f"{c['backend']:<6} {c['pages']:>8,} {c['cycle'][:12]:<12} {c['wall_s']:6.2f}"
            f" {c['rss_peak_growth_mib']:5.0f}"
            + "".join(f" {x:>11}" for x in cells)
            + f" {other:6.2f} {c['aws_total']:>5} {moto:6.2f} {job.get('job_s', 0):6.1f}"
        )
        scanned = {n: p.get("items_scanned", 0) for n, p in ph.items() if p.get("items_scanned")}
        print(
            f"       job items {c['job_items']:,} (URLs {c['job_urls']:,}); crawl records yielded "
            f"{c['crawl_records_read']:,}; DynamoDB items scanned {scanned}; peak RSS by phase "
            f"{dict(list(c.get('rss_growth_by_phase_mib', {}).items())[:3])}"
        )


def main() -> None:
    global OUT
    parser = argparse.ArgumentParser()
    ints = lambda s: [int(n) for n in s.split(",") if n]  # noqa: E731
    parser.add_argument("--aws", type=ints, default=[20_000, 100_000], help="AWS site sizes (moto)")
    parser.add_argument("--local", type=ints, default=[100_000, 400_000], help="local site sizes")
    parser.add_argument("--out", type=Path, help="also append each end's figures to this JSON Lines file")
    parser.add_argument("--report", type=Path, help="summarise a JSON Lines file of a run instead")
    parser.add_argument("--step-seconds", type=float, help="AWS: the job-end function's end_step_seconds")
    parser.add_argument("--piece-urls", type=int, help="AWS: the job-end function's end_piece_urls")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    OUT = args.out
    install()
    local_sizes(args.local, CYCLES)
    aws_sizes(args.aws, CYCLES, step_seconds=args.step_seconds, piece_urls=args.piece_urls)


if __name__ == "__main__":
    main()
