"""The task queue on SQS: fan-out in SendMessageBatch calls of ten, never one call per URL, and the pages of a
push packed into page batch messages (``PageBatchTask``) of up to ``PageBatchSize`` pages, one per job and
delay: a page function takes one message at a time (template.yaml), so a message is a batch of work, on the
priority lane as on the bulk queue: a push's pages ranked above ``PRIORITY_LANE`` travel in batches of their
own."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from msgspec import Struct

from harvester.model.messages import PAGES_PER_MESSAGE, JobRequest, PageBatchTask, PageTask, SitemapTask
from harvester.patience import PATIENCE, Busy
from harvester.pipeline.ranking import PRIORITY_LANE
from harvester.ports import Delays, Message, each_delay

log = logging.getLogger(__name__)
Item = TypeVar("Item")

BATCH = 10
#: A message's body at most: SQS bills every 64 KiB of a request as one request.
MESSAGE_BYTES = 60_000
#: The bodies of one SendMessageBatch at most, together (SQS refuses a request over 256 KiB).
BATCH_BYTES = 240_000
_COUNTED = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


class SqsMessage(Struct, frozen=True):
    """A popped message and where to acknowledge it."""

    body: str
    queue_url: str
    receipt_handle: str


class QueueSendError(RuntimeError):
    """SQS refused messages repeatedly; the caller's step fails and its own message is retried."""


class SqsTaskQueue:
    """Page tasks ranked above ``PRIORITY_LANE`` go to the priority lane's queue when there is one: SQS has
    no order by priority, so the lane is a queue with functions of its own (see template.yaml)."""

    def __init__(
        self,
        client: Any,
        *,
        job_queue_url: str,
        sitemap_queue_url: str,
        page_queue_url: str,
        page_priority_queue_url: str | None = None,
        pages_per_message: int = PAGES_PER_MESSAGE,
    ) -> None:
        self.client = client
        self.pages_per_message = max(1, min(pages_per_message, PAGES_PER_MESSAGE))
        self.urls = {JobRequest: job_queue_url, SitemapTask: sitemap_queue_url, PageTask: page_queue_url}
        self.priority_url = page_priority_queue_url or page_queue_url
        #: Popped in this order: job requests, sitemaps, then the priority lane before the other pages.
        self.order = list(dict.fromkeys([job_queue_url, sitemap_queue_url, self.priority_url, page_queue_url]))
        self._length: int | None = None

    def queue_of(self, message: Message) -> str:
        if isinstance(message, PageTask) and message.rank > PRIORITY_LANE:
            return self.priority_url
        return self.urls[type(message)]

    def push(self, messages: Sequence[Message], *, delay_seconds: Delays = 0) -> None:
        by_queue: dict[str, list[tuple[str, int]]] = defaultdict(list)
        pages: dict[tuple[str, str, int], list[PageTask]] = defaultdict(list)
        for message, delay in zip(messages, each_delay(messages, delay_seconds), strict=True):
            queue_url, seconds = self.queue_of(message), _whole_seconds(delay)
            if isinstance(message, PageTask):
                pages[(queue_url, message.job_id, seconds)].append(message)
            else:
                by_queue[queue_url].append((message.model_dump_json(exclude_none=True), seconds))
        for (queue_url, _, seconds), tasks in pages.items():
            by_queue[queue_url] += [(body, seconds) for body in page_messages(tasks, self.pages_per_message)]
        for queue_url, bodies in by_queue.items():
            for batch in _requests(bodies):
                self._send_batch(queue_url, batch)

    def pop(self) -> SqsMessage | None:
        """(Lambda's pollers hand the functions their messages; this is for anything else that consumes.)"""
        for queue_url in self.order:
            try:
                response = self.client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)
            except (BotoCoreError, ClientError, Busy) as exc:
                log.warning("SQS did not answer; trying again later", extra={"queue": queue_url, "error": str(exc)})
                return None
            for message in response.get("Messages", []):
                return SqsMessage(message["Body"], queue_url, message["ReceiptHandle"])
        return None

    def ack(self, popped: SqsMessage) -> None:
        self.client.delete_message(QueueUrl=popped.queue_url, ReceiptHandle=popped.receipt_handle)

    def close(self) -> None:
        self.client.close()

    def __len__(self) -> int:
        """SQS's approximate counts, over every queue; the last known count (or 1) when they cannot be had."""
        try:
            total = 0
            for queue_url in self.order:
                attributes = self.client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(_COUNTED))
                total += sum(int(attributes["Attributes"].get(name, 0)) for name in _COUNTED)
        except (BotoCoreError, ClientError, Busy) as exc:
            log.warning("SQS's queues could not be counted", extra={"error": str(exc)})
            return self._length or 1
        self._length = total
        return total

    def _send_batch(self, queue_url: str, bodies: list[tuple[str, int]]) -> None:
        entries = [
            {"Id": str(i), "MessageBody": body, "DelaySeconds": seconds} for i, (body, seconds) in enumerate(bodies)
        ]
        tries = 0
        while True:
            response = self.client.send_message_batch(QueueUrl=queue_url, Entries=entries)
            failed = {f["Id"]: f for f in response.get("Failed", [])}
            if not failed:
                return
            if any(f.get("SenderFault") for f in failed.values()):
                raise QueueSendError(f"SQS refused messages to {queue_url}: {list(failed.values())}")
            # (SQS's own fault: the entries it failed are sent again, within the step's patience)
            entries = [e for e in entries if e["Id"] in failed]
            tries += 1
            codes = sorted({f.get("Code", "?") for f in failed.values()})
            PATIENCE.pause(tries, "sqs", "SendMessageBatch", f"{len(entries)} messages failed ({', '.join(codes)})")


def _whole_seconds(delay: float) -> int:
    """SQS's delay for ``delay``: whole seconds, never sooner, at most 900."""
    return max(0, min(900, math.ceil(delay)))


def page_messages(tasks: Sequence[PageTask], limit: int) -> Iterator[str]:
    """The bodies that carry ``tasks`` (of one job), in order: batches of up to ``limit`` pages and
    ``MESSAGE_BYTES``; a page alone travels as the page task it is."""
    # (a page's size told from its URLs: its other fields are well under 200 bytes)
    for batch in _packed(tasks, limit, MESSAGE_BYTES, lambda t: len(t.url) + len(t.sitemap or "") + 200):
        yield (
            batch[0].model_dump_json(exclude_none=True)
            if len(batch) == 1
            else PageBatchTask.of(batch).model_dump_json()
        )


def _requests(bodies: list[tuple[str, int]]) -> Iterator[list[tuple[str, int]]]:
    """The bodies grouped into SendMessageBatch requests: ten at most, ``BATCH_BYTES`` at most together."""
    return _packed(bodies, BATCH, BATCH_BYTES, lambda body: len(body[0].encode()))


def _packed(items: Sequence[Item], most: int, budget: int, size: Callable[[Item], int]) -> Iterator[list[Item]]:
    """``items`` in order, in groups of at most ``most`` whose sizes add up to at most ``budget`` (an item
    bigger than the budget alone in its group)."""
    group: list[Item] = []
    total = 0
    for item in items:
        length = size(item)
        if group and (len(group) == most or total + length > budget):
            yield group
            group, total = [], 0
        group.append(item)
        total += length
    if group:
        yield group
