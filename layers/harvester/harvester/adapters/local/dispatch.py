"""Which message a free worker of a local run takes next: Scrapy's downloader-aware queue, over SQLite.

One queue served in rank order lets a host that is slow to answer, or slow to be granted turns, hold as
many workers as it has messages at the head of the queue, and starve every other host of a run with
several sites. So page messages are served by host: the host with the fewest of this run's requests in
flight goes first (ties: the highest ranked message, then the oldest), and a host already at its
``per_host`` limit is not served at all until one of its requests ends, where the gate would have sent
the page back to the queue to wait, behind pages of lower rank received meanwhile. Job requests and
sitemap tasks come before any page (the queue's order: discovery first).

SQLite is asked for a few messages of one host at a time (``depth``), and only when there may be news:
a host whose queued messages are all in flight or delayed is asked again when the first of them is due
or when one is sent or handed back (``SqliteTaskQueue.arrivals``).

A worker is handed a batch of one host's and one job's pages (:meth:`Dispatcher.take_batch`), so a page's
claim, outcome, counters and queue deletion are written once per batch rather than once per page (the
hot path's SQLite statements and transactions, divided by the batch). The run's ``budget`` bounds the
pages in flight across all batches: ``harvest crawl --concurrency`` stays the number of requests at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Sequence

from harvester.adapters.local.queue import LocalQueue, Received

#: Messages asked of SQLite per host at a time: enough to save most of its statements, few enough that
#: a message sent later with a higher rank waits behind at most this many.
DEPTH = 8


class Dispatcher:
    def __init__(
        self,
        queue: LocalQueue,
        job_ids: Sequence[str],
        *,
        per_host: int,
        depth: int = DEPTH,
        budget: int | None = None,
    ) -> None:
        self.queue = queue
        self.job_ids = list(job_ids)
        self.per_host = per_host
        self.depth = depth
        #: Pages in flight at most, all hosts together (None: as many as the workers take).
        self.budget = budget
        self.pages_in_flight = 0
        self.control: deque[Received] = deque()
        self.pages: dict[str, deque[Received]] = {}
        #: When to ask SQLite again for a host's pages (None: for job requests and sitemap tasks).
        self.look_at: dict[str | None, float] = {None: 0.0}
        #: Messages handed out and not yet done, by the host they make requests to; and by job.
        self.in_flight: Counter[str] = Counter()
        self.busy: Counter[str] = Counter()
        #: Messages handed out whose requests may not be over yet (their slots still counted), with when each
        #: was handed out (for the progress line: what is in flight, and since when).
        self.requesting: dict[int, tuple[float, Received]] = {}
        self.changed = asyncio.Event()
        #: Set when a job's last message in flight is done: the moment its end (or its stall) can be seen.
        self._idle = asyncio.Event()
        queue.arrivals.clear()
        for host in queue.hosts(self.job_ids):
            self.look_at[host] = 0.0

    def take(self) -> Received | None:
        """The next message to handle, or None when none may be handled now."""
        batch = self.take_batch(1)
        return batch[0] if batch else None

    def take_batch(self, limit: int) -> list[Received]:
        """The next job request or sitemap task alone, or else up to ``limit`` pages of the host chosen as
        :meth:`take` chooses it, all of the job of its first (none past the host's limit or the budget);
        empty when nothing may be handled now."""
        now = time.time()
        self._note_arrivals()
        if not self.control and self.look_at[None] <= now:
            self.control.extend(self._ask(None, now, self.depth))
        if self.control:
            return [self._hand_out(self.control.popleft())]
        if self.budget is not None:
            limit = min(limit, self.budget - self.pages_in_flight)
            if limit <= 0:
                return []
        best: tuple[int, float, int] | None = None
        chosen = ""
        for host, at in self.look_at.items():
            if host is None or self.in_flight[host] >= self.per_host:
                continue
            waiting = self.pages.get(host)
            if not waiting and at <= now:
                waiting = self.pages[host] = deque(self._ask(host, now, self.depth))
            if waiting:
                head = waiting[0]
                key = (self.in_flight[host], -head.rank, head.id)
                if best is None or key < best:
                    best, chosen = key, host
        if best is None:
            return []
        waiting = self.pages[chosen]
        head = waiting.popleft()
        batch = [self._hand_out(head)]
        limit = min(limit, self.per_host - self.in_flight[chosen] + 1)
        while len(batch) < limit:
            if not waiting and self.look_at[chosen] <= now:
                waiting.extend(self._ask(chosen, now, self.depth))
            if not waiting or waiting[0].job_id != head.job_id:
                break
            batch.append(self._hand_out(waiting.popleft()))
        return batch

    def requests_over(self, messages: Sequence[Received]) -> None:
        """The messages' pages have made their last request (their grants are back at the gate), though
        their captures are still being stored and their outcomes settled: their host's slots and the
        budget's are free for other pages, as the gate's are. (Counted until :meth:`done`, a batch's
        slots would stay taken through its writes, and its hosts go short of requests.)"""
        for message in messages:
            if message.id not in self.requesting:
                continue
            del self.requesting[message.id]
            self.in_flight[message.host] -= 1
            if message.queue == "pages":
                self.pages_in_flight -= 1
        self.changed.set()

    def done(self, message: Received) -> None:
        """The worker is through with ``message`` (deleted, handed back or dead-lettered)."""
        self.requests_over([message])
        self.busy[message.job_id] -= 1
        if self.busy[message.job_id] == 0:
            self._idle.set()

    async def wait(self, timeout: float) -> None:
        """Until a message is done (a host may have a free slot again), the first delayed message is due,
        or ``timeout`` passes."""
        self.changed.clear()
        now = time.time()
        due = min((at for at in self.look_at.values() if now < at < float("inf")), default=now + timeout)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(timeout, due - now)):
                await self.changed.wait()

    async def wait_idle(self, timeout: float) -> None:
        """Until a job has no message in flight any more (its last one done since the last call), or
        ``timeout`` passes: when the run looks again whether a job ended or stalled."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        self._idle.clear()

    def forget(self, job_id: str) -> None:
        """A finished job's messages left in the queue are duplicates of finished work: none is handed out.
        (Its messages are asked for no more once it is forgotten: forgetting it again has nothing to do.)"""
        if job_id not in self.job_ids:
            return
        self.job_ids.remove(job_id)
        self.control = deque(m for m in self.control if m.job_id != job_id)
        for host, waiting in self.pages.items():
            self.pages[host] = deque(m for m in waiting if m.job_id != job_id)

    def _hand_out(self, message: Received) -> Received:
        self.in_flight[message.host] += 1  # (a sitemap's request takes one of its host's slots at the gate too)
        self.requesting[message.id] = (time.time(), message)
        if message.queue == "pages":
            self.pages_in_flight += 1
        self.busy[message.job_id] += 1
        return message

    def _ask(self, host: str | None, now: float, limit: int) -> list[Received]:
        if not self.job_ids:
            self.look_at[host] = float("inf")
            return []
        if host is None:
            taken = self.queue.take_control(self.job_ids, limit)
        else:
            taken = self.queue.take_pages(self.job_ids, host, limit)
        if len(taken) < limit:
            # Nothing more visible now: ask again when the next one is due (an arrival may bring it forward).
            due = self.queue.next_visible(self.job_ids, host)
            self.look_at[host] = float("inf") if due is None else max(due, now)
        return taken

    def _note_arrivals(self) -> None:
        arrivals = self.queue.arrivals
        while arrivals:
            lane, at = arrivals.popitem()
            self.look_at[lane] = min(self.look_at.get(lane, float("inf")), at)
