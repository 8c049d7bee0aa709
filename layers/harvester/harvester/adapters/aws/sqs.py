"""The task queue on SQS: fan-out in SendMessageBatch calls of ten, never one call per URL."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.pipeline.ranking import PRIORITY_LANE
from harvester.ports import Message

BATCH = 10
_SEND_ATTEMPTS = 5


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

    def queue_of(self, message: Message) -> str:
        if isinstance(message, PageTask) and message.rank > PRIORITY_LANE:
            return self.priority_url
        return self.urls[type(message)]

    def send(self, messages: Sequence[Message], *, delay_seconds: float = 0) -> None:
        by_queue: dict[str, list[str]] = defaultdict(list)
        for message in messages:
            by_queue[self.queue_of(message)].append(message.model_dump_json(exclude_none=True))
        for queue_url, bodies in by_queue.items():
            for start in range(0, len(bodies), BATCH):
                self._send_batch(queue_url, bodies[start : start + BATCH], delay_seconds)

    def _send_batch(self, queue_url: str, bodies: list[str], delay_seconds: float) -> None:
        delay = max(0, min(900, math.ceil(delay_seconds)))  # never sooner than asked
        entries = [{"Id": str(i), "MessageBody": body, "DelaySeconds": delay} for i, body in enumerate(bodies)]
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
