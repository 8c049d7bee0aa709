"""The DynamoDB state store's moves of a listed batch's pages, each exactly once: the requests a move makes
are seen at botocore, refused answers are injected, and a competing writer is slipped in between a batch's
read and its write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from msgspec.structs import replace

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.crawl import URL_SHARDS, DynamoCrawlDatabase
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.pointer_items import pointer_key
from harvester.model.crawl import WarcLocation
from harvester.model.messages import PageTask, Unprocessable
from harvester.model.records import UrlStatus, body_of
from harvester.model.state import Lease, PageOutcome, PageRetry
from harvester.patience import PATIENCE, Busy
from harvester.pipeline import recovery
from tests.aws.faults import BOTOCORE_ATTEMPTS, Call, Faults, in_process
from tests.contract.test_crawl_database import crawl_record
from tests.contract.test_state_store import (
    NOW,
    T0,
    claimed_sitemap,
    counts,
    lease,
    new_job,
    page,
    resuming,
    sitemap,
)


class Store:
    """The stack's state store, with the DynamoDB requests it made, by operation."""

    def __init__(self, store: DynamoStateStore) -> None:
        self.store = store
        self.calls: dict[str, int] = {}
        #: Run once before the next call of that operation (a competing writer's move).
        self.before: dict[str, Callable[[], None]] = {}

        def count(event_name: str, **_: Any) -> None:
            operation = event_name.rsplit(".", 1)[-1]
            self.calls[operation] = self.calls.get(operation, 0) + 1
            hook = self.before.pop(operation, None)
            if hook is not None:
                hook()

        store.client.meta.events.register("before-call.dynamodb.*", count)


@pytest.fixture
def aws(deployed_stack: Any) -> Store:
    stack, _ = deployed_stack
    return Store(AwsAdapters.from_env(stack.function("PageFunction").environment).store)


class Backend:  # (what the contract's helpers need of a backend)
    def __init__(self, store: DynamoStateStore) -> None:
        self.store = store


def recorded(aws: Store, n_pages: int, *, per_batch: int | None = None) -> tuple[str, list[str]]:
    """A job with ``n_pages`` pending pages (listed ``per_batch`` a batch), and their URLs; the requests
    counted from here on."""
    if per_batch is not None:
        aws.store.listing.record_batch = per_batch
    backend = Backend(aws.store)
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    pages = [page(n) for n in range(n_pages)]
    aws.store.record_pages(job_id, sitemap(1).url, pages, checkpoint=n_pages, lease=lease())
    aws.calls.clear()
    return job_id, [p.url for p in pages]


def index_entries(aws: Store, job_id: str) -> list[str]:
    """The sort keys the OpenItems index holds for the job."""
    response = aws.store.client.query(
        TableName=aws.store.table,
        IndexName="OpenItems",
        KeyConditionExpression="open_pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"OPEN#{job_id}"}},
    )
    return [item["sk"]["S"] for item in response["Items"]]


def test_pages_stay_out_of_the_open_index_and_a_resume_still_finds_them(aws):
    """The open index lists a job's open sitemaps only (an entry a page would cost write units at each of its
    moves): a resume reads the job's batches for its open pages, and finds each in every state."""
    job_id, urls = recorded(aws, 4)
    assert index_entries(aws, job_id) == [f"SITEMAP#{sitemap(1).key}"]
    pending = {p.url for p in aws.store.pages(job_id, status=UrlStatus.PENDING)}
    assert pending == set(urls)
    claimed = aws.store.claim_pages(job_id, urls[:3], lease("w", seconds=-1), now=NOW)
    done = claimed[0].model_copy(update={"status": UrlStatus.COMPLETED, "finished_at": T0})
    assert aws.store.finish_pages(job_id, [PageOutcome(done)], lease("w", seconds=-1)).applied == [urls[0]]
    later = datetime(2030, 1, 1, tzinfo=UTC)
    retry = PageRetry(urls[1], retries=1, error_message="503", not_before=later)
    assert aws.store.retry_pages(job_id, [retry], lease("w", seconds=-1)) == [urls[1]]
    assert index_entries(aws, job_id) == [f"SITEMAP#{sitemap(1).key}"]
    assert {p.url for p in aws.store.pages(job_id, status=UrlStatus.PENDING)} == {urls[1], urls[3]}
    assert [p.url for p in aws.store.pages(job_id, status=UrlStatus.PROCESSING)] == [urls[2]]
    assert aws.store.release_leases(job_id) == 2  # the sitemap's lease and the claimed page's
    assert [p.url for p in aws.store.claim_pages(job_id, urls, lease("w2"), now=NOW)] == urls[1:]


def test_a_claim_refused_because_a_transaction_holds_its_item_is_tried_again(aws):
    """A single write to an item a transaction is changing is refused (TransactionConflictException), and
    botocore does not retry that: the claim (its batch's states, one write) is tried again
    (adapters.aws.busy), not raised."""
    job_id, urls = recorded(aws, 3)

    def twice(call: Call, tries: int) -> bool:  # (the first claim, twice)
        return call.operation == "UpdateItem" and faults.refused[("dynamodb", "UpdateItem")] < 2

    with in_process(Faults(twice)) as faults:
        claimed = aws.store.claim_pages(job_id, urls, lease("w1"), now=NOW)
    assert faults.refused == {("dynamodb", "UpdateItem"): 2} and faults.longest == 2
    assert [p.url for p in claimed] == urls and all(p.attempts == 1 for p in claimed)
    assert all(aws.store.get_page(job_id, url).attempts == 1 for url in urls)


def test_claims_that_stay_refused_are_busy_and_the_ones_made_are_the_leases(aws, monkeypatch):
    """A claim refused past the step's patience raises Busy; the claims that landed before it (the pages of
    the batches before) are the lease's (the page step gives them back by that lease: give_back.pages)."""
    job_id, urls = recorded(aws, 3, per_batch=1)
    monkeypatch.setattr(PATIENCE, "cap", 0.001)

    def third(call: Call, tries: int) -> bool:  # (the third batch's claim, always)
        return call.operation == "UpdateItem" and faults.answered[("dynamodb", "UpdateItem")] >= 2

    with in_process(Faults(third)) as faults, PATIENCE.until(3.2), pytest.raises(Busy):
        aws.store.claim_pages(job_id, urls, lease("w1"), now=NOW)
    assert faults.longest > BOTOCORE_ATTEMPTS
    again = PageRetry(url="", retries=None, error_message="busy", not_before=T0, untried=True)
    moved = aws.store.retry_pages(job_id, [replace(again, url=url) for url in urls], lease("w1"))
    assert moved == urls[:2]
    assert [aws.store.get_page(job_id, url).attempts for url in urls] == [0, 0, 0]


@pytest.mark.parametrize("competitor", ["claims", "settles"])
def test_a_page_taken_between_the_read_and_the_write_is_left_to_its_taker(aws, competitor):
    """Another worker claims (or settles) one page of the batch after the batch was read: the batch's states
    moved, so they are read again, and the others are claimed, each once."""
    job_id, urls = recorded(aws, 5)
    other = Lease(token="w2", until=NOW + 60)

    def compete() -> None:
        (taken,) = aws.store.claim_pages(job_id, [urls[2]], other, now=NOW)
        if competitor == "settles":
            done = taken.model_copy(update={"status": UrlStatus.COMPLETED})
            assert aws.store.finish_pages(job_id, [PageOutcome(done)], other).applied == [urls[2]]

    aws.before["UpdateItem"] = compete  # (the first claim is written after the batch was read)
    mine = aws.store.claim_pages(job_id, urls, lease("w1"), now=NOW)
    assert [p.url for p in mine] == [u for u in urls if u != urls[2]] and all(p.attempts == 1 for p in mine)
    stored = aws.store.get_page(job_id, urls[2])
    assert stored is not None and stored.attempts == 1
    assert stored.status is (UrlStatus.COMPLETED if competitor == "settles" else UrlStatus.PROCESSING)
    assert aws.store.claim_pages(job_id, urls, lease("w3"), now=NOW + 1) == []
    backend = Backend(aws.store)
    assert counts(backend, job_id) == aws.store.recount(job_id)


SITE = "https://www.example.com"


def value_size(value: dict[str, Any]) -> int:
    raw = next(iter(value.values()))
    if isinstance(raw, list):  # (a string set)
        return sum(len(member.encode()) for member in raw)
    return len(raw) if isinstance(raw, bytes) else len(raw.encode())


def item_size(item: dict[str, Any]) -> int:
    """Near enough DynamoDB's item size for strings, numbers and binary: names plus values, in bytes."""
    return sum(len(name) + value_size(value) for name, value in item.items())


ARCHIVED = WarcLocation(
    filename="warc/job-31168a96d792493db648/20261125224104-3f9a0c2b7d1e.warc.gz",
    offset=48_213_377,
    length=12_941,
    record_type="response",
    payload_digest="sha1:U5FYCBWF5TX6CFNPFPQGCPZS5XVNMUXG",
    date=datetime(2026, 11, 25, 22, 41, 4, 566744, tzinfo=UTC),
)


@pytest.mark.parametrize("warc", [None, ARCHIVED], ids=["loose document", "WARC record"])
def test_a_fetched_pages_pointer_stays_within_one_write_unit_and_its_records_read_back_whole(aws, warc):
    """A page's one write of its own, its pointer, long URL included, costs one write unit (its records go
    in its batch's items, deflated: item_body.py), and its job and crawl records, WARC location included,
    read back whole."""
    from tests.aws.test_page_body import JOB, fetched_with_record, listed_page

    backend = Backend(aws.store)
    new_job(backend, JOB)
    claimed_sitemap(backend, JOB)
    listed = listed_page()
    assert listed.known is not None
    crawl_at_listing = {listed.url: listed.known}
    aws.store.record_pages(
        JOB, sitemap(1).url, [listed], checkpoint=1, lease=lease(), site=SITE, crawl=crawl_at_listing
    )
    (claimed,) = aws.store.claim_pages(JOB, [listed.url], lease("w"), now=NOW)
    assert claimed.known == listed.known
    done, crawl = fetched_with_record(claimed, warc=warc)
    outcome = PageOutcome(done, crawl=crawl)
    assert aws.store.finish_pages(JOB, [outcome], lease("w"), site=SITE).applied == [listed.url]
    pointer = aws.store.client.get_item(TableName=aws.store.table, Key=pointer_key(SITE, listed.url))["Item"]
    assert item_size(pointer) < 1024
    assert aws.store.get_page(JOB, listed.url) == done
    assert list(aws.store.pages(JOB)) == [done] and list(aws.store.page_bodies(JOB)) == [body_of(done)]
    (read,) = DynamoCrawlDatabase(aws.store.client, aws.store.table).get_urls(SITE, [listed.url]).values()
    assert replace(read, version=crawl.version) == crawl  # (a record's version is its pointer's: written once)


def test_a_job_of_an_earlier_page_layout_is_refused_with_the_reason(aws):
    """A job whose item names another page layout (or none: an item per URL) was started by an earlier
    version: its steps are refused with a reason that says what to do, and it is left out of the active
    jobs, so that the scheduler's pass over them goes on."""
    backend = Backend(aws.store)
    job_id = new_job(backend)
    key = {"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}}
    for old in ("batches", None):
        update = "SET layout = :old" if old else "REMOVE layout"
        values = {"ExpressionAttributeValues": {":old": {"S": old}}} if old else {}
        aws.store.client.update_item(TableName=aws.store.table, Key=key, UpdateExpression=update, **values)
        with pytest.raises(Unprocessable, match=f"job {job_id} keeps its pages in the '{old or 'items'}' state layout"):
            aws.store.get_job(job_id)
        with pytest.raises(Unprocessable, match="crawl the site again as a new job"):
            aws.store.snapshot(job_id)
        assert job_id not in aws.store.active_job_ids()


def test_a_page_of_a_job_of_an_earlier_page_layout_is_dead_lettered_with_the_reason(deployed_stack, aws):
    """As the page function runs it: the message is refused at once (not retried until the queue gives up)."""
    stack, poller = deployed_stack
    job_id = new_job(Backend(aws.store))
    aws.store.client.update_item(
        TableName=aws.store.table,
        Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}},
        UpdateExpression="REMOVE layout",
    )
    sqs = boto3.client("sqs")
    task = PageTask(job_id=job_id, url=page(1).url, sitemap=sitemap(1).url)
    sqs.send_message(QueueUrl=stack.queue_url("PageQueue"), MessageBody=body_of(task))
    assert poller.poll_once("PageFunction") == 1
    assert poller.queue_depth("PageQueue").total == 0
    (dead,) = sqs.receive_message(
        QueueUrl=stack.queue_url("PageDeadLetterQueue"), MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    reason = dead["MessageAttributes"]["HarvestError"]["StringValue"]
    assert f"job {job_id} keeps its pages in the 'items' state layout of an earlier Harvester" in reason


def test_a_site_with_no_url_record_is_told_by_one_small_read_a_shard_and_one_with_some_by_one(deployed_stack):
    """``count_urls`` is 0 for an empty site (its first crawl then looks up none of the URLs it lists): one
    single-item Query per shard of the site's URL records; a site with a record stops at the first shard
    that has one, and says None (counting would read every record)."""
    stack, _ = deployed_stack
    crawldb = AwsAdapters.from_env(stack.function("PageFunction").environment).crawldb
    calls: list[str] = []
    crawldb.client.meta.events.register("before-call.dynamodb.*", lambda event_name, **_: calls.append(event_name))
    assert crawldb.count_urls("https://empty.example") == 0
    assert calls == ["before-call.dynamodb.Query"] * 16
    record = crawl_record(page(1).url)
    assert crawldb.put_urls("https://known.example", [record]) == []
    shard = pointer_key("https://known.example", record.url)["pk"]["S"][-1]
    calls.clear()
    assert crawldb.count_urls("https://known.example") is None
    assert len(calls) == URL_SHARDS.index(shard) + 1


def test_a_resume_reads_a_bounded_number_of_batches_and_the_next_goes_on_from_there(aws):
    """A stalled job's resume sends the open pages of at most ``resume_batches`` of its batches, whatever the
    job's size, and stores where it stopped: the next resume goes on from there, and one that reached the end
    has the next start over. Every open page is sent once a round."""
    job_id, urls = recorded(aws, 60, per_batch=5)  # (12 batches)
    ctx, sent = resuming(aws.store, resume_batches=5)
    rounds: list[list[str]] = []
    for _ in range(3):
        aws.calls.clear()
        report = recovery.resume(ctx, job_id, force=True)
        rounds.append([task.url for task in sent.tasks if isinstance(task, PageTask)])
        sent.tasks.clear()
        assert report.pages_resent == len(rounds[-1]) <= 25
        # (the sitemaps' leases, those pending and in processing, the counters, and a page of the batches from
        # where the last resume stopped, and one from the start when that reached the end: for a job of any size)
        assert aws.calls.get("Query", 0) <= 6
    # (the third goes on to the end, then from the start: the open pages of 15 batches, each page at least once)
    assert [len(r) for r in rounds] == [25, 25, 25]
    assert sorted({url for one in rounds for url in one}) == sorted(urls)
    assert rounds[2][10:] == rounds[0][:15]
    assert recovery.resume(ctx, job_id, force=True).pages_resent == 25
    assert [task.url for task in sent.tasks if isinstance(task, PageTask)] == rounds[0][15:] + rounds[1][:15]
