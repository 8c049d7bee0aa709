"""The task queue on SQS: fan-out in SendMessageBatch calls of ten, never one call per URL."""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.pipeline.ranking import PRIORITY_LANE
from harvester.ports import Delays, Message, each_delay

log = logging.getLogger(__name__)

BATCH = 10
_SEND_ATTEMPTS = 5
_COUNTED = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


@dataclass(frozen=True, slots=True)
class SqsMessage:
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
    ) -> None:
        self.client = client
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
        by_queue: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for message, delay in zip(messages, each_delay(messages, delay_seconds), strict=True):
            by_queue[self.queue_of(message)].append((message.model_dump_json(exclude_none=True), delay))
        for queue_url, bodies in by_queue.items():
            for start in range(0, len(bodies), BATCH):
                self._send_batch(queue_url, bodies[start : start + BATCH])

    def pop(self) -> SqsMessage | None:
        """(Lambda's pollers hand the functions their messages; this is for anything else that consumes.)"""
        for queue_url in self.order:
            try:
                response = self.client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)
            except (BotoCoreError, ClientError) as exc:
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
        except (BotoCoreError, ClientError) as exc:
            log.warning("SQS's queues could not be counted", extra={"error": str(exc)})
            return self._length or 1
        self._length = total
        return total

    def _send_batch(self, queue_url: str, bodies: list[tuple[str, float]]) -> None:
        entries = [
            {"Id": str(i), "MessageBody": body, "DelaySeconds": max(0, min(900, math.ceil(delay)))}  # never sooner
            for i, (body, delay) in enumerate(bodies)
        ]
        for attempt in range(_SEND_ATTEMPTS):
            response = self.client.send_message_batch(QueueUrl=queue_url, Entries=entries)
            failed = {f["Id"]: f for f in response.get("Failed", [])}
            if not failed:
                return
            if any(f.get("SenderFault") for f in failed.values()):
                raise QueueSendError(f"SQS refused messages to {queue_url}: {list(failed.values())}")
            entries = [e for e in entries if e["Id"] in failed]
            time.sleep(0.1 * 2**attempt)
        raise QueueSendError(f"SQS kept failing {len(entries)} messages to {queue_url}")
