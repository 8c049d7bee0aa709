"""The pages' pointers (adapters/aws/page_listing.py, crawl_pointers.py): a URL's item written once a job, the
crawl records a batch at a time, what a reader sees of a listing not committed, and jobs of one site moving
the same URL's record at once without losing either's fetch."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest

from harvester.adapters.aws import AwsAdapters, crawl_pointers, page_batches
from harvester.adapters.aws.crawl import DynamoCrawlDatabase
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.item_body import body_text
from harvester.adapters.aws.pointer_items import LINES, Ref, batch_key
from harvester.crawldb.crawl_state import Fetched, FetchResult, after_fetch, listed, orphaned
from harvester.crawldb.schedule import Schedule
from harvester.model.crawl import CrawlRecord
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapURL, UrlStatus, body_of, url_key
from harvester.model.state import Lease, PageOutcome, PageRetry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NOW = T0.timestamp()
SITE = "https://example.com"
SCHEDULE = Schedule()


class Container:
    """A container's adapters: its own store and crawl database sharing its own memory of lookups."""

    def __init__(self, aws: AwsAdapters) -> None:
        self.crawldb = DynamoCrawlDatabase(aws.store.client, aws.store.table)
        self.store = DynamoStateStore(aws.store.client, aws.store.table, pointers=self.crawldb.pointers)


@pytest.fixture
def aws(deployed_stack: Any) -> AwsAdapters:
    stack, _ = deployed_stack
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def lease(token: str = "a", seconds: float = 60.0) -> Lease:
    return Lease(token=token, until=NOW + seconds)


def sitemap_url(n: int = 1) -> str:
    return f"{SITE}/sitemap-{n}.xml"


def url(n: int) -> str:
    return f"{SITE}/page-{n}.html"


def new_job(c: Container, job_id: str) -> str:
    c.store.create_job(JobRecord(job_id=job_id, request=JobRequest(site=f"{SITE}/"), start_time=T0))
    c.store.mark_seeded(job_id)
    c.store.add_sitemaps(job_id, [SitemapRecord(url=sitemap_url(), origin=SitemapOrigin.INDEX, depth=1)])
    assert c.store.claim_sitemap(job_id, sitemap_url(), lease("s"), now=NOW) is not None
    return job_id


def listed_by(job_id: str, page_url: str, prior: CrawlRecord | None) -> CrawlRecord:
    return listed(
        prior,
        url=page_url,
        lastmod=None,
        changefreq=None,
        priority=0.5,
        sitemap=sitemap_url(),
        job_id=job_id,
        now=T0,
        schedule=SCHEDULE,
    )


def fetched(record: CrawlRecord, signature: str) -> CrawlRecord:
    """The record a listing made, moved by a fetch (as the page worker does: the listing's version)."""
    answer = Fetched(FetchResult.SUCCESS, 200, signature=signature, document_key=signature)
    return after_fetch(record, answer, now=T0, schedule=SCHEDULE, unwritten=True)


def list_pages(c: Container, job_id: str, ns: list[int], *, checkpoint: int | None = None) -> list[str]:
    """The job lists pages ``ns`` for fetching, on what its lookup reads (as the sitemap worker does)."""
    priors = c.crawldb.get_urls(SITE, [url(n) for n in ns])
    pages = [
        SitemapURL(
            url=url(n), sitemap=sitemap_url(), discovered_at=T0, known=listed_by(job_id, url(n), priors.get(url(n)))
        )
        for n in ns
    ]
    recorded = c.store.record_pages(
        job_id, sitemap_url(), pages, checkpoint=checkpoint or len(ns), lease=lease("s"), site=SITE
    )
    assert not recorded.stale
    return [p.url for p in recorded.new]


def settle(c: Container, job_id: str, urls: list[str], signature: str, token: str = "p") -> tuple[list[str], list[str]]:
    """Claims and settles the pages as fetched with ``signature`` (a stale one computed again on the record
    it meets and settled again, as the page worker does): (applied, stale the first time)."""
    claimed = c.store.claim_pages(job_id, urls, lease(token), now=NOW)
    outcomes = [
        PageOutcome(r.model_copy(update={"status": UrlStatus.COMPLETED}), crawl=fetched(r.known, signature))
        for r in claimed
    ]
    settled = c.store.finish_pages(job_id, outcomes, lease(token), site=SITE)
    first_stale = list(settled.stale)
    applied = list(settled.applied)
    if settled.stale:
        priors = c.crawldb.get_urls(SITE, settled.stale)
        again = [
            PageOutcome(o.record, crawl=fetched(listed_by(job_id, o.record.url, priors[o.record.url]), signature))
            for o in outcomes
            if o.record.url in settled.stale
        ]
        retried = c.store.finish_pages(job_id, again, lease(token), site=SITE)
        assert retried.stale == []
        applied += retried.applied
    return applied, first_stale


def crawl_items(aws: AwsAdapters) -> Counter[str]:
    """The site's crawl items by kind: URL (pointers), CB (listed crawl batches), CBO (their settlements);
    a crawl batch's lines item (written apart) is counted with its batch, and is there only beside it or a
    tombstone."""
    found: Counter[str] = Counter()
    lines, batches = set(), set()
    for shard in "0123456789abcdef":
        for item in aws.store.jobs.query(
            KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": f"CRAWL#{SITE}#{shard}"}}
        ):
            sk = item["sk"]["S"]
            if sk.endswith(LINES):
                lines.add(sk.removesuffix(LINES))
                continue
            if sk.startswith("CB#") and "#O#" not in sk:
                batches.add(sk)
            found["CBO" if "#O#" in sk else sk.split("#")[0]] += 1
    assert lines <= batches
    return found


def test_a_fetched_page_writes_its_url_once_a_job(aws: AwsAdapters) -> None:
    c = Container(aws)
    job_id = new_job(c, "job-one")
    listed_urls = list_pages(c, job_id, list(range(60)))
    assert len(listed_urls) == 60
    assert crawl_items(aws) == Counter(URL=60, CB=2)
    marks = [item for item in aws.store.jobs.query(
        KeyConditionExpression="pk = :pk AND begins_with(sk, :m)",
        ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}, ":m": {"S": "MARK#"}},
    )]  # fmt: skip
    assert marks == []  # (the pointer is the mark)
    before = {u: r.version for u, r in c.crawldb.get_urls(SITE, listed_urls).items()}
    applied, stale = settle(c, job_id, listed_urls, "sig-1")
    assert sorted(applied) == sorted(listed_urls) and stale == []
    # The settlement wrote its crawl records a batch at a time: no URL item moved.
    assert crawl_items(aws) == Counter(URL=60, CB=2, CBO=2)
    after = Container(aws).crawldb.get_urls(SITE, listed_urls)
    assert {u: r.version for u, r in after.items()} == before
    assert {r.signature for r in after.values()} == {"sig-1"} and {r.http_status for r in after.values()} == {200}
    assert sorted(r.url for r in Container(aws).crawldb.site_urls(SITE)) == sorted(listed_urls)
    assert list(Container(aws).crawldb.site_urls(SITE, unless_listed_by=job_id)) == []
    assert c.store.counts(job_id).urls_succeeded == 60 == len(list(c.store.pages(job_id, status=UrlStatus.COMPLETED)))


def test_a_listing_not_committed_yet_is_not_seen(aws: AwsAdapters) -> None:
    c = Container(aws)
    first = new_job(c, "job-first")
    list_pages(c, first, [1])
    settle(c, first, [url(1)], "sig-1")
    # A second job's listing wrote the URL's pointer and has not committed its batch (or died before).
    other = Container(aws)
    second = new_job(other, "job-second")
    base = other.crawldb.pointers.read(SITE, [url(1)])[url(1)]
    assert other.store.listing.put_pointer(SITE, Ref(second, "beef0000beef0000"), "sm", url(1), base)
    seen = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert (seen.signature, seen.last_listed_job, seen.version) == ("sig-1", first, base.version + 1)
    assert [r.url for r in Container(aws).crawldb.site_urls(SITE, unless_listed_by=second)] == [url(1)]


def test_jobs_listing_and_fetching_one_url_at_once_both_count(aws: AwsAdapters) -> None:
    """Job A lists a page; job B lists it while A has still to fetch it (B's record is what A's listing made);
    A fetches and settles, then B. Each settlement meets the record the other moved: it is computed again on it,
    so the URL's record ends with both fetches counted, B's last (as one job after the other would leave it)."""
    a, b = Container(aws), Container(aws)
    job_a, job_b = new_job(a, "job-a"), new_job(b, "job-b")
    list_pages(a, job_a, [1, 2])
    list_pages(b, job_b, [1])  # (its transaction marks A's page 1 as moved: A has still to fetch it)
    applied_a, stale_a = settle(a, job_a, [url(1)], "sig-a", token="pa")
    assert applied_a == [url(1)] and stale_a == [url(1)]
    applied_b, stale_b = settle(b, job_b, [url(1)], "sig-b", token="pb")
    assert applied_b == [url(1)] and stale_b == [url(1)]
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert (final.signature, final.changes, final.last_listed_job) == ("sig-b", 1, job_b)
    # Page 2, listed by A alone, is A's to settle as usual: one outcome item, no URL item written.
    applied, stale = settle(a, job_a, [url(2)], "sig-a2", token="pa2")
    assert applied == [url(2)] and stale == []
    assert Container(aws).crawldb.get_urls(SITE, [url(2)])[url(2)].signature == "sig-a2"
    for c, job_id in ((a, job_a), (b, job_b)):
        assert c.store.recount(job_id) == c.store.counts(job_id)


def test_a_listing_that_moves_another_jobs_uncommitted_batch_makes_sure_it_never_commits(aws: AwsAdapters) -> None:
    """Job K wrote the URL's pointer and stalled before its transaction; job L lists the URL (reading the record
    K's listing started from) and commits: K's batch is made a tombstone, so K's transaction fails and K
    decides again on what L listed."""
    k, lstore = Container(aws), Container(aws)
    job_k, job_l = new_job(k, "job-k"), new_job(lstore, "job-l")
    base = k.crawldb.pointers.read(SITE, [url(1)]).get(url(1))
    stalled = Ref(job_k, "dead0000dead0000")
    assert k.store.listing.put_pointer(SITE, stalled, "sm", url(1), base)
    assert list_pages(lstore, job_l, [1]) == [url(1)]
    tomb = aws.store.client.get_item(TableName=aws.store.table, Key=batch_key(SITE, stalled))["Item"]
    assert "tomb" in tomb
    # K, reading again, finds L's listing and lists on it.
    assert list_pages(k, job_k, [1]) == [url(1)]
    record = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert record.last_listed_job == job_k


def test_a_listing_whose_batch_another_job_made_a_tombstone_is_decided_again(aws: AwsAdapters) -> None:
    """K's listing wrote its pointers; before its transaction, L listed the same URL (K's batch not committed:
    L makes it a tombstone). K's transaction then finds its crawl batch written: K is told stale, and lists
    again on L's record."""
    k, lstore = Container(aws), Container(aws)
    job_k, job_l = new_job(k, "job-k"), new_job(lstore, "job-l")
    real = k.store.sitemap_items.commit_listing

    def commit_after_l(*args: Any, **kwargs: Any) -> Any:
        assert list_pages(lstore, job_l, [1]) == [url(1)]
        return real(*args, **kwargs)

    page = SitemapURL(url=url(1), sitemap=sitemap_url(), discovered_at=T0, known=listed_by(job_k, url(1), None))
    k.store.sitemap_items.commit_listing = commit_after_l  # type: ignore[method-assign]
    recorded = k.store.record_pages(job_k, sitemap_url(), [page], checkpoint=1, lease=lease("s"), site=SITE)
    k.store.sitemap_items.commit_listing = real  # type: ignore[method-assign]
    assert recorded.new == [] and recorded.stale == [url(1)]
    assert k.store.counts(job_k).urls_total == 0
    assert list_pages(k, job_k, [1]) == [url(1)]
    assert Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)].last_listed_job == job_k
    assert k.store.counts(job_k).urls_total == 1 == lstore.store.counts(job_l).urls_total


def test_a_page_whose_pointer_two_other_jobs_moved_is_still_its_jobs_to_fetch(aws: AwsAdapters) -> None:
    """J listed the URL; K and L listed it before J fetched it: its pointer names K's and L's batches only.
    J still finds its page (in its own batches), fetches it and settles it on the record L's listing left."""
    j, k, lstore = Container(aws), Container(aws), Container(aws)
    job_j, job_k, job_l = new_job(j, "job-j"), new_job(k, "job-k"), new_job(lstore, "job-l")
    list_pages(j, job_j, [1])
    list_pages(k, job_k, [1])
    list_pages(lstore, job_l, [1])
    applied, stale = settle(Container(aws), job_j, [url(1)], "sig-j")
    assert applied == [url(1)] and stale == [url(1)]
    for c, job_id, signature in ((k, job_k, "sig-k"), (lstore, job_l, "sig-l")):
        assert settle(c, job_id, [url(1)], signature)[0] == [url(1)]
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert final.signature in {"sig-k", "sig-l"} and final.changes == 2
    assert j.store.counts(job_j).urls_succeeded == 1


# Jobs of one site at once: the cases a review found (issue 11, session 11), each lost a fetch or counted a
# URL twice before its fix.


def second_sitemap(c: Container, job_id: str) -> None:
    c.store.add_sitemaps(job_id, [SitemapRecord(url=sitemap_url(2), origin=SitemapOrigin.INDEX, depth=1)])
    assert c.store.claim_sitemap(job_id, sitemap_url(2), lease("s"), now=NOW) is not None


def record(c: Container, job_id: str, n: int, priors: dict[str, CrawlRecord], sitemap: int = 1) -> Any:
    """The job lists page ``n`` from sitemap ``sitemap`` on ``priors`` (a lookup made earlier)."""
    known = listed_by(job_id, url(n), priors.get(url(n)))
    page = SitemapURL(url=url(n), sitemap=sitemap_url(sitemap), discovered_at=T0, known=known)
    return c.store.record_pages(job_id, sitemap_url(sitemap), [page], checkpoint=1, lease=lease("s"), site=SITE)


def test_a_listing_committing_while_another_job_moves_its_pointer_stays_named(aws: AwsAdapters) -> None:
    """B wrote its pointer and is about to commit; C reads (B not committed) and moves the pointer, and B
    commits in between: C's move and its tombstone of B's batch are one write, so either B's commit fails
    (B decides again) or C's move does (C reads again, B's listing its record's source)."""
    a, b, c = Container(aws), Container(aws), Container(aws)
    job_a, job_b, job_c = new_job(a, "job-a"), new_job(b, "job-b"), new_job(c, "job-c")
    list_pages(a, job_a, [1])
    settle(a, job_a, [url(1)], "sig-a")
    real_b, real_c = b.store.sitemap_items.commit_listing, c.store.sitemap_items.commit_listing
    results: dict[str, Any] = {}

    def b_commit(*args: Any, **kwargs: Any) -> Any:
        def c_commit(*c_args: Any, **c_kwargs: Any) -> Any:
            results["b"] = real_b(*args, **kwargs)
            return real_c(*c_args, **c_kwargs)

        c.store.sitemap_items.commit_listing = c_commit  # type: ignore[method-assign]
        results["c"] = record(c, job_c, 1, c.crawldb.get_urls(SITE, [url(1)]))
        c.store.sitemap_items.commit_listing = real_c  # type: ignore[method-assign]
        return results["b"]

    b.store.sitemap_items.commit_listing = b_commit  # type: ignore[method-assign]
    first_b = record(b, job_b, 1, b.crawldb.get_urls(SITE, [url(1)]))
    b.store.sitemap_items.commit_listing = real_b  # type: ignore[method-assign]
    for c_store, job_id, first in ((b, job_b, first_b), (c, job_c, results["c"])):
        if first.stale:  # (decided again, as the sitemap worker does)
            assert list_pages(c_store, job_id, [1]) == [url(1)]
    assert settle(b, job_b, [url(1)], "sig-b")[0] == [url(1)]
    assert settle(c, job_c, [url(1)], "sig-c")[0] == [url(1)]
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert final.signature in {"sig-b", "sig-c"} and final.changes == 2  # (a -> b -> c: every fetch counted)
    second_sitemap(b, job_b)
    again = record(b, job_b, 1, b.crawldb.get_urls(SITE, [url(1)]), sitemap=2)
    assert again.new == [] and b.store.counts(job_b).urls_total == 1


def test_a_listing_committing_after_another_job_wrote_its_pointer_and_died_is_read(aws: AwsAdapters) -> None:
    a, b, c = Container(aws), Container(aws), Container(aws)
    job_a, job_b, job_c = new_job(a, "job-a"), new_job(b, "job-b"), new_job(c, "job-c")
    list_pages(a, job_a, [1])
    settle(a, job_a, [url(1)], "sig-a")
    real_b = b.store.sitemap_items.commit_listing
    moved: list[bool] = []

    def b_commit(*args: Any, **kwargs: Any) -> Any:
        base = c.crawldb.pointers.read(SITE, [url(1)])[url(1)]
        assert c.store.listing._bury(SITE, job_c, [base]) == []  # (C makes sure B's listing never commits, moves, dies)
        moved.append(c.store.listing.put_pointer(SITE, Ref(job_c, "dead0000dead0000"), "sm", url(1), base))
        return real_b(*args, **kwargs)

    b.store.sitemap_items.commit_listing = b_commit  # type: ignore[method-assign]
    listed = record(b, job_b, 1, b.crawldb.get_urls(SITE, [url(1)]))
    b.store.sitemap_items.commit_listing = real_b  # type: ignore[method-assign]
    assert moved == [True] and listed.stale == [url(1)]  # (C's tombstone: B decides again)
    assert list_pages(b, job_b, [1]) == [url(1)]
    assert Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)].last_listed_job == job_b


def test_a_fetch_settled_between_another_jobs_lookup_and_listing_is_kept(aws: AwsAdapters) -> None:
    a, b = Container(aws), Container(aws)
    job_a, job_b = new_job(a, "job-a"), new_job(b, "job-b")
    list_pages(a, job_a, [1])
    priors = b.crawldb.get_urls(SITE, [url(1)])  # (B's lookup reads A's page still to fetch)
    assert settle(a, job_a, [url(1)], "sig-a")[0] == [url(1)]
    listed = record(b, job_b, 1, priors)
    if listed.stale:
        assert list_pages(b, job_b, [1]) == [url(1)]
    assert Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)].signature == "sig-a"


def test_a_fetch_settled_between_a_moved_pages_relookup_and_its_settlement_is_kept(aws: AwsAdapters) -> None:
    a, b = Container(aws), Container(aws)
    job_a, job_b = new_job(a, "job-a"), new_job(b, "job-b")
    list_pages(a, job_a, [1])
    list_pages(b, job_b, [1])
    claimed = a.store.claim_pages(job_a, [url(1)], lease("pa"), now=NOW)
    outcomes = [
        PageOutcome(r.model_copy(update={"status": UrlStatus.COMPLETED}), crawl=fetched(r.known, "sig-a"))
        for r in claimed
    ]
    assert a.store.finish_pages(job_a, outcomes, lease("pa"), site=SITE).stale == [url(1)]
    priors = a.crawldb.get_urls(SITE, [url(1)])  # (the page worker reads B's record, B's page still open)
    assert settle(b, job_b, [url(1)], "sig-b")[0] == [url(1)]
    again = [PageOutcome(o.record, crawl=fetched(listed_by(job_a, url(1), priors[url(1)]), "sig-a")) for o in outcomes]
    settled = a.store.finish_pages(job_a, again, lease("pa"), site=SITE)
    assert settled.stale == [url(1)]  # (B settled since A's lookup: computed again, as the page worker does)
    priors = a.crawldb.get_urls(SITE, [url(1)])
    again = [PageOutcome(o.record, crawl=fetched(listed_by(job_a, url(1), priors[url(1)]), "sig-a")) for o in outcomes]
    assert a.store.finish_pages(job_a, again, lease("pa"), site=SITE).applied == [url(1)]
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert (final.signature, final.changes) == ("sig-a", 1)  # (B's fetch, then A's: its change from B's counted)


def test_a_url_two_other_jobs_listed_since_is_still_once_in_its_job(aws: AwsAdapters) -> None:
    b, c, d = Container(aws), Container(aws), Container(aws)
    job_b, job_c, job_d = new_job(b, "job-b"), new_job(c, "job-c"), new_job(d, "job-d")
    list_pages(b, job_b, [1])
    list_pages(c, job_c, [1])
    list_pages(d, job_d, [1])
    second_sitemap(b, job_b)
    record(b, job_b, 1, b.crawldb.get_urls(SITE, [url(1)]), sitemap=2)
    assert b.store.counts(job_b).urls_total == 1


# A job taking over its own listing that died, the orphan pass, a guard for many pages (a second review).


def test_takeover_keeps_a_fetch_settled_after_the_lookup(aws: AwsAdapters) -> None:
    """J's listing wrote url1's pointer and died before its transaction (M's page still to fetch). J's redelivered
    reading looks url1 up (M's page open), M settles, J takes its own pointer over and commits."""
    m, j = Container(aws), Container(aws)
    job_m, job_j = new_job(m, "job-m"), new_job(j, "job-j")
    list_pages(m, job_m, [1])
    base = j.crawldb.pointers.read(SITE, [url(1)])[url(1)]
    assert j.store.listing.put_pointer(SITE, Ref(job_j, "dead0000dead0000"), url_key(sitemap_url()), url(1), base)
    j2 = Container(aws)  # (the redelivery, in another container)
    priors = j2.crawldb.get_urls(SITE, [url(1)])
    assert settle(m, job_m, [url(1)], "sig-m")[0] == [url(1)]
    listed = record(j2, job_j, 1, priors)
    if listed.stale:
        assert list_pages(j2, job_j, [1]) == [url(1)]
    else:
        assert [p.url for p in listed.new] == [url(1)]
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert final.signature == "sig-m", "M's fetch was lost"


def test_takeover_keeps_a_whole_write_made_after_the_lookup(aws: AwsAdapters) -> None:
    """As above, but between J's lookup and its takeover the orphan pass of job O writes url1 whole."""
    m, j, o = Container(aws), Container(aws), Container(aws)
    job_m, job_j = new_job(m, "job-m"), new_job(j, "job-j")
    list_pages(m, job_m, [1])
    assert settle(m, job_m, [url(1)], "sig-m")[0] == [url(1)]
    base = j.crawldb.pointers.read(SITE, [url(1)])[url(1)]
    assert j.store.listing.put_pointer(SITE, Ref(job_j, "dead0000dead0000"), url_key(sitemap_url()), url(1), base)
    j2 = Container(aws)
    priors = j2.crawldb.get_urls(SITE, [url(1)])
    current = o.crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert o.crawldb.put_urls(SITE, [orphaned(current, job_id="job-o")]) == []
    listed = record(j2, job_j, 1, priors)
    assert listed.stale == [url(1)], "J's takeover landed a record computed on a version since overwritten"


def test_orphan_pass_keeps_a_fetch_when_its_reading_was_forgotten(
    aws: AwsAdapters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orphan pass reads the site (K's page open), K settles, and the orphan pass's reading of url1 is no
    longer remembered (a site larger than the memory: here 1): put_urls reads it now, settled, same version."""
    monkeypatch.setattr(crawl_pointers, "_REMEMBERED", 1)
    k, o = Container(aws), Container(aws)
    job_k = new_job(k, "job-k")
    list_pages(k, job_k, [1, 2])
    records = {r.url: r for r in o.crawldb.site_urls(SITE)}
    assert records[url(1)].signature is None
    assert settle(k, job_k, [url(1)], "sig-k")[0] == [url(1)]
    stale = o.crawldb.put_urls(SITE, [orphaned(records[url(1)], job_id="job-o")])
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert stale == [url(1)] or final.signature == "sig-k", "K's fetch was lost"


def test_takeover_keeps_a_moved_pages_whole_write_made_after_the_lookup(aws: AwsAdapters) -> None:
    """M lists url1, K lists it too (M's page moved); J's listing writes url1's pointer and dies. J's redelivered
    reading looks it up; M settles (a whole write on the pointer, tombstoning J's dead batch); J takes over."""
    m, k, j = Container(aws), Container(aws), Container(aws)
    job_m, job_k, job_j = new_job(m, "job-m"), new_job(k, "job-k"), new_job(j, "job-j")
    list_pages(m, job_m, [1])
    list_pages(k, job_k, [1])
    base = j.crawldb.pointers.read(SITE, [url(1)])[url(1)]
    assert j.store.listing.put_pointer(SITE, Ref(job_j, "dead0000dead0000"), url_key(sitemap_url()), url(1), base)
    j2 = Container(aws)
    priors = j2.crawldb.get_urls(SITE, [url(1)])
    assert settle(m, job_m, [url(1)], "sig-m")[0] == [url(1)]
    listed = record(j2, job_j, 1, priors)
    if listed.stale:
        assert list_pages(j2, job_j, [1]) == [url(1)]
    final = Container(aws).crawldb.get_urls(SITE, [url(1)])[url(1)]
    assert final.signature == "sig-m", "M's fetch was lost"


def test_a_failed_guard_reports_every_url_it_guards(aws: AwsAdapters, monkeypatch: pytest.MonkeyPatch) -> None:
    """J's pages 1-3 were moved by K (K's pages open). J's settlement writes them whole, guarded by one moved mark
    on K's batch; K settles page 1 first: the mark fails, and only one URL is reported stale per round."""
    j, k = Container(aws), Container(aws)
    job_j, job_k = new_job(j, "job-j"), new_job(k, "job-k")
    urls = [url(n) for n in (1, 2, 3)]
    list_pages(j, job_j, [1, 2, 3])
    list_pages(k, job_k, [1, 2, 3])
    claimed = j.store.claim_pages(job_j, urls, lease("pj"), now=NOW)
    outcomes = [
        PageOutcome(r.model_copy(update={"status": UrlStatus.COMPLETED}), crawl=fetched(r.known, "sig-j"))
        for r in claimed
    ]
    first = j.store.finish_pages(job_j, outcomes, lease("pj"), site=SITE)
    assert sorted(first.stale) == sorted(urls)  # (K's pages open, read now: stale)
    priors = j.crawldb.get_urls(SITE, urls)  # (remembered: K's pages open, K's batch not settled)
    assert settle(k, job_k, [url(1)], "sig-k")[0] == [url(1)]
    again = [
        PageOutcome(o.record, crawl=fetched(listed_by(job_j, o.record.url, priors[o.record.url]), "sig-j"))
        for o in outcomes
    ]
    monkeypatch.setattr(page_batches, "_STATE_RETRIES", 2)
    settled = j.store.finish_pages(job_j, again, lease("pj"), site=SITE)
    assert sorted(settled.applied + settled.stale) == sorted(urls), "a page was neither applied nor stale"


def test_a_chunk_whose_pointers_name_too_many_batches_and_sitemaps_is_listed_in_halves(aws: AwsAdapters) -> None:
    """Ninety-eight URLs each listed by a sitemap of its own in a job still fetching them, then all listed by
    one sitemap of another job: a chunk of 49 would move 49 open pages' batches and 49 other sitemaps' epochs,
    past DynamoDB's 100 items a transaction. It is halved before anything is written, and every URL is
    listed."""
    c = Container(aws)
    ns = list(range(98))
    new_job(c, "job-1")
    c.store.add_sitemaps(
        "job-1", [SitemapRecord(url=sitemap_url(n + 2), origin=SitemapOrigin.INDEX, depth=1) for n in ns]
    )
    for n in ns:
        assert c.store.claim_sitemap("job-1", sitemap_url(n + 2), lease("s"), now=NOW) is not None
        page = SitemapURL(
            url=url(n), sitemap=sitemap_url(n + 2), discovered_at=T0, known=listed_by("job-1", url(n), None)
        )
        recorded = c.store.record_pages("job-1", sitemap_url(n + 2), [page], checkpoint=1, lease=lease("s"), site=SITE)
        assert [p.url for p in recorded.new] == [url(n)]
    new_job(c, "job-2")
    assert sorted(list_pages(c, "job-2", ns)) == sorted(url(n) for n in ns)
    batches = {r.cur.bid for r in c.crawldb.pointers.read(SITE, [url(n) for n in ns]).values() if r.cur}
    assert len(batches) == 4  # (each chunk of 49 halved: 24 and 25, twice)
    assert {r.last_listed_job for r in Container(aws).crawldb.get_urls(SITE, [url(n) for n in ns]).values()} == {
        "job-2"
    }


class Calls:
    """The DynamoDB operations a client makes while counted (a query of a batch's outcome items apart)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.made: Counter[str] = Counter()

    def _count(self, **kwargs: Any) -> None:
        name = kwargs["model"].name
        if name == "Query" and "#O#" in str(kwargs["params"].get("ExpressionAttributeValues")):
            name = "Query of outcomes"
        self.made[name] += 1

    def __enter__(self) -> Calls:
        self.client.meta.events.register("before-parameter-build.dynamodb.*", self._count, unique_id="calls-counted")
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.meta.events.unregister("before-parameter-build.dynamodb.*", unique_id="calls-counted")


def test_the_records_of_settled_batches_are_read_by_key_and_without_the_names_by_query(aws: AwsAdapters) -> None:
    c = Container(aws)
    job_id = new_job(c, "job-one")
    urls = list_pages(c, job_id, list(range(120)))  # (three listed batches)
    assert settle(c, job_id, urls[:10], "sig-1", token="p1")[0] == urls[:10]
    assert settle(c, job_id, urls[10:20], "sig-2", token="p2")[0] == urls[10:20]  # (the same batch again)
    assert settle(c, job_id, urls[100:], "sig-3", token="p3")[0] == urls[100:]
    expected = {u: "sig-1" for u in urls[:10]} | {u: "sig-2" for u in urls[10:20]} | {u: "sig-3" for u in urls[100:]}

    def signatures() -> tuple[dict[str, str | None], Counter[str]]:
        reader = Container(aws)
        with Calls(aws.store.client) as calls:
            records = reader.crawldb.get_urls(SITE, urls)
        return {u: r.signature for u, r in records.items() if r.signature}, calls.made

    found, made = signatures()
    assert found == expected
    assert made["Query of outcomes"] == 0 and made["BatchGetItem"] == 6
    # (pointers: two reads of a hundred; the batches; their states; their outcomes; the states again, for the
    # pages still to be settled)
    # A batch whose states do not name its settlements (settled before they did), or whose job is gone:
    # its outcomes are found by a query of the batch's items.
    states = [
        item
        for item in aws.store.jobs.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :b)",
            ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}, ":b": {"S": "BATCH#"}},
        )
        if item["sk"]["S"].endswith("#S")
    ]
    settled = [item for item in states if "co" in item]
    assert len(states) == 3 and len(settled) == 2  # (the middle batch has no settlement)
    first, last = ({"pk": item["pk"], "sk": item["sk"]} for item in settled)
    aws.store.client.update_item(TableName=aws.store.table, Key=first, UpdateExpression="REMOVE co")
    aws.store.client.delete_item(TableName=aws.store.table, Key=last)
    found, made = signatures()
    assert found == expected
    assert made["Query of outcomes"] == 2


def test_records_written_whole_go_many_a_transaction_and_one_that_moved_is_refused_alone(aws: AwsAdapters) -> None:
    c = Container(aws)
    job_id = new_job(c, "job-one")
    urls = list_pages(c, job_id, list(range(30)))
    assert settle(c, job_id, urls, "sig-1")[0] == urls
    records = c.crawldb.get_urls(SITE, urls)
    other = Container(aws)
    moved = orphaned(other.crawldb.get_urls(SITE, [urls[3]])[urls[3]], job_id="job-b")
    assert other.crawldb.put_urls(SITE, [moved]) == []
    with Calls(aws.store.client) as calls:
        stale = c.crawldb.put_urls(SITE, [orphaned(records[u], job_id="job-a") for u in urls])
    assert stale == [urls[3]]  # (moved since this container read it)
    # The first 25 in one transaction, refused for the one that moved, then one by one; the last 5 in one.
    assert calls.made["TransactWriteItems"] == 1 + 25 + 1
    after = Container(aws).crawldb.get_urls(SITE, urls)
    assert {u: r.orphaned_job for u, r in after.items()} == {u: "job-b" if u == urls[3] else "job-a" for u in urls}


def test_a_jobs_few_records_are_read_by_key_and_as_its_batches_hold_them(aws: AwsAdapters) -> None:
    c = Container(aws)
    job_id = new_job(c, "job-one")
    urls = list_pages(c, job_id, list(range(60)))
    assert settle(c, job_id, urls[:30], "sig-1")[0] == urls[:30]
    whole = {url: CrawlRecord.model_validate_json(text) for url, text in c.crawldb.pointers.job_records(SITE, job_id)}
    asked = urls[25:35]  # (settled and not)
    with Calls(aws.store.client) as calls:
        found = Container(aws).crawldb.job_urls(SITE, job_id, asked)
    assert found == {url: whole[url] for url in asked}
    assert calls.made["Query"] == 0 and calls.made["Query of outcomes"] == 0
    # Another job lists one of them since: its pointer names the job's batch still, as the one its record
    # came from; two other jobs: it names neither, and the job's batches are read whole.
    list_pages(c, new_job(c, "job-two"), [30])
    with Calls(aws.store.client) as calls:
        found = Container(aws).crawldb.job_urls(SITE, job_id, asked)
    assert found == {url: whole[url] for url in asked} and calls.made["Query"] == 0
    list_pages(c, new_job(c, "job-three"), [30])
    with Calls(aws.store.client) as calls:
        found = Container(aws).crawldb.job_urls(SITE, job_id, asked)
    assert found == {url: whole[url] for url in asked}
    assert calls.made["Query"] >= 16


def test_a_settlement_the_states_show_and_do_not_name_has_the_batchs_outcomes_found_by_query(aws: AwsAdapters) -> None:
    """A settlement made by a version that did not name its outcome items (a job that ran across an upgrade,
    or a container still running the version before), before or after one that did."""
    c = Container(aws)
    job_id = new_job(c, "job-one")
    urls = list_pages(c, job_id, list(range(20)))
    assert settle(c, job_id, urls[:5], "sig-1", token="p1")[0] == urls[:5]
    assert settle(c, job_id, urls[5:10], "sig-2", token="p2")[0] == urls[5:10]
    (states,) = [
        item
        for item in aws.store.jobs.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :b)",
            ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}, ":b": {"S": "BATCH#"}},
        )
        if item["sk"]["S"].endswith("#S")
    ]
    first = sorted(states["co"]["SS"])[0]  # (the first settlement's: as if it had not named it)
    aws.store.client.update_item(
        TableName=aws.store.table,
        Key={"pk": states["pk"], "sk": states["sk"]},
        UpdateExpression="DELETE co :first",
        ExpressionAttributeValues={":first": {"SS": [first]}},
    )
    with Calls(aws.store.client) as calls:
        records = Container(aws).crawldb.get_urls(SITE, urls)
    assert {u: r.signature for u, r in records.items() if r.signature} == (
        {u: "sig-1" for u in urls[:5]} | {u: "sig-2" for u in urls[5:10]}
    )
    assert calls.made["Query of outcomes"] == 1


def test_the_orphan_pass_reads_no_batch_of_its_own_jobs_committed_listings(aws: AwsAdapters) -> None:
    """Its job's own listings are left out by their pointers and the job's states items, unread; a listing of
    the job that never committed is not the job's: its URLs' records are read as the batch before holds them."""
    c = Container(aws)
    one = new_job(c, "job-one")
    urls = list_pages(c, one, list(range(60)))
    settle(c, one, urls[:20], "sig-1")
    two = new_job(c, "job-two")
    list_pages(c, two, list(range(30)))
    # A listing of job-two whose pointers moved and whose transaction never came (a container that died).
    c.store.batches.jobs.transact = lambda items: (_ for _ in ()).throw(RuntimeError("died"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="died"):
        list_pages(c, two, [40, 41])
    every = {r.url: r for r in Container(aws).crawldb.site_urls(SITE)}
    read: list[str] = []

    def keys_read(**kwargs: Any) -> None:
        for request in kwargs["params"].get("RequestItems", {}).values():
            read.extend(key["sk"]["S"] for key in request["Keys"])

    client = aws.store.client
    client.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", keys_read, unique_id="keys-read")
    try:
        left = {r.url: r for r in Container(aws).crawldb.site_urls(SITE, unless_listed_by=two)}
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb.BatchGetItem", unique_id="keys-read")
    assert left == {u: r for u, r in every.items() if r.last_listed_job != two}
    assert sorted(left) == sorted(urls[30:]) and left[url(40)].last_listed_job == one
    pointers = Container(aws).crawldb.pointers.fetch(SITE, [url(0), url(40)])
    committed, dead = (pointers[u].cur for u in (url(0), url(40)))
    assert committed is not None and dead is not None and committed != dead
    assert read and not [key for key in read if key.startswith(f"CB#{two}#{committed.bid}")]
    assert f"CB#{two}#{dead.bid}" in read  # (read, and found never committed)


def test_settled_records_whose_snapshot_is_their_listed_ones_are_stored_by_reference_once_turned_on(
    aws: AwsAdapters,
) -> None:
    """With ``snapshot_refs`` (HARVEST_SNAPSHOT_REFS=1) a settled record's snapshot, its previous fetch for a
    page fetched again, is stored as its listed record's; every reader reads the record ``body_of`` made."""
    c = Container(aws)
    c.store.batches.snapshot_refs = True
    for job_id, signature in (("job-one", "sig-1"), ("job-two", "sig-2")):
        urls = list_pages(c, new_job(c, job_id), list(range(12)))
        claimed = c.store.claim_pages(job_id, urls, lease("p"), now=NOW)
        outcomes = [
            PageOutcome(r.model_copy(update={"status": UrlStatus.COMPLETED}), crawl=fetched(r.known, signature))
            for r in claimed
        ]
        assert c.store.finish_pages(job_id, outcomes, lease("p"), site=SITE).stale == []
    lines = [
        line
        for item in aws.store.jobs.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :b)",
            ExpressionAttributeValues={":pk": {"S": "JOB#job-two"}, ":b": {"S": "BATCH#"}},
        )
        if "#O#" in item["sk"]["S"]
        for line in body_text(item).split("\n")
    ]
    assert len(lines) == 12 and all('"_k":"="' in line for line in lines)
    expected = {o.record.url: body_of(o.record) for o in outcomes}
    reader = Container(aws)  # (another container: the setting is the writer's only)
    assert {r.url: body_of(r) for r in reader.store.pages("job-two")} == expected
    assert sorted(reader.store.page_bodies("job-two")) == sorted(expected.values())
    assert body_of(reader.store.get_page("job-two", url(3))) == expected[url(3)]  # type: ignore[arg-type]
    known = reader.store.get_page("job-two", url(3)).known  # type: ignore[union-attr]
    assert known is not None and known.signature == "sig-1"  # (its previous fetch)


class Killed(BaseException):
    """The container died (nothing catches it)."""


def test_crawl_records_a_settlement_wrote_before_dying_are_never_read_as_the_batchs(aws: AwsAdapters) -> None:
    """A settlement writes its crawl outcome item apart, before the transaction that names it: one that dies
    between the two leaves an item nothing names, which no reading takes for the batch's records: by key
    (the states' names), by query (its job's items gone: the crawl batch item's names), or a job's batches
    read whole."""
    c = Container(aws)
    job_id = new_job(c, "job-one")
    urls = list_pages(c, job_id, list(range(5)))
    dying = Container(aws)
    claimed = dying.store.claim_pages(job_id, urls[:1], lease("dies", seconds=10), now=NOW)
    lost = [
        PageOutcome(r.model_copy(update={"status": UrlStatus.COMPLETED}), crawl=fetched(r.known, "sig-lost"))
        for r in claimed
    ]
    with (
        mock.patch.object(dying.store.jobs, "transact", side_effect=Killed("before its transaction")),
        pytest.raises(Killed),
    ):
        dying.store.finish_pages(job_id, lost, lease("dies", seconds=10), site=SITE)
    assert crawl_items(aws)["CBO"] == 1  # (what it left)
    again = Container(aws)  # (its message again once the lease lapsed: sent back to wait)
    assert [r.url for r in again.store.claim_pages(job_id, urls[:1], lease("again"), now=NOW + 30)] == urls[:1]
    retry = [PageRetry(urls[0], 1, "HTTP 503", T0)]
    assert again.store.retry_pages(job_id, retry, lease("again")) == urls[:1]
    assert settle(c, job_id, urls[1:2], "sig-1", token="p1")[0] == urls[1:2]  # (another page of the batch)

    def signatures() -> dict[str, str | None]:
        records = Container(aws).crawldb.get_urls(SITE, urls)
        return {u: r.signature for u, r in records.items()}

    def whole() -> dict[str, str | None]:
        found = Container(aws).crawldb.pointers.job_records(SITE, job_id)
        return {u: CrawlRecord.model_validate_json(text).signature for u, text in found}

    expected = {u: "sig-1" if u == urls[1] else None for u in urls}
    assert signatures() == expected
    assert whole() == expected
    job_items = {"KeyConditionExpression": "pk = :pk", "ExpressionAttributeValues": {":pk": {"S": f"JOB#{job_id}"}}}
    for item in list(aws.store.jobs.query(**job_items)):  # (the job's items expired)
        aws.store.client.delete_item(TableName=aws.store.table, Key={"pk": item["pk"], "sk": item["sk"]})
    assert signatures() == expected
    assert whole() == expected
