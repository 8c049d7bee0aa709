"""What the Lambda handlers share: adapters built from the environment, the engine, and bad-message handling.

Clients are built once per container (and again if the environment names other resources). The fetcher
is built once per event loop: Powertools' async batch processor keeps one loop per container in Lambda,
so keep-alive connections outlive an invocation there.

A message that does not validate can never succeed, so it is not retried: it is logged with the reason
and moved to its queue's dead-letter queue at once (with the reason as a message attribute), and the
rest of the batch goes on.

Each invocation sets the process's patience (``harvester.patience``) from the time Lambda gives it: what
a busy AWS service refuses is waited out until a reserve before the end, the reserve being for a step to
give its work back. A message whose step still met a busy service comes back through its queue (reported
failed, logged as a warning: nothing is wrong with it or with the site); its receive count and the
dead-letter queue, with its alarm, stay the last resort.

Imports are kept to what a handler's INIT needs (the bound: a cold start within 1.3 times a bare boto3
handler's, which bench/cold_start.py measures): the engine, the fetcher and their HTTP stack (aiohttp, httpx) are
imported when the first message builds the engine; Powertools' batch processor only by the handlers that
use it (not the page function's); a message is validated by msgspec as it is decoded (harvester.model.base),
not through Powertools' parser, whose import brings pydantic and every AWS event model with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import NoRegionError
from msgspec import Struct, field

from harvester.adapters.aws import AwsAdapters, AwsResources, MissingSetting
from harvester.model.base import Model as Record
from harvester.model.base import ValidationError
from harvester.model.messages import PageBatchTask, PageTask, Unprocessable
from harvester.patience import PATIENCE, Busy

if TYPE_CHECKING:
    from harvester.engine import Engine
    from harvester.fetch import FetchPolicy
    from harvester.settings import EngineSettings

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=Record)
_REASON_LIMIT = 900


class LambdaRuntime(Struct):
    resources: AwsResources
    adapters: AwsAdapters
    environ: Mapping[str, str] = field(default_factory=dict)
    _policy: FetchPolicy | None = None
    _settings: EngineSettings | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _engine: Engine | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> LambdaRuntime:
        adapters = AwsAdapters.from_env(environ)
        return cls(resources=adapters.resources, adapters=adapters, environ=dict(environ))

    @property
    def policy(self) -> FetchPolicy:
        """The fetch policy from the environment (read with the engine, whose imports it shares)."""
        if self._policy is None:
            from harvester.fetch import FetchPolicy

            self._policy = FetchPolicy.from_env(self.environ)
        return self._policy

    @property
    def settings(self) -> EngineSettings:
        if self._settings is None:
            from harvester.settings import EngineSettings

            self._settings = EngineSettings.from_env(self.environ)
        return self._settings

    def engine(self) -> Engine:
        """The engine for the running event loop (or, outside one, for synchronous steps)."""
        from harvester.engine import Engine
        from harvester.fetch import Fetcher

        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._engine is None or (loop is not None and loop is not self._loop):
            previous = self._engine
            self.adapters.gate.rules = self.settings.gate
            PATIENCE.base, PATIENCE.cap = self.settings.busy_backoff_base, self.settings.busy_backoff_max
            self._engine = Engine(
                store=self.adapters.store,
                queue=self.adapters.queue,
                documents=self.adapters.documents,
                warcs=self.adapters.warcs,
                fetcher=Fetcher(self.policy),
                crawldb=self.adapters.crawldb,
                settings=self.settings,
                host_gate=self.adapters.gate,
                end_apart=self.adapters.end_apart(),
            )
            if previous is not None:  # what the container learnt of robots.txt outlives the loop
                self._engine.robots = previous.robots.rebound(self._engine.fetcher)
            self._loop = loop
        return self._engine

    def run(self, step: Callable[[Engine], Awaitable[None]]) -> None:
        """Runs ``step`` on the thread's event loop, kept across invocations, the one Powertools' batch
        processing runs the other handlers' records on in Lambda: the engine (its fetcher and keep-alive
        connections) is built for a loop, and a loop per invocation would build one each time."""

        async def with_engine() -> None:
            await step(self.engine())

        thread_loop().run_until_complete(with_engine())

    def close(self) -> None:
        """Closes the engine's connections on the loop they were opened on (a runtime replaced by another,
        as when a container's settings change; not while that loop runs)."""
        engine, loop = self._engine, self._loop
        self._engine = None
        if engine is not None and loop is not None and not loop.is_closed() and not loop.is_running():
            loop.run_until_complete(engine.fetcher.aclose())

    def parse(self, record: SQSRecord, model: type[Model], dead_letter_url: str | None) -> Model | None:
        """The record's body as ``model``, or None after dead-lettering a body that can never be valid."""
        try:
            return model.model_validate_json(record.body)
        except (ValidationError, ValueError, TypeError) as exc:
            reason = f"invalid {model.__name__}: {_short(str(exc))}"
            log.error(
                "invalid message moved to the dead-letter queue",
                extra={"message_id": record.message_id, "reason": reason, "body": record.body[:2000]},
            )
            self.dead_letter(record, dead_letter_url, reason)
            return None

    def page_tasks(self, record: SQSRecord, dead_letter_url: str | None) -> list[PageTask]:
        """A page message's tasks: its page task, or its page batch's valid pages, each invalid page of the
        batch dead-lettered alone with the reason (the batch's other pages go on)."""
        try:
            kind = json.loads(record.body).get("kind")
        except (ValueError, AttributeError):  # (not JSON, or not an object: the page task's parse says why)
            kind = None
        if kind != "pages":
            task = self.parse(record, PageTask, dead_letter_url)
            return [task] if task is not None else []
        batch = self.parse(record, PageBatchTask, dead_letter_url)
        if batch is None:
            return []
        tasks, invalid = batch.tasks()
        for body, why in invalid:
            reason = f"invalid PageTask: {_short(why)}"
            log.error(
                "invalid page of a page batch moved to the dead-letter queue",
                extra={"message_id": record.message_id, "reason": reason, "body": body[:2000]},
            )
            self.dead_letter(record, dead_letter_url, reason, body=body)
        return tasks

    def dead_letter(
        self, record: SQSRecord, dead_letter_url: str | None, reason: str, *, body: str | None = None
    ) -> None:
        """Sends ``body`` (the record's own by default) to the dead-letter queue with the reason."""
        if not dead_letter_url:
            log.error("no dead-letter queue configured; the invalid message is dropped after logging")
            return
        self.adapters.sqs.send_message(
            QueueUrl=dead_letter_url,
            MessageBody=record.body if body is None else body,
            MessageAttributes={
                "HarvestError": {"DataType": "String", "StringValue": reason[:_REASON_LIMIT]},
                "SourceMessageId": {"DataType": "String", "StringValue": record.message_id},
            },
        )


def _short(reason: str) -> str:
    text = reason.replace("\n", "; ")
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


#: One runtime per thread: a Lambda container runs one invocation at a time on one thread, so this is one
#: per container there; where several invocations run side by side in one process (the tests' concurrent
#: pollers, as Lambda runs several containers), each keeps its own event loop, fetcher and caches.
_local = threading.local()
#: mallopt's parameter for the threshold above which malloc maps a block of its own (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3


def end_of_init() -> None:
    """The last statement of a handler module, whose first switched the garbage collector off.

    INIT makes objects that live as long as the container (Powertools' event classes, the modules
    themselves): with the collector on, its full collections would walk them again and again while they are
    being made, on every handler's cold start. Frozen, they are left out of every collection to come, and
    the collector resumes for what the invocations make. (What INIT left as garbage is frozen with them: a
    few objects, once.)

    The container's runtime, its SDK clients, is built here too, as AWS advises (clients made once, at
    INIT), and with the collector still off: botocore's service models are large dicts, which the collector
    would walk as they are built. A module imported without a stack's environment (a tool, a test) builds
    none: its first invocation does."""
    with contextlib.suppress(MissingSetting, NoRegionError):
        current()
    gc.freeze()
    gc.enable()


def large_blocks_mapped(threshold: int = 128 * 1024) -> bool:
    """Fixes glibc's mmap threshold at ``threshold`` (its default, which it otherwise raises to the largest
    block freed, up to 32 MiB), for a container whose steps make blocks of megabytes (the job-end function's
    8 MiB upload parts, DuckDB's buffers): such blocks are then mapped and given back when freed, rather than
    kept in the heap for the container's life, so that a warm container's step peaks where a cold one's does
    (docs/performance.md, "The job's end"). False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False


def current(environ: Mapping[str, str] = os.environ) -> LambdaRuntime:
    """The container's runtime, rebuilt if the Harvester settings in the environment change."""
    key = tuple(sorted((k, v) for k, v in environ.items() if k.startswith(("HARVEST_", "AWS_REGION"))))
    held: tuple[tuple[tuple[str, str], ...], LambdaRuntime] | None = getattr(_local, "runtime", None)
    if held is None or held[0] != key:
        close_current()
        held = _local.runtime = (key, LambdaRuntime.from_env(environ))
    return held[1]


def close_current() -> None:
    """Closes the thread's runtime, if it has one (a container shut down; a test's stack taken down)."""
    held: tuple[object, LambdaRuntime] | None = getattr(_local, "runtime", None)
    if held is not None:
        held[1].close()
        del _local.runtime


def thread_loop() -> asyncio.AbstractEventLoop:
    """The thread's event loop, made (and set) when it has none or a closed one: what Powertools' batch
    processing takes in Lambda (``asyncio.get_event_loop()``), so that whichever handler a container runs,
    its batches run on one loop for the container's life."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # (none set in this thread, or unset by an asyncio.run that ended here)
        loop = None
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


#: What is logged when a step's message comes back because our own infrastructure stayed busy.
STAYED_BUSY = "our own infrastructure stayed busy; the message comes back"


@contextlib.contextmanager
def patient(context: LambdaContext) -> Iterator[None]:
    """The process's patience for one invocation: waiting for a busy service ends a reserve before the time
    Lambda gives the invocation (``harvester.patience``)."""
    with PATIENCE.until(context.get_remaining_time_in_millis() / 1000):
        yield


Step = Callable[["Engine", Model, SQSRecord], Awaitable[None]]
Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


#: The level of the line per fetch, retry, deferral and sitemap (``harvester.pipeline.fetch_log``) on AWS:
#: WARNING unless the function's environment says otherwise, since at INFO the page function writes a JSON
#: line per page to CloudWatch Logs (about half a KB: some $0.25 a million pages in ingestion).
ENV_FETCH_LOG_LEVEL = "HARVEST_FETCH_LOG_LEVEL"


def structured_logger() -> Logger:
    """Powertools' JSON logger, also for the engine's own (stdlib) loggers; the per-fetch lines at
    ``HARVEST_FETCH_LOG_LEVEL`` (default WARNING)."""
    logger = Logger()
    copy_config_to_registered_loggers(source_logger=logger, include={"harvester"})
    level = logging.getLevelName(os.environ.get(ENV_FETCH_LOG_LEVEL, "WARNING").upper())
    logging.getLogger("harvester.pipeline.fetch_log").setLevel(level if isinstance(level, int) else logging.WARNING)
    return logger


def sqs_handler(model: type[Model], step: Step[Model], *, dead_letter: str) -> Handler:
    """The Lambda handler of an SQS queue: Powertools batch processing with partial batch failures, each
    record validated as ``model`` (an invalid one goes to the ``<dead_letter>_dlq_url`` queue at once)
    and handed to ``step``. The records of a batch run concurrently, so a page batch fetches in parallel;
    a record whose step raises is reported alone and comes back after the visibility timeout."""
    from aws_lambda_powertools.utilities.batch import (
        AsyncBatchProcessor,
        EventType,
        async_process_partial_response,
    )

    logger = structured_logger()
    # (a batch whose every record failed is reported as failures, not raised: a record given back because our
    # own infrastructure stayed busy is no error of the invocation's)
    processor = AsyncBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    async def record_handler(record: SQSRecord) -> None:
        runtime = current()
        dead_letter_url = getattr(runtime.resources, f"{dead_letter}_dlq_url")
        message = runtime.parse(record, model, dead_letter_url)
        if message is None:
            return
        try:
            await step(runtime.engine(), message, record)
        except Unprocessable as exc:  # valid, but it can never succeed: refused with the reason, not retried
            log.error("message refused", extra={"message_id": record.message_id, "reason": str(exc)})
            runtime.dead_letter(record, dead_letter_url, str(exc))
        except Busy as exc:  # (reported failed: the message comes back)
            log.warning(STAYED_BUSY, extra={"message_id": record.message_id, "reason": str(exc)})
            raise

    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        with patient(context):
            return async_process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=context
            )

    return handler


BatchStep = Callable[["Engine", list[Model]], Awaitable[None]]
#: What a record holds, validated: ``(runtime, record, dead-letter queue URL) -> messages``; what can never
#: be valid is dead-lettered by the reader, with the reason (``LambdaRuntime.page_tasks`` is one).
Reader = Callable[[LambdaRuntime, SQSRecord, "str | None"], list[Model]]


def sqs_batch_handler(read: Reader[Model], step: BatchStep[Model], *, dead_letter: str) -> Handler:
    """The Lambda handler of an SQS queue whose records are one unit of work: each record is read into its
    messages by ``read`` (what can never be valid goes to the ``<dead_letter>_dlq_url`` queue at once, alone),
    and ``step`` gets the valid ones together, so that their writes are batched (one claim, one settlement,
    one turn at the host's gate per batch). A ``step`` that raises reports every record failed: they come
    back after the visibility timeout, and their claims keep a redelivery from doing twice what was done; one
    that raises Unprocessable (the job can never be served) sends them to the dead-letter queue with the
    reason."""
    logger = structured_logger()

    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        with patient(context):
            return handle(event)

    def handle(event: dict[str, Any]) -> dict[str, Any]:
        runtime = current()
        dead_letter_url = getattr(runtime.resources, f"{dead_letter}_dlq_url")
        messages: list[Model] = []
        records: list[SQSRecord] = []
        for raw in event.get("Records", []):
            record = SQSRecord(raw)
            read_from = read(runtime, record, dead_letter_url)
            if read_from:
                messages += read_from
                records.append(record)
        if not messages:
            return {"batchItemFailures": []}
        try:
            runtime.run(lambda engine: step(engine, messages))
        except Unprocessable as exc:  # (a job that can never be served: its records refused with the reason)
            log.error("messages refused", extra={"records": len(records), "reason": str(exc)})
            for record in records:
                runtime.dead_letter(record, dead_letter_url, str(exc))
            return {"batchItemFailures": []}
        except Busy as exc:
            log.warning(STAYED_BUSY, extra={"records": len(records), "reason": str(exc)})
        except Exception:
            log.exception("batch failed; its messages come back", extra={"records": len(records)})
        else:
            return {"batchItemFailures": []}
        return {"batchItemFailures": [{"itemIdentifier": record.message_id} for record in records]}

    return handler
