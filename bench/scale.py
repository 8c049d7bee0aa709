"""The scale proof of issue 40: every Lambda invocation bounded in time and memory whatever the site's size.

A generated site is served on 127.0.0.1 from a process of its own (so that neither its memory nor its threads
are the handlers'): robots.txt declaring a sitemap index of gzipped urlsets of 50,000 URLs each (a
``<lastmod>`` on every entry, spread over three years with a time and zone; a ``<priority>`` on every third),
and a small HTML page at every listed URL. For each size of ``--sizes`` a job with ``fetch_pages: false`` is
sent to the stack's JobQueue as the product sends it (``harvester.adapters.aws.stack.submit_job``) and run on
the AWS path (bench/_aws_path.py: template.yaml created in moto, AllowedNetworks with 127.0.0.0/8, the real
handlers driven by the test harness's LambdaPoller with the template's batch sizes and MaximumConcurrency
per round) until the queues are empty, the job-end function having written the job's result. Then one job
with ``fetch_pages: true`` on a site of ``--fetch-pages`` URLs (rate_limit_delay 0.00001).

The poller's invocations are sequential, in this process (one container per function; tests.aws.concurrent's
side-by-side containers run in other processes, where this process's memory cannot be measured). Every
invocation is measured by wrapping the handler the poller calls (the product is not changed): its wall time;
its peak memory, the process's peak RSS during it (the kernel's high-water mark, VmHWM, reset before the
invocation through /proc/self/clear_refs, and RSS sampled every 2 ms as a check) less the RSS before it; with
``--tracemalloc`` the peak of Python allocations too (slower); and the AWS requests it made (those
bench/_aws_path.py counts: the handler's, not the poller's own receives and deletes). moto runs in a process
of its own, served over HTTP on 127.0.0.1 (``aws_path(apart=True)``), so what an invocation stores in moto
(DynamoDB items, S3 objects, SQS messages) is not in the RSS measured (``--moto-here``: moto in this process,
faster, its data in the RSS). Memory an earlier invocation freed is reused without new RSS, so a later
invocation's delta is a lower bound (a job run after another in one process reads low): compare sizes each
run first in its own process.

Printed: per function, the largest invocation (by wall time, by memory and by requests, each its own maximum)
at the smallest and the largest size side by side, with the ratio large/small, and issue 40's targets checked
on each function's largest invocation: memory growth and requests the same within 20 % at both sizes, the
process's peak RSS under 256 MB (what Lambda reports as max memory used: the process holds every function's
code and the poller, so it is an upper bound), and its time: requests x 10 ms under 300 s, or, with
``--latency-ms 10`` (every request made 10 ms longer, a real round trip; requests made side by side wait side
by side), its wall time under 300 s. Then each job's wall time and total AWS requests. ``--out FILE`` appends
every invocation and every job as JSON lines.

    PYTHONPATH=layers/harvester:. python bench/scale.py [--sizes 100000,1000000] [--fetch-pages 20000]
                                                        [--latency-ms 10] [--moto-here]
                                                        [--tracemalloc] [--out scale.jsonl]
    PYTHONPATH=layers/harvester:. python bench/scale.py --report scale.jsonl [more.jsonl ...]

``--fetch-pages 0`` skips the fetching job. ``--report`` prints the tables of the JSON lines of earlier runs:
sizes run in separate processes side by side (one a core), then compared. On a 2-core machine moto takes
about 5 s per 1,000 listed URLs of a first crawl (~1.06 AWS requests per URL; 300,000 URLs took 26 minutes),
so 1,000,000 URLs would take about 85 minutes. In moto a 50,000-URL urlset is read in two invocations: the
fetcher's total_timeout (120 s) breaks off the body, whose reading is paced by moto's slow writes, and a retry
resumes after its checkpoint; ``HARVEST_TOTAL_TIMEOUT=1000`` in the environment reads it in one.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import multiprocessing
import os
import random
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from _aws_path import AwsPath, aws_path

URLSET = 50_000
PAGE = os.sysconf("SC_PAGE_SIZE")
FUNCTIONS = ("JobFunction", "SitemapFunction", "PageFunction", "PagePriorityFunction", "JobEndFunction")
MEMORY_TARGET_MB = 256
REQUEST_TARGET_S = 300
REQUEST_COST_S = 0.010
SAME_WITHIN = 0.20


# the site ---------------------------------------------------------------------------------------------------


def urlset_body(base: str, first: int, last: int) -> bytes:
    """The gzipped urlset listing pages first..last-1 (lastmods spread over 2023-2025, seeded by the URL)."""
    start = datetime(2023, 1, 1, tzinfo=UTC)
    rng = random.Random(first)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    for n in range(first, last):
        lastmod = (start + timedelta(seconds=rng.randrange(3 * 365 * 86400))).isoformat()
        priority = f"<priority>{rng.choice(('0.3', '0.5', '0.8', '1.0'))}</priority>" if n % 3 == 0 else ""
        lines.append(f"<url><loc>{base}/pages/{n}.html</loc><lastmod>{lastmod}</lastmod>{priority}</url>")
    lines.append("</urlset>\n")
    return gzip.compress("\n".join(lines).encode(), compresslevel=6, mtime=0)


def serve_site(pages: int, ready: Any) -> None:
    """The site of ``pages`` URLs, served until the process is ended; sends its base URL through ``ready``."""
    from harvester.demo.site import QuietServer

    documents: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            kind = "application/xml"
            body = documents.get(path)
            if body is not None:
                kind = {".txt": "text/plain", ".gz": "application/gzip"}.get(path[path.rfind(".") :], kind)
                status = 200
            elif path.startswith("/pages/") and path.endswith(".html") and path[7:-5].isdigit():
                n = int(path[7:-5])
                status = 200 if n < pages else 404
                kind = "text/html; charset=utf-8"
                body = (
                    f"<!doctype html><html><head><title>Page {n}</title></head><body><h1>Page {n}</h1>"
                    f"<p>{'Some text of a generated page. ' * 8}</p></body></html>\n"
                ).encode()
            else:
                status, body = 404, b"<html><body>Not here</body></html>"
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if kind.startswith("text/html"):
                    self.send_header("Last-Modified", "Thu, 01 Jan 2026 00:00:00 GMT")
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    server = QuietServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    urlsets = [f"/sitemaps/{i}.xml.gz" for i in range((pages + URLSET - 1) // URLSET)]
    documents["/robots.txt"] = f"User-agent: *\nAllow: /\n\nSitemap: {base}/sitemap_index.xml\n".encode()
    documents["/sitemap_index.xml"] = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        + "".join(f"<sitemap><loc>{base}{p}</loc><lastmod>2025-12-31</lastmod></sitemap>\n" for p in urlsets)
        + "</sitemapindex>\n"
    ).encode()
    for i, path in enumerate(urlsets):
        documents[path] = urlset_body(base, i * URLSET, min(pages, (i + 1) * URLSET))
    ready.send(base)
    server.serve_forever()


class Site:
    """The generated site, in a process of its own: ``with Site(pages) as base: ...``."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.process: multiprocessing.process.BaseProcess | None = None

    def __enter__(self) -> str:
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        self.process = context.Process(target=serve_site, args=(self.pages, send), daemon=True)
        self.process.start()
        if not receive.poll(600):
            raise SystemExit("the site did not start")
        return str(receive.recv())

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.join()


# measuring invocations ----------------------------------------------------------------------------------------


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def high_water_mark() -> int | None:
    """VmHWM, after reset_high_water_mark() the peak RSS since; None where the kernel does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_high_water_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Measured:
    """One invocation."""

    run: str
    pages: int
    function: str
    records: int
    wall_s: float
    rss_peak_mb: float  # peak RSS during it less RSS before it (MB = 2**20 bytes)
    rss_sampled_mb: float  # the same, from RSS sampled every 2 ms
    rss_after_mb: float  # RSS after it less RSS before it
    requests: int
    operations: dict[str, int] = field(default_factory=dict)
    tracemalloc_mb: float | None = None
    rss_total_mb: float = 0.0  # the process's peak RSS during it (its imports, the poller and the handlers' code)
    cpu_s: float = 0.0  # this process's CPU time during it, every thread's (moto apart: the handler's own work)
    latency_ms: float = 0.0  # added to every AWS request it made (``--latency-ms``)


class Meter:
    """Wraps the handlers the poller calls; keeps every invocation's figures under the current run's label."""

    def __init__(self, aws: AwsPath, *, use_tracemalloc: bool) -> None:
        self.aws = aws
        self.use_tracemalloc = use_tracemalloc
        self.run, self.pages = "", 0
        self.invocations: list[Measured] = []
        self.out: Path | None = None
        self.latency_ms = 0.0

    def delay(self, latency_ms: float) -> None:
        """Every AWS request a handler makes takes ``latency_ms`` more (a real service's round trip, where moto
        answers in a fraction of it): requests made side by side (the listing's pointer writes) wait side by
        side, so the wall time says what an invocation takes on AWS, not requests x a round trip."""
        self.latency_ms = latency_ms
        if latency_ms <= 0:
            return
        pause = latency_ms / 1000

        def delayed(client: Any, operation: str, params: Any, poller: bool, call: Callable[[], Any]) -> Any:
            if not poller:
                time.sleep(pause)
            return call()

        self.aws.requests.observer = delayed

    def install(self) -> None:
        poller = self.aws.poller
        original = poller.handler

        def handler(function_logical_id: str) -> Callable[[dict[str, Any], Any], Any]:
            inner = original(function_logical_id)
            return lambda event, context: self.measure(function_logical_id, inner, event, context)

        poller.handler = handler  # type: ignore[method-assign]

    def measure(self, function: str, inner: Callable[..., Any], event: dict[str, Any], context: Any) -> Any:
        counts = self.aws.requests.counts
        before_counts = collections.Counter(counts)
        stop = threading.Event()
        sampled = [0]

        def sample() -> None:
            while not stop.is_set():
                sampled[0] = max(sampled[0], rss())
                time.sleep(0.002)

        if self.use_tracemalloc:
            tracemalloc.start()
        exact = reset_high_water_mark()
        before = rss()
        sampled[0] = before
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return inner(event, context)
        finally:
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu
            stop.set()
            sampler.join()
            after = rss()
            peak = max(sampled[0], after, (high_water_mark() or 0) if exact else 0)
            traced = None
            if self.use_tracemalloc:
                traced = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
            made = collections.Counter(counts)
            made.subtract(before_counts)
            operations = {k: v for k, v in made.items() if v}
            measured = Measured(
                run=self.run,
                pages=self.pages,
                function=function,
                records=len(event.get("Records", ())),
                wall_s=wall,
                rss_peak_mb=(peak - before) / 2**20,
                rss_sampled_mb=(sampled[0] - before) / 2**20,
                rss_after_mb=(after - before) / 2**20,
                requests=sum(operations.values()),
                operations=operations,
                tracemalloc_mb=traced,
                rss_total_mb=peak / 2**20,
                cpu_s=cpu,
                latency_ms=self.latency_ms,
            )
            self.invocations.append(measured)
            if self.out is not None:
                with self.out.open("a") as f:
                    f.write(json.dumps({"invocation": True, **asdict(measured)}) + "\n")


# the jobs -----------------------------------------------------------------------------------------------------


@dataclass
class Job:
    run: str
    pages: int
    wall_s: float
    requests: int
    invocations: dict[str, int]
    sites_seconds: float  # generating and starting the site (not in wall_s)
    timed_out: int = 0  # invocations past their function's timeout (in moto: its speed), their messages back


def run_job(pages: int, *, fetch_pages: bool, args: argparse.Namespace) -> Job:
    from harvester.model.messages import JobRequest

    run = f"{'fetch' if fetch_pages else 'list'} {pages:,}" + (f" in urlsets of {URLSET:,}" if URLSET != 50_000 else "")
    started = time.perf_counter()
    with Site(pages) as base, aws_path(apart=not args.moto_here) as aws:
        site_seconds = time.perf_counter() - started
        meter = Meter(aws, use_tracemalloc=args.tracemalloc)
        meter.out, meter.run, meter.pages = args.out, run, pages
        meter.install()
        meter.delay(args.latency_ms)
        print(f"{run}: site ready in {site_seconds:.1f} s, running the job", file=sys.stderr, flush=True)
        request = JobRequest(site=base + "/", rate_limit_delay=0.00001, fetch_pages=fetch_pages)
        leg = aws.run(request, timeouts_fail=False)
        job = Job(
            run=run,
            pages=pages,
            wall_s=leg["seconds"],
            requests=sum(leg["aws"].values()),
            invocations=dict(collections.Counter(m.function for m in meter.invocations)),
            sites_seconds=site_seconds,
            timed_out=leg["timed_out"],
        )
        ended = any(m.function == "JobEndFunction" for m in meter.invocations)
        print(
            f"{run}: job {job.wall_s:.1f} s, {job.requests:,} AWS requests, invocations {job.invocations},"
            f" past their timeout {job.timed_out}" + ("" if ended else "  (no JobEndFunction invocation!)"),
            file=sys.stderr,
            flush=True,
        )
    if args.out is not None:
        with args.out.open("a") as f:
            f.write(json.dumps({"job": True, **asdict(job)}) + "\n")
    RESULTS[run] = meter.invocations
    JOBS[run] = job
    return job


RESULTS: dict[str, list[Measured]] = {}
JOBS: dict[str, Job] = {}


# the report ---------------------------------------------------------------------------------------------------


def largest(invocations: list[Measured], function: str) -> tuple[Measured, Measured, Measured] | None:
    """The invocation of ``function`` with the longest wall time, the most memory, the most requests."""
    mine = [m for m in invocations if m.function == function]
    if not mine:
        return None
    return (
        max(mine, key=lambda m: m.wall_s),
        max(mine, key=lambda m: m.rss_peak_mb),
        max(mine, key=lambda m: m.requests),
    )


def memory_of(m: Measured) -> float:
    """What the memory target is checked on: the process's peak RSS during the invocation (what Lambda's
    max memory used reports) when measured, else the growth during it (runs recorded before that field)."""
    return m.rss_total_mb or m.rss_peak_mb


def time_check(wall: Measured, most: Measured) -> tuple[str, bool]:
    """The time target: with a round trip added to every request (``--latency-ms`` 10 or more), the longest
    invocation's wall time under REQUEST_TARGET_S; without, its requests x 10 ms (as if made one by one)."""
    if wall.latency_ms >= REQUEST_COST_S * 1000:
        return f"wall@{wall.latency_ms:g}ms<{REQUEST_TARGET_S}s", wall.wall_s < REQUEST_TARGET_S
    return f"req*10ms<{REQUEST_TARGET_S}s", most.requests * REQUEST_COST_S < REQUEST_TARGET_S


def ratio(large: float, small: float) -> str:
    return f"{large / small:5.2f}" if small > 0 else ("  1.00" if large == small else "   inf")


def same(large: float, small: float, floor: float) -> bool:
    """Within 20 % of each other (differences under ``floor`` count as the same: noise, not growth)."""
    return abs(large - small) <= max(floor, SAME_WITHIN * max(large, small))


def report(small_run: str, large_run: str) -> bool:
    small, large = RESULTS[small_run], RESULTS[large_run]
    ps, pl = JOBS[small_run].pages, JOBS[large_run].pages
    print(f"\nLargest invocation per function, {ps:,} URLs vs {pl:,} URLs (ratio large/small); sequential poller")
    print(
        f"{'function':<22} {'n':>11}  {'wall s':>17} {'ratio':>6}  {'peak RSS MB':>15} {'ratio':>6}"
        f"  {'AWS requests':>15} {'ratio':>6}  targets"
    )
    everything = True
    for function in FUNCTIONS:
        a, b = largest(small, function), largest(large, function)
        if a is None or b is None:
            continue
        ns = sum(1 for m in small if m.function == function)
        nl = sum(1 for m in large if m.function == function)
        (ws, ms, rs), (wl, ml, rl) = a, b
        memory = max(memory_of(ms), memory_of(ml))
        timing = [time_check(ws, rs), time_check(wl, rl)]
        checks = {
            "mem same": same(ml.rss_peak_mb, ms.rss_peak_mb, floor=8.0),
            "req same": same(rl.requests, rs.requests, floor=2),
            f"mem<{MEMORY_TARGET_MB}": memory < MEMORY_TARGET_MB,
            timing[1][0]: all(ok for _, ok in timing),
        }
        everything &= all(checks.values())
        verdict = "all met" if all(checks.values()) else "FAILS " + ", ".join(k for k, ok in checks.items() if not ok)
        print(
            f"{function:<22} {ns:>5}/{nl:<5}  {ws.wall_s:8.2f}/{wl.wall_s:<8.2f} {ratio(wl.wall_s, ws.wall_s):>6}"
            f"  {ms.rss_peak_mb:7.1f}/{ml.rss_peak_mb:<7.1f} {ratio(ml.rss_peak_mb, ms.rss_peak_mb):>6}"
            f"  {rs.requests:7,}/{rl.requests:<7,} {ratio(rl.requests, rs.requests):>6}  {verdict}"
        )
        top = sorted(rl.operations.items(), key=lambda kv: -kv[1])[:4]
        print(f"{'':<22} largest's requests at {pl:,}: {dict(top)}")
        print(f"{'':<22} process peak RSS in the most memory's: {memory_of(ms):.1f}/{memory_of(ml):.1f} MB")
        if wl.cpu_s:
            print(f"{'':<22} CPU of the longest: {ws.cpu_s:.1f}/{wl.cpu_s:.1f} s (the handler's, moto apart)")
    return everything


def jobs_table() -> None:
    print(f"\n{'job':<18} {'wall s':>9} {'AWS requests':>13} {'req/URL':>8}  invocations")
    for job in JOBS.values():
        print(
            f"{job.run:<18} {job.wall_s:9.1f} {job.requests:>13,} {job.requests / job.pages:8.3f}  "
            + ", ".join(f"{k.removesuffix('Function')} {v}" for k, v in job.invocations.items())
            + (f"; {job.timed_out} past their timeout" if job.timed_out else "")
        )


def single(run: str) -> None:
    """One run's largest invocations, against the absolute targets (the fetching job has no second size)."""
    invocations = RESULTS[run]
    print(f"\nLargest invocation per function, {run}")
    for function in FUNCTIONS:
        found = largest(invocations, function)
        if found is None:
            continue
        w, m, r = found
        failed = [
            name
            for name, ok in ((f"mem<{MEMORY_TARGET_MB}", memory_of(m) < MEMORY_TARGET_MB), time_check(w, r))
            if not ok
        ]
        n = sum(1 for i in invocations if i.function == function)
        traced = max((i.tracemalloc_mb or 0.0 for i in invocations if i.function == function), default=0.0)
        print(
            f"{function:<22} {n:>6} invocations  wall {w.wall_s:8.2f} s (CPU {w.cpu_s:.1f})"
            f"  peak RSS +{m.rss_peak_mb:.1f}"
            f" ({memory_of(m):.1f}) MB"
            + (f" (tracemalloc peak {traced:7.1f} MB)" if traced else "")
            + f"  requests {r.requests:6,}  "
            + ("FAILS " + ", ".join(failed) if failed else "met (mem, requests)")
        )


def load(paths: list[Path]) -> None:
    """RESULTS and JOBS from the JSON lines of runs (``--out``), each run made by one process."""
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row.pop("invocation", False):
                RESULTS.setdefault(row["run"], []).append(Measured(**row))
            elif row.pop("job", False):
                JOBS[row["run"]] = Job(**row)
                RESULTS.setdefault(row["run"], [])


def summary() -> None:
    listed = sorted((job for job in JOBS.values() if job.run.startswith("list")), key=lambda job: job.pages)
    if len(listed) >= 2:
        met = report(listed[0].run, listed[-1].run)
        print(f"\nIssue 40's targets on every function's largest invocation: {'met' if met else 'NOT all met'}")
    elif listed:
        single(listed[0].run)
    for job in JOBS.values():
        if job.run.startswith("fetch"):
            single(job.run)
    jobs_table()


def main() -> None:
    global URLSET
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(n) for n in s.split(",") if n]  # noqa: E731
    parser.add_argument("--sizes", type=ints, default=[100_000, 1_000_000], help="site sizes, fetch_pages false")
    parser.add_argument("--fetch-pages", type=int, default=20_000, help="site size of the fetching job (0: none)")
    parser.add_argument(
        "--urlset-urls", type=int, default=URLSET, help="URLs a urlset lists (smaller: more sitemaps, more parts)"
    )
    parser.add_argument(
        "--moto-here", action="store_true", help="moto in this process (its stored data then in the RSS figures)"
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="added to every AWS request a handler makes (e.g. 10)"
    )
    parser.add_argument("--tracemalloc", action="store_true", help="also the peak of Python allocations (slower)")
    parser.add_argument("--out", type=Path, help="append every invocation and job as JSON lines")
    parser.add_argument("--report", type=Path, nargs="+", help="print the tables of runs' JSON lines instead")
    args = parser.parse_args()
    URLSET = args.urlset_urls  # (the site's process is forked: it reads it)
    if args.report:
        load(args.report)
        summary()
        return
    print(
        f"Scale proof (issue 40): sizes {', '.join(f'{s:,}' for s in args.sizes)} URLs (fetch_pages false), "
        f"fetching job {args.fetch_pages:,} pages; template.yaml in moto, sequential LambdaPoller",
        flush=True,
    )
    for pages in args.sizes:
        run_job(pages, fetch_pages=False, args=args)
    if args.fetch_pages:
        run_job(args.fetch_pages, fetch_pages=True, args=args)
    summary()


if __name__ == "__main__":
    main()
