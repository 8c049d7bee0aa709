"""Collecting the pointer layout's crawl batches (crawl_collect.py): a batch no URL's pointer names, of a job
that is over, is deleted with its settlements' items; every record reads as before, and a batch a pointer
still names, or one of a running job, is kept. A collection that left nothing waiting notes the site's part
epochs, and the next one, with no pointer moved since, reads no batch."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from harvester.adapters.aws import AwsAdapters, crawl_collect
from harvester.adapters.aws.pointer_items import LINES, Ref, batch_key
from harvester.adapters.aws.state_table import batch_delete
from harvester.crawldb.crawl_state import orphaned
from harvester.model.crawl import Collected
from harvester.model.records import JobStatus
from harvester.pipeline import collection
from harvester.settings import EngineSettings
from tests.aws.test_page_pointers import SITE, T0, Container, crawl_items, list_pages, new_job, settle, url


@pytest.fixture
def aws(deployed_stack: Any) -> AwsAdapters:
    stack, _ = deployed_stack
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def crawl_job(c: Container, job_id: str, ns: list[int]) -> None:
    """A job that lists pages ``ns`` and fetches them all."""
    new_job(c, job_id)
    urls = list_pages(c, job_id, ns)
    settle(c, job_id, urls, f"sig-{job_id}")


def batches_by_job(aws: AwsAdapters, *, lines_alone: bool = False) -> Counter[str]:
    """The site's crawl batch items (listed and settled) by job; a batch's lines item (written apart) is
    counted with its batch, and is there only beside it or a tombstone (collected with it). With
    ``lines_alone``: the lines items without either, by job (a collection cut short leaves them)."""
    found: Counter[str] = Counter()
    lines, batches = set(), set()
    for shard in "0123456789abcdef":
        for item in aws.store.jobs.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :cb)",
            ExpressionAttributeValues={":pk": {"S": f"CRAWL#{SITE}#{shard}"}, ":cb": {"S": "CB#"}},
        ):
            sk = item["sk"]["S"]
            if sk.endswith(LINES):
                lines.add(sk.removesuffix(LINES))
                continue
            if "#O#" not in sk:
                batches.add(sk)
            found[sk.split("#")[1]] += 1
    if lines_alone:
        return Counter(sk.split("#")[1] for sk in lines - batches)
    assert lines <= batches
    return found


def records(aws: AwsAdapters) -> dict[str, str]:
    """Every record of the site as a fresh container reads it (JSON)."""
    return {r.url: r.model_dump_json() for r in Container(aws).crawldb.site_urls(SITE)}


def test_a_collection_in_steps_stops_whenever_its_time_is_up_and_goes_on_to_the_same_end(
    aws: AwsAdapters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection given a ``pause`` that always says the time is up stops after every query page of the
    batches and of the pointers (a shard's page each here) and every piece of deletions (one item a piece
    here), each stop a state the next call goes on from, a fresh container each: it deletes what a collection
    in one call does, with pointers moved between its steps (a job listing over it) changing nothing it
    should not delete."""
    monkeypatch.setattr(crawl_collect, "_DELETED_AT_ONCE", 1)
    c = Container(aws)
    pages = list(range(60))
    for job_id in ("job-1", "job-2", "job-3"):
        crawl_job(c, job_id, pages)
    before = records(aws)
    steps, state = 0, None
    while True:
        done = Container(aws).crawldb.collect(SITE, lambda job_id: job_id != "job-3", pause=lambda: True, resume=state)
        steps += 1
        if done.paused is None:
            break
        assert done.batches == 0
        state = done.paused
        if steps == 20:  # (in the pointers' pass: a job lists the first half again, moving their pointers)
            crawl_job(c, "job-4", pages[:30])
    # (a stop after each shard's page but the last, of the batches and of the pointers; after each of job 1's
    # four items but the last, and of its two lines items; then the call that ends it)
    assert steps == 15 + 15 + 3 + 1 + 1
    assert done.batches == 2
    assert batches_by_job(aws) == Counter({"job-2": 4, "job-3": 4, "job-4": 2})
    after = records(aws)
    later = {url(n) for n in pages[30:]}  # (not listed again: their records read as before)
    assert {u: r for u, r in after.items() if u in later} == {u: r for u, r in before.items() if u in later}
    assert {r.signature for r in Container(aws).crawldb.site_urls(SITE)} == {"sig-job-3", "sig-job-4"}


def test_a_collection_in_steps_keeps_what_the_ends_during_it_added_to_the_note(aws: AwsAdapters) -> None:
    """The URLs listed one by one that the ends of other jobs add to the note while a collection goes on in
    steps are left there for the next one; those the note counted when it began are taken by it."""
    c = Container(aws)
    crawl_job(c, "job-1", list(range(60)))
    crawl_job(c, "job-2", list(range(60)))
    crawldb = Container(aws).crawldb
    assert crawldb.collect(SITE, lambda job_id: True).paused is None  # (noted)
    crawl_job(c, "job-3", list(range(10)))  # (the epochs move)

    def pending() -> int:
        note = crawldb.client.get_item(TableName=crawldb.table, Key=crawl_collect._noted_key(SITE))["Item"]
        return int(note.get("pending", {"N": "0"})["N"])

    assert crawldb.collect(SITE, lambda job_id: True, relisted=3, urls=1000).paused is None  # (few: noted)
    assert pending() == 3
    state = crawldb.collect(SITE, lambda job_id: True, pause=lambda: True).paused  # (begun: it takes the 3)
    assert state is not None
    assert crawldb.collect(SITE, lambda job_id: True, relisted=2, urls=1000).paused is None
    assert pending() == 5
    while state is not None:
        state = crawldb.collect(SITE, lambda job_id: True, pause=lambda: True, resume=state).paused
    assert pending() == 2


def test_batches_no_pointer_names_go_and_every_record_reads_as_before(aws: AwsAdapters) -> None:
    c = Container(aws)
    pages = list(range(60))
    for job_id in ("job-1", "job-2", "job-3"):
        crawl_job(c, job_id, pages)
    # Each job's two listed batches and their settlements; the pointers name job 3's (cur) and job 2's (prev).
    assert batches_by_job(aws) == Counter({"job-1": 4, "job-2": 4, "job-3": 4})
    before = records(aws)
    assert len(before) == 60 and {r.last_listed_job for r in Container(aws).crawldb.site_urls(SITE)} == {"job-3"}
    asked: list[str] = []

    def ended(job_id: str) -> bool:
        asked.append(job_id)
        return job_id != "job-3"

    assert Container(aws).crawldb.collect(SITE, ended).batches == 2
    assert sorted(asked) == ["job-1", "job-2", "job-3"]  # (once a job, however many batches it has)
    assert batches_by_job(aws) == Counter({"job-2": 4, "job-3": 4})
    assert crawl_items(aws)["URL"] == 60
    assert records(aws) == before
    fresh = Container(aws).crawldb.get_urls(SITE, [url(n) for n in pages])
    assert {u: r.model_dump_json() for u, r in fresh.items()} == before
    # Nothing left to collect, and run again it deletes nothing.
    assert Container(aws).crawldb.collect(SITE, ended).batches == 0
    # A fourth job lists and fetches over what is left: job 2's batches go at the next collection.
    crawl_job(c, "job-4", pages)
    assert Container(aws).crawldb.collect(SITE, lambda job_id: job_id != "job-4").batches == 2
    assert batches_by_job(aws) == Counter({"job-3": 4, "job-4": 4})
    assert {r.signature for r in Container(aws).crawldb.site_urls(SITE)} == {"sig-job-4"}


def test_a_batch_a_url_not_listed_since_still_names_is_kept(aws: AwsAdapters) -> None:
    """Job 1 lists sixty pages; jobs 2 and 3 only the first ten (in job 1's first batch): job 1's second batch
    still holds the records of the fifty others, and its first one is named by them too."""
    c = Container(aws)
    crawl_job(c, "job-1", list(range(60)))
    crawl_job(c, "job-2", list(range(10)))
    crawl_job(c, "job-3", list(range(10)))
    before = records(aws)
    assert Container(aws).crawldb.collect(SITE, lambda job_id: True).batches == 0
    assert batches_by_job(aws) == Counter({"job-1": 4, "job-2": 2, "job-3": 2})
    assert records(aws) == before
    crawl_job(c, "job-4", list(range(10)))
    assert Container(aws).crawldb.collect(SITE, lambda job_id: True).batches == 1  # (job 2's: named by none now)
    assert batches_by_job(aws) == Counter({"job-1": 4, "job-3": 2, "job-4": 2})
    after = records(aws)
    unlisted = [url(n) for n in range(10, 60)]
    assert len(after) == 60 and {u: after[u] for u in unlisted} == {u: before[u] for u in unlisted}


def test_the_batches_of_a_job_not_over_are_kept(aws: AwsAdapters) -> None:
    """A batch named by no pointer whose job is still running (here: a listing another job's made sure never
    commits, its tombstone written) is kept until that job is over."""
    k, other = Container(aws), Container(aws)
    job_k = new_job(k, "job-k")
    stalled = Ref(job_k, "dead0000dead0000")
    assert k.store.listing.put_pointer(SITE, stalled, "sm", url(1), None)
    crawl_job(other, "job-l", [1])
    assert "tomb" in aws.store.client.get_item(TableName=aws.store.table, Key=batch_key(SITE, stalled))["Item"]
    assert Container(aws).crawldb.collect(SITE, lambda job_id: job_id != job_k).batches == 0
    assert batches_by_job(aws)[job_k] == 1
    assert Container(aws).crawldb.collect(SITE, lambda job_id: True).batches == 1
    assert batches_by_job(aws)[job_k] == 0
    assert Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)].signature == "sig-job-l"


class Spy:
    """The crawl database's client, with the Queries it makes (their sort key prefix) and its other calls."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[str] = []

    def get_paginator(self, name: str) -> Any:
        inner = self.client.get_paginator(name)
        calls = self.calls

        class Paginator:
            def paginate(self, **kwargs: Any) -> Any:
                values = kwargs["ExpressionAttributeValues"]
                calls.append(f"Query {(values.get(':prefix') or values.get(':part'))['S']}")
                return inner.paginate(**kwargs)

        return Paginator()

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.client, name)


def spied(aws: AwsAdapters) -> tuple[Any, Spy]:
    crawldb = Container(aws).crawldb
    spy = crawldb.client = Spy(crawldb.client)
    return crawldb, spy


def read_every_batch_then_pointers(calls: list[str]) -> bool:
    """Whether a collection read the note, every shard's batches, then pointers until each batch of a job
    over was found named (a shard at least, 16 at most: it stops once none is left), then noted itself."""
    pointers = len(calls) - 2 - 16 - 1
    head, tail = calls[:2], calls[2 + 16 :]
    return (
        head == ["Query PART#", "get_item"]
        and calls[2 : 2 + 16] == ["Query CB#"] * 16
        and 1 <= pointers <= 16
        and tail == ["Query URL#"] * pointers + ["update_item"]
    )


def test_a_site_with_no_batch_of_a_job_over_reads_no_pointer(aws: AwsAdapters) -> None:
    """A site's first crawl ends with only its own batches, not over long enough: the collection reads the
    part items' epochs and the batches' keys (a query a shard) and no pointer."""
    c = Container(aws)
    crawl_job(c, "job-1", list(range(60)))
    crawldb, spy = spied(aws)
    assert crawldb.collect(SITE, lambda job_id: False, by="job-1").batches == 0
    assert spy.calls == ["Query PART#", "get_item", *["Query CB#"] * 16, "update_item"]


def test_with_no_pointer_moved_since_a_collection_that_left_nothing_waiting_no_batch_is_read(
    aws: AwsAdapters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note a collection leaves (the part epochs it started from) spares the next one every read of
    batches and pointers while no write moved a pointer; a listing that moves some, another job's batch still
    waiting for its job to be over, or a week passed, and the batches are read again."""
    c = Container(aws)
    crawl_job(c, "job-1", list(range(60)))
    crawldb, spy = spied(aws)
    assert crawldb.collect(SITE, lambda job_id: False, by="job-1").batches == 0  # (only job 1's own batches: noted)
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: True, by="job-2").batches == 0
    assert spy.calls == ["Query PART#", "get_item"]
    crawl_job(c, "job-2", list(range(10)))  # (moves ten pointers off job 1's first batch)
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: job_id == "job-1", by="job-3").batches == 0
    assert read_every_batch_then_pointers(spy.calls)  # (noted: job 2 waiting)
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: True, by="job-3").batches == 0
    assert "Query CB#" in spy.calls and "update_item" in spy.calls
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: True, by="job-3").batches == 0
    assert spy.calls == ["Query PART#", "get_item"]
    later = time.time() + 7 * 24 * 3600 + 1
    monkeypatch.setattr("harvester.adapters.aws.crawl_collect.time.time", lambda: later)
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: True, by="job-3").batches == 0
    assert "Query CB#" in spy.calls


def test_a_jobs_end_that_listed_few_urls_one_by_one_notes_them_until_they_are_worth_a_collection(
    aws: AwsAdapters,
) -> None:
    """A collection reads the whole site; the URLs a job's end listed one by one (what can leave garbage) are
    added to the note instead, until those since the last collection reach COLLECT_SHARE of the site's."""
    c = Container(aws)
    crawl_job(c, "job-1", list(range(60)))
    crawldb, spy = spied(aws)
    assert crawldb.collect(SITE, lambda job_id: False, by="job-1", relisted=60, urls=60).batches == 0  # (no note yet)
    assert "Query CB#" in spy.calls
    crawl_job(c, "job-2", [0, 1])
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: True, by="job-2", relisted=2, urls=60).batches == 0  # (2 of 60: < 5 %)
    assert spy.calls == ["Query PART#", "get_item", "update_item"]
    crawl_job(c, "job-3", [2])
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: job_id != "job-3", by="job-3", relisted=0, urls=60).batches == 0
    assert spy.calls == ["Query PART#", "get_item"]  # (nothing added: still 2)
    spy.calls.clear()
    assert (
        crawldb.collect(SITE, lambda job_id: job_id != "job-3", by="job-3", relisted=1, urls=60).batches == 0
    )  # (3: 5 %)
    assert read_every_batch_then_pointers(spy.calls)
    crawl_job(c, "job-4", [0, 1, 2])  # (job 1's first batch still holds pages 3-48)
    spy.calls.clear()
    assert crawldb.collect(SITE, lambda job_id: True, by="job-4", relisted=1, urls=60).batches == 0  # (counted anew)
    assert spy.calls == ["Query PART#", "get_item", "update_item"]
    before, spy.calls = records(aws), []
    assert crawldb.collect(SITE, lambda job_id: job_id != "job-4", by="job-4").batches == 0  # (None: read now)
    assert "Query CB#" in spy.calls and records(aws) == before  # (jobs 2 and 3's batches: named as ``prev``)


def test_the_batches_of_a_record_written_whole_go_and_its_url_listed_again_reads_right(aws: AwsAdapters) -> None:
    """The orphan pass writes a URL's record whole on its pointer, which keeps naming its batches: those are
    collected once their jobs are over (the record is the pointer's body), and a job listing the URL again
    finds the batch its pointer names gone, as if never committed (a tombstone is written in its place,
    collected in turn), and lists on the body."""
    c = Container(aws)
    crawl_job(c, "job-1", [1, 2])
    crawl_job(c, "job-2", [1, 2])
    crawl_job(c, "job-3", [3])
    orphan_pass = Container(aws).crawldb
    known = orphan_pass.get_urls(SITE, [url(1), url(2)])
    assert orphan_pass.put_urls(SITE, [orphaned(r, job_id="job-3") for r in known.values()]) == []
    before = records(aws)
    assert Container(aws).crawldb.collect(SITE, lambda job_id: job_id != "job-3").batches == 2  # (job 1's and job 2's)
    assert batches_by_job(aws) == Counter({"job-3": 2})
    assert records(aws) == before
    crawl_job(c, "job-4", [1, 2])
    again = Container(aws).crawldb.get_urls(SITE, [url(1), url(2)])
    for n in (1, 2):
        record, orphan = again[url(n)], known[url(n)]
        assert (record.signature, record.last_listed_job, record.state.value) == ("sig-job-4", "job-4", "fetched")
        assert record.first_listed == orphan.first_listed and record.changes == orphan.changes + 1
    assert batches_by_job(aws)["job-2"] == 1  # (the tombstone)
    assert Container(aws).crawldb.collect(SITE, lambda job_id: job_id != "job-4").batches == 1
    assert batches_by_job(aws) == Counter({"job-3": 2, "job-4": 2})  # (page 3 reads from job 3's batch)


def test_a_jobs_end_collects_the_batches_of_jobs_over_long_enough_and_never_fails_for_it(
    aws: AwsAdapters, caplog: pytest.LogCaptureFixture
) -> None:
    """What ``collection.collect`` tells the crawl database of each job: over for a job that ended at least
    ``collect_after_seconds`` ago or whose record is gone, not for one that ended just now or still runs; and
    a collection that fails is logged, the job's end going on."""
    c = Container(aws)
    now = T0 + timedelta(hours=2)
    for job_id, ended_ago in (("job-long", 3600), ("job-just", 60), ("job-running", None)):
        new_job(c, job_id)
        if ended_ago is not None:
            assert c.store.end_job(job_id, JobStatus.COMPLETED, end_time=now - timedelta(seconds=ended_ago))
    said: dict[str, bool] = {}

    class Recording:
        def collect(self, site: str, ended: Callable[[str], bool], *, by: str | None = None, **_: Any) -> Collected:
            assert site == SITE and by == "job-running"
            said.update({job_id: ended(job_id) for job_id in ("job-long", "job-just", "job-running", "job-gone")})
            return Collected(batches=3)

    ctx: Any = SimpleNamespace(clock=lambda: now, settings=EngineSettings(), store=c.store, crawldb=Recording())
    job = c.store.get_job("job-running")
    assert job is not None and collection.collect(ctx, job).batches == 3
    assert said == {"job-long": True, "job-just": False, "job-running": False, "job-gone": True}

    class Failing:
        def collect(self, site: str, ended: Callable[[str], bool], *, by: str | None = None, **_: Any) -> Collected:
            raise RuntimeError("throttled")

    ctx.crawldb = Failing()
    with caplog.at_level(logging.ERROR):
        assert collection.collect(ctx, job).batches == 0
    assert "could not be collected" in caplog.text


def test_deletions_go_25_a_request_and_what_dynamodb_left_unprocessed_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("harvester.adapters.aws.state_table.time.sleep", lambda _: None)
    sent: list[list[str]] = []

    class Client:
        def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
            keys = [r["DeleteRequest"]["Key"]["pk"]["S"] for r in RequestItems["t"]]
            sent.append(keys)
            if len(sent) == 1:  # (DynamoDB may leave some of a batch unprocessed)
                return {"UnprocessedItems": {"t": RequestItems["t"][:3]}}
            return {"UnprocessedItems": {}}

    batch_delete(Client(), "t", [{"pk": {"S": str(i)}} for i in range(60)])
    assert [len(keys) for keys in sent] == [25, 3, 25, 10]
    assert sorted({k for keys in sent for k in keys}, key=int) == [str(i) for i in range(60)]
    assert sent[1] == ["0", "1", "2"]


def test_a_collection_cut_short_leaves_no_batch_that_blocks_a_listing(aws: AwsAdapters, monkeypatch) -> None:
    """The batches a collection takes are deleted in two steps, their items then their lines: one that dies
    between them leaves lines items alone, which read as listings that never committed (a tombstone buries
    them), never a batch item whose lines are gone (which could be neither read nor buried). Here job 2's
    batches are named only by pointers whose records were written whole since (the orphan pass), so they
    are collected; the collection dies after its first step; job 3 then lists the URLs, and a later
    collection takes what was left."""
    c = Container(aws)
    crawl_job(c, "job-1", [1, 2])
    crawl_job(c, "job-2", [1, 2])
    orphan_pass = Container(aws).crawldb
    known = orphan_pass.get_urls(SITE, [url(1), url(2)])
    assert orphan_pass.put_urls(SITE, [orphaned(r, job_id="job-2") for r in known.values()]) == []
    steps: list[int] = []

    def dies_after_a_step(client: Any, table: str, keys: list[dict[str, Any]]) -> None:
        if steps:
            raise RuntimeError("the collection's container died")
        steps.append(len(keys))
        batch_delete(client, table, keys)

    monkeypatch.setattr(crawl_collect, "batch_delete", dies_after_a_step)
    with pytest.raises(RuntimeError):
        Container(aws).crawldb.collect(SITE, lambda job_id: True)
    monkeypatch.undo()
    assert steps and batches_by_job(aws, lines_alone=True)  # (lines items left alone)
    job = new_job(c, "job-3")
    assert sorted(list_pages(c, job, [1, 2])) == [url(1), url(2)]
    assert Container(aws).crawldb.collect(SITE, lambda job_id: job_id != job).batches > 0
    assert not batches_by_job(aws, lines_alone=True)
