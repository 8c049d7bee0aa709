"""The AWS path for the benches: template.yaml created in moto, the real handlers driven as Lambda's SQS
poller drives them (the test harness's poller), and the AWS requests the handlers make, counted.

Shared by bench/recrawl.py and bench/discovery.py, whose AWS figures are requests per listed URL, and by
bench/aws_cost.py, which also weighs each request in billed units and dollars.

``aws_path(apart=True)`` runs moto in a process of its own, served over HTTP on 127.0.0.1 (``AWS_ENDPOINT_URL``):
what the handlers store in moto is then not in this process's memory, so that this process's RSS is what an
invocation itself holds (bench/scale.py's memory figures). That process also ends the DelaySeconds of waiting
messages as they appear (the poller's ``release_delayed`` reaches into moto's queues, which are not here).
"""

from __future__ import annotations

import collections
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test harness (tests.aws) deploys the template in moto

_ENVIRONMENT = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


#: Sees each counted request and makes it: (client, operation, params, by the poller?, the call itself) -> response.
Observer = Callable[[Any, str, dict[str, Any], bool, Callable[[], Any]], Any]


class AwsRequests:
    """Counts the AWS requests made through botocore, by service and operation, except the poller's own.

    An ``observer`` (bench/aws_cost.py's meter) sees every counted request, the poller's too, and makes it;
    ``unpatched`` makes a request that nothing counts or observes.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.poller: collections.Counter[str] = collections.Counter()
        self.excluded: set[int] = set()
        self.active = False
        self.observer: Observer | None = None
        self.unpatched: Callable[[Any, str, dict[str, Any]], Any] | None = None

    @contextmanager
    def patched(self) -> Iterator[AwsRequests]:
        from botocore.client import BaseClient

        original = BaseClient._make_api_call
        counter = self
        self.unpatched = original

        def counted(client: Any, operation: str, params: Any) -> Any:
            if not counter.active:
                return original(client, operation, params)
            poller = id(client) in counter.excluded
            name = f"{client.meta.service_model.service_name}:{operation}"
            (counter.poller if poller else counter.counts)[name] += 1
            if counter.observer is None:
                return original(client, operation, params)
            return counter.observer(client, operation, params, poller, lambda: original(client, operation, params))

        BaseClient._make_api_call = counted  # type: ignore[method-assign]
        try:
            yield self
        finally:
            BaseClient._make_api_call = original  # type: ignore[method-assign]
            self.unpatched = None


class AwsPath:
    """The stack in moto with its poller; :meth:`run` submits one job and drains it, counting requests."""

    def __init__(self, stack: Any, poller: Any, requests: AwsRequests) -> None:
        self.stack, self.poller, self.requests = stack, poller, requests

    def run(self, request: Any, *, timeouts_fail: bool = True) -> dict[str, Any]:
        """Submits the job and drains the queues; SystemExit when an invocation failed (``timeouts_fail``
        False: one that only ran past its function's timeout, its messages coming back as Lambda's would, is
        counted in ``timed_out`` instead: moto's own speed, not the handler's, may be why)."""
        from harvester.adapters.aws.stack import submit_job

        self.requests.counts.clear()
        self.requests.poller.clear()
        job_id = submit_job(request, self.stack.outputs["JobQueueUrl"])
        first = len(self.poller.invocations)
        start = time.perf_counter()
        self.requests.active = True
        logging.disable(logging.INFO)  # the handlers' per-sitemap log lines: not what a bench prints
        try:
            self.poller.drain(max_rounds=100_000)
        finally:
            logging.disable(logging.NOTSET)
            self.requests.active = False
        seconds = time.perf_counter() - start
        ran = [i for i in self.poller.invocations[first:] if i.failed]  # (every drain's, however many)
        failures = [f for f in ran if timeouts_fail or not (f.timed_out and f.error is None)]
        if failures:
            failed = failures[0]
            why = failed.traceback or ("timed out" if failed.timed_out else failed.invalid_response)
            raise SystemExit(
                f"{len(failures)} invocations failed; the first, of {failed.function_logical_id}"
                f" ({len(failed.message_ids)} messages, {failed.duration:.1f} s): {why}"
            )
        return {
            "seconds": seconds,
            "aws": dict(self.requests.counts),
            "poller": dict(self.requests.poller),
            "job_id": job_id,
            "timed_out": sum(1 for f in ran if f.timed_out),
        }


@contextmanager
def aws_path(parameters: Mapping[str, str] | None = None, *, apart: bool = False) -> Iterator[AwsPath]:
    """The stack in moto, deployed with template.yaml's defaults but loopback allowed (and ``parameters``);
    ``apart``: moto in a process of its own (module docstring)."""
    os.environ.update(_ENVIRONMENT)
    if apart:
        with _moto_apart(parameters) as path:
            yield path
        return
    from moto import mock_aws

    from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
    from tests.aws.moto_speedups import moto_sqs_speedups
    from tests.aws.poller import LambdaPoller
    from tests.aws.stack import TEMPLATE_PATH, deploy_stack

    requests = AwsRequests()
    with mock_aws(), moto_sqs_speedups(), moto_dynamodb_speedups(), requests.patched():
        stack = deploy_stack(TEMPLATE_PATH, {"AllowedNetworks": "127.0.0.0/8", **(parameters or {})})
        poller = LambdaPoller(stack)
        requests.excluded.add(id(poller.sqs))
        try:
            yield AwsPath(stack, poller, requests)
        finally:
            poller.close()


@contextmanager
def _moto_apart(parameters: Mapping[str, str] | None) -> Iterator[AwsPath]:
    from tests.aws.deployed import stack_from_json
    from tests.aws.poller import LambdaPoller

    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve_moto, args=(dict(parameters or {}), theirs), daemon=True)
    process.start()
    try:
        if not ours.poll(300):
            raise SystemExit("moto's process did not deploy the stack in 300 s")
        endpoint, stack_json = ours.recv()
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        stack = stack_from_json(json.loads(stack_json))
        requests = AwsRequests()
        with requests.patched():
            poller = LambdaPoller(stack)
            requests.excluded.add(id(poller.sqs))

            def released(queue_logical_id: str | None = None) -> int:
                time.sleep(_RELEASE_EVERY * 2)  # (moto's process ends delays as it sees them)
                return 1

            poller.release_delayed = released  # type: ignore[method-assign]
            poller.drain = _patient(poller)  # type: ignore[method-assign]
            try:
                yield AwsPath(stack, poller, requests)
            finally:
                poller.close()
    finally:
        os.environ.pop("AWS_ENDPOINT_URL", None)
        ours.send("stop")
        process.join(30)
        if process.is_alive():
            process.kill()


def _patient(poller: Any) -> Callable[..., Any]:
    """The poller's drain, gone on with after a stall while a queue still shows a message: over HTTP a
    message made visible again (a delay ended by moto's process, a visibility set to 0) may be counted
    visible a moment before a receive can take it. Returns the last drain's counts (``AwsPath.run`` reads
    the failures from the poller's invocations)."""
    from tests.aws.poller import DrainError

    original = poller.drain

    def drain(*args: Any, **kwargs: Any) -> Any:
        for _ in range(100):
            try:
                return original(*args, **kwargs)
            except DrainError:
                if all(depth.total == 0 for depth in poller.depths().values()):
                    raise
                time.sleep(_RELEASE_EVERY * 5)
        raise SystemExit("the queues stalled over HTTP a hundred times")

    return drain


#: How often moto's process ends the DelaySeconds of the messages waiting in the stack's queues.
_RELEASE_EVERY = 0.1


def _serve_moto(parameters: dict[str, str], pipe: Any) -> None:
    """moto's process: the stack deployed, moto served over HTTP, the endpoint and the stack sent back, delays
    ended as they appear, until told to stop."""
    os.environ.update(_ENVIRONMENT)
    from moto import mock_aws
    from moto.sqs.models import sqs_backends

    from tests.aws.concurrent import moto_over_http
    from tests.aws.deployed import stack_to_json
    from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
    from tests.aws.moto_speedups import moto_sqs_speedups
    from tests.aws.stack import TEMPLATE_PATH, deploy_stack

    logging.disable(logging.WARNING)
    with mock_aws(), moto_sqs_speedups(), moto_dynamodb_speedups():
        stack = deploy_stack(TEMPLATE_PATH, {"AllowedNetworks": "127.0.0.0/8", **parameters})
        queues = sqs_backends[stack.account_id][stack.region].queues
        with moto_over_http() as endpoint:
            pipe.send((endpoint, json.dumps(stack_to_json(stack))))
            while not pipe.poll(_RELEASE_EVERY):
                for queue in list(queues.values()):
                    for message in list(queue._messages):
                        if message.delayed:
                            message.delayed_until = 0.0


def by_operation(counts: dict[str, int], listed: int) -> list[str]:
    """The requests of one job, an indented line per operation, with their share per listed URL."""
    return [
        f"    {operation:<40} {count:>7,}  ({count / listed:.4f} per URL)"
        for operation, count in sorted(counts.items(), key=lambda item: -item[1])
    ]
