"""Semantics-preserving patches that take moto 5.2.5's SQS from quadratic to linear per drain.

Why: the end-to-end tests drive thousands of messages through moto, and moto recomputes *every* queue
attribute, including the three ApproximateNumberOf* counts (each a scan over all the queue's messages),
where it needs one:

* on receive, once per delivered message, in ``SQSBackend.is_message_valid_based_on_retention_period``
  (via ``get_queue_attributes(["MessageRetentionPeriod"])`` -> ``Queue.attributes``): draining 2,000
  messages took ~150 s instead of ~4 s. The patch reads ``queue.message_retention_period`` directly:
  the very value ``Queue.attributes`` would have put under ``MessageRetentionPeriod``, compared with the
  same clock (``moto.sqs.models.unix_time``, looked up at call time so time-freezing still applies);
* on send, once per message, in ``SQSBackend.send_message`` (``queue.attributes.get(
  "ContentBasedDeduplication")``) and, for FIFO queues, in ``Queue.add_message``: sending 2,000
  messages took ~42 s instead of ~0.5 s. The patch leaves ``send_message`` itself alone: while it runs
  (and only in the calling thread, via a ContextVar), ``Queue.attributes`` of the queue being sent to
  is computed by moto's own property code over a view whose ``BASE_ATTRIBUTES`` omits the three counts -
  the only attributes that scan the messages, and ones a send never reads. Every other caller, and
  every other queue, gets moto's unmodified property;
* on every receive and every count of a queue's messages (``Queue.messages`` and the
  ``approximate_number_of_messages_*`` properties): moto reads its clock (``unix_time_millis``, a datetime
  subtraction) twice per message of the queue, ~6 ms for an empty receive from a queue of 200 delayed
  messages. The patch reads the same clock once per call and compares each message's ``visible_at`` and
  ``delayed_until`` with it as ``Message.visible`` and ``Message.delayed`` do.

Each patch is applied only when the moto code it replaces or relies on is byte-for-byte the code it was
checked against (``CHECKED_SOURCES``); otherwise it is skipped with a warning (slow but correct).
Use ``with moto_sqs_speedups(): ...`` or the ``sqs_speedups`` fixture. tests/aws/test_harness.py checks
each patch against unpatched moto. (moto's DynamoDB TransactWriteItems, which copies the whole table per
action, has its own patch in tests/aws/moto_dynamodb_speedups.py.)
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import moto
import pytest
from moto.core import responses as moto_responses
from moto.sqs import models as sqs_models

#: sha256 prefixes of the moto code the patches replace or rely on, as read in moto 5.2.5. The patches
#: are applied only to exactly this code: a moto that changed any of it gets no patch (slow but correct)
#: and a warning, rather than a patch that might no longer mean the same.
CHECKED_SOURCES = {
    "SQSBackend.is_message_valid_based_on_retention_period": "cca23b94a5f3af9d",
    "SQSBackend.send_message": "bf161af09a9e6b86",
    "SQSBackend._validate_message": "39cb57c19e596164",
    "Queue.attributes": "40cb990b121628d5",
    "Queue.add_message": "f27c9231c1f20433",
    "Queue.messages": "03a531dbcbcf9aee",
    "Queue.approximate_number_of_messages_delayed": "c3c1dadb0c42ed5f",
    "Queue.approximate_number_of_messages_not_visible": "5dbecc4dda174358",
    "Message.visible": "5129b573308de62a",
    "Message.delayed": "e2fd48abf582683a",
    "responses.method_names_from_class": "9dbac89d082b655f",
}


def _source_digest(qualified_name: str) -> str:
    owner, _, name = qualified_name.partition(".")
    member = vars(moto_responses if owner == "responses" else getattr(sqs_models, owner))[name]
    function = member.fget if isinstance(member, property) else member
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def changed_moto_code() -> list[str]:
    """The checked pieces of moto whose source differs from the code the patches were checked against."""
    return list(_changed())


@functools.cache
def _changed() -> tuple[str, ...]:  # (moto's code does not change within a process: read once, not each test)
    return tuple(name for name, digest in CHECKED_SOURCES.items() if _source_digest(name) != digest)


def speedups_apply() -> bool:
    """True when the installed moto has exactly the code the patches were checked against."""
    return not changed_moto_code()


_COUNT_ATTRIBUTES = frozenset(
    {"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesNotVisible"}
)

# The queue a send in this thread/context is adding to; None outside send_message.
_SENDING_TO: contextvars.ContextVar[Any] = contextvars.ContextVar("harvester_moto_sending_to", default=None)


def _is_message_valid_based_on_retention_period(
    self: sqs_models.SQSBackend, queue_name: str, message: sqs_models.Message
) -> bool:
    """moto's check, minus the full attribute recomputation (same value, same clock, same comparison)."""
    retention_period = self.get_queue(queue_name).message_retention_period
    retain_until = retention_period + message.sent_timestamp / 1000  # type: ignore[operator]
    return not retain_until <= sqs_models.unix_time()


class _WithoutCounts:
    """A view of a Queue whose BASE_ATTRIBUTES lacks the message counts; everything else delegates."""

    def __init__(self, queue: sqs_models.Queue) -> None:
        object.__setattr__(self, "_queue", queue)

    @property
    def BASE_ATTRIBUTES(self) -> list[str]:
        return [name for name in type(self._queue).BASE_ATTRIBUTES if name not in _COUNT_ATTRIBUTES]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def _patched_attributes(original: property) -> property:
    def attributes(self: sqs_models.Queue) -> dict[str, Any]:
        if _SENDING_TO.get() is self:
            return original.fget(_WithoutCounts(self))  # type: ignore[misc]
        return original.fget(self)  # type: ignore[misc]

    return property(attributes, original.fset, original.fdel, original.__doc__)


def _patched_send_message(original: Any) -> Any:
    def send_message(self: sqs_models.SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            queue = self.get_queue(queue_name)
        except Exception:
            return original(self, queue_name, *args, **kwargs)  # let moto raise its own error
        token = _SENDING_TO.set(queue)
        try:
            return original(self, queue_name, *args, **kwargs)
        finally:
            _SENDING_TO.reset(token)

    return send_message


@functools.cache
def _method_names(clazz: object) -> list[str]:
    """``moto.core.responses.method_names_from_class``, once a class: what a response class defines does not
    change while it serves (its result only read, by ``in``)."""
    return [name for name, _ in inspect.getmembers(clazz, predicate=inspect.isfunction)]


def _now_ms() -> float:
    return sqs_models.unix_time_millis()  # (moto's clock, looked up at call time: time-freezing applies)


def _visible_now(self: sqs_models.Queue) -> list[sqs_models.Message]:
    """``Queue.messages``: the messages visible and not delayed, against one reading of the clock."""
    now = _now_ms()
    return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]


def _delayed_now(self: sqs_models.Queue) -> int:
    now = _now_ms()
    return sum(1 for m in self._messages if now < m.delayed_until)


def _not_visible_now(self: sqs_models.Queue) -> int:
    now = _now_ms()
    return sum(1 for m in self._messages if not now > m.visible_at)


@contextmanager
def moto_sqs_speedups(*, receive: bool = True, send: bool = True) -> Iterator[None]:
    """Apply the SQS patches for the duration of the block (process-wide: moto's classes are patched)."""
    changed = changed_moto_code()
    if changed:
        warnings.warn(f"moto {moto.__version__} changed {', '.join(changed)}: SQS speedups not applied", stacklevel=3)
        yield
        return
    with ExitStack() as stack:
        # (every request of every service asks for its handler class's method names, by inspect.getmembers)
        stack.enter_context(mock.patch.object(moto_responses, "method_names_from_class", _method_names))
        if receive:
            stack.enter_context(
                mock.patch.object(
                    sqs_models.SQSBackend,
                    "is_message_valid_based_on_retention_period",
                    _is_message_valid_based_on_retention_period,
                )
            )
            for name, reading in (
                ("messages", _visible_now),
                ("approximate_number_of_messages_delayed", _delayed_now),
                ("approximate_number_of_messages_not_visible", _not_visible_now),
            ):
                stack.enter_context(mock.patch.object(sqs_models.Queue, name, property(reading)))
        if send:
            stack.enter_context(
                mock.patch.object(
                    sqs_models.SQSBackend,
                    "send_message",
                    _patched_send_message(sqs_models.SQSBackend.send_message),
                )
            )
            stack.enter_context(
                mock.patch.object(
                    sqs_models.Queue, "attributes", _patched_attributes(sqs_models.Queue.__dict__["attributes"])
                )
            )
        yield


@pytest.fixture
def sqs_speedups() -> Iterator[None]:
    """The SQS speedups for one test."""
    with moto_sqs_speedups():
        yield
