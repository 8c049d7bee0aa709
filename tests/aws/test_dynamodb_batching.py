"""What the DynamoDB state store batches, and that batching keeps each move exactly once (issue 11, "Cost,
measured"): the requests a move makes are counted at botocore, and a competing writer is slipped in between
a batch's read and its write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from msgspec.structs import replace

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.crawl import URL_SHARDS, DynamoCrawlDatabase, url_item_key
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.model.crawl import WarcLocation
from harvester.model.records import UrlStatus, body_of
from harvester.patience import PATIENCE, Busy
from harvester.ports import Lease, PageOutcome, PageRetry
from tests.aws.faults import BOTOCORE_ATTEMPTS, Call, Faults, in_process
from tests.contract.test_crawl_database import crawl_record
from tests.contract.test_state_store import NOW, T0, claimed_sitemap, counts, lease, new_job, page, sitemap


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
    # The item-per-URL layout's batching (jobs created before the batch layout keep it); the batch
    # layout's requests: test_page_batches.py.
    environment = {**stack.function("PageFunction").environment, "HARVEST_STATE_LAYOUT": "items"}
    return Store(AwsAdapters.from_env(environment).store)


class Backend:  # (what the contract's helpers need of a backend)
    def __init__(self, store: DynamoStateStore) -> None:
        self.store = store


def recorded(aws: Store, n_pages: int) -> tuple[str, list[str]]:
    """A job with ``n_pages`` pending pages, and their URLs; the requests counted from here on."""
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
    """An index entry per page cost 3 write units a fetched page (added, rewritten at the claim, removed): a
    resume reads the job's partition for its open pages instead, and finds each in every state."""
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


def test_a_batchs_retries_are_one_read_and_one_write_and_a_page_leased_elsewhere_is_left_out(aws):
    """Each retry was a GetItem and a transaction of its own (a batch whose pages waited for their host's turn
    sent each back so)."""
    job_id, urls = recorded(aws, 6)
    aws.store.claim_pages(job_id, urls[:5], lease("w"), now=NOW)
    aws.store.claim_pages(job_id, urls[5:], lease("other"), now=NOW)
    aws.calls.clear()
    retries = [PageRetry(url, retries=1, error_message="503", not_before=T0) for url in urls + urls[:1]]
    assert aws.store.retry_pages(job_id, retries, lease("w")) == urls[:5]
    assert aws.calls == {"BatchGetItem": 1, "TransactWriteItems": 2}  # (the second without the page leased elsewhere)
    pending = {p.url: p for p in aws.store.pages(job_id, status=UrlStatus.PENDING)}
    assert set(pending) == set(urls[:5]) and all(p.retries == 1 for p in pending.values())
    assert aws.store.get_page(job_id, urls[5]).status is UrlStatus.PROCESSING


def test_a_batch_is_read_once_and_each_page_claimed_by_one_plain_conditional_write(aws):
    """A transaction bills each write twice and a claim needs no other write beside it: one BatchGetItem for
    the batch, then one conditional UpdateItem a claimable page (no transaction)."""
    job_id, urls = recorded(aws, 10)
    claimed = aws.store.claim_pages(job_id, urls + urls[:3], lease("w1"), now=NOW)
    assert [p.url for p in claimed] == urls and all(p.attempts == 1 for p in claimed)
    assert aws.calls == {"BatchGetItem": 1, "UpdateItem": 10}


def test_a_page_claimed_elsewhere_costs_no_write(aws):
    job_id, urls = recorded(aws, 3)
    aws.store.claim_pages(job_id, urls[1:], lease("w1"), now=NOW)
    aws.calls.clear()
    assert [p.url for p in aws.store.claim_pages(job_id, urls, lease("w2"), now=NOW)] == urls[:1]
    assert aws.calls == {"BatchGetItem": 1, "UpdateItem": 1}


def test_a_claim_refused_because_a_transaction_holds_its_item_is_tried_again(aws):
    """A single write to an item a transaction is changing is refused (TransactionConflictException), and
    botocore does not retry that: the claim is tried again (adapters.aws.busy), not raised with the batch's
    other claims made."""
    job_id, urls = recorded(aws, 3)

    def twice(call: Call, tries: int) -> bool:  # (the first claim, twice)
        return call.operation == "UpdateItem" and faults.refused[("dynamodb", "UpdateItem")] < 2

    with in_process(Faults(twice)) as faults:
        claimed = aws.store.claim_pages(job_id, urls, lease("w1"), now=NOW)
    assert faults.refused == {("dynamodb", "UpdateItem"): 2} and faults.longest == 2
    assert [p.url for p in claimed] == urls and all(p.attempts == 1 for p in claimed)
    assert all(aws.store.get_page(job_id, url).attempts == 1 for url in urls)


def test_claims_that_stay_refused_are_busy_and_the_ones_made_are_the_leases(aws, monkeypatch):
    """A claim refused past the step's patience raises Busy; the claims that landed before it are the
    lease's (the page step gives them back by that lease: give_back.pages)."""
    job_id, urls = recorded(aws, 3)
    monkeypatch.setattr(PATIENCE, "cap", 0.001)

    def third(call: Call, tries: int) -> bool:  # (the third claim, always)
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
    """Another worker claims (or settles) one page of the batch after the batch was read: that page's
    conditional write fails, and the others are claimed, each once."""
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
def test_a_fetched_pages_items_stay_within_one_write_unit_and_read_back_whole(aws, warc):
    """A fetched page's job record and crawl record, long URL and WARC location included, each cost one
    write unit: the job record's snapshot keeps only what differs (page_body.py) and bodies are stored
    deflated (item_body.py). Whole and plain, the job record took 1,336+ bytes, two units a write."""
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
    key = {"pk": {"S": f"JOB#{JOB}"}, "sk": {"S": f"URL#{listed.key}"}}
    item = aws.store.client.get_item(TableName=aws.store.table, Key=key)["Item"]
    assert item_size(item) < 1024 < item_size(item) - value_size(item["body"]) + len(body_of(done))
    record = aws.store.client.get_item(TableName=aws.store.table, Key=url_item_key(SITE, listed.url))["Item"]
    assert item_size(record) < 1024
    assert aws.store.get_page(JOB, listed.url) == done
    assert list(aws.store.pages(JOB)) == [done] and list(aws.store.page_bodies(JOB)) == [body_of(done)]
    assert DynamoCrawlDatabase(aws.store.client, aws.store.table).get_urls(SITE, [listed.url]) == {listed.url: crawl}


def test_a_job_record_stored_whole_by_the_previous_version_is_claimed_and_read(aws):
    from tests.aws.test_page_body import JOB, fetched, listed_page

    backend = Backend(aws.store)
    new_job(backend, JOB)
    listed = listed_page()
    whole = {
        "pk": {"S": f"JOB#{JOB}"},
        "sk": {"S": f"URL#{listed.key}"},
        "body": {"S": body_of(listed)},
        "status": {"S": "pending"},
        "lease_until": {"N": "0"},
        "version": {"N": "1"},
        "open_pk": {"S": f"OPEN#{JOB}"},
    }
    aws.store.client.put_item(TableName=aws.store.table, Item=whole)
    assert [p.url for p in aws.store.pages(JOB, status=UrlStatus.PENDING)] == [listed.url]
    (claimed,) = aws.store.claim_pages(JOB, [listed.url], lease("w"), now=NOW)
    assert index_entries(aws, JOB) == []  # (an entry it had leaves the index at its first move)
    assert [p.url for p in aws.store.pages(JOB, status=UrlStatus.PROCESSING)] == [listed.url]
    assert claimed == listed.model_copy(update={"status": UrlStatus.PROCESSING, "attempts": 1})
    done = fetched(claimed)
    assert aws.store.finish_pages(JOB, [PageOutcome(done)], lease("w")).applied == [listed.url]
    assert aws.store.get_page(JOB, listed.url) == done


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
    shard = url_item_key("https://known.example", record.url)["pk"]["S"][-1]
    calls.clear()
    assert crawldb.count_urls("https://known.example") is None
    assert len(calls) == URL_SHARDS.index(shard) + 1
