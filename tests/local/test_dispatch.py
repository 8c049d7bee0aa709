"""The local dispatcher: the host with the fewest pages in flight first, never more than the per-host limit
handed out, discovery before pages, rank order within a host, and news (a send, a hand-back) noticed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harvester.adapters.local.database import connect
from harvester.adapters.local.dispatch import Dispatcher
from harvester.adapters.local.queue import SqliteTaskQueue
from harvester.model.messages import PageTask, SitemapOrigin, SitemapTask


@pytest.fixture
def queue(tmp_path: Path) -> SqliteTaskQueue:
    return SqliteTaskQueue(connect(tmp_path / "harvest.db"))


def pages(host: str, count: int, *, job: str = "j", rank: float = 0.5) -> list[PageTask]:
    return [PageTask(job_id=job, url=f"https://{host}/p/{n}", rank=rank) for n in range(count)]


def url(message) -> str:
    return message.body.split('"url":"', 1)[1].split('"', 1)[0]


def test_hosts_are_served_fewest_in_flight_first_and_never_past_their_limit(queue):
    queue.push(pages("a.example", 10, rank=1.0))  # ranked above b's: rank alone would serve a first
    queue.push(pages("b.example", 10))
    dispatcher = Dispatcher(queue, ["j"], per_host=3)
    taken = [dispatcher.take() for _ in range(6)]
    assert [m.host for m in taken] == ["a.example", "b.example"] * 3
    assert dispatcher.take() is None  # both hosts at their limit
    dispatcher.done(taken[1])  # one of b's ends
    assert dispatcher.take().host == "b.example"


def test_within_a_host_the_highest_rank_first_and_discovery_before_any_page(queue):
    queue.push(pages("a.example", 2, rank=0.2))
    queue.push([PageTask(job_id="j", url="https://a.example/top", rank=1.9)])
    queue.push([SitemapTask(job_id="j", url="https://a.example/sitemap.xml", origin=SitemapOrigin.DECLARED, depth=1)])
    dispatcher = Dispatcher(queue, ["j"], per_host=8)
    first = dispatcher.take()
    assert first.queue == "sitemaps"
    dispatcher.done(first)
    assert [url(dispatcher.take()) for _ in range(3)] == [
        "https://a.example/top",
        "https://a.example/p/0",
        "https://a.example/p/1",
    ]


def test_messages_sent_or_handed_back_later_are_noticed_and_other_jobs_are_not_served(queue):
    dispatcher = Dispatcher(queue, ["j"], per_host=8)
    assert dispatcher.take() is None
    queue.push(pages("c.example", 1, job="other"))
    assert dispatcher.take() is None
    queue.push(pages("c.example", 1))
    message = dispatcher.take()
    assert message is not None and message.job_id == "j"
    queue.release(message, delay_seconds=0, reason="test")
    dispatcher.done(message)
    again = dispatcher.take()
    assert again is not None and again.id == message.id and again.receive_count == 2


def test_a_finished_jobs_messages_are_not_handed_out(queue):
    queue.push(pages("a.example", 4, job="done"))
    queue.push(pages("a.example", 1, job="j"))
    dispatcher = Dispatcher(queue, ["done", "j"], per_host=8)
    first = dispatcher.take()
    dispatcher.forget(first.job_id)
    rest = list(iter(dispatcher.take, None))
    assert {m.job_id for m in rest} <= {"j"}


def test_a_batch_is_one_hosts_and_one_jobs_pages_within_the_hosts_free_slots_and_the_runs_budget(queue):
    queue.push(pages("a.example", 5) + pages("a.example", 5, job="k") + pages("a.example", 20))
    queue.push(pages("b.example", 20))
    dispatcher = Dispatcher(queue, ["j", "k"], per_host=6, budget=10)
    first = dispatcher.take_batch(8)
    assert [m.host for m in first] == ["a.example"] * 5  # stops where job k's pages begin
    assert {m.job_id for m in first} == {"j"}
    second = dispatcher.take_batch(8)
    assert [m.host for m in second] == ["b.example"] * 5  # the run's budget: 10 pages in flight at most
    assert dispatcher.take_batch(8) == []
    for message in second:
        dispatcher.done(message)
    third = dispatcher.take_batch(8)
    assert [m.host for m in third] == ["b.example"] * 5  # b has fewer in flight; its 6 slots, 5 of budget
    for message in first:
        dispatcher.done(message)
    fourth = dispatcher.take_batch(8)
    assert [(m.host, m.job_id) for m in fourth] == [("a.example", "k")] * 5


def test_a_sitemap_being_read_takes_one_of_its_hosts_slots(queue):
    """Its request holds one of the host's turns at the gate: pages handed out past the rest would be sent
    back to wait, behind lower ranks."""
    queue.push([SitemapTask(job_id="j", url="https://a.example/sitemap.xml", origin=SitemapOrigin.DECLARED, depth=1)])
    queue.push(pages("a.example", 10))
    dispatcher = Dispatcher(queue, ["j"], per_host=4)
    [sitemap] = dispatcher.take_batch(8)
    assert sitemap.queue == "sitemaps"
    assert len(dispatcher.take_batch(8)) == 3
    assert dispatcher.take_batch(8) == []
    dispatcher.done(sitemap)
    assert len(dispatcher.take_batch(8)) == 1


def test_a_batch_is_deleted_in_one_call(queue):
    queue.push(pages("a.example", 4))
    dispatcher = Dispatcher(queue, ["j"], per_host=8)
    batch = dispatcher.take_batch(8)
    queue.delete(*batch)
    assert len(queue) == 0
    assert not queue.holds("j")


def test_a_batch_whose_requests_are_over_frees_its_slots_before_it_is_done(queue):
    """Its captures are still being stored and its outcomes settled, but its requests are over and its
    grants back at the gate: the host's slots and the budget's serve other pages meanwhile, while the job
    still counts the batch as busy (the run must not take the job for idle)."""
    queue.push(pages("a.example", 12))
    dispatcher = Dispatcher(queue, ["j"], per_host=4, budget=4)
    first = dispatcher.take_batch(4)
    assert len(first) == 4 and dispatcher.take_batch(4) == []
    dispatcher.requests_over(first)
    second = dispatcher.take_batch(4)
    assert len(second) == 4
    assert dispatcher.busy["j"] == 8
    for message in first:  # done after its requests were over: its slots are not freed twice
        dispatcher.done(message)
    assert dispatcher.take_batch(4) == [] and dispatcher.busy["j"] == 4
    dispatcher.done(second[0])
    assert len(dispatcher.take_batch(4)) == 1


@pytest.mark.parametrize("waiting", ["wait", "wait_idle"])
def test_a_wait_cancelled_in_the_loop_turn_its_news_came_in_is_cancelled(queue, waiting):
    # Ctrl-C: asyncio.run cancels the run's main task, which may be in wait_idle just as a worker's last
    # message is done. The cancellation must reach the run (3.11's wait_for returned normally and the crawl
    # went on to its end, the interrupt lost).
    queue.push(pages("a.example", 1))
    dispatcher = Dispatcher(queue, ["j"], per_host=8)
    taken = dispatcher.take()

    async def run() -> str:
        waiter = asyncio.create_task(getattr(dispatcher, waiting)(10.0))
        await asyncio.sleep(0.01)  # (the waiter is waiting)
        dispatcher.done(taken)  # the news, and the cancel in the same turn
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    assert asyncio.run(run()) == "cancelled"


@pytest.mark.parametrize("kind", ["state file", "memory"])
def test_the_runs_activity_names_its_tasks_in_flight_and_the_first_and_last_waiting(queue, kind):
    """What the progress line says of a run: the requests out (the one out longest), and the tasks delayed in
    the queue, the first to come back with the request it makes next, and when the last one comes back;
    neither what is in flight nor another job's tasks count as waiting."""
    import time

    from harvester.adapters.local.activity import Task, activity
    from harvester.adapters.local.memory_queue import MemoryTaskQueue

    tasks = queue if kind == "state file" else MemoryTaskQueue()
    tasks.push(pages("a.example", 2))
    retried = PageTask(job_id="j", url="https://a.example/flaky", attempt=2)
    later = SitemapTask(job_id="j", url="https://a.example/s.xml", origin=SitemapOrigin.DECLARED, depth=1)
    tasks.push([retried, later], delay_seconds=[30.0, 90.0])
    tasks.push(pages("a.example", 1, job="other"), delay_seconds=5.0)
    dispatcher = Dispatcher(tasks, ["j"], per_host=8)
    out = dispatcher.take_batch(8)
    assert [url(m) for m in out] == ["https://a.example/p/0", "https://a.example/p/1"]

    now = time.time()
    seen = activity(tasks, dispatcher, ["j"], now=now)
    assert (seen.in_flight, seen.longest, seen.waiting) == (2, Task("https://a.example/p/0", 1), 2)
    assert seen.next == Task("https://a.example/flaky", 3)  # (two retries so far: its third request)
    assert now + 29 < seen.next_at < now + 31 and now + 89 < seen.last_at < now + 91
    dispatcher.requests_over(out)
    assert activity(tasks, dispatcher, ["j"], now=now + 100) == type(seen)()  # nothing out, nothing delayed
