"""Play Lambda's SQS event source mapping (and EventBridge's schedule) against a stack deployed in moto.

Why: moto cannot run the event source mappings the template creates (its attempt needs Docker, and
``deploy_stack`` unhooks it), so a test must do what Lambda's poller does - and do it exactly, because
the handlers' correctness under retries depends on it:

* receive up to BatchSize messages with all system and message attributes, using the queue's own
  visibility timeout;
* call the handler once with Lambda's SQS event shape and a LambdaContext whose remaining time counts
  down from the function's Timeout, in the function's environment (its deployed env vars plus the
  runtime's AWS_LAMBDA_* variables), loading ``<CodeUri>/app.py`` once per poller (a cold start, then
  warm invocations);
* if the handler raised, returned something that is not JSON, or ran past its Timeout: delete nothing
  (the whole batch comes back after the visibility timeout);
* else, with ReportBatchItemFailures: delete every message not listed in ``batchItemFailures``; an
  entry that is not an object with a non-empty ``itemIdentifier`` naming a message of the batch makes
  Lambda treat the whole batch as failed (documented behaviour), and so does it here. Without
  ReportBatchItemFailures a successful invocation deletes the whole batch;
* leave failed messages in flight: SQS makes them visible again after the visibility timeout, and moves
  them to the DLQ once ApproximateReceiveCount passes the RedrivePolicy's maxReceiveCount (moto does
  that part itself, on the next receive).

Time is compressed rather than waited for: ``expire_in_flight()`` makes the messages this poller left in
flight visible at once (ChangeMessageVisibility 0, as if the visibility timeout had passed) and
``release_delayed()`` ends DelaySeconds early (a moto-internal change: no API shortens a delay).
``drain()`` does both only when nothing else is deliverable, so retries come after fresh work, as they
would in real time.

What is not simulated here: concurrency (a poller's invocations run one at a time; several pollers in
threads are tests.aws.concurrent's), the batching window (a batch is
whatever one receive returns), Lambda's own retries of throttled invocations, and the X-Ray trace
header. ``LAMBDA_TASK_ROOT`` is set to the function's code directory, as Lambda sets it: Powertools' batch
processing then runs each batch on the thread's event loop, kept from one invocation to the next as in a
container, so the engine and its connections are too (Harvester uses no Tracer, which it would switch on);
``AWS_EXECUTION_ENV`` is not set. Isolation is per handler module only: each poller imports
``app.py`` afresh, but the modules it imports (the harvester package, boto3) are the test process's, so
state they cache survives from one poller, function or test to the next - unlike separate Lambda
containers.
"""

from __future__ import annotations

import base64
import datetime as dt
import gc
import importlib.util
import json
import os
import resource
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import boto3

from harvester.adapters.aws.lambda_runtime import close_current
from tests.aws.deployed import DeployedFunction, DeployedStack, EventSource

Handler = Callable[[dict[str, Any], Any], Any]

_SQS_RECEIVE_MAX = 10
# moto's Message.visible is `now_ms > visible_at`: after ChangeMessageVisibility(0) a receive in the
# same millisecond would still miss the message.
_VISIBILITY_CLOCK_STEP = 0.002


class DrainError(AssertionError):
    """drain() could not empty the queues: stalled (messages in flight it does not own) or out of rounds."""


@dataclass(frozen=True)
class QueueDepth:
    """ApproximateNumberOfMessages / ...NotVisible / ...Delayed of one queue."""

    visible: int
    in_flight: int
    delayed: int

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


class FakeLambdaContext:
    """The attributes of the Python runtime's LambdaContext (awslambdaric), with a real countdown.

    ``memory_limit_in_mb`` is a string, as in the runtime (it reads AWS_LAMBDA_FUNCTION_MEMORY_SIZE).
    """

    def __init__(self, function: DeployedFunction, request_id: str | None = None) -> None:
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.function_name = function.name
        self.function_version = "$LATEST"
        self.invoked_function_arn = function.arn
        self.memory_limit_in_mb = str(function.memory_size)
        self.log_group_name = f"/aws/lambda/{function.name}"
        self.log_stream_name = f"{dt.datetime.now(dt.UTC):%Y/%m/%d}/[$LATEST]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._deadline = time.monotonic() + function.timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass
class Invocation:
    """One handler invocation and what the poller did with its batch."""

    function_logical_id: str
    request_id: str
    message_ids: tuple[str, ...]
    deleted_ids: tuple[str, ...] = ()
    returned_ids: tuple[str, ...] = ()  # left in flight (reported failures, or the whole batch)
    result: Any = None
    error: BaseException | None = None
    traceback: str | None = None
    timed_out: bool = False
    invalid_response: str | None = None
    duration: float = 0.0
    started_at: float = 0.0  # time.monotonic() when the handler was called
    #: Of ``duration``, the seconds the handler's thread was ready to run but waited for one of this machine's
    #: CPUs (Linux's schedstat; 0 where not known): Lambda gives an invocation its own share of a CPU.
    cpu_wait: float = 0.0
    #: Of ``duration``, the CPU seconds the handler's process used (every thread of it), and the process's peak
    #: resident memory in MiB after the invocation (Lambda bills a function's MemorySize, kills it past that).
    cpu: float = 0.0
    peak_mib: float = 0.0
    #: Of ``duration``, the seconds during which at least one AWS request of the handler's process was in
    #: flight (``AwsWait``; 0 where it is not installed): what the services' answers kept it waiting.
    aws_wait: float = 0.0
    #: ``aws_wait`` as it would be with every request answered at AWS's speed (``AwsWait.answers``: scaled by
    #: what its requests would take on AWS over what they took here).
    aws_model_wait: float = 0.0

    @property
    def failed(self) -> bool:
        """The whole batch was returned (raised, timed out, or an invalid partial-batch response)."""
        return self.error is not None or self.timed_out or self.invalid_response is not None


#: What an AWS request takes on AWS, in seconds, for the bench's model of compute at AWS's answer times
#: (``AwsWait.answers``): DynamoDB answers in single-digit milliseconds (its documentation's figure; a
#: batch, query or transaction taken at twice to three times a single item's), S3 at its performance
#: guide's first-byte latency of 100-200 ms (taken at its lower end for the small objects written here),
#: SQS in tens of milliseconds. Assumptions, not measurements: the bench prints them as a model.
AWS_ANSWER_SECONDS: dict[str, float] = {
    "dynamodb": 0.008,
    "dynamodb:BatchGetItem": 0.015,
    "dynamodb:BatchWriteItem": 0.015,
    "dynamodb:Query": 0.015,
    "dynamodb:TransactGetItems": 0.015,
    "dynamodb:TransactWriteItems": 0.025,
    "s3": 0.1,
    "sqs": 0.02,
}


class AwsWait:
    """The wall time during which at least one AWS request of this process is in flight (every botocore
    request, its retries included, from any thread): a handler's time that the services' latency makes,
    which on this machine is moto's, serving every request of every container one at a time. ``install``
    hooks botocore; ``seconds()`` reads the running total. ``answers()`` reads two more running sums over
    the requests: the seconds each took here, and the seconds AWS_ANSWER_SECONDS says each takes on AWS (a
    bench scales an invocation's wait by their ratio: the same requests, overlapping as they did, answered
    at AWS's speed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._since = 0.0
        self._total = 0.0
        self._took = 0.0
        self._modelled = 0.0

    def install(self) -> None:
        from botocore.endpoint import Endpoint

        made = Endpoint.make_request
        wait = self

        def make_request(endpoint: Any, operation: Any, *args: Any, **kwargs: Any) -> Any:
            asked = wait._enter()
            try:
                return made(endpoint, operation, *args, **kwargs)
            finally:
                service = operation.service_model.endpoint_prefix
                answer = AWS_ANSWER_SECONDS.get(f"{service}:{operation.name}", AWS_ANSWER_SECONDS.get(service, 0.0))
                wait._leave(asked, answer)

        Endpoint.make_request = make_request  # type: ignore[method-assign]

    def _enter(self) -> float:
        with self._lock:
            now = time.monotonic()
            if self._open == 0:
                self._since = now
            self._open += 1
            return now

    def _leave(self, asked: float = 0.0, answer: float = 0.0) -> None:
        with self._lock:
            now = time.monotonic()
            self._open -= 1
            if self._open == 0:
                self._total += now - self._since
            if asked:
                self._took += now - asked
                self._modelled += answer

    def seconds(self) -> float:
        with self._lock:
            return self._total + (time.monotonic() - self._since if self._open else 0.0)

    def answers(self) -> tuple[float, float]:
        """The requests' seconds here and on AWS (AWS_ANSWER_SECONDS), summed over those answered so far."""
        with self._lock:
            return self._took, self._modelled


#: This process's (installed by the containers of tests/aws/container.py).
AWS_WAIT = AwsWait()


def cpu_wait() -> float:
    """Seconds the calling thread has spent ready to run but waiting for a CPU (the second field of its
    ``/proc/thread-self/schedstat``, in nanoseconds); 0.0 where Linux does not say."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class FunctionStats:
    invocations: int = 0
    records: int = 0
    deleted: int = 0
    returned: int = 0
    failed_invocations: int = 0


@dataclass
class Stats:
    """Counters of a poller's (or one drain's) work. ``failures`` keeps failed invocations in order."""

    rounds: int = 0
    invocations: int = 0
    records: int = 0
    deleted: int = 0
    returned: int = 0
    failed_invocations: int = 0
    visibility_expiries: int = 0
    delays_released: int = 0
    per_function: dict[str, FunctionStats] = field(default_factory=dict)
    failures: list[Invocation] = field(default_factory=list)

    def add(self, invocation: Invocation) -> None:
        per = self.per_function.setdefault(invocation.function_logical_id, FunctionStats())
        for target in (self, per):
            target.invocations += 1
            target.records += len(invocation.message_ids)
            target.deleted += len(invocation.deleted_ids)
            target.returned += len(invocation.returned_ids)
            target.failed_invocations += int(invocation.failed)
        if invocation.failed:
            self.failures.append(invocation)


def lambda_message_attributes(attributes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """SQS API MessageAttributes -> the shape Lambda puts in an SQS record (binary values base64)."""
    converted: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        entry: dict[str, Any] = {}
        if "StringValue" in value:
            entry["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            entry["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
        entry["stringListValues"] = list(value.get("StringListValues", []))
        entry["binaryListValues"] = [base64.b64encode(v).decode("ascii") for v in value.get("BinaryListValues", [])]
        entry["dataType"] = value["DataType"]
        converted[name] = entry
    return converted


def lambda_sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One received SQS message (ReceiveMessage response entry) as a Lambda SQS event record."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": lambda_message_attributes(message.get("MessageAttributes", {})),
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def scheduled_event(rule_arn: str, account_id: str, region: str, when: dt.datetime | None = None) -> dict[str, Any]:
    """The event an EventBridge schedule rule delivers to its Lambda target."""
    moment = (when or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account_id,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


def _batch_item_failures(result: Any, message_ids: set[str]) -> tuple[set[str], str | None]:
    """(ids to leave on the queue, reason the response is invalid) for a ReportBatchItemFailures response.

    Lambda: success for a null/empty response or a null/empty list; complete failure for an entry
    without an itemIdentifier, with a null/empty one, or with one not in the batch.
    """
    if result is None:
        return set(), None
    if not isinstance(result, Mapping):
        return set(message_ids), f"response is a {type(result).__name__}, not an object"
    failures = result.get("batchItemFailures")
    if failures is None:
        return set(), None
    if not isinstance(failures, list):
        return set(message_ids), "batchItemFailures is not a list"
    returned: set[str] = set()
    for entry in failures:
        identifier = entry.get("itemIdentifier") if isinstance(entry, Mapping) else None
        if not isinstance(identifier, str) or not identifier:
            return set(message_ids), f"invalid batchItemFailures entry {entry!r}"
        if identifier not in message_ids:
            return set(message_ids), f"itemIdentifier {identifier!r} is not a message of the batch"
        returned.add(identifier)
    return returned, None


class LambdaPoller:
    """Lambda's SQS poller and schedule invoker for the functions of a ``DeployedStack``.

    ``code_dirs`` replaces a function's code directory (its ``app.py`` is loaded instead), ``handlers``
    replaces the handler callable outright; both keyed by logical id. With ``raise_errors`` an exception
    from a handler propagates to the test after the batch has been left in flight, instead of only
    being recorded in ``stats.failures``.
    """

    def __init__(
        self,
        stack: DeployedStack,
        *,
        code_dirs: Mapping[str, str | Path] | None = None,
        handlers: Mapping[str, Handler] | None = None,
        raise_errors: bool = False,
    ) -> None:
        self.stack = stack
        self.raise_errors = raise_errors
        self.sqs = boto3.client("sqs", region_name=stack.region)
        self.stats = Stats()
        self.invocations: list[Invocation] = []
        self._code_dirs = {k: Path(v) for k, v in (code_dirs or {}).items()}
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self._modules: list[str] = []
        self._in_flight: dict[str, dict[str, str]] = {}  # queue url -> message id -> latest receipt handle
        self._observers: list[Stats] = [self.stats]
        #: Whether each invocation sets the function's environment itself. Invocations run side by side
        #: (``tests.aws.concurrent``) cannot each patch os.environ: their runner sets it once around them.
        self.patch_environment = True

    # ------------------------------------------------------------------ handlers and environment

    def code_dir(self, function_logical_id: str) -> Path:
        return self._code_dirs.get(function_logical_id, self.stack.function(function_logical_id).code_dir)

    def function_environment(self, function: DeployedFunction) -> dict[str, str]:
        """The function's deployed variables plus those the Lambda runtime sets."""
        runtime = {
            "AWS_REGION": self.stack.region,
            "AWS_DEFAULT_REGION": self.stack.region,
            "AWS_LAMBDA_FUNCTION_NAME": function.name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_size),
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"[$LATEST]{function.logical_id}",
            "_HANDLER": function.handler,
            "LAMBDA_TASK_ROOT": str(self.code_dir(function.logical_id)),
        }
        return {**function.environment, **runtime}

    @contextmanager
    def lambda_environment(self, function_logical_id: str) -> Iterator[None]:
        """os.environ and sys.path as the function sees them, restored afterwards."""
        if not self.patch_environment:
            yield
            return
        function = self.stack.function(function_logical_id)
        code_dir = str(self.code_dir(function_logical_id))
        with mock.patch.dict(os.environ, self.function_environment(function)):
            sys.path.insert(0, code_dir)
            try:
                yield
            finally:
                if code_dir in sys.path:
                    sys.path.remove(code_dir)

    def _handler_source(self, function_logical_id: str) -> Path:
        handler = self.stack.function(function_logical_id).handler
        source = self.code_dir(function_logical_id) / (handler.rpartition(".")[0].replace(".", "/") + ".py")
        if not source.is_file():
            raise FileNotFoundError(f"{function_logical_id}: handler {handler!r} needs {source}")
        return source

    def handler(self, function_logical_id: str) -> Handler:
        """The function's handler, imported on first use (the cold start) inside its environment."""
        if function_logical_id in self._handlers:
            return self._handlers[function_logical_id]
        source = self._handler_source(function_logical_id)
        attribute = self.stack.function(function_logical_id).handler.rpartition(".")[2]
        module_name = f"_harvester_lambda_{function_logical_id}_{uuid.uuid4().hex[:8]}"
        spec = importlib.util.spec_from_file_location(module_name, source)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {source}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            with self.lambda_environment(function_logical_id):
                spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        finally:
            # An app.py switches the garbage collector off for its INIT and freezes what INIT made
            # (lambda_runtime.end_of_init): right for a container, which loads it once, but this process loads
            # one per poller, and each freeze would keep whatever garbage the tests before had left.
            gc.unfreeze()
            gc.enable()
        self._modules.append(module_name)
        self._handlers[function_logical_id] = getattr(module, attribute)
        return self._handlers[function_logical_id]

    def close(self) -> None:
        """Forget the loaded handler modules (the next poller gets cold starts), and close the runtime the
        invocations left in this thread (its engine's connections), as a container's shutdown does."""
        for name in self._modules:
            sys.modules.pop(name, None)
        self._modules.clear()
        self._handlers.clear()  # (a poller used again starts cold: a container that died, in fault tests)
        close_current()

    # ------------------------------------------------------------------ invoking

    def invoke(self, function_logical_id: str, event: Any) -> Any:
        """Invoke a handler directly with any event (exceptions propagate)."""
        function = self.stack.function(function_logical_id)
        handler = self.handler(function_logical_id)
        with self.lambda_environment(function_logical_id):
            return handler(event, FakeLambdaContext(function))

    def invoke_schedule(self, function_logical_id: str, *, when: dt.datetime | None = None) -> Any:
        """Invoke a function as its EventBridge schedule rule would; returns what the handler returns."""
        function = self.stack.function(function_logical_id)
        if not function.schedule_rules:
            raise ValueError(f"{function_logical_id} has no schedule rule")
        rule = function.schedule_rules[0]
        return self.invoke(
            function_logical_id, scheduled_event(rule.arn, self.stack.account_id, self.stack.region, when)
        )

    def _receive(self, source: EventSource) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while len(messages) < source.batch_size:
            response = self.sqs.receive_message(
                QueueUrl=source.queue_url,
                MaxNumberOfMessages=min(_SQS_RECEIVE_MAX, source.batch_size - len(messages)),
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            )
            received = response.get("Messages", [])
            messages.extend(received)
            if not received:
                break
        return messages

    def poll_once(self, function_logical_id: str) -> int:
        """One poll of the function's SQS event source: receive, invoke, delete. Returns records delivered."""
        function = self.stack.function(function_logical_id)
        source = function.sqs_event_source
        if source is None:
            raise ValueError(f"{function_logical_id} has no SQS event source")
        if not source.enabled:
            return 0
        messages = self._receive(source)
        if not messages:
            return 0
        if function_logical_id not in self._handlers:
            self._handler_source(function_logical_id)  # a missing app.py is a set-up error: raise, not a fault
        in_flight = self._in_flight.setdefault(source.queue_url, {})
        for message in messages:
            in_flight[message["MessageId"]] = message["ReceiptHandle"]
        event = {"Records": [lambda_sqs_record(m, source.queue_arn, self.stack.region) for m in messages]}
        ids = tuple(m["MessageId"] for m in messages)
        invocation = Invocation(function_logical_id, str(uuid.uuid4()), ids)
        started, waited, used, answered = time.monotonic(), cpu_wait(), time.process_time(), AWS_WAIT.seconds()
        took, modelled = AWS_WAIT.answers()
        try:
            handler = self.handler(function_logical_id)  # a cold start's init is not on the invoke's clock
            started, waited, used, answered = time.monotonic(), cpu_wait(), time.process_time(), AWS_WAIT.seconds()
            took, modelled = AWS_WAIT.answers()
            context = FakeLambdaContext(function, invocation.request_id)
            with self.lambda_environment(function_logical_id):
                invocation.result = handler(event, context)
            json.dumps(invocation.result)  # the runtime serializes the response; failing that fails the invoke
        except Exception as error:
            invocation.error = error
            invocation.traceback = traceback.format_exc()
        invocation.duration = time.monotonic() - started
        invocation.cpu_wait = min(invocation.duration, max(0.0, cpu_wait() - waited))
        invocation.cpu = time.process_time() - used
        invocation.aws_wait = min(invocation.duration, AWS_WAIT.seconds() - answered)
        here, there = (now - then for now, then in zip(AWS_WAIT.answers(), (took, modelled), strict=True))
        invocation.aws_model_wait = invocation.aws_wait * there / here if here > 0 else 0.0
        invocation.peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        invocation.started_at = started
        invocation.timed_out = invocation.error is None and invocation.duration > function.timeout

        if invocation.error is not None or invocation.timed_out:
            returned = set(ids)
        elif source.reports_batch_item_failures:
            returned, invocation.invalid_response = _batch_item_failures(invocation.result, set(ids))
        else:
            returned = set()
        to_delete = [m for m in messages if m["MessageId"] not in returned]
        self._delete(source.queue_url, to_delete)
        invocation.deleted_ids = tuple(m["MessageId"] for m in to_delete)
        invocation.returned_ids = tuple(i for i in ids if i in returned)
        self.invocations.append(invocation)
        for stats in self._observers:
            stats.add(invocation)
        if self.raise_errors and invocation.error is not None:
            raise invocation.error
        return len(messages)

    def _delete(self, queue_url: str, messages: list[dict[str, Any]]) -> None:
        in_flight = self._in_flight.get(queue_url, {})
        for start in range(0, len(messages), _SQS_RECEIVE_MAX):
            chunk = messages[start : start + _SQS_RECEIVE_MAX]
            response = self.sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            if response.get("Failed"):
                raise RuntimeError(f"DeleteMessageBatch failed on {queue_url}: {response['Failed']}")
            for message in chunk:
                in_flight.pop(message["MessageId"], None)

    # ------------------------------------------------------------------ time compression

    def in_flight_count(self) -> int:
        """Messages this poller received and left in flight (not deleted)."""
        return sum(len(handles) for handles in self._in_flight.values())

    def expire_in_flight(self, function_logical_id: str | None = None) -> int:
        """Make the messages this poller left in flight visible now, as if their timeout had passed.

        Returns how many were still in their queue (a message moved to the DLQ or deleted is skipped).
        """
        urls = (
            [self.stack.function(function_logical_id).sqs_event_source.queue_url]  # type: ignore[union-attr]
            if function_logical_id
            else list(self._in_flight)
        )
        changed = 0
        for url in urls:
            handles = list(self._in_flight.pop(url, {}).values())
            for start in range(0, len(handles), _SQS_RECEIVE_MAX):
                chunk = handles[start : start + _SQS_RECEIVE_MAX]
                response = self.sqs.change_message_visibility_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)],
                )
                changed += len(response.get("Successful", []))
        if changed:
            time.sleep(_VISIBILITY_CLOCK_STEP)
            for stats in self._observers:
                stats.visibility_expiries += 1
        return changed

    def _moto_queue(self, queue_url: str) -> Any:
        from moto.sqs.models import sqs_backends

        return sqs_backends[self.stack.account_id][self.stack.region].queues[queue_url.rsplit("/", 1)[-1]]

    def release_delayed(self, queue_logical_id: str | None = None) -> int:
        """End the DelaySeconds of waiting messages now (moto internals: no SQS API shortens a delay)."""
        urls = [self.stack.queue_url(queue_logical_id)] if queue_logical_id else list(self.stack.queue_urls().values())
        released = 0
        for url in urls:
            for message in self._moto_queue(url)._messages:
                if message.delayed:
                    message.delayed_until = 0.0
                    released += 1
        if released:
            time.sleep(_VISIBILITY_CLOCK_STEP)
            for stats in self._observers:
                stats.delays_released += 1
        return released

    def queue_depth(self, queue_logical_id: str) -> QueueDepth:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.stack.queue_url(queue_logical_id),
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return QueueDepth(
            int(attributes["ApproximateNumberOfMessages"]),
            int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            int(attributes["ApproximateNumberOfMessagesDelayed"]),
        )

    def depths(self) -> dict[str, QueueDepth]:
        """Depth of every queue that triggers a function."""
        return {
            source.queue_logical_id: self.queue_depth(source.queue_logical_id)
            for function in self.stack.sqs_functions
            for source in function.event_sources
        }

    # ------------------------------------------------------------------ draining

    def drain(
        self,
        max_rounds: int = 1000,
        *,
        expire_in_flight: bool = True,
        release_delayed: bool = True,
        batches_per_round: Mapping[str, int] | None = None,
    ) -> Stats:
        """Run every SQS-triggered function until all their queues are empty (visible, in flight, delayed).

        Each round polls each function, in template order, up to ``batches_per_round[id]`` times -
        by default its MaximumConcurrency, so functions get Lambda's relative throughput and a fan-out
        stage's output queue is consumed as fast as Lambda would consume it, keeping moto's queues short.
        When a round delivers nothing but messages remain, the poller's in-flight messages are expired
        (retries), then delayed messages released; if neither helps, DrainError. Returns this drain's
        Stats (``self.stats`` keeps the poller's totals).
        """
        stats = Stats()
        self._observers.append(stats)
        try:
            functions = self.stack.sqs_functions
            for _ in range(max_rounds):
                stats.rounds += 1
                delivered = 0
                for function in functions:
                    source = function.sqs_event_source
                    assert source is not None
                    limit = (batches_per_round or {}).get(function.logical_id) or source.maximum_concurrency or 1
                    for _ in range(limit):
                        received = self.poll_once(function.logical_id)
                        delivered += received
                        if not received:
                            break
                if delivered:
                    continue
                depths = self.depths()
                if all(depth.total == 0 for depth in depths.values()):
                    return stats
                if expire_in_flight and self.in_flight_count() and self.expire_in_flight():
                    continue
                if release_delayed and any(d.delayed for d in depths.values()) and self.release_delayed():
                    continue
                raise DrainError(f"drain stalled after {stats.rounds} rounds: {depths}")
            raise DrainError(f"queues not empty after {max_rounds} rounds: {self.depths()}")
        finally:
            self._observers.remove(stats)
