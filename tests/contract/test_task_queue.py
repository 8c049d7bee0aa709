"""The task queue contract: every message arrives (at least once) as sent, and fan-out is batched."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harvester.model.messages import JobRequest, PageTask, SitemapOrigin, SitemapTask
from harvester.pipeline.ranking import PRIORITY_LANE


def test_messages_reach_their_queues_intact(queues):
    job = JobRequest(site="https://example.com/", job_id="job-9", include=("*/blog/*",))
    sitemap = SitemapTask(
        job_id="job-9",
        url="https://example.com/sitemap.xml",
        origin=SitemapOrigin.DECLARED,
        depth=2,
        ancestors=("https://example.com/", "https://example.com/robots.txt"),
    )
    pages = [
        PageTask(job_id="job-9", url=f"https://example.com/p/{n}", priority=0.8, changefreq="daily") for n in range(3)
    ]

    queues.queue.push([job, sitemap, *pages])

    assert queues.take("jobs") == [job]
    assert queues.take("sitemaps") == [sitemap]
    assert sorted(queues.take("pages"), key=lambda p: p.url) == pages


def test_fan_out_sends_batches_of_ten_and_pages_in_page_batches(queues):
    """On SQS a request sends ten messages, and a message carries a page batch of up to 100 pages of a job
    (what a page function takes at once): 240 pages are three messages, 25 sitemap tasks three requests."""
    pages = [PageTask(job_id="job-9", url=f"https://example.com/p/{n}") for n in range(240)]
    others = [PageTask(job_id="job-8", url=f"https://example.com/o/{n}") for n in range(2)]
    sitemaps = [
        SitemapTask(job_id="job-9", url=f"https://example.com/s/{n}.xml", origin=SitemapOrigin.INDEX, depth=2)
        for n in range(25)
    ]
    queues.queue.push([*sitemaps, *pages, *others])
    assert sorted(p.url for p in queues.take("pages")) == sorted(p.url for p in pages + others)
    assert len(queues.take("sitemaps")) == 25
    if queues.name == "aws":
        assert queues.calls.get("SendMessageBatch") == 4  # 3 of sitemap tasks, 1 of the 4 page messages
        assert "SendMessage" not in queues.calls
        assert queues.carried == {"pages": 4, "sitemaps": 25}  # 100 + 100 + 40 pages of job-9, 2 of job-8


def test_delayed_messages_wait(queues):
    queues.queue.push([PageTask(job_id="job-9", url="https://example.com/later")], delay_seconds=60)
    assert queues.take("pages") == []


def test_each_message_may_have_a_delay_of_its_own_in_one_batch(queues):
    """Pages deferred to turns of their own come back one by one: one push, one request; on SQS, whose
    delays are whole seconds, the pages of one delay travel as one page batch."""
    pages = [PageTask(job_id="job-9", url=f"https://example.com/d/{n}") for n in range(12)]
    queues.queue.push(pages, delay_seconds=[0, 60] * 6)
    assert sorted(p.url for p in queues.take("pages")) == sorted(p.url for p in pages[::2])
    if queues.name == "aws":
        assert queues.calls.get("SendMessageBatch") == 1
        assert queues.carried == {"pages": 1}  # (the six delayed a minute are the other message)
    with pytest.raises(ValueError, match="2 delays for 3 messages"):
        queues.queue.push(pages[:3], delay_seconds=[0, 60])


def test_sending_nothing_sends_nothing(queues):
    queues.queue.push([])
    assert queues.take("pages") == []
    assert queues.calls.get("SendMessageBatch", 0) + queues.calls.get("SendMessage", 0) == 0


def test_pages_ranked_above_the_priority_lane_come_first(queues):
    """Locally the queue serves pages by rank, highest first; SQS has no order by priority, so pages ranked
    above PRIORITY_LANE go to the priority lane's queue, which functions of its own poll."""
    ranks = [0.5, 1.9, 1.0, 1.6, 0.0, 1.5]
    queues.queue.push([PageTask(job_id="job-9", url=f"https://example.com/r/{r}", rank=r) for r in ranks])
    taken = [p.rank for p in queues.take("pages")]
    assert sorted(taken) == sorted(ranks)
    lane = [r for r in ranks if r > PRIORITY_LANE]
    assert sorted(taken[: len(lane)]) == sorted(lane)
    if queues.name in ("local", "memory"):
        assert taken == sorted(ranks, reverse=True)


def test_pop_hands_out_discovery_first_and_a_message_once_until_it_is_acked(queues):
    """The seed's queue interface: push, pop (None when nothing is visible), and a length that counts what
    is queued, in flight included. A popped message is not popped again while its worker holds it."""
    queue = queues.queue
    assert queue.pop() is None and len(queue) == 0
    page = PageTask(job_id="job-9", url="https://example.com/p")
    sitemap = SitemapTask(job_id="job-9", url="https://example.com/s.xml", origin=SitemapOrigin.DECLARED, depth=1)
    queue.push([page])
    queue.push([sitemap])
    assert len(queue) == 2
    first = queue.pop()
    assert SitemapTask.model_validate_json(first.body) == sitemap
    second = queue.pop()
    assert PageTask.model_validate_json(second.body) == page
    assert queue.pop() is None  # (both in flight)
    assert len(queue) == 2
    queue.ack(first)
    queue.ack(second)
    assert len(queue) == 0 and queue.pop() is None


def test_a_queue_that_cannot_answer_pops_nothing_and_never_counts_zero(backend):
    """A temporary problem is not raised from pop, and the length falls back on the last count it had (a
    count of 0 would make the queue look finished). (The durable queues: memory always answers.)"""
    queues = backend
    queue = queues.queue
    for n in range(3):  # (three messages: pushed together, SQS would carry them as one page batch)
        queue.push([PageTask(job_id="job-9", url=f"https://example.com/p/{n}")])
    assert len(queue) == 3
    with unavailable(queues):
        assert queue.pop() is None
        assert len(queue) == 3
    message = queue.pop()
    assert message is not None
    queue.ack(message)


def test_a_push_the_state_file_cannot_take_is_kept_in_memory_and_said_so(tmp_path, caplog):
    """Locally, a push that fails for a reason that may pass (the state file locked) falls back to memory for
    those tasks, with a warning; they are handed out like the others."""
    from harvester.adapters.local.runner import LocalHarvest

    with LocalHarvest.open(tmp_path / "state") as harvest:
        queue = harvest.queue
        queue.push([PageTask(job_id="job-9", url="https://example.com/durable")])
        with unavailable_sqlite(queue.durable.conn, tmp_path / "state" / "harvest.db"), caplog.at_level("WARNING"):
            queue.push([PageTask(job_id="job-9", url="https://example.com/kept")])
        assert "1 tasks kept in memory for this run: the state file's queue: database is locked" in caplog.text
        assert queue.kept_in_memory == 1 and len(queue) == 2
        popped = list(iter(queue.pop, None))
        assert sorted(PageTask.model_validate_json(m.body).url for m in popped) == [
            "https://example.com/durable",
            "https://example.com/kept",
        ]
        for message in popped:
            queue.ack(message)
        assert len(queue) == 0


@contextlib.contextmanager
def unavailable(queues: Any) -> Iterator[None]:
    if queues.name == "local":
        path = Path(queues.store.conn.execute("PRAGMA database_list").fetchone()[2])
        with unavailable_sqlite(queues.queue.durable.conn, path):
            yield
        return
    queue = queues.queue
    order = queue.order
    queue.order = [url + "-gone" for url in order]  # (SQS answers QueueDoesNotExist)
    try:
        yield
    finally:
        queue.order = order


@contextlib.contextmanager
def unavailable_sqlite(conn: sqlite3.Connection, path: Path) -> Iterator[None]:
    """Another connection holds the state file's write lock; this one gives up waiting at once."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 10")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA busy_timeout = {timeout}")
        other.execute("ROLLBACK")
        other.close()


def test_a_push_the_state_files_disk_fails_stops_the_run_as_every_write_does(tmp_path, caplog):
    """A full or damaged disk under the queue is not a moment's condition: the push raises the storage's
    error (the runner stops with one line, as for any write to the state), and no task is kept in memory."""
    import sqlite3

    from harvester.adapters.local.runner import LocalHarvest

    class Failing:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: object) -> object:
            if sql.lstrip().upper().startswith("BEGIN"):
                raise sqlite3.OperationalError("database or disk is full")
            return self.conn.execute(sql, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(self.conn, name)

    with LocalHarvest.open(tmp_path / "state") as harvest:
        queue = harvest.queue
        queue.durable.conn = Failing(queue.durable.conn)  # type: ignore[assignment]
        with caplog.at_level("WARNING"), pytest.raises(sqlite3.OperationalError, match="disk is full"):
            queue.push([PageTask(job_id="job-9", url="https://example.com/lost")])
        assert queue.kept_in_memory == 0 and "kept in memory" not in caplog.text
