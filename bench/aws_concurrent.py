"""AWS cost of a first crawl as a deployment runs it: every function's containers side by side, in one run.

Why: bench/aws_cost.py counts a crawl whose invocations run one after another, and a deployment runs its
page functions side by side (PageConcurrency), each taking a page batch, waiting at the host's gate, sending
back what the gate cannot serve yet. What that costs per page grows with the concurrency a user sets and with
how many pages a site marks important (the priority lane), so it is measured the way Lambda runs it
(issue 41).

    python bench/aws_concurrent.py [--pages 2000] [--pollers 1,8,20] [--lanes 2] [--delay 0.05]
                                   [--baseline REF] [--json]

What runs: a demo site of ``--pages`` pages whose entries carry priorities 0.0 to 0.9
(harvester.demo.live.LiveSite, served on 127.0.0.1), crawled once by the stack of template.yaml in moto
(samtranslator, tests/aws/stack.py). moto is served over HTTP (tests/aws/concurrent.py), and every function
runs in containers of its own, each a process polling its queue as Lambda's event source mapping does
(tests/aws/container.py: the template's batch size and window, the functions' own environment): the job
function 1, the sitemap function SitemapConcurrency's default, the job-end function 1, the priority lane
``--lanes`` and the page function ``--pollers`` (one run per value). Nothing in time is compressed: a
message's DelaySeconds and the job's ``--delay`` between requests to the host are waited for.

What is counted: every request that reaches moto's server, booked to the function whose container made it
(the SDK's User-Agent names it: tests/aws/container.py) and weighed in the units AWS bills with
bench/aws_cost.py's meter and prices (its docstring says how). Lambda's event source mapping is billed one
ReceiveMessage per batch that returned messages and one DeleteMessageBatch per batch deleted; the empty
receives of idle pollers and the harness's own calls are left out. Lambda compute is each invocation's
measured duration times its function's MemorySize; the bench prints it again less the waits for this
machine's CPUs, less the waits for moto's answers, and with those waits scaled to AWS's answer times
(a model: tests/aws/poller.AWS_ANSWER_SECONDS, each invocation's requests overlapping as they did here).
Timeouts are invocations that ran past their function's
Timeout. WARC objects are counted in the bucket at the end (and those without their CDXJ index).

``--baseline REF`` runs the same measurement first against REF's engine, template and functions (a git
worktree of REF, this harness), so both appear side by side, named by their commits.

The script always exits 0: it measures and prints, it does not test.
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib.util
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from _aws_path import _ENVIRONMENT, REPO
from aws_cost import (
    _WRITES,
    TARGET_DOLLARS_PER_MILLION,
    TARGET_REQUESTS_PER_PAGE,
    Meter,
    Tally,
    _pages_in,
    gb_second_price,
    priced,
)

#: The functions' containers besides the page function's (``--pollers``) and the lane's (``--lanes``).
OTHER_CONTAINERS = {"JobFunction": 1, "SitemapFunction": 5, "JobEndFunction": 1}
_ESM = {"ReceiveMessage", "DeleteMessageBatch"}
_HARNESS = {"ChangeMessageVisibilityBatch", "GetQueueAttributes", "GetQueueUrl", "ListQueues"}


@dataclass
class Booked:
    """What one function's containers asked of AWS."""

    tally: Tally = field(default_factory=Tally)
    #: Table write units by operation and kind of item written (bench/aws_cost.item_kind).
    item_units: collections.Counter[str] = field(default_factory=collections.Counter)
    deliveries: int = 0  # pages delivered (a page batch delivered twice: twice its pages)
    messages: int = 0  # records delivered


class ServerMeter(Meter):
    """Books every request that reaches moto's server to the function that made it."""

    def __init__(self, stack: Any) -> None:  # (not Meter's: no AwsPath, no botocore patch)
        import boto3
        from moto.dynamodb.models import dynamodb_backends

        self.backend = dynamodb_backends[stack.account_id][stack.region]
        self.where = False
        self._lock = threading.Lock()
        self.tally = Tally()
        client = boto3.client("dynamodb", region_name=stack.region)  # in process: not over HTTP, not counted
        self.unpatched = lambda _client, operation, params: client._make_api_call(operation, params)
        self.functions: dict[str, Booked] = collections.defaultdict(Booked)
        self.harness: collections.Counter[str] = collections.Counter()
        self.page_queues = {stack.queue_url(q) for q in ("PageQueue", "PagePriorityQueue") if _has(stack, q)}

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Meters moto's server (call inside tests.aws.concurrent.moto_over_http)."""
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication

        serve = DomainDispatcherApplication.__call__
        meter = self

        def metered(app: Any, environ: dict[str, Any], start_response: Any) -> Any:
            return meter._request(lambda: serve(app, environ, start_response), environ)

        with mock.patch.object(DomainDispatcherApplication, "__call__", metered):
            yield

    def _request(self, call: Any, environ: dict[str, Any]) -> Any:
        agent = environ.get("HTTP_USER_AGENT", "")
        parts = agent.split()
        named = [part[3:] for part in parts if part.startswith("fn/")]  # (the engine's: after app/harvester)
        function = (named or [part[4:] for part in parts if part.startswith("app/")] or ["(unnamed)"])[0]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target:
            service = "dynamodb" if target.startswith("DynamoDB") else "sqs"
            operation = target.rpartition(".")[2]
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
            params = json.loads(body or b"{}")
        else:
            service, operation, params = "s3", _s3_operation(environ), {}
        with self._lock:
            before = self._snapshot(operation, params) if service == "dynamodb" and operation in _WRITES else None
            chunks = list(call())
            response = json.loads(b"".join(chunks) or b"{}") if target and operation in _READ_BACK else None
            self._book(function, service, operation, params, response, before)
        return chunks

    def _book(
        self, function: str, service: str, operation: str, params: dict[str, Any], response: Any, before: Any
    ) -> None:
        name = f"{service}:{operation}"
        booked = self.functions[function]
        if (service == "sqs" and operation in _HARNESS) or (
            operation == "ReceiveMessage" and not response.get("Messages")
        ):
            self.harness[name] += 1
            return
        units = self._units(None, service, operation, params, response, before)
        for kind, n in self.items_written if before is not None else ():
            booked.item_units[f"{operation} {kind}"] += n
        esm = service == "sqs" and operation in _ESM
        key = f"{name} (Lambda's poller)" if esm else name
        (booked.tally.esm if esm else booked.tally.calls)[key] += 1
        for kind, n in units:
            booked.tally.units[kind, key] += n
        if operation == "ReceiveMessage":
            messages = response.get("Messages", [])
            booked.messages += len(messages)
            if params.get("QueueUrl") in self.page_queues:
                booked.deliveries += sum(_pages_in({"body": m.get("Body", "")}) for m in messages)


_READ_BACK = {"ReceiveMessage", "Query", "Scan"}


def _has(stack: Any, queue: str) -> bool:
    try:
        stack.queue_url(queue)
    except KeyError:
        return False
    return True


def _s3_operation(environ: dict[str, Any]) -> str:
    method, query = environ.get("REQUEST_METHOD", "GET"), environ.get("QUERY_STRING", "")
    path = environ.get("PATH_INFO", "/").strip("/")
    if method == "PUT":
        return "UploadPart" if "partNumber" in query else "PutObject"
    if method == "POST":
        return "DeleteObjects" if "delete" in query else "PostObject"
    if method == "DELETE":
        return "DeleteObject"
    if method == "HEAD":
        return "HeadObject"
    return "GetObject" if "/" in path else "ListObjectsV2"


# ---------------------------------------------------------------------------------------------- a run


def measure(pages: int, pollers: int, lanes: int, delay: float, template: Path, timeout: float) -> dict[str, Any]:
    """One first crawl with ``pollers`` page-function containers: its figures, as a dict (JSON-ready)."""
    import boto3
    from moto import mock_aws

    from harvester.adapters.aws import AwsAdapters
    from harvester.adapters.aws.stack import submit_job
    from harvester.model.messages import JobRequest
    from tests.aws.concurrent import moto_over_http, run_side_by_side
    from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
    from tests.aws.moto_speedups import moto_sqs_speedups
    from tests.aws.stack import deploy_stack

    site_serving = _live_site()(pages=pages, sitemaps=max(1, pages // 1000), priorities=True).serving()
    with site_serving as site, mock_aws(), moto_sqs_speedups(), moto_dynamodb_speedups(), moto_over_http() as url:
        stack = deploy_stack(template, {"AllowedNetworks": "127.0.0.0/8"})
        meter = ServerMeter(stack)
        store = AwsAdapters.from_env(stack.function("PageFunction").environment).store
        job_id = submit_job(JobRequest(site=site.url("/"), rate_limit_delay=delay), stack.outputs["JobQueueUrl"])

        def done() -> bool:  # (the job's end written: its status turns final before the end function runs)
            job = store.get_job(job_id)
            return (
                job is not None and job.status.final and (job.result_key is not None or job.error_message is not None)
            )

        containers = {**OTHER_CONTAINERS, "PageFunction": pollers, "PagePriorityFunction": lanes}
        gc.collect()
        start = time.monotonic()
        with meter.serving():
            runs = run_side_by_side(stack, url, {f: n for f, n in containers.items() if n}, until=done, timeout=timeout)
        seconds = time.monotonic() - start
        job = store.get_job(job_id)
        counts = _counts(store.counts(job_id))
        s3 = boto3.client("s3", region_name=stack.region)
        keys = [
            o["Key"]
            for p in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.outputs["DocumentBucketName"])
            for o in p.get("Contents", [])
        ]
        warc = {k for k in keys if k.endswith(".warc.gz")}
        fetched = sum(1 for hit in site.page_hits() if hit.status == 200)
        functions = stack.functions
    return _figures(
        pollers=pollers,
        lanes=lanes,
        pages=pages,
        fetched=fetched,
        seconds=seconds,
        status=str(job.status.value) if job else "missing",
        counts=counts,
        meter=meter,
        runs=runs,
        functions=functions,
        warc_objects=len(warc),
        unindexed=len({k for k in warc if f"{k}.cdxj" not in keys}),
    )


def _live_site() -> Any:
    """This tree's LiveSite, whichever engine is measured (a baseline's may not spread priorities)."""
    source = REPO / "layers" / "harvester" / "harvester" / "demo" / "live.py"
    spec = importlib.util.spec_from_file_location("bench_live_site", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module.LiveSite


def _counts(counts: Any) -> dict[str, int]:
    return {
        "total": counts.urls_total,
        "succeeded": counts.urls_succeeded,
        "failed": counts.urls_failed,
        "excluded": counts.urls_excluded,
    }


def _figures(**run: Any) -> dict[str, Any]:
    meter: ServerMeter = run.pop("meter")
    runs = run.pop("runs")
    functions = run.pop("functions")
    pages = run["fetched"] or run["pages"]
    by_function: dict[str, dict[str, float]] = {}
    write_units: dict[str, dict[str, float]] = {}
    item_units: dict[str, dict[str, float]] = {}
    read_units: dict[str, dict[str, float]] = {}
    units: collections.Counter[str] = collections.Counter()
    for name, booked in meter.functions.items():
        rows = {**booked.tally.calls, **booked.tally.esm}
        by_function[name] = {op: n / pages for op, n in rows.items()}
        for (kind, _), n in booked.tally.units.items():
            units[kind] += n
        written: collections.Counter[str] = collections.Counter()
        read: collections.Counter[str] = collections.Counter()
        for (kind, op), n in booked.tally.units.items():
            if kind.startswith("WRU"):
                written[op] += n / pages
            elif kind == "RRU":
                read[op] += n / pages
        write_units[name], read_units[name] = dict(written), dict(read)
        item_units[name] = {kind: n / pages for kind, n in booked.item_units.items()}
    invocations = collections.Counter(r.function for r in runs)

    def billed(seconds: float, function: str) -> float:  # (dollars: GB-seconds by the millisecond, priced)
        gb_seconds = round(seconds * 1000 + 0.5) / 1000 * functions[function].memory_size / 1024
        return gb_seconds * gb_second_price(functions[function].architecture)

    def per_function(seconds: Callable[[Any], float]) -> dict[str, float]:
        """Compute by function, in dollars a million pages, each invocation billed for ``seconds(run)``."""
        spent: collections.Counter[str] = collections.Counter()
        for r in runs:
            spent[r.function] += billed(seconds(r), r.function) / pages * 1e6
        return dict(spent)

    compute = per_function(lambda r: r.duration)
    uncontended = per_function(lambda r: r.duration - r.cpu_wait)
    unanswered = per_function(lambda r: r.duration - r.aws_wait)
    modelled = per_function(lambda r: r.duration - r.aws_wait + r.aws_model_wait)
    timed_out = sum(1 for r in runs if r.duration > functions[r.function].timeout)
    dollars = priced(len(runs), sum(compute.values()) * pages / 1e6, lambda kind: units[kind])
    requests = sum(sum(ops.values()) for ops in by_function.values()) + len(runs) / pages
    page_functions = [b for f, b in meter.functions.items() if f.startswith("Page")]
    return {
        **run,
        "requests_per_page": requests,
        "dollars_per_million_pages": sum(dollars.values()) / pages * 1e6,
        "dollars_by_service": {k: v / pages * 1e6 for k, v in dollars.items()},
        "compute_by_function": compute,
        "compute_uncontended": sum(uncontended.values()),
        "compute_unanswered": sum(unanswered.values()),
        "compute_unanswered_by_function": unanswered,
        "compute_modelled": sum(modelled.values()),
        "compute_modelled_by_function": modelled,
        "dollars_modelled": (sum(dollars.values()) / pages * 1e6) - sum(compute.values()) + sum(modelled.values()),
        "by_function": by_function,
        "invocations": dict(invocations),
        "invocations_per_page": len(runs) / pages,
        "timed_out": timed_out,
        "longest_invocation": max((r.duration for r in runs), default=0.0),
        "longest_function": max(runs, key=lambda r: r.duration).function if runs else "",
        "longest_page_invocation": max((r.duration for r in runs if r.function.startswith("Page")), default=0.0),
        "page_seconds_per_page": sum(r.duration for r in runs if r.function.startswith("Page")) / pages,
        "page_cpu_wait_per_page": sum(r.cpu_wait for r in runs if r.function.startswith("Page")) / pages,
        "page_cpu_per_page": sum(r.cpu for r in runs if r.function.startswith("Page")) / pages,
        "peak_mib": {
            f: [max(r.peak_mib for r in runs if r.function == f), functions[f].memory_size] for f in invocations
        },
        "deliveries_per_page": sum(b.deliveries for b in page_functions) / pages,
        "pages_per_message": {
            f: b.deliveries / b.messages for f, b in meter.functions.items() if f.startswith("Page") and b.messages
        },
        "write_units_by_function": write_units,
        "read_units_by_function": read_units,
        "write_units_by_item": item_units,
        "warc_objects_per_page": run["warc_objects"] / pages,
        "harness_calls": dict(meter.harness),
    }


# ---------------------------------------------------------------------------------------------- report


def report(columns: list[tuple[str, dict[str, Any]]], delay: float) -> None:
    width, label_width = 22, 52

    def line(label: str, values: list[str]) -> None:
        print(f"  {label:<{label_width}}" + "".join(f"{v:>{width}}" for v in values))

    first = columns[0][1]
    print(
        f"AWS cost of a first crawl, containers side by side: a {first['pages']:,}-page site on 127.0.0.1 whose"
        f" priorities run 0.0-0.9, the job's delay {delay:g} s; template.yaml in moto served over HTTP"
    )
    line("code", [name[: width - 1] for name, _ in columns])
    line("page pollers + lane pollers", [f"{c['pollers']} + {c['lanes']}" for _, c in columns])
    line("job status / pages fetched", [f"{c['status']} / {c['fetched']:,}" for _, c in columns])
    line(
        "urls total / succeeded / failed",
        [f"{c['counts']['total']} / {c['counts']['succeeded']} / {c['counts']['failed']}" for _, c in columns],
    )
    line("wall time", [f"{c['seconds']:.0f} s" for _, c in columns])
    print("\nRequests per page, by function and operation (billed requests)")
    names = sorted({(f, op) for _, c in columns for f, ops in c["by_function"].items() for op in ops})
    for function in sorted({f for f, _ in names}):
        total = [sum(c["by_function"].get(function, {}).values()) for _, c in columns]
        line(function, [f"{t:.3f}" for t in total])
        for _, op in sorted((n for n in names if n[0] == function), key=lambda n: n[1]):
            values = [c["by_function"].get(function, {}).get(op, 0.0) for _, c in columns]
            if max(values) >= 0.005:
                line(f"  {op}", [f"{v:.3f}" for v in values])
    line("Lambda invocations", [f"{c['invocations_per_page']:.3f}" for _, c in columns])
    line("all billed requests", [f"{c['requests_per_page']:.3f}" for _, c in columns])
    print("\n$ per million pages, by service")
    for service in first["dollars_by_service"]:
        line(service, [f"{c['dollars_by_service'][service]:.2f}" for _, c in columns])

    def by_function(key: str, label: str, spec: str) -> None:  # (a line a function, of the figure ``key``)
        for function in sorted({f for _, c in columns for f in c.get(key, {})}):
            line(f"{label}{function}", [format(c.get(key, {}).get(function, 0.0), spec) for _, c in columns])

    by_function("compute_by_function", "  Lambda compute: ", ".2f")
    line("total (requests and compute)", [f"{c['dollars_per_million_pages']:.2f}" for _, c in columns])
    line(
        "Lambda compute less the waits for this machine's CPUs",
        [f"{c.get('compute_uncontended', float('nan')):.2f}" for _, c in columns],
    )
    line(
        "Lambda compute less the waits for AWS's answers (moto's)",
        [f"{c.get('compute_unanswered', float('nan')):.2f}" for _, c in columns],
    )
    by_function("compute_unanswered_by_function", "  less the waits for AWS: ", ".2f")
    line(
        "Lambda compute with AWS's answer times (model: tests/aws/poller.AWS_ANSWER_SECONDS)",
        [f"{c.get('compute_modelled', float('nan')):.2f}" for _, c in columns],
    )
    by_function("compute_modelled_by_function", "  model: ", ".2f")
    line("total with that compute (model)", [f"{c.get('dollars_modelled', float('nan')):.2f}" for _, c in columns])
    for key, title in (
        ("write_units_by_function", "DynamoDB write units per page (1 KB an item written; 2 in a transaction)"),
        ("read_units_by_function", "DynamoDB read units per page (4 KB an item read consistently; half eventually)"),
    ):
        print(f"\n{title}, by function")
        for function in sorted({f for _, c in columns for f in c.get(key, {})}):
            ops = [c.get(key, {}).get(function, {}) for _, c in columns]
            if max(sum(o.values()) for o in ops) >= 0.005:
                line(function, [f"{sum(o.values()):.2f}" for o in ops])
                for op in sorted({op for o in ops for op in o}):
                    line(f"  {op}", [f"{o.get(op, 0.0):.2f}" for o in ops])
    print("\nDynamoDB table write units per page by the kind of item written (names starred), by function")
    for function in sorted({f for _, c in columns for f in c.get("write_units_by_item", {})}):
        kinds = [c.get("write_units_by_item", {}).get(function, {}) for _, c in columns]
        shown = sorted(
            {k for o in kinds for k, n in o.items() if n >= 0.005}, key=lambda k: -max(o.get(k, 0) for o in kinds)
        )
        if shown:
            line(function, ["" for _ in kinds])
            for kind in shown:
                line(f"  {kind}", [f"{o.get(kind, 0.0):.3f}" for o in kinds])
    print("\nHow the work ran")
    line("page deliveries per page (1: each delivered once)", [f"{c['deliveries_per_page']:.2f}" for _, c in columns])
    by_function("pages_per_message", "pages a delivered message holds: ", ".1f")
    line("page-function seconds per page", [f"{c['page_seconds_per_page']:.3f}" for _, c in columns])
    line(
        "  of which waiting for this machine's CPUs",
        [f"{c.get('page_cpu_wait_per_page', float('nan')):.3f}" for _, c in columns],
    )
    line(
        "  of which the CPU time its process used",
        [f"{c.get('page_cpu_per_page', float('nan')):.3f}" for _, c in columns],
    )
    for function in sorted({f for _, c in columns for f in c.get("peak_mib", {})}):
        line(
            f"peak memory, MiB of MemorySize: {function}",
            [
                "{:.0f} of {}".format(*c["peak_mib"][function]) if function in c.get("peak_mib", {}) else "-"
                for _, c in columns
            ],
        )
    line("invocations past their timeout", [f"{c['timed_out']}" for _, c in columns])
    line(
        "longest invocation",
        [f"{c['longest_invocation']:.1f} s {c.get('longest_function', '')[:-8]}" for _, c in columns],
    )
    line("  of the page functions", [f"{c.get('longest_page_invocation', 0.0):.1f} s" for _, c in columns])
    line("WARC objects per page (a batch of 50: 0.02)", [f"{c['warc_objects_per_page']:.3f}" for _, c in columns])
    line("WARC objects without their CDXJ", [f"{c['unindexed']}" for _, c in columns])
    print(
        f"\nVerdict (issue 41: <= {TARGET_REQUESTS_PER_PAGE} requests and"
        f" <= ${TARGET_DOLLARS_PER_MILLION:.0f} a million pages)"
    )

    def verdict(c: dict[str, Any]) -> str:  # (the dollars with compute at AWS's answer times: see the docstring)
        dollars = c.get("dollars_modelled", float("nan"))
        met = c["requests_per_page"] <= TARGET_REQUESTS_PER_PAGE and dollars <= TARGET_DOLLARS_PER_MILLION
        return f"{'met' if met else 'MISSED'} {c['requests_per_page']:.2f} / {dollars:.2f}"

    line("requests / $ (model)", [verdict(c) for _, c in columns])
    line("  ($ measured here)", [f"{c['dollars_per_million_pages']:.2f}" for _, c in columns])


# ---------------------------------------------------------------------------------------------- main


def _commit(ref: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def baseline(ref: str, argv: list[str]) -> list[dict[str, Any]]:
    """This measurement against REF's engine, template and functions (a worktree of REF), as JSON rows."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), ref], cwd=REPO, check=True)
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "layers" / "harvester"), str(REPO)])}
            out = subprocess.run(
                [sys.executable, __file__, *argv, "--json", "--template", str(tree / "template.yaml")],
                env=env,
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise SystemExit(f"the baseline run failed:\n{out.stderr[-4000:]}")
            return json.loads(out.stdout.splitlines()[-1])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2_000, help="pages of the site (default 2,000)")
    parser.add_argument("--pollers", default="1,8,20", help="page-function containers, one run each (default 1,8,20)")
    parser.add_argument("--lanes", type=int, default=2, help="priority-lane containers (default 2)")
    parser.add_argument("--delay", type=float, default=0.05, help="the job's rate_limit_delay (default 0.05 s)")
    parser.add_argument("--timeout", type=float, default=1200, help="a run's limit in seconds (default 1200)")
    parser.add_argument("--baseline", metavar="REF", help="also measure REF's code (e.g. main), shown first")
    parser.add_argument("--template", type=Path, default=REPO / "template.yaml", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="the figures as JSON, no table")
    args = parser.parse_args()
    os.environ.update(_ENVIRONMENT)
    logging.disable(logging.WARNING)  # (moto's deploy names every resource it does not create)
    argv = ["--pages", str(args.pages), "--pollers", args.pollers, "--lanes", str(args.lanes)]
    argv += ["--delay", str(args.delay), "--timeout", str(args.timeout)]
    columns: list[tuple[str, dict[str, Any]]] = []
    if args.baseline:
        name = f"{args.baseline} ({_commit(args.baseline)})"
        columns += [(name, row) for row in baseline(args.baseline, argv)]
    rows = [
        measure(args.pages, int(n), args.lanes, args.delay, args.template, args.timeout)
        for n in args.pollers.split(",")
    ]
    if args.json:
        print(json.dumps(rows))
        return
    head = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    here = f"this tree ({_commit('HEAD')}{'+' if head.strip() else ''})"
    columns += [(here, row) for row in rows]
    report(columns, args.delay)


if __name__ == "__main__":
    main()
