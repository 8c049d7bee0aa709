"""The AWS state store's pages kept a listed batch at a time (adapters/aws/page_listing.py, page_batches.py):
what it writes, the requests a batch's moves make, and the listings it must recover from (a crash between a
listing's pointers and its commit)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from botocore.exceptions import ReadTimeoutError
from moto.core.botocore_stubber import BotocoreStubber

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.listed_batch import ITEM_BYTES, as_lines, batch_sk, batched
from harvester.adapters.aws.page_body import pack
from harvester.adapters.aws.page_listing import PageListing
from harvester.adapters.aws.pointer_items import Ref, crawl_batch_items, listed_lines, pointer_key
from harvester.adapters.aws.state_table import batch_put
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import (
    JobRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    body_of,
    url_key,
)
from harvester.model.state import Lease, PageOutcome, PageRetry, SitemapOutcome, SitemapRelease

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NOW = T0.timestamp()
SITE = "https://example.com/"


@pytest.fixture
def aws(deployed_stack: Any) -> AwsAdapters:
    stack, _ = deployed_stack
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def lease(token: str = "a", seconds: float = 60.0) -> Lease:
    return Lease(token=token, until=NOW + seconds)


def sitemap(n: int) -> SitemapRecord:
    return SitemapRecord(url=f"{SITE}sitemap-{n}.xml", origin=SitemapOrigin.INDEX, depth=2)


def page(n: int, **fields: Any) -> SitemapURL:
    return SitemapURL(url=f"{SITE}page-{n}.html", sitemap=f"{SITE}sitemap-1.xml", discovered_at=T0, **fields)


def new_job(store: DynamoStateStore, job_id: str) -> str:
    store.create_job(JobRecord(job_id=job_id, request=JobRequest(site=SITE), start_time=T0))
    store.mark_seeded(job_id)
    return job_id


def leased_sitemap(store: DynamoStateStore, job_id: str, n: int = 1, token: str = "s") -> Lease:
    store.add_sitemaps(job_id, [sitemap(n)])
    held = lease(token)
    assert store.claim_sitemap(job_id, sitemap(n).url, held, now=NOW) is not None
    return held


def mark(store: DynamoStateStore, job_id: str, bid: str, n: int, pages: list[SitemapURL], held: Lease) -> list[str]:
    """A listing's first step alone (its pointers, no commit: a reading that dies there) of batch ``bid`` of
    sitemap ``n``: the URLs that are the batch's."""
    listing = store.listing._list(job_id, bid, url_key(sitemap(n).url), pages, held, site=None, writes={})
    return [p.url for p in listing.mine]


def urls_of(pages: list[SitemapURL]) -> list[str]:
    return [p.url for p in pages]


def kinds(store: DynamoStateStore, job_id: str) -> Counter[str]:
    """The job partition's items by kind: JOB, SITEMAP, BATCH (records), STATE, OUTCOME."""
    found: Counter[str] = Counter()
    for item in store.jobs.query(
        KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}}
    ):
        sk = item["sk"]["S"]
        if sk.startswith("BATCH#"):
            found["STATE" if sk.endswith("#S") else "OUTCOME" if "#O#" in sk else "BATCH"] += 1
        else:
            found[sk.split("#")[0]] += 1
    return found


def test_a_new_jobs_pages_are_kept_a_listed_batch_at_a_time(aws: AwsAdapters) -> None:
    store = aws.store
    job_id = new_job(store, "job-b")
    held = leased_sitemap(store, job_id)
    recorded = store.record_pages(job_id, sitemap(1).url, [page(i) for i in range(60)], checkpoint=60, lease=held)
    assert len(recorded.new) == 60
    assert kinds(store, job_id) == Counter(JOB=1, SITEMAP=1, BATCH=2, STATE=2)
    urls = [page(i).url for i in range(60)]
    claimed = store.claim_pages(job_id, urls, lease("p"), now=NOW)
    assert [r.url for r in claimed] == urls and {r.attempts for r in claimed} == {1}
    outcomes = [PageOutcome(record=r.model_copy(update={"status": UrlStatus.COMPLETED})) for r in claimed]
    assert sorted(store.finish_pages(job_id, outcomes, lease("p")).applied) == sorted(urls)
    # One outcome item a batch for the settlement; no item per URL in the job (a URL's is its pointer).
    assert kinds(store, job_id) == Counter(JOB=1, SITEMAP=1, BATCH=2, STATE=2, OUTCOME=2)
    assert store.counts(job_id).urls_succeeded == 60
    assert store.recount(job_id) == store.counts(job_id)
    got = store.get_page(job_id, page(0).url)
    assert got is not None and got.status is UrlStatus.COMPLETED
    assert store.get_page(job_id, f"{SITE}never-listed") is None


def test_a_listing_that_never_committed_is_taken_over_by_its_sitemaps_next_reading(aws: AwsAdapters) -> None:
    store = aws.store
    job_id = new_job(store, "job-crash")
    pages = [page(i) for i in range(10)]
    # A first reading wrote the pages' pointers, then died before its transaction.
    dead = leased_sitemap(store, job_id, token="first reading")
    assert mark(store, job_id, "dead0000dead0000", 1, pages, dead) == urls_of(pages)
    store.release_leases(job_id)  # (its lease lapsed)
    held = lease("second reading")
    assert store.claim_sitemap(job_id, sitemap(1).url, held, now=NOW) is not None
    recorded = store.record_pages(job_id, sitemap(1).url, pages, checkpoint=10, lease=held)
    assert len(recorded.new) == 10
    assert store.counts(job_id).urls_total == 10 == len(list(store.pages(job_id)))
    # Read once more (a redelivery after the commit): nothing new.
    again = store.record_pages(job_id, sitemap(1).url, pages, checkpoint=10, lease=held)
    assert again.new == [] and store.counts(job_id).urls_total == 10


def test_records_a_listing_wrote_before_a_transaction_that_never_came_are_not_the_jobs(aws: AwsAdapters) -> None:
    """A listing writes its batch's records alone, then its transaction (the states item: the commit). A
    reading that died between the two leaves records no reader takes, even where they come first in the job's
    partition and name the same URLs as the batch that committed."""
    store = aws.store
    job_id = new_job(store, "job-apart")
    pages = [page(i) for i in range(10)]
    dead = leased_sitemap(store, job_id, token="first reading")
    assert mark(store, job_id, "0000dead0000dead", 1, pages, dead) == urls_of(pages)
    dead_ref, origin = Ref(job_id, "0000dead0000dead"), store.jobs.site_of(job_id)
    records = as_lines([pack(body_of(p), job_id) for p in pages])
    lines, _ = crawl_batch_items(store.table, origin, dead_ref, listed_lines([(body_of(p), False) for p in pages]))
    batch_put(store.client, store.table, [store.jobs.apart_item(job_id, batch_sk(dead_ref.bid), records), lines])
    read: dict[Ref, Any] = {}
    store.pointers._read_batches(origin, {dead_ref}, read)
    assert read == {}  # (its lines are there, its crawl batch item is not: never committed)
    store.release_leases(job_id)
    held = lease("second reading")
    assert store.claim_sitemap(job_id, sitemap(1).url, held, now=NOW) is not None
    assert len(store.record_pages(job_id, sitemap(1).url, pages, checkpoint=10, lease=held).new) == 10
    assert kinds(store, job_id)["BATCH"] == 2 and kinds(store, job_id)["STATE"] == 1
    assert store.recount(job_id) == store.counts(job_id) and store.counts(job_id).urls_total == 10
    assert sorted(p.url for p in store.pages(job_id)) == sorted(urls_of(pages))
    # A page looked for in the job's batches (its pointer names none of them) is found in the committed one.
    store.client.delete_item(TableName=store.table, Key=pointer_key(SITE.rstrip("/"), pages[0].url))
    placed, _ = store.batches._place(job_id, [pages[0].url])
    assert pages[0].url in placed and placed[pages[0].url][0] != "0000dead0000dead"
    claimed = store.claim_pages(job_id, urls_of(pages), lease("p"), now=NOW)
    assert sorted(r.url for r in claimed) == sorted(urls_of(pages))


def test_another_sitemaps_listing_under_way_is_left_to_that_sitemap(aws: AwsAdapters) -> None:
    store = aws.store
    job_id = new_job(store, "job-two")
    pages = [page(i) for i in range(4)]
    # Sitemap 2's listing wrote their pointers and has not committed yet (it is still running).
    second = leased_sitemap(store, job_id, 2, token="t")
    assert mark(store, job_id, "beef0000beef0000", 2, pages, second) == urls_of(pages)
    first = leased_sitemap(store, job_id, 1)
    assert store.record_pages(job_id, sitemap(1).url, pages, checkpoint=4, lease=first).new == []
    assert len(store.record_pages(job_id, sitemap(2).url, pages, checkpoint=4, lease=second).new) == 4
    assert store.counts(job_id).urls_total == 4


def test_a_final_sitemaps_uncommitted_listing_is_taken_over(aws: AwsAdapters) -> None:
    """Sitemap 2's reading wrote the pages' pointers, died, and sitemap 2 then failed for good: its batch will
    never commit, so sitemap 1's listing takes the pointers over (else the URLs were lost to the job)."""
    store = aws.store
    job_id = new_job(store, "job-final")
    pages = [page(i) for i in range(3)]
    dying = leased_sitemap(store, job_id, 2, token="t")
    assert mark(store, job_id, "beef0000beef0000", 2, pages, dying) == urls_of(pages)
    store.release_sitemap(job_id, sitemap(2).url, dying, SitemapRelease("HTTP 503"))
    failed = lease("u")
    assert store.claim_sitemap(job_id, sitemap(2).url, failed, now=NOW) is not None
    outcome = SitemapOutcome(status=SitemapStatus.FAILED, error_message="HTTP 503 (gave up after 3 attempts)")
    assert store.finish_sitemap(job_id, sitemap(2).url, outcome, failed)
    first = leased_sitemap(store, job_id, 1)
    assert len(store.record_pages(job_id, sitemap(1).url, pages, checkpoint=3, lease=first).new) == 3
    assert store.counts(job_id).urls_total == 3


def test_a_reading_whose_lease_lapsed_cannot_take_pointers_back(aws: AwsAdapters) -> None:
    """Reading A wrote a page's pointer and stalled; its lease lapsed and reading B took the sitemap, writing
    and taking pointers over. A, waking between B's pointers and B's commit, must not take them back: B's
    batch would commit with no pointer naming it (its pages counted, never claimable)."""
    store = aws.store
    job_id = new_job(store, "job-take")
    pages = [page(1), page(2)]
    a, b = DynamoStateStore(store.client, store.table), DynamoStateStore(store.client, store.table)
    store.add_sitemaps(job_id, [sitemap(1)])
    la, lb = Lease("A", NOW + 10), Lease("B", NOW + 1000)
    assert store.claim_sitemap(job_id, sitemap(1).url, la, now=NOW) is not None
    assert mark(a, job_id, "a" * 16, 1, pages[:1], la) == urls_of(pages[:1])
    assert store.claim_sitemap(job_id, sitemap(1).url, lb, now=NOW + 20) is not None  # (A's lease lapsed)
    commit = b.sitemap_items.commit_listing

    def a_wakes_first(*args: Any, **kwargs: Any) -> Any:
        assert mark(a, job_id, "a" * 16, 1, pages, la) == []
        return commit(*args, **kwargs)

    b.sitemap_items.commit_listing = a_wakes_first  # type: ignore[method-assign]
    assert len(b.record_pages(job_id, sitemap(1).url, pages, checkpoint=2, lease=lb).new) == 2
    worker = DynamoStateStore(store.client, store.table)
    assert len(worker.claim_pages(job_id, [p.url for p in pages], lease("w"), now=NOW + 30)) == 2
    assert store.counts(job_id).urls_total == 2


def test_a_settlement_that_wrote_nothing_to_a_batch_does_not_move_what_it_holds_of_it(aws: AwsAdapters) -> None:
    """Lease A holds pages of batches X (1, 4) and Y (2); page 1 is claimed again by B after A's lease
    lapsed. A's settlement of pages 1 and 2 writes Y only; what A holds of X must stay at X's version, or A's
    later settlement of page 4 would land on B's and put page 1 back to processing (counted twice)."""
    store = aws.store
    job_id = new_job(store, "job-held")
    held = leased_sitemap(store, job_id)
    store.record_pages(job_id, sitemap(1).url, [page(1), page(4)], checkpoint=2, lease=held)
    store.record_pages(job_id, sitemap(1).url, [page(2)], checkpoint=3, lease=held)
    a, b = DynamoStateStore(store.client, store.table), DynamoStateStore(store.client, store.table)
    la, lb = Lease("A", NOW + 10), Lease("B", NOW + 1000)
    mine = {r.url: r for r in a.claim_pages(job_id, [page(i).url for i in (1, 4, 2)], la, now=NOW)}
    theirs = b.claim_pages(job_id, [page(1).url], lb, now=NOW + 20)

    def done(record: SitemapURL) -> PageOutcome:
        return PageOutcome(record=record.model_copy(update={"status": UrlStatus.COMPLETED}))

    assert a.finish_pages(job_id, [done(mine[page(1).url]), done(mine[page(2).url])], la).applied == [page(2).url]
    assert b.finish_pages(job_id, [done(theirs[0])], lb).applied == [page(1).url]
    assert a.finish_pages(job_id, [done(mine[page(4).url])], la).applied == [page(4).url]
    assert {r.status for r in store.pages(job_id)} == {UrlStatus.COMPLETED}
    later = DynamoStateStore(store.client, store.table)
    assert later.claim_pages(job_id, [page(1).url], lease("C"), now=NOW + 2000) == []
    assert store.counts(job_id).urls_succeeded == 3 and store.recount(job_id) == store.counts(job_id)


def test_workers_claiming_pages_of_one_batch_at_once_claim_each_page_once(aws: AwsAdapters) -> None:
    store = aws.store
    job_id = new_job(store, "job-race")
    held = leased_sitemap(store, job_id)
    urls = [page(i).url for i in range(40)]
    store.record_pages(job_id, sitemap(1).url, [page(i) for i in range(40)], checkpoint=40, lease=held)
    won: dict[str, list[str]] = {}
    start = threading.Barrier(4)

    def claim(token: str, wanted: list[str]) -> None:
        worker = DynamoStateStore(store.client, store.table)  # (a container of its own)
        start.wait()
        won[token] = [r.url for r in worker.claim_pages(job_id, wanted, lease(token), now=NOW)]

    # Overlapping halves: every page is wanted by two workers.
    wants = {"w0": urls[:20], "w1": urls[10:30], "w2": urls[20:], "w3": urls[:10] + urls[30:]}
    threads = [threading.Thread(target=claim, args=item) for item in wants.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [url for got in won.values() for url in got]
    assert sorted(every) == sorted(urls)  # each page claimed, and by one worker only
    assert {r.attempts for r in store.pages(job_id)} == {1}


def test_a_batchs_claim_settlement_and_retries_are_a_few_requests_for_all_its_pages(aws: AwsAdapters) -> None:
    """A page batch of 49: its claim reads the pointers and the batch and writes the batch's states once; its
    settlement and its retries each write once, on the version the claim left, without reading it again."""
    store = aws.store
    job_id = new_job(store, "job-calls")
    held = leased_sitemap(store, job_id)
    store.record_pages(job_id, sitemap(1).url, [page(i) for i in range(49)], checkpoint=49, lease=held)
    calls: Counter[str] = Counter()
    store.client.meta.events.register(
        "before-call.dynamodb.*", lambda event_name, **_: calls.update([event_name.rsplit(".", 1)[-1]])
    )
    worker = DynamoStateStore(store.client, store.table)  # (a page function's container)
    claimed = worker.claim_pages(job_id, [page(i).url for i in range(49)], lease("p"), now=NOW)
    assert len(claimed) == 49
    assert calls == Counter(GetItem=1, BatchGetItem=2, UpdateItem=1)  # (GetItem: the job's site, once)
    calls.clear()
    done = [PageOutcome(record=r.model_copy(update={"status": UrlStatus.COMPLETED})) for r in claimed[:40]]
    assert len(worker.finish_pages(job_id, done, lease("p")).applied) == 40
    later = T0 + timedelta(minutes=1)
    retries = [PageRetry(r.url, 1, "HTTP 503", later) for r in claimed[40:]]
    assert len(worker.retry_pages(job_id, retries, lease("p"))) == 9
    # (the settlement's outcome item written apart, then its transaction; the retries' transaction)
    assert calls == Counter(BatchWriteItem=1, TransactWriteItems=2)
    assert Counter(r.status for r in store.pages(job_id)) == Counter({UrlStatus.COMPLETED: 40, UrlStatus.PENDING: 9})


def test_a_claim_goes_where_the_listing_stored_each_page_without_reading_its_pointer(aws: AwsAdapters) -> None:
    """The listing says where it stored each page (``Recorded.stored``, carried by its task): a claim given
    that reads the batch alone (one BatchGetItem, no pointer read); a hint the batch does not bear out (another
    position, another batch, a batch that never committed, garbage) falls back to the page's pointer."""
    store = aws.store
    job_id = new_job(store, "job-stored")
    held = leased_sitemap(store, job_id)
    recorded = store.record_pages(job_id, sitemap(1).url, [page(i) for i in range(60)], checkpoint=60, lease=held)
    urls = [page(i).url for i in range(60)]
    assert sorted(recorded.stored) == sorted(urls) and len({v.split("/")[0] for v in recorded.stored.values()}) == 2
    keys: list[list[str]] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        keys.append([k["sk"]["S"] for table in params["RequestItems"].values() for k in table["Keys"]])

    store.client.meta.events.register("provide-client-params.dynamodb.BatchGetItem", seen)
    worker = DynamoStateStore(store.client, store.table)  # (a page function's container)
    first = urls[:30]
    claimed = worker.claim_pages(job_id, first, lease("p"), now=NOW, stored=recorded.stored)
    assert [r.url for r in claimed] == first
    assert len(keys) == 1 and not any(k.startswith("URL#") for k in keys[0])  # (the batch's two items only)
    keys.clear()
    rest = urls[30:]
    other_bid = recorded.stored[urls[0]].split("/")[0]
    wrong = {
        rest[0]: recorded.stored[rest[1]],  # (another position of its batch)
        rest[2]: f"{other_bid}/0",  # (another batch)
        rest[3]: "0123456789abcdef/1",  # (no such batch)
        rest[4]: "garbage",
    }
    claimed = worker.claim_pages(job_id, rest, lease("q"), now=NOW, stored={**recorded.stored, **wrong})
    assert [r.url for r in claimed] == rest and {r.attempts for r in claimed} == {1}
    pointers = [k for batch in keys for k in batch if k.startswith("URL#")]
    assert sorted(pointers) == sorted(f"URL#{url_key(u)}" for u in [rest[0], rest[2], rest[3], rest[4]])


@contextmanager
def answer_lost_once(operation: str) -> Iterator[list[str]]:
    """The first ``operation`` request lands in moto and its answer is lost (a read timeout): botocore sends
    it again, and that second request fails its condition on the first one's write."""
    original = BotocoreStubber.__call__
    lost: list[str] = []

    def call(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
        answer = original(self, event_name, request, **kwargs)
        if not lost and event_name.endswith(f".{operation}"):
            lost.append(event_name)
            raise ReadTimeoutError(endpoint_url=request.url)
        return answer

    with mock.patch.object(BotocoreStubber, "__call__", call):
        yield lost


class Killed(BaseException):
    """The container died (nothing catches it)."""


def test_an_outcome_item_of_a_settlement_that_never_committed_is_not_the_pages_outcome(aws: AwsAdapters) -> None:
    """A settlement writes its outcome item apart, before the transaction that names it: a container that dies
    between the two leaves an item no states item names, which no reading folds, even where the page's later
    moves wrote no outcome of their own (sent back for a retry, then settled failed)."""
    store = aws.store
    job_id = new_job(store, "job-dies-settling")
    held = leased_sitemap(store, job_id)
    store.record_pages(job_id, sitemap(1).url, [page(i) for i in range(3)], checkpoint=3, lease=held)
    dying = DynamoStateStore(store.client, store.table)
    claimed = dying.claim_pages(job_id, [page(0).url], lease("dies", seconds=10), now=NOW)
    done = [PageOutcome(record=claimed[0].model_copy(update={"status": UrlStatus.COMPLETED}))]
    dies = Killed("between the outcome item and its states")
    with mock.patch.object(dying.jobs, "transact", side_effect=dies), pytest.raises(Killed):
        dying.finish_pages(job_id, done, lease("dies", seconds=10))
    written = [i["sk"]["S"] for i in store.jobs.partition(job_id, "BATCH#") if "#O#" in i["sk"]["S"]]
    assert len(written) == 1  # (the item it left)
    assert store.get_page(job_id, page(0).url).status is UrlStatus.PROCESSING

    later = DynamoStateStore(store.client, store.table)  # (the message again, its lease lapsed)
    again = later.claim_pages(job_id, [page(0).url], lease("again"), now=NOW + 30)
    assert [r.url for r in again] == [page(0).url]
    sent_back = [PageRetry(page(0).url, 1, "HTTP 503", T0 + timedelta(minutes=1))]
    assert later.retry_pages(job_id, sent_back, lease("again")) == [page(0).url]
    assert store.get_page(job_id, page(0).url).status is UrlStatus.PENDING
    assert {r.url: r.status for r in store.pages(job_id)}[page(0).url] is UrlStatus.PENDING

    last = later.claim_pages(job_id, [page(0).url], lease("last"), now=NOW + 120)
    failed = [PageOutcome(record=last[0].model_copy(update={"status": UrlStatus.FAILED}))]
    assert later.finish_pages(job_id, failed, lease("last")).applied == [page(0).url]
    assert store.get_page(job_id, page(0).url).status is UrlStatus.FAILED
    assert Counter(r.status for r in store.pages(job_id)) == Counter({UrlStatus.FAILED: 1, UrlStatus.PENDING: 2})
    assert (store.counts(job_id).urls_failed, store.counts(job_id).urls_succeeded) == (1, 0)


def test_a_claim_whose_answer_was_lost_is_still_the_claims(aws: AwsAdapters) -> None:
    store = aws.store
    job_id = new_job(store, "job-lost")
    held = leased_sitemap(store, job_id)
    store.record_pages(job_id, sitemap(1).url, [page(i) for i in range(3)], checkpoint=3, lease=held)
    urls = [page(i).url for i in range(3)]
    with answer_lost_once("UpdateItem") as lost:
        claimed = store.claim_pages(job_id, urls, lease("p"), now=NOW)
    assert lost and [r.url for r in claimed] == urls and {r.attempts for r in claimed} == {1}
    assert {p.url: (p.status, p.attempts) for p in store.pages(job_id)} == dict.fromkeys(
        urls, (UrlStatus.PROCESSING, 1)
    )


def test_a_sitemap_claim_whose_answer_was_lost_is_still_the_claims(aws: AwsAdapters) -> None:
    store = aws.store
    job_id = new_job(store, "job-s")
    store.add_sitemaps(job_id, [sitemap(1)])
    with answer_lost_once("UpdateItem") as lost:
        claimed = store.claim_sitemap(job_id, sitemap(1).url, lease("s"), now=NOW)
    assert lost and claimed is not None and claimed.attempts == 1
    stored = store.get_sitemap(job_id, sitemap(1).url)
    assert stored is not None and (stored.status, stored.attempts) == (claimed.status, 1)


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, []),
        (10, [10]),
        (49, [49]),
        (50, [50]),
        (51, [26, 25]),
        (59, [30, 29]),
        (97, [49, 48]),
        (99, [50, 49]),
        (148, [50, 49, 49]),
        (196, [49, 49, 49, 49]),
    ],
)
def test_a_listing_is_cut_in_even_batches_and_a_remainder_that_fits_a_page_message_is_shared_out(count, expected):
    """A listing's batches of 49 (a transaction's items) are as even as they can be (a batch of a few pages
    costs its fetches a claim's and a settlement's writes as a full one does), a remainder shared out when
    the run it joins still fits a batch (50: ``PageListing.batch_most``)."""
    assert [len(run) for run in batched(list(range(count)), [10] * count, 49, PageListing.batch_most)] == expected


def test_a_remainder_that_would_pass_an_items_size_stays_a_batch_of_its_own():
    sizes = [ITEM_BYTES // 49] * 50  # (the fifty together pass an item's size)
    assert [len(run) for run in batched(list(range(50)), sizes, 49, PageListing.batch_most)] == [49, 1]


def test_runs_of_full_batches_are_never_merged():
    assert [len(run) for run in batched(list(range(3)), [10] * 3, 1, PageListing.batch_most)] == [1, 1, 1]
    assert [len(run) for run in batched(list(range(50)), [10] * 50, 25, PageListing.batch_most)] == [25, 25]


def test_a_settlements_outcome_items_count_only_under_the_name_its_committed_try_gave_them() -> None:
    """Each transaction a settlement tries names its outcome items anew (``settlement_tag``): a try whose
    transaction was cancelled (a stale crawl record held a page back) may have written more parts than the
    try that committed; only the committed try's parts are folded, and an item of an older version written
    inside its transaction (no tag) counts as it is."""
    from harvester.adapters.aws.listed_batch import StoredBatch, outcome_sk, settlement_names, settlement_tag

    first, second = settlement_tag(), settlement_tag()
    assert first != second
    tried, committed = settlement_names(3, 2, first), settlement_names(3, 1, second)
    batch = StoredBatch("b1", ["{}"] * 4)
    batch.add_outcomes('1\t{"try":"first"}\n2\t{"try":"first"}', outcome_sk("b1", tried[0]))
    batch.add_outcomes('3\t{"try":"first, its second part"}', outcome_sk("b1", tried[1]))
    batch.add_outcomes('1\t{"try":"second"}', outcome_sk("b1", committed[0]))
    batch.add_outcomes('0\t{"try":"older version"}', "BATCH#b1#O#000002#0")
    state = {"s": "completed", "o": 3}
    batch.read_states(
        {
            "body": {"S": json.dumps({"0": {**state, "o": 2}, "1": state})},
            "version": {"N": "4"},
            "jo": {"SS": committed},
        }
    )
    batch.fold_outcomes()
    assert batch.outcomes == {"0": '{"try":"older version"}', "1": '{"try":"second"}'}
    assert batch.read == {2, 3}
