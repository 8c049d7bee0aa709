"""A task queue in memory, for runs that nothing resumes from the queue (the seed's default memory queue).

It serves what the SQLite queue serves, in the same order (job requests, then sitemaps, then pages by rank,
FIFO within a rank; pages by host for the dispatcher), without a write per message: for a throwaway
discovery (`harvest sitemaps`, the Python API), for `harvest crawl --memory`, and for the tasks a durable
push could not write (``FallbackQueue``). A run killed with tasks in memory loses them; a durable run's
records still say what is left, and resuming the job sends it again.

Message ids are negative, so that a run holding both kinds tells whose a message is. A message handed out
stays handed out until deleted or handed back: in one process the worker holding it always does one of
the two, so there is no visibility timeout to run out.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from harvester.adapters.local.queue import (
    QUEUES,
    Received,
    SqliteTaskQueue,
    Waiting,
    job_of,
    lane,
    note_arrival,
    queue_of,
    rank,
    target_host,
)
from harvester.ports import Delays, Message, QueueUnavailable, each_delay

log = logging.getLogger(__name__)

#: The heap of job requests and sitemap tasks (pages have one heap per host).
_CONTROL = None


@dataclass(slots=True)
class _Entry:
    received: Received
    available_at: float
    in_flight: bool = False


class MemoryTaskQueue:
    def __init__(self, *, max_receives: int = 5, arrivals: dict[str | None, float] | None = None) -> None:
        self.max_receives = max_receives
        self.arrivals: dict[str | None, float] = {} if arrivals is None else arrivals
        self.entries: dict[int, _Entry] = {}
        #: Ids waiting (not in flight), by heap: (queue order, -rank, sequence, id).
        self.heaps: dict[str | None, list[tuple[int, float, int, int]]] = {}
        self.per_job: Counter[str] = Counter()
        self.failed: list[tuple[str, str, str, str]] = []  # (queue, job, body, reason)
        self._ids = itertools.count(1)

    # the TaskQueue port ------------------------------------------------------------------------------

    def push(self, messages: Sequence[Message], *, delay_seconds: Delays = 0) -> None:
        now = time.time()
        for message, delay in zip(messages, each_delay(messages, delay_seconds), strict=True):
            available = now + delay
            sequence = next(self._ids)
            queue = queue_of(message)
            received = Received(
                -sequence,
                queue,
                message.model_dump_json(exclude_defaults=True),
                0,
                job_id=job_of(message),
                host=target_host(message) if queue == "pages" else "",
                rank=rank(message),
            )
            self.entries[received.id] = _Entry(received, available)
            self.per_job[received.job_id] += 1
            self._wait(received, available)

    def pop(self) -> Received | None:
        for where in [_CONTROL, *(h for h in self.heaps if h is not _CONTROL)]:
            taken = self._take(where, None, 1)
            if taken:
                return taken[0]
        return None

    def ack(self, popped: Received) -> None:
        self.delete(popped)

    def close(self) -> None:
        self.entries.clear()
        self.heaps.clear()
        self.per_job.clear()

    def __len__(self) -> int:
        return len(self.entries)

    # what the runner and its dispatcher use (as SqliteTaskQueue's) ------------------------------------

    def take_pages(self, job_ids: Sequence[str], host: str, limit: int) -> list[Received]:
        return self._take(host, set(job_ids), limit)

    def take_control(self, job_ids: Sequence[str], limit: int) -> list[Received]:
        return self._take(_CONTROL, set(job_ids), limit)

    def next_visible(self, job_ids: Sequence[str], host: str | None) -> float | None:
        jobs = set(job_ids)
        times = [
            entry.available_at
            for *_, id_ in self.heaps.get(host, ())
            if (entry := self.entries.get(id_)) and not entry.in_flight and entry.received.job_id in jobs
        ]
        return min(times, default=None)

    def waiting(self, job_ids: Sequence[str], now: float) -> Waiting | None:
        jobs = set(job_ids)
        delayed = sorted(
            (e.available_at, e.received.queue, e.received.body)
            for e in self.entries.values()
            if not e.in_flight and e.available_at > now and e.received.job_id in jobs and e.received.queue != "jobs"
        )
        if not delayed:
            return None
        return Waiting(len(delayed), *delayed[0], delayed[-1][0])

    def hosts(self, job_ids: Sequence[str]) -> list[str]:
        jobs = set(job_ids)
        return sorted(
            {
                e.received.host
                for e in self.entries.values()
                if e.received.queue == "pages" and e.received.job_id in jobs
            }
        )

    def holds(self, job_id: str) -> bool:
        return self.per_job[job_id] > 0

    def delete(self, *messages: Received) -> None:
        for message in messages:
            entry = self.entries.pop(message.id, None)
            if entry is not None:
                self.per_job[entry.received.job_id] -= 1

    def release(self, message: Received, *, delay_seconds: float, reason: str, counted: bool = True) -> None:
        entry = self.entries.get(message.id)
        if entry is None:
            return
        if not counted:
            entry.received = replace(entry.received, receive_count=max(0, entry.received.receive_count - 1))
        elif entry.received.receive_count >= self.max_receives:
            self.dead_letter(message, reason)
            return
        entry.in_flight = False
        entry.available_at = time.time() + delay_seconds
        self._wait(entry.received, entry.available_at)

    def dead_letter(self, message: Received, reason: str) -> None:
        entry = self.entries.get(message.id)
        if entry is not None:
            self.delete(message)
            self.failed.append((entry.received.queue, entry.received.job_id, entry.received.body, reason))

    def dead_letters(self, job_id: str) -> list[tuple[str, str, str]]:
        return [(queue, body, reason) for queue, job, body, reason in self.failed if job == job_id]

    def recover(self, job_id: str) -> int:
        """(Nothing is in flight at a run's start: messages in memory do not outlive their run.)"""
        return 0

    def purge(self, job_id: str) -> int:
        gone = [e.received for e in self.entries.values() if e.received.job_id == job_id]
        for received in gone:
            self.delete(received)
        return len(gone)

    # ------------------------------------------------------------------------------------------------

    def _wait(self, received: Received, available: float) -> None:
        where = lane(received.queue, received.host)
        order = QUEUES.index(received.queue)
        heapq.heappush(self.heaps.setdefault(where, []), (order, -received.rank, -received.id, received.id))
        note_arrival(self.arrivals, where, available)

    def _take(self, lane: str | None, jobs: set[str] | None, limit: int) -> list[Received]:
        """Up to ``limit`` visible messages of the lane (of ``jobs``, or any), best first; the messages not
        visible yet or of other jobs are put back."""
        heap = self.heaps.get(lane)
        if not heap:
            return []
        now = time.time()
        taken: list[Received] = []
        aside = []
        while heap and len(taken) < limit:
            item = heapq.heappop(heap)
            entry = self.entries.get(item[3])
            if entry is None or entry.in_flight:
                continue  # (deleted, or pushed back twice: its other item stands)
            if entry.available_at > now or (jobs is not None and entry.received.job_id not in jobs):
                aside.append(item)
                continue
            entry.in_flight = True
            entry.received = replace(entry.received, receive_count=entry.received.receive_count + 1)
            taken.append(entry.received)
        for item in aside:
            heapq.heappush(heap, item)
        return taken


class FallbackQueue:
    """The durable queue, and memory for the tasks it could not take for a moment: Scrapy's scheduler falls
    back to its memory queue for a request the disk queue failed to push; so does a local run, saying so
    in its log. Everything else is asked of both."""

    def __init__(self, durable: SqliteTaskQueue) -> None:
        self.durable = durable
        self.memory = MemoryTaskQueue(max_receives=durable.max_receives, arrivals=durable.arrivals)
        self.arrivals = durable.arrivals
        self.kept_in_memory = 0

    def push(self, messages: Sequence[Message], *, delay_seconds: Delays = 0) -> None:
        try:
            self.durable.push(messages, delay_seconds=delay_seconds)
        except QueueUnavailable as exc:
            self.kept_in_memory += len(messages)
            log.warning(
                "%d tasks kept in memory for this run: %s (a kill now loses them; resuming the job sends them"
                " again from its records)",
                len(messages),
                exc,
            )
            self.memory.push(messages, delay_seconds=delay_seconds)

    def _of(self, message: Received) -> SqliteTaskQueue | MemoryTaskQueue:
        return self.memory if message.id < 0 else self.durable

    def pop(self) -> Received | None:
        return self.durable.pop() or self.memory.pop()

    def ack(self, popped: Received) -> None:
        self._of(popped).delete(popped)

    def close(self) -> None:
        self.durable.close()
        self.memory.close()

    def __len__(self) -> int:
        return len(self.durable) + len(self.memory)

    def take_pages(self, job_ids: Sequence[str], host: str, limit: int) -> list[Received]:
        taken = self.durable.take_pages(job_ids, host, limit)
        return taken + (self.memory.take_pages(job_ids, host, limit - len(taken)) if len(taken) < limit else [])

    def take_control(self, job_ids: Sequence[str], limit: int) -> list[Received]:
        taken = self.durable.take_control(job_ids, limit)
        return taken + (self.memory.take_control(job_ids, limit - len(taken)) if len(taken) < limit else [])

    def next_visible(self, job_ids: Sequence[str], host: str | None) -> float | None:
        times = [t for q in (self.durable, self.memory) if (t := q.next_visible(job_ids, host)) is not None]
        return min(times, default=None)

    def hosts(self, job_ids: Sequence[str]) -> list[str]:
        return sorted({*self.durable.hosts(job_ids), *self.memory.hosts(job_ids)})

    def waiting(self, job_ids: Sequence[str], now: float) -> Waiting | None:
        both = [w for q in (self.durable, self.memory) if (w := q.waiting(job_ids, now)) is not None]
        if len(both) < 2:
            return both[0] if both else None
        first = min(both, key=lambda w: w.first_at)
        count, last = sum(w.count for w in both), max(w.last_at for w in both)
        return Waiting(count, first.first_at, first.first_queue, first.first_body, last)

    def holds(self, job_id: str) -> bool:
        return self.memory.holds(job_id) or self.durable.holds(job_id)

    def delete(self, *messages: Received) -> None:
        in_memory = [m for m in messages if m.id < 0]
        durable = [m for m in messages if m.id >= 0]
        if in_memory:
            self.memory.delete(*in_memory)
        if durable:
            self.durable.delete(*durable)

    def release(self, message: Received, *, delay_seconds: float, reason: str, counted: bool = True) -> None:
        self._of(message).release(message, delay_seconds=delay_seconds, reason=reason, counted=counted)

    def dead_letter(self, message: Received, reason: str) -> None:
        self._of(message).dead_letter(message, reason)

    def dead_letters(self, job_id: str) -> list[tuple[str, str, str]]:
        return self.durable.dead_letters(job_id) + self.memory.dead_letters(job_id)

    def recover(self, job_id: str) -> int:
        return self.durable.recover(job_id)

    def purge(self, job_id: str) -> int:
        return self.durable.purge(job_id) + self.memory.purge(job_id)
