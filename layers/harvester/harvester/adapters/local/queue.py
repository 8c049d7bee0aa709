"""A durable queue in the state file, with the semantics of SQS that the engine relies on.

Messages are received with a visibility timeout and deleted only when handled, so a killed crawl's
in-flight messages come back on the next run (:meth:`SqliteTaskQueue.recover`). A message that keeps
failing goes to ``dead_letters`` after ``max_receives`` deliveries, like a redrive policy.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from harvester.adapters.local.database import Transaction, storage_failure
from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.patience import Busy
from harvester.ports import Delays, Message, QueueUnavailable, each_delay
from harvester.urls import host_of

log = logging.getLogger(__name__)

#: Receive order: a job's discovery first, so that its total is known early and its progress means something.
QUEUES = ("jobs", "sitemaps", "pages")


def queue_of(message: Message) -> str:
    if isinstance(message, SitemapTask):
        return "sitemaps"
    if isinstance(message, PageTask):
        return "pages"
    return "jobs"


def rank(message: Message) -> float:
    return message.rank if isinstance(message, PageTask) else 0.0


def job_of(message: Message) -> str:
    return message.job_id or ""


def target_host(message: Message) -> str:
    """The host the message's task makes its request to (a job request's: its site's)."""
    return host_of(message.site if isinstance(message, JobRequest) else message.url)


def lane(queue: str, host: str) -> str | None:
    """Where a local run's dispatcher looks for a message: its host's pages, or (None) the job requests and
    sitemaps, which come before any page whichever host they go to."""
    return host if queue == "pages" else None


def note_arrival(arrivals: dict[str | None, float], lane: str | None, available: float) -> None:
    """Keeps the earliest time a message sent or handed back to ``lane`` becomes visible."""
    if available < arrivals.get(lane, float("inf")):
        arrivals[lane] = available


#: Delayed tasks counted at most by ``waiting`` (it runs at each progress tick: a bounded index range).
WAITING_COUNTED = 1000


@dataclass(frozen=True, slots=True)
class Waiting:
    """A run's sitemap and page tasks delayed in the queue (a retry's wait, a host's turn), not in flight: how
    many (at most ``WAITING_COUNTED`` counted), the first to come back (its time and its message's body) and
    when the last one does (epoch seconds)."""

    count: int
    first_at: float
    first_queue: str
    first_body: str
    last_at: float


@dataclass(frozen=True, slots=True)
class Received:
    id: int
    queue: str
    body: str
    receive_count: int
    job_id: str = ""
    host: str = ""
    rank: float = 0.0


class LocalQueue(Protocol):
    """What a local run asks of its queue beyond the TaskQueue port: messages by job and host for the
    dispatcher, and SQS's hand-back and dead-letter semantics for the workers."""

    arrivals: dict[str | None, float]

    def push(self, messages: Sequence[Message], *, delay_seconds: Delays = 0) -> None: ...
    def take_pages(self, job_ids: Sequence[str], host: str, limit: int) -> list[Received]: ...
    def take_control(self, job_ids: Sequence[str], limit: int) -> list[Received]: ...
    def next_visible(self, job_ids: Sequence[str], host: str | None) -> float | None: ...
    def hosts(self, job_ids: Sequence[str]) -> list[str]: ...
    def waiting(self, job_ids: Sequence[str], now: float) -> Waiting | None: ...
    def holds(self, job_id: str) -> bool: ...
    def delete(self, *messages: Received) -> None: ...
    def release(self, message: Received, *, delay_seconds: float, reason: str, counted: bool = True) -> None: ...
    def dead_letter(self, message: Received, reason: str) -> None: ...
    def dead_letters(self, job_id: str) -> list[tuple[str, str, str]]: ...
    def recover(self, job_id: str) -> int: ...
    def purge(self, job_id: str) -> int: ...


_COLUMNS = "id, queue, body, receive_count, job_id, host, priority"


def _received(row: tuple) -> Received:
    return Received(
        id=row[0], queue=row[1], body=row[2], receive_count=row[3] + 1, job_id=row[4], host=row[5], rank=row[6]
    )


class SqliteTaskQueue:
    def __init__(self, conn: sqlite3.Connection, *, visibility_timeout: float = 600.0, max_receives: int = 5) -> None:
        self.conn = conn
        self.visibility_timeout = visibility_timeout
        self.max_receives = max_receives
        #: When messages sent or handed back since the dispatcher last looked become visible, by the host
        #: of their pages (None: job requests and sitemaps), so that it asks SQLite only where there is news.
        self.arrivals: dict[str | None, float] = {}
        self._length = 0

    def push(self, messages: Sequence[Message], *, delay_seconds: Delays = 0) -> None:
        if not messages:
            return
        now = time.time()
        rows = [
            (queue_of(m), job_of(m), m.model_dump_json(exclude_defaults=True), now + delay, rank(m), target_host(m))
            for m, delay in zip(messages, each_delay(messages, delay_seconds), strict=True)
        ]
        try:
            with Transaction(self.conn, waits=False) as db:
                db.executemany(
                    "INSERT INTO messages (queue, job_id, body, available_at, priority, host)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
        except (sqlite3.OperationalError, Busy) as exc:
            if storage_failure(exc) is not None:  # (full, damaged: as for every write to the state, the run stops)
                raise
            raise QueueUnavailable(f"the state file's queue: {exc.reason if isinstance(exc, Busy) else exc}") from exc
        for queue, _, _, available, _, host in rows:
            note_arrival(self.arrivals, lane(queue, host), available)

    def pop(self) -> Received | None:
        """The next visible message of any job (the runner's dispatcher takes by job and host instead)."""
        taken = self._take(
            f"SELECT {_COLUMNS} FROM messages WHERE available_at <= ?"
            " ORDER BY queue = 'pages', queue = 'sitemaps', priority DESC, id LIMIT ?",
            (),
            1,
        )
        return taken[0] if taken else None

    def ack(self, popped: Received) -> None:
        self.delete(popped)

    def close(self) -> None:
        """(The connection is the state directory's, closed with it.)"""

    def __len__(self) -> int:
        try:
            self._length = self.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        except sqlite3.Error as exc:
            log.warning("the state file's queue could not be counted", extra={"error": str(exc)})
            return self._length or 1
        return self._length

    def take_pages(self, job_ids: Sequence[str], host: str, limit: int) -> list[Received]:
        """Up to ``limit`` visible page messages of the jobs to ``host``, highest ranked first (FIFO within
        a rank), made invisible for the visibility timeout."""
        marks = ",".join("?" * len(job_ids))
        return self._take(
            f"SELECT {_COLUMNS} FROM messages INDEXED BY messages_by_host WHERE host = ? AND queue = 'pages'"
            f" AND job_id IN ({marks}) AND available_at <= ? ORDER BY priority DESC, id LIMIT ?",
            (host, *job_ids),
            limit,
        )

    def take_control(self, job_ids: Sequence[str], limit: int) -> list[Received]:
        """Up to ``limit`` visible job requests and sitemap tasks of the jobs, job requests first."""
        marks = ",".join("?" * len(job_ids))
        return self._take(
            f"SELECT {_COLUMNS} FROM messages WHERE queue IN ('jobs', 'sitemaps') AND job_id IN ({marks})"
            " AND available_at <= ? ORDER BY queue = 'sitemaps', priority DESC, id LIMIT ?",
            tuple(job_ids),
            limit,
        )

    def _take(self, sql: str, params: tuple, limit: int) -> list[Received]:
        """Nothing when SQLite does not answer (busy, I/O): a temporary problem is not the taker's to raise."""
        now = time.time()
        try:
            with Transaction(self.conn, waits=False) as db:
                taken = [_received(row) for row in db.execute(sql, (*params, now, limit))]
                if taken:
                    db.execute(
                        "UPDATE messages SET available_at = ?, in_flight = 1, receive_count = receive_count + 1"
                        f" WHERE id IN ({','.join('?' * len(taken))})",
                        (now + self.visibility_timeout, *(m.id for m in taken)),
                    )
        except (sqlite3.OperationalError, Busy) as exc:
            log.warning("the state file's queue did not answer; asking again later", extra={"error": str(exc)})
            return []
        return taken

    def next_visible(self, job_ids: Sequence[str], host: str | None) -> float | None:
        """When the next message of the jobs waiting (not in flight) to ``host`` (None: a job request or a
        sitemap) becomes visible; None when there is none."""
        marks = ",".join("?" * len(job_ids))
        if host is None:
            where, params = "queue IN ('jobs', 'sitemaps')", tuple(job_ids)
        else:
            where, params = "host = ? AND queue = 'pages'", (host, *job_ids)
        sql = f"SELECT MIN(available_at) FROM messages WHERE {where} AND job_id IN ({marks}) AND in_flight = 0"
        return self.conn.execute(sql, params).fetchone()[0]

    def waiting(self, job_ids: Sequence[str], now: float) -> Waiting | None:
        """The jobs' sitemap and page tasks delayed past ``now`` (None: none, or SQLite did not answer): three
        reads of the ``messages_ready`` index's range past ``now``, the count bounded."""
        marks = ",".join("?" * len(job_ids))
        where = (
            f"FROM messages INDEXED BY messages_ready WHERE job_id IN ({marks})"
            " AND queue IN ('sitemaps', 'pages') AND available_at > ? AND in_flight = 0"
        )
        params = (*job_ids, now)
        try:
            first = self.conn.execute(f"SELECT available_at, queue, body {where} ORDER BY available_at LIMIT 1", params)
            row = first.fetchone()
            if row is None:
                return None
            last = self.conn.execute(f"SELECT MAX(available_at) {where}", params).fetchone()[0]
            count = self.conn.execute(f"SELECT COUNT(*) FROM (SELECT 1 {where} LIMIT {WAITING_COUNTED})", params)
            return Waiting(count.fetchone()[0], row[0], row[1], row[2], last)
        except sqlite3.Error:  # (busy: the progress line goes without it this once)
            return None

    def hosts(self, job_ids: Sequence[str]) -> list[str]:
        """The hosts the jobs' queued pages go to (where a dispatcher starting on a resumed run looks)."""
        marks = ",".join("?" * len(job_ids))
        rows = self.conn.execute(
            f"SELECT DISTINCT host FROM messages WHERE queue = 'pages' AND job_id IN ({marks})", tuple(job_ids)
        )
        return [row[0] for row in rows]

    def delete(self, *messages: Received) -> None:
        """Deletes handled messages, a page batch's in one transaction."""
        with Transaction(self.conn) as db:
            db.executemany("DELETE FROM messages WHERE id = ?", [(m.id,) for m in messages])

    def release(self, message: Received, *, delay_seconds: float, reason: str, counted: bool = True) -> None:
        """Hands a failed message back after a delay, or dead-letters it after ``max_receives`` deliveries.
        A delivery not ``counted`` (its step was kept from working by our own infrastructure, not by the
        message) is taken back from the receive count, and never dead-letters the message."""
        with Transaction(self.conn) as db:
            if counted and message.receive_count >= self.max_receives:
                db.execute(
                    "INSERT INTO dead_letters (id, queue, job_id, body, reason, failed_at)"
                    " SELECT id, queue, job_id, body, ?, ? FROM messages WHERE id = ?",
                    (reason, time.time(), message.id),
                )
                db.execute("DELETE FROM messages WHERE id = ?", (message.id,))
            else:
                available = time.time() + delay_seconds
                db.execute(
                    "UPDATE messages SET available_at = ?, in_flight = 0, receive_count = receive_count - ?"
                    " WHERE id = ?",
                    (available, 0 if counted else 1, message.id),
                )
                note_arrival(self.arrivals, lane(message.queue, message.host), available)

    def dead_letter(self, message: Received, reason: str) -> None:
        """Moves a message that can never succeed (it is not valid) aside at once, with the reason."""
        with Transaction(self.conn) as db:
            db.execute(
                "INSERT INTO dead_letters (id, queue, job_id, body, reason, failed_at)"
                " SELECT id, queue, job_id, body, ?, ? FROM messages WHERE id = ?",
                (reason, time.time(), message.id),
            )
            db.execute("DELETE FROM messages WHERE id = ?", (message.id,))

    def recover(self, job_id: str) -> int:
        """Makes the messages a killed run had in flight visible again (nobody else can be handling them)."""
        with Transaction(self.conn) as db:
            return db.execute(
                "UPDATE messages SET available_at = ?, in_flight = 0 WHERE job_id = ? AND in_flight = 1",
                (time.time(), job_id),
            ).rowcount

    def purge(self, job_id: str) -> int:
        """Drops a finished job's leftover messages (duplicates whose records are all final)."""
        with Transaction(self.conn) as db:
            return db.execute("DELETE FROM messages WHERE job_id = ?", (job_id,)).rowcount

    def holds(self, job_id: str) -> bool:
        """Whether the job has a message queued (visible, in flight or delayed)."""
        return self.conn.execute("SELECT 1 FROM messages WHERE job_id = ? LIMIT 1", (job_id,)).fetchone() is not None

    def dead_letters(self, job_id: str) -> list[tuple[str, str, str]]:
        return self.conn.execute(
            "SELECT queue, body, reason FROM dead_letters WHERE job_id = ? ORDER BY id", (job_id,)
        ).fetchall()
