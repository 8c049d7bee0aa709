"""What a local run is doing at a moment, for the progress line: its tasks in flight (and the one out longest),
and its tasks waiting in the queue for a later time (a retry's wait, a host's turn): how many, the first to
come back, and when the last one does, which the time left cannot be shorter than."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from harvester.adapters.local.dispatch import Dispatcher
from harvester.adapters.local.queue import WAITING_COUNTED, LocalQueue


@dataclass(frozen=True)
class Task:
    """A task named on the progress line: its URL, and which request of it comes next (None: a sitemap's)."""

    url: str
    attempt: int | None = None


@dataclass(frozen=True)
class Activity:
    """``in_flight`` tasks handed to the workers, the longest out ``longest`` (``longest_since``, epoch
    seconds); ``waiting`` tasks delayed (``waiting_more``: and more, not counted), the first (``next``) due at
    ``next_at``, the last at ``last_at``."""

    in_flight: int = 0
    longest: Task | None = None
    longest_since: float = 0.0
    waiting: int = 0
    waiting_more: bool = False
    next: Task | None = None
    next_at: float = 0.0
    last_at: float = 0.0


def activity(queue: LocalQueue, dispatcher: Dispatcher, job_ids: Sequence[str], *, now: float) -> Activity:
    """The run's activity at ``now`` (epoch seconds): the dispatcher's requests in flight, the queue's
    delayed tasks of the jobs still running."""
    out = dispatcher.requesting.values()
    since, longest = min(out, key=lambda handed: handed[0], default=(0.0, None))
    waiting = queue.waiting(job_ids, now) if job_ids else None
    return Activity(
        in_flight=len(out),
        longest=None if longest is None else task(longest.queue, longest.body),
        longest_since=since,
        waiting=waiting.count if waiting else 0,
        waiting_more=waiting is not None and waiting.count >= WAITING_COUNTED,
        next=task(waiting.first_queue, waiting.first_body) if waiting else None,
        next_at=waiting.first_at if waiting else 0.0,
        last_at=waiting.last_at if waiting else 0.0,
    )


def task(queue: str, body: str) -> Task | None:
    """The task a message of ``queue`` carries: a sitemap's, a page's (with the request it makes next: its
    retries so far, plus one), or None (a job request, or a body that does not read)."""
    try:
        fields = json.loads(body)
    except ValueError:
        return None
    if not isinstance(fields, dict) or not isinstance(fields.get("url"), str):
        return None
    if queue == "pages":
        return Task(fields["url"], int(fields.get("attempt", 0)) + 1)
    return Task(fields["url"]) if queue == "sitemaps" else None
