"""Waiting out our own infrastructure: how long a step may wait for a service that asks it to, and what it
raises when that service is still not answering.

Harvester keeps its state and its work in services of its own (DynamoDB, S3 and SQS on AWS; SQLite
locally). When one of them throttles a request, refuses it because another transaction holds the item,
answers 503 SlowDown or times out, nothing is wrong with the site being crawled: a sitemap's or a page's
``attempts`` count what the *site* did, so such an answer must never spend them. The adapters wait, with
exponential back-off and full jitter (AWS's advice for throttling), for as long as the step has
(:class:`Patience`); when that is not enough they raise :class:`Busy`, and the step gives its work back
for later (``pipeline.give_back``) with its attempts as they were.

The patience is one per process: a Lambda container runs one invocation at a time, whose deadline the
handler sets (:meth:`Patience.until`); a step without a deadline (the CLI, a local crawl) waits a bounded
number of tries instead. Part of an invocation's time is held back from waiting (``reserve``) so that a
step that meets a service still busy has the time to give its work back (:meth:`Patience.giving_back`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

#: The first back-off's bound, and the most one back-off waits (seconds).
BACKOFF_BASE = 0.05
BACKOFF_MAX = 5.0
#: Tries of one request when no deadline is set (a tool, a local crawl): about a minute of back-offs at most.
TRIES_WITHOUT_DEADLINE = 16
#: How long a step without a deadline waits to give its work back.
GIVING_BACK_WITHOUT_DEADLINE = 120.0
#: The part of an invocation's remaining time held back from waiting, for giving the work back: this
#: fraction of it, at least RESERVE_MIN and at most RESERVE_MAX seconds.
RESERVE_SHARE = 0.15
RESERVE_MIN = 3.0
RESERVE_MAX = 30.0


class Busy(RuntimeError):
    """A service Harvester keeps its own state or work in could not take a request now, and waiting for it
    did not help in the time there was: throttled, a conflicting transaction, 503 SlowDown, a timeout or a
    5xx talking to AWS, SQLite busy or locked. Never the site's doing: the step gives its work back without
    spending the site's attempts."""

    def __init__(self, service: str, operation: str, reason: str) -> None:
        super().__init__(f"{service} {operation}: {reason}")
        self.service = service
        self.operation = operation
        self.reason = reason


class Patience:
    """How long a request to a busy service is tried again, and how long to wait before each try."""

    def __init__(self, *, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX) -> None:
        self.base = base
        self.cap = cap
        #: ``time.monotonic()`` after which no back-off starts (None: TRIES_WITHOUT_DEADLINE tries).
        self.deadline: float | None = None
        #: The invocation's own end, less a margin: where a step giving its work back stops waiting.
        self.end: float | None = None
        self.backoffs = 0  # back-offs started
        self.gave_up = 0  # requests given up on (raised as Busy)

    def backoff(self, tries: int) -> float | None:
        """The wait before try ``tries + 1`` of a request a busy service refused ``tries`` times; None when
        there is no time for it (the request is given up on)."""
        if self.deadline is None and tries >= TRIES_WITHOUT_DEADLINE:
            self.gave_up += 1
            return None
        wait = random.uniform(0.0, min(self.cap, self.base * 2 ** max(0, tries - 1)))
        if self.deadline is not None and time.monotonic() + wait > self.deadline:
            self.gave_up += 1
            return None
        self.backoffs += 1
        return wait

    def out_of_time(self) -> bool:
        """Whether the step's time for waiting is over (never without a deadline)."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def pause(self, tries: int, service: str, operation: str, reason: str) -> None:
        """Sleeps the back-off before another try, or raises Busy when there is no time for one."""
        wait = self.backoff(tries)
        if wait is None:
            raise Busy(service, operation, reason)
        time.sleep(wait)

    def retrying(self, work: Callable[[], T]) -> T:
        """``work()``, run again after a back-off while a service stays busy, until there is no time for
        another try (then Busy). For work that may run again whole: each of its writes lands once however
        often it runs."""
        tries = 0
        while True:
            try:
                return work()
            except Busy as busy:
                tries += 1
                self.pause(tries, busy.service, busy.operation, busy.reason)

    @contextmanager
    def until(self, remaining: float) -> Iterator[None]:
        """Within an invocation that has ``remaining`` seconds: back-offs stop a reserve before its end."""
        now = time.monotonic()
        reserve = min(RESERVE_MAX, max(RESERVE_MIN, RESERVE_SHARE * remaining))
        previous = self.deadline, self.end
        self.end = now + max(0.0, remaining - 1.0)
        self.deadline = now + max(0.0, remaining - reserve)
        try:
            yield
        finally:
            self.deadline, self.end = previous

    @contextmanager
    def giving_back(self) -> Iterator[None]:
        """While a step gives its work back after Busy: the reserve is this step's to wait in (without a
        deadline, ``GIVING_BACK_WITHOUT_DEADLINE`` seconds)."""
        previous, now = self.deadline, time.monotonic()
        self.deadline = max(self.end, now) if self.end is not None else now + GIVING_BACK_WITHOUT_DEADLINE
        try:
            yield
        finally:
            self.deadline = previous


#: The process's patience (a Lambda container runs one invocation at a time; a local crawl sets none).
PATIENCE = Patience()
