"""Several Lambda containers of one function at once, each in its own process, as Lambda runs them.

Why processes: what must hold across invocations (the per-host gate, claims, counters) holds only if it
holds when they truly run side by side. Threads in the test process would share one interpreter lock with
moto and the test servers, so a container's timers would fire hundreds of milliseconds late for reasons no
Lambda has; separate processes keep each container's timing its own, as on AWS.

How: the moto the test deployed the stack into (``mock_aws``, with the speedups) is also served over HTTP
from the test process (moto's ThreadedMotoServer shares the same in-memory backends), and each container is a
process of its own (``tests.aws.container``) pointed at it with ``AWS_ENDPOINT_URL``: a :class:`LambdaPoller` of its
own (its own ``app.py`` module, cold-started; its own runtime, fetcher and caches) polling the function's
queue until told to stop. moto's backends take no locks, so every AWS request, from the test's clients or
the containers', is handled whole before the next (``atomic_requests``), as the real services serialise
the writes to one item.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any
from unittest import mock

from moto import backends as moto_backends
from moto.core.botocore_stubber import BotocoreStubber
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler

from tests.aws import container
from tests.aws.deployed import DeployedStack, stack_to_json
from tests.aws.faults import Faults, wsgi_refusal

ROOT = Path(__file__).resolve().parents[2]
_CHECK = 0.2


@dataclasses.dataclass(frozen=True)
class ContainerRun:
    """One invocation a container made (times are ``time.monotonic()``, the same clock in every process)."""

    started_at: float
    duration: float
    records: int
    error: str | None
    returned: int = 0  # messages left to come back when their visibility lapses (reported failed)
    function: str = ""  # the function's logical id
    cpu_wait: float = 0.0  # of ``duration``, waiting for one of this machine's CPUs (poller.Invocation)
    cpu: float = 0.0  # of ``duration``, the CPU seconds the container's process used
    peak_mib: float = 0.0  # the container's peak resident memory after the invocation
    aws_wait: float = 0.0  # of ``duration``, with an AWS request of the container in flight (poller.AwsWait)
    aws_model_wait: float = 0.0  # ``aws_wait`` with AWS's answer times (poller.Invocation)


@contextmanager
def moto_over_http(faults: Faults | None = None) -> Iterator[str]:
    """The running mock_aws, also served on 127.0.0.1 (its URL is yielded), every request handled whole;
    with ``faults``, what they refuse of Harvester's requests over HTTP is refused before moto sees it."""
    lock = threading.RLock()
    stubbed, served = BotocoreStubber.__call__, DomainDispatcherApplication.__call__

    def stub_whole(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return stubbed(self, *args, **kwargs)

    def serve_whole(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        refusal = wsgi_refusal(faults, environ) if faults is not None else None
        if refusal is not None:
            status, headers, body = refusal
            start_response(
                f"{status} {HTTPStatus(status).phrase}", [*headers.items(), ("Content-Length", str(len(body)))]
            )
            return [body]
        with lock:
            return served(self, environ, start_response)

    # (moto's server lists its service folders on disk, one stat each, to route every request: listed once)
    modules = tuple(moto_backends.list_of_moto_modules())

    def listed_once() -> Iterator[str]:
        return iter(modules)

    def quiet(*args: Any, **kwargs: Any) -> None:
        return None

    with (
        mock.patch.object(BotocoreStubber, "__call__", stub_whole),
        mock.patch.object(DomainDispatcherApplication, "__call__", serve_whole),
        mock.patch.object(moto_backends, "list_of_moto_modules", listed_once),
        mock.patch.object(MotoRequestHandler, "log_request", quiet),  # (a line per request, that no one reads)
    ):
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()


def run_side_by_side(
    stack: DeployedStack,
    endpoint: str,
    containers: dict[str, int],
    *,
    until: Callable[[], bool],
    timeout: float = 120.0,
) -> list[ContainerRun]:
    """Polls each function's queue from as many processes as ``containers`` says (function logical id ->
    containers), every one starting to poll once all have made their cold starts, until ``until()`` is true
    (checked here), then stops them; returns every invocation. Raises
    if a handler raised or ``until`` was not reached in ``timeout`` seconds (with what the containers
    printed)."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        spec = work / "stack.json"
        spec.write_text(json.dumps(stack_to_json(stack)))
        stop = work / "stop"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("HARVEST_", "AWS_"))},
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": stack.region,
            "AWS_REGION": stack.region,
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_CONFIG_FILE": "/dev/null",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        functions = [f for f, count in containers.items() for _ in range(count)]
        logs = [work / f"container-{i}.jsonl" for i in range(len(functions))]
        outputs = [work / f"container-{i}.out" for i in range(len(functions))]
        processes = [
            container.start(spec, function, stop, log, output, env)
            for function, log, output in zip(functions, logs, outputs, strict=True)
        ]
        deadline = time.monotonic() + timeout
        try:
            while not all(Path(f"{log}.ready").exists() for log in logs):
                if any(p.exitcode is not None for p in processes) or time.monotonic() > deadline:
                    break  # (said below, with what the containers printed)
                time.sleep(_CHECK)
            (work / "go").touch()
            while not until():
                dead = [p for p in processes if p.exitcode is not None]
                if dead or time.monotonic() > deadline:
                    printed = "\n".join(o.read_text()[-3000:] for o in outputs)
                    why = "a container exited" if dead else f"not done after {timeout} s"
                    raise AssertionError(f"{', '.join(containers)}: {why}\n{printed}")
                time.sleep(_CHECK)
        finally:
            stop.touch()
            for process in processes:
                process.join(timeout=60)
                if process.exitcode is None:
                    process.kill()
                    process.join()
        runs = [
            ContainerRun(**json.loads(line), function=function)
            for function, log in zip(functions, logs, strict=True)
            if log.exists()
            for line in log.read_text().splitlines()
        ]
    failed = [r for r in runs if r.error]
    if failed:
        raise AssertionError(f"a handler raised:\n{failed[0].error}")
    return runs


def overlapping(runs: list[ContainerRun]) -> int:
    """The most invocations that ran at one time."""
    edges = sorted([(r.started_at, 1) for r in runs] + [(r.started_at + r.duration, -1) for r in runs])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most
