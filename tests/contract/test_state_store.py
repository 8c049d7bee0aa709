"""The state store contract: the guarantees the engine's exact accounting rests on, for both adapters."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from harvester.adapters.local import record_rows
from harvester.crawldb.crawl_state import listed
from harvester.crawldb.schedule import Schedule
from harvester.model.messages import JobRequest, PageTask, SitemapOrigin
from harvester.model.records import (
    JobCounts,
    JobRecord,
    JobStatus,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    StepDocument,
    UrlStatus,
    body_of,
)
from harvester.model.state import (
    Checkpoint,
    EndProgress,
    Lease,
    ListedBatch,
    PageOutcome,
    PageRetry,
    SitemapOutcome,
    SitemapRelease,
)
from harvester.pipeline import recovery, scheduler
from harvester.pipeline.context import StepContext
from harvester.pipeline.listed_rows import first_listings
from harvester.pipeline.recovery import Resumed
from harvester.ports import LeaseLost
from harvester.settings import EngineSettings
from harvester.sitemap import PageEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NOW = T0.timestamp()
SITE = "https://example.com/"


def new_job(backend, job_id="job-1", **request):
    job = JobRecord(job_id=job_id, request=JobRequest(site=SITE, **request), start_time=T0)
    backend.store.create_job(job)
    backend.store.mark_seeded(job_id)
    return job_id


def sitemap(n, **fields):
    return SitemapRecord(url=f"{SITE}sitemap-{n}.xml", origin=SitemapOrigin.INDEX, depth=2, **fields)


def page(n, **fields):
    return SitemapURL(url=f"{SITE}page-{n}.html", sitemap=f"{SITE}sitemap-1.xml", **fields)


def lease(token="a", seconds=60.0):
    return Lease(token=token, until=NOW + seconds)


def counts(backend, job_id) -> JobCounts:
    snapshot = backend.store.snapshot(job_id)
    assert snapshot is not None
    assert backend.store.counts(job_id) == snapshot.counts  # the cheap read agrees when nothing is in flight
    return snapshot.counts


def claimed_sitemap(backend, job_id, n=1, token="a"):
    backend.store.add_sitemaps(job_id, [sitemap(n)])
    record = backend.store.claim_sitemap(job_id, sitemap(n).url, lease(token), now=NOW)
    assert record is not None
    return record


# jobs -------------------------------------------------------------------------------------------------


def test_a_job_id_is_one_job(backend):
    first = JobRecord(job_id="job-x", request=JobRequest(site=SITE), start_time=T0)
    other = JobRecord(job_id="job-x", request=JobRequest(site="https://other.example/"), start_time=T0)
    assert backend.store.create_job(first).site == SITE
    assert backend.store.create_job(other).site == SITE  # the stored job wins
    assert backend.store.get_job("job-x").status is JobStatus.PENDING
    assert backend.store.get_job("nope") is None


def test_seeding_moves_only_a_pending_job(backend):
    job_id = new_job(backend)
    assert backend.store.get_job(job_id).status is JobStatus.IN_PROGRESS
    assert backend.store.end_job(job_id, JobStatus.COMPLETED, end_time=T0 + timedelta(seconds=5))
    backend.store.mark_seeded(job_id)
    assert backend.store.get_job(job_id).status is JobStatus.COMPLETED


def test_a_job_ends_exactly_once(backend):
    job_id = new_job(backend)
    end = T0 + timedelta(seconds=9)
    outcomes = [backend.store.end_job(job_id, JobStatus.COMPLETED, end_time=end) for _ in range(3)]
    assert outcomes == [True, False, False]
    assert not backend.store.end_job(job_id, JobStatus.FAILED, end_time=end, error_message="late")
    job = backend.store.get_job(job_id)
    assert (job.status, job.end_time, job.error_message) == (JobStatus.COMPLETED, end, None)


def test_active_jobs_until_the_result_is_written(backend):
    job_id = new_job(backend)
    assert backend.store.active_job_ids() == [job_id]
    backend.store.end_job(job_id, JobStatus.COMPLETED, end_time=T0 + timedelta(seconds=1))
    assert backend.store.active_job_ids() == [job_id]  # a resume must still write its result
    backend.store.set_result(job_id, "jobs/job-1/result.json")
    assert backend.store.active_job_ids() == []
    assert backend.store.get_job(job_id).result_key == "jobs/job-1/result.json"


def test_ticks_with_little_time_look_after_every_running_job_in_turn(backend, monkeypatch):
    """Ticks every five minutes whose invocation has time for three of ten running jobs each look at three,
    say how many they left, and begin elsewhere: over 70 ticks every job is looked at, about as often (a
    place moved on with the minutes would begin at two places only)."""
    jobs = sorted(new_job(backend, f"job-{n}") for n in range(10))
    looked: list[str] = []
    monkeypatch.setattr(scheduler, "resume", lambda ctx, job_id, **_: looked.append(job_id) or Resumed(job_id))
    ctx = SimpleNamespace(store=backend.store)
    reserve = scheduler.TICK_RESERVE
    for n in range(70):
        left = iter([reserve + 300, reserve + 100, reserve + 1, reserve - 1])  # (seconds left before each look)
        report = scheduler.tick(ctx, None, now=T0 + timedelta(minutes=5 * n), time_left=left.__next__)
        assert report.not_looked_at == 7
    assert len(looked) == 210 and {looked.count(job) for job in jobs} <= set(range(10, 35))


# sitemaps ---------------------------------------------------------------------------------------------


def test_a_sitemap_is_registered_and_counted_once_per_job(backend):
    job_id = new_job(backend)
    stored = backend.store.add_sitemaps(job_id, [sitemap(1), sitemap(2), sitemap(1)])
    assert sorted(s.url for s in stored) == sorted({sitemap(1).url, sitemap(2).url})
    again = backend.store.add_sitemaps(job_id, [sitemap(2, parent="someone else"), sitemap(3)])
    assert [s.parent for s in again] == [None, None]  # the stored record, not the one offered
    assert counts(backend, job_id).sitemaps_total == 3
    other = new_job(backend, "job-2")
    backend.store.add_sitemaps(other, [sitemap(1)])
    assert counts(backend, other).sitemaps_total == 1


def test_a_sitemap_registered_final_counts_as_done(backend):
    job_id = new_job(backend)
    backend.store.add_sitemaps(job_id, [sitemap(1, status=SitemapStatus.INVALID, error_message="recursion")])
    c = counts(backend, job_id)
    assert (c.sitemaps_total, c.sitemaps_done, c.sitemaps_ok) == (1, 1, 0)


def test_a_sitemap_claim_is_exclusive_until_its_lease_lapses(backend):
    job_id = new_job(backend)
    backend.store.add_sitemaps(job_id, [sitemap(1)])
    first = backend.store.claim_sitemap(job_id, sitemap(1).url, lease("a", 60), now=NOW)
    assert first is not None and first.attempts == 1 and first.status is SitemapStatus.PROCESSING
    assert backend.store.claim_sitemap(job_id, sitemap(1).url, lease("b", 60), now=NOW + 30) is None
    taken = backend.store.claim_sitemap(job_id, sitemap(1).url, lease("b", 60), now=NOW + 61)
    assert taken is not None and taken.attempts == 2
    # The first worker lost it: its writes are refused.
    with pytest.raises(LeaseLost):
        backend.store.record_pages(job_id, sitemap(1).url, [page(1)], checkpoint=1, lease=lease("a"))
    assert not backend.store.finish_sitemap(job_id, sitemap(1).url, SitemapOutcome(SitemapStatus.COMPLETED), lease("a"))
    assert backend.store.claim_sitemap(job_id, "https://example.com/unknown.xml", lease(), now=NOW) is None


def test_recording_pages_counts_the_new_ones_and_moves_the_checkpoint(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    url = sitemap(1).url
    recorded = backend.store.record_pages(job_id, url, [page(1), page(2), page(3)], checkpoint=3, lease=lease())
    assert [p.url for p in recorded.new] == [page(1).url, page(2).url, page(3).url] and recorded.stale == []
    recorded = backend.store.record_pages(job_id, url, [page(2), page(4)], checkpoint=5, lease=lease())
    assert [p.url for p in recorded.new] == [page(4).url]
    backend.store.mark_enqueued(job_id, url, Checkpoint(5, digest="d", probes=2), lease())
    record = backend.store.get_sitemap(job_id, url)
    assert (record.pages_recorded, record.pages_enqueued, record.pages_new) == (5, 5, 4)
    assert (record.checkpoint_digest, record.probes_spent) == ("d", 2)
    backend.store.mark_enqueued(job_id, url, Checkpoint(3, digest="older"), lease())  # a reading started over
    record = backend.store.get_sitemap(job_id, url)
    assert (record.pages_enqueued, record.checkpoint_digest) == (5, "d")
    c = counts(backend, job_id)
    assert (c.urls_total, c.urls_succeeded, c.urls_failed) == (4, 0, 0)
    assert backend.store.get_page(job_id, page(4).url).status is UrlStatus.PENDING


def test_more_pages_than_one_transaction_holds(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    pages = [page(n) for n in range(250)]
    backend.store.record_pages(job_id, sitemap(1).url, pages[:120], checkpoint=120, lease=lease())
    recorded = backend.store.record_pages(job_id, sitemap(1).url, pages, checkpoint=250, lease=lease())
    assert len(recorded.new) == 130
    assert counts(backend, job_id).urls_total == 250
    assert backend.store.get_sitemap(job_id, sitemap(1).url).pages_recorded == 250


def test_pages_recorded_final_are_counted_as_such(backend):
    job_id = new_job(backend, fetch_pages=False)
    claimed_sitemap(backend, job_id)
    done = [page(n, status=UrlStatus.COMPLETED) for n in range(3)]
    backend.store.record_pages(job_id, sitemap(1).url, done, checkpoint=3, lease=lease())
    c = counts(backend, job_id)
    assert (c.urls_total, c.urls_succeeded) == (3, 3)


def test_a_refused_batch_leaves_its_pages_new_to_the_job(backend):
    """A batch whose write is refused (here: the lease is someone else's) makes none of its URLs the job's:
    the next attempt records them, and only then are they de-duplicated."""
    job_id = new_job(backend, fetch_pages=False)
    claimed_sitemap(backend, job_id)
    url = sitemap(1).url
    done = [page(n, status=UrlStatus.COMPLETED, fetch_reason="listed") for n in range(4)]
    with pytest.raises(LeaseLost):
        backend.store.record_pages(job_id, url, done[:3], checkpoint=3, lease=lease("intruder"))
    assert len(backend.store.record_pages(job_id, url, done[:3], checkpoint=3, lease=lease()).new) == 3
    again = backend.store.record_pages(job_id, url, [done[1], done[3], done[3]], checkpoint=6, lease=lease())
    assert [p.url for p in again.new] == [done[3].url]
    assert counts(backend, job_id).urls_total == 4
    assert backend.store.get_page(job_id, done[2].url) == done[2]  # a final record is found too
    bodies = list(backend.store.page_bodies(job_id))
    by_url = sorted((SitemapURL.model_validate_json(b) for b in bodies), key=lambda p: p.url)
    assert by_url == done
    assert sorted(bodies) == sorted(body_of(p) for p in done)  # as stored, nothing re-serialised


def test_records_written_straight_as_json_are_recorded_and_read_like_the_others(backend):
    """A first listing in a job that fetches nothing arrives serialised already (``ListedRow``,
    ``CrawlRow``), beside records built as models: both count the same, both crawl records are written,
    every record reads back as stored, and the job's end gets them all (a store that keeps the rows a
    batch at a time hands them over whole, with their feed lines and counts by kind)."""
    job_id = new_job(backend, fetch_pages=False)
    claimed_sitemap(backend, job_id)
    url = sitemap(1).url
    entries = [PageEntry(page(n).url, last_modified=T0, change_frequency="daily", priority=0.75) for n in range(3)]
    rows = [
        r
        for r in first_listings([(e.url, e) for e in entries], sitemap=url, job_id=job_id, now=T0, schedule=Schedule())
        if r
    ]
    models = [page(3, status=UrlStatus.COMPLETED, fetch_reason="listed"), page(4)]  # (page 4: open)
    known = listed(
        None,
        url=page(3).url,
        lastmod=None,
        changefreq=None,
        priority=0.5,
        sitemap=url,
        job_id=job_id,
        now=T0,
        schedule=Schedule(),
    )
    recorded = backend.store.record_pages(
        job_id,
        url,
        [rows[0][0], models[0], rows[1][0], models[1], rows[2][0], rows[0][0]],
        checkpoint=6,
        lease=lease(),
        site=SITE,
        crawl={**{row.url: crawl for row, crawl in rows}, known.url: known},
    )
    assert [p.url for p in recorded.new] == [page(n).url for n in (0, 3, 1, 4, 2)]
    c = counts(backend, job_id)
    assert (c.urls_total, c.urls_succeeded, c.urls_failed) == (5, 4, 0)
    stored = backend.crawldb.get_urls(SITE, [page(n).url for n in range(4)])
    for row, crawl in rows:
        assert body_of(stored[row.url]) == crawl.body
        assert backend.store.get_page(job_id, row.url) == SitemapURL.model_validate_json(row.body)
    assert stored[known.url] == known
    bodies = list(backend.store.page_bodies(job_id))
    assert sorted(bodies) == sorted([*(row.body for row, _ in rows), *(body_of(p) for p in models)])
    flat: list[str] = []
    for item in backend.store.job_records(job_id):
        if isinstance(item, ListedBatch):
            flat += item.bodies.split("\n")
            assert item.kinds == {"new": item.count} and item.count == len(item.bodies.split("\n"))
            assert item.feed.split(b"\n") == [r.feed for r, _ in rows if r.body in item.bodies]
        else:
            flat.append(item)
    assert sorted(flat) == sorted(bodies)
    read_on_after_any_page(backend.store, job_id)  # (one batch on AWS; locally the records kept a row, then it)


def read_on_after_any_page(store: Any, job_id: str) -> list[Any]:
    """Checks that the job's record pages hold what ``job_records`` gives, in its order, and that a pass
    resumed after any page reads exactly the pages after it; the pages."""
    pages = list(store.job_record_pages(job_id))
    assert [item for p in pages for item in p.items] == list(store.job_records(job_id))
    for n, one in enumerate(pages):
        rest = [item for later in store.job_record_pages(job_id, after=one.after) for item in later.items]
        assert rest == [item for later in pages[n + 1 :] for item in later.items], n
    return pages


def test_a_sitemap_finishes_exactly_once(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    outcome = SitemapOutcome(SitemapStatus.COMPLETED, kind="urlset", children=0, dropped={"not_http": 2})
    assert backend.store.finish_sitemap(job_id, sitemap(1).url, outcome, lease())
    assert not backend.store.finish_sitemap(job_id, sitemap(1).url, outcome, lease())
    record = backend.store.get_sitemap(job_id, sitemap(1).url)
    assert (record.status, record.kind, record.dropped) == (SitemapStatus.COMPLETED, "urlset", {"not_http": 2})
    c = counts(backend, job_id)
    assert (c.sitemaps_total, c.sitemaps_done, c.sitemaps_ok) == (1, 1, 1)
    assert backend.store.claim_sitemap(job_id, sitemap(1).url, lease("z"), now=NOW + 10_000) is None


def test_robots_txt_is_done_but_not_a_sitemap_read(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    backend.store.finish_sitemap(
        job_id, sitemap(1).url, SitemapOutcome(SitemapStatus.COMPLETED, kind="robots"), lease()
    )
    c = counts(backend, job_id)
    assert (c.sitemaps_done, c.sitemaps_ok) == (1, 0)


def test_a_released_sitemap_is_read_again_from_its_checkpoint(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    url = sitemap(1).url
    backend.store.record_pages(job_id, url, [page(1), page(2)], checkpoint=2, lease=lease())
    assert not backend.store.release_sitemap(job_id, url, lease("other"), SitemapRelease("HTTP 503"))
    assert backend.store.release_sitemap(job_id, url, lease(), SitemapRelease("HTTP 503 Service Unavailable"))
    record = backend.store.get_sitemap(job_id, url)
    assert (record.status, record.pages_recorded, record.error_message) == (
        SitemapStatus.PENDING,
        2,
        "HTTP 503 Service Unavailable",
    )
    assert [s.url for s in backend.store.sitemaps(job_id, status=SitemapStatus.PENDING)] == [url]
    again = backend.store.claim_sitemap(job_id, url, lease("b"), now=NOW)  # no need to wait for the old lease
    assert again is not None and again.attempts == 2
    c = counts(backend, job_id)
    assert (c.sitemaps_total, c.sitemaps_done, c.urls_total) == (1, 0, 2)


def test_a_reading_in_steps_keeps_its_document_noted_until_the_sitemap_is_finished(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    url = sitemap(1).url
    backend.store.record_pages(job_id, url, [page(1)], checkpoint=1, lease=lease())
    note = StepDocument(key="sites/x/sitemaps/a/b", signature="ab" * 32, http_status=200, final_url=url, etag='"e"')
    assert backend.store.release_sitemap(job_id, url, lease(), SitemapRelease(None, 0, note))
    assert backend.store.get_sitemap(job_id, url).step_document == note
    # (a release without one, a failure given back, keeps it: the reading goes on on the same document)
    assert backend.store.claim_sitemap(job_id, url, lease("b"), now=NOW) is not None
    assert backend.store.release_sitemap(job_id, url, lease("b"), SitemapRelease("busy", 0))
    assert backend.store.get_sitemap(job_id, url).step_document == note
    assert backend.store.claim_sitemap(job_id, url, lease("c"), now=NOW) is not None
    done = backend.store.finish_sitemap(job_id, url, SitemapOutcome(SitemapStatus.COMPLETED, kind="urlset"), lease("c"))
    assert done is not None and done.step_document is None
    assert backend.store.get_sitemap(job_id, url).step_document is None


def test_sitemaps_by_status(backend):
    job_id = new_job(backend)
    backend.store.add_sitemaps(job_id, [sitemap(1), sitemap(2), sitemap(3)])
    backend.store.claim_sitemap(job_id, sitemap(2).url, lease(), now=NOW)
    backend.store.claim_sitemap(job_id, sitemap(3).url, lease(), now=NOW)
    backend.store.finish_sitemap(
        job_id, sitemap(3).url, SitemapOutcome(SitemapStatus.FAILED, error_message="x"), lease()
    )
    by = {s: sorted(r.url for r in backend.store.sitemaps(job_id, status=s)) for s in SitemapStatus}
    assert by[SitemapStatus.PENDING] == [sitemap(1).url]
    assert by[SitemapStatus.PROCESSING] == [sitemap(2).url]
    assert by[SitemapStatus.FAILED] == [sitemap(3).url]
    assert len(list(backend.store.sitemaps(job_id))) == 3


# pages ------------------------------------------------------------------------------------------------


def recorded(backend, job_id, n_pages):
    claimed_sitemap(backend, job_id)
    backend.store.record_pages(
        job_id, sitemap(1).url, [page(n) for n in range(n_pages)], checkpoint=n_pages, lease=lease()
    )


def test_a_page_is_claimed_by_one_worker_and_settled_once(backend):
    job_id = new_job(backend)
    recorded(backend, job_id, 3)
    urls = [page(n).url for n in range(3)]
    mine = backend.store.claim_pages(job_id, urls, lease("w1"), now=NOW)
    assert sorted(p.url for p in mine) == sorted(urls) and all(p.attempts == 1 for p in mine)
    assert backend.store.claim_pages(job_id, urls, lease("w2"), now=NOW + 1) == []
    done = [
        PageOutcome(mine[0].model_copy(update={"status": UrlStatus.COMPLETED, "http_status": 200})),
        PageOutcome(mine[1].model_copy(update={"status": UrlStatus.FAILED, "error_message": "HTTP 404 Not Found"})),
    ]
    settled = backend.store.finish_pages(job_id, done, lease("w1"))
    assert sorted(settled.applied) == sorted([mine[0].url, mine[1].url]) and settled.stale == []
    assert backend.store.finish_pages(job_id, done, lease("w1")).applied == []  # a duplicate changes nothing
    c = counts(backend, job_id)
    assert (c.urls_total, c.urls_succeeded, c.urls_failed) == (3, 1, 1)
    assert backend.store.get_page(job_id, mine[1].url).error_message == "HTTP 404 Not Found"


def test_a_lapsed_page_lease_is_taken_over_and_the_old_worker_is_ignored(backend):
    job_id = new_job(backend)
    recorded(backend, job_id, 1)
    url = page(0).url
    (old,) = backend.store.claim_pages(job_id, [url], lease("old", 10), now=NOW)
    (new,) = backend.store.claim_pages(job_id, [url], lease("new", 10), now=NOW + 11)
    assert new.attempts == 2
    stale = PageOutcome(old.model_copy(update={"status": UrlStatus.COMPLETED}))
    assert backend.store.finish_pages(job_id, [stale], lease("old", 10)).applied == []
    fresh = PageOutcome(new.model_copy(update={"status": UrlStatus.COMPLETED}))
    assert backend.store.finish_pages(job_id, [fresh], lease("new", 10)).applied == [url]
    assert counts(backend, job_id).urls_succeeded == 1


def test_a_retried_page_goes_back_to_pending(backend):
    job_id = new_job(backend)
    recorded(backend, job_id, 1)
    url = page(0).url
    backend.store.claim_pages(job_id, [url], lease("w"), now=NOW)
    retry = PageRetry(url=url, retries=1, error_message="HTTP 503 Service Unavailable", not_before=T0)
    assert backend.store.retry_pages(job_id, [retry], lease("other")) == []
    assert backend.store.retry_pages(job_id, [retry], lease("w")) == [url]
    record = backend.store.get_page(job_id, url)
    assert (record.status, record.retries, record.error_message) == (UrlStatus.PENDING, 1, retry.error_message)
    assert [p.url for p in backend.store.pages(job_id, status=UrlStatus.PENDING)] == [url]
    assert backend.store.claim_pages(job_id, [url], lease("again"), now=NOW)[0].attempts == 2
    c = counts(backend, job_id)
    assert (c.urls_succeeded, c.urls_failed) == (0, 0)


def test_release_leases_lets_everything_in_progress_be_claimed_now(backend):
    job_id = new_job(backend)
    recorded(backend, job_id, 2)
    backend.store.claim_pages(job_id, [page(0).url], lease("dead", 3600), now=NOW)
    assert backend.store.release_leases(job_id) == 2  # the page and the sitemap
    assert len(backend.store.claim_pages(job_id, [page(0).url], lease("alive"), now=NOW)) == 1
    assert backend.store.claim_sitemap(job_id, sitemap(1).url, lease("alive"), now=NOW) is not None


# the invariant ----------------------------------------------------------------------------------------


def test_counters_always_equal_a_recount_of_the_records(backend):
    """Random interleavings of every move, duplicates included: the counters never drift."""
    rng = random.Random(7)
    job_id = new_job(backend)
    backend.store.add_sitemaps(job_id, [sitemap(n) for n in range(4)])
    for step in range(60):
        n = rng.randrange(4)
        token = f"t{step}"
        move = rng.choice(["sitemap", "sitemap", "pages", "pages", "pages", "finish-sitemap"])
        if move == "sitemap":
            if backend.store.claim_sitemap(job_id, sitemap(n).url, lease(token, 5), now=NOW + step * 10):
                batch = [page(rng.randrange(40)) for _ in range(rng.randrange(1, 6))]
                backend.store.record_pages(job_id, sitemap(n).url, batch, checkpoint=len(batch), lease=lease(token, 5))
        elif move == "finish-sitemap":
            if backend.store.claim_sitemap(job_id, sitemap(n).url, lease(token, 5), now=NOW + step * 10):
                outcome = SitemapOutcome(rng.choice([SitemapStatus.COMPLETED, SitemapStatus.FAILED]), kind="urlset")
                backend.store.finish_sitemap(job_id, sitemap(n).url, outcome, lease(token, 5))
        else:
            urls = [page(rng.randrange(40)).url for _ in range(3)]
            claimed = backend.store.claim_pages(job_id, urls, lease(token, 5), now=NOW + step * 10)
            outcomes = [
                PageOutcome(p.model_copy(update={"status": UrlStatus.COMPLETED}))
                if rng.random() < 0.7
                else PageOutcome(p.model_copy(update={"status": UrlStatus.FAILED, "error_message": "x"}))
                for p in claimed
            ]
            backend.store.finish_pages(job_id, outcomes + outcomes, lease(token, 5))
        assert counts(backend, job_id) == backend.store.recount(job_id), f"after step {step} ({move})"


def test_extensions_of_later_listings_are_kept_first_value_of_each_kind(backend):
    store = backend.store
    url_a, url_b = page(1).url, page(2).url
    new_job(backend)
    first = {"news": {"title": "first"}}
    store.add_extensions("job-1", [(url_a, first), (url_b, {"images": [{"loc": "x"}]})])
    store.add_extensions("job-1", [(url_a, {"news": {"title": "second"}, "videos": [{"title": "v"}]})])
    store.add_extensions("job-1", [])

    assert store.extensions("job-1") == {
        url_a: {"news": {"title": "first"}, "videos": [{"title": "v"}]},
        url_b: {"images": [{"loc": "x"}]},
    }
    assert store.extensions("job-2") == {}


def test_a_job_record_the_previous_version_stored_is_read_with_todays_names(backend):
    """Stored before the outputs took the data model's names (tests/model/test_stored_names.py): the
    page's Last-Modified header and its crawl record's names read as today's, in every way of reading."""
    from harvester.model.records import ListedRow
    from tests.model.test_stored_names import HEADER, OLD_PAGE, expected_crawl

    job_id = new_job(backend)
    claimed = claimed_sitemap(backend, job_id)
    url = "https://example.com/page-1"
    old = ListedRow(url, OLD_PAGE, "unchanged", None)
    backend.store.record_pages(job_id, claimed.url, [old], checkpoint=1, lease=lease())
    for record in (backend.store.get_page(job_id, url), *backend.store.pages(job_id)):
        assert record is not None and record.http_last_modified == HEADER
        assert record.known == expected_crawl()


def test_one_writer_at_a_time_claims_a_jobs_end(backend):
    new_job(backend, "job-1")
    assert backend.store.claim_end("job-1", until=1000.0, now=100.0)
    assert not backend.store.claim_end("job-1", until=1500.0, now=500.0)  # (held until 1000)
    assert backend.store.claim_end("job-1", until=2500.0, now=1001.0)  # (lapsed: its writer is gone)
    assert not backend.store.claim_end("job-1", until=3000.0, now=2000.0)
    assert not backend.store.claim_end("no-such-job", until=1000.0, now=0.0)


def test_a_jobs_end_keeps_its_progress_and_hands_its_claim_to_its_next_step(backend):
    store = backend.store
    new_job(backend, "job-1")
    assert store.claim_end("job-1", until=1000.0, now=100.0) == EndProgress()  # (nothing done yet)
    half = EndProgress(orphans_at="position", removed_lines=("jobs/job-1/end/removed-0.jsonl",), removed=3)
    assert not store.save_end("job-1", half, held=999.0, handed=1200.0)  # (not this writer's claim)
    assert store.save_end("job-1", half, held=1000.0, handed=1200.0)
    assert store.claim_end("job-1", until=1300.0, now=300.0) is None  # (a delivery without the claim handed on)
    assert store.claim_end("job-1", until=1300.0, now=300.0, handed=1200.0) == half  # (the next step)
    assert store.claim_end("job-1", until=1400.0, now=301.0, handed=1200.0) is None  # (that message again)
    assert not store.save_end("job-1", EndProgress(), held=1200.0, handed=1500.0)  # (its claim was taken on)
    assert store.claim_end("job-1", until=2000.0, now=1301.0) == half  # (lapsed: a resume goes on from there)


def test_a_resume_reads_the_open_pages_a_batch_at_a_time_and_goes_on_after_any(backend, monkeypatch):
    monkeypatch.setattr(record_rows, "_PAGE_SIZE", 40)  # (the local store's records in pages, as AWS's batches)
    job_id = new_job(backend)
    recorded(backend, job_id, 250)
    urls = [page(n).url for n in range(250)]
    claimed = backend.store.claim_pages(job_id, urls[:7], lease("dead", 3600), now=NOW)
    done = PageOutcome(claimed[0].model_copy(update={"status": UrlStatus.COMPLETED, "http_status": 200}))
    assert backend.store.finish_pages(job_id, [done], lease("dead", 3600)).applied == [urls[0]]
    batches = list(backend.store.open_pages(job_id))
    assert len(batches) >= 2  # (AWS: batches of 50 pages; locally the pending, then those in processing)
    assert len(read_on_after_any_page(backend.store, job_id)) >= 2
    seen = [p.url for b in batches for p in b.pages]
    assert sorted(seen) == sorted(urls[1:]) and len(seen) == len(set(seen))
    assert len(backend.store.claim_pages(job_id, urls[1:7], lease("alive"), now=NOW)) == 6  # (leases let go)
    for n, batch in enumerate(batches):  # (resumed after each: exactly the pages of the batches after it)
        after = [p.url for later in backend.store.open_pages(job_id, after=batch.after) for p in later.pages]
        assert after == [p.url for later in batches[n + 1 :] for p in later.pages], n
        # (and from the start up to it: those before, each once)
        before = [p.url for b in backend.store.open_pages(job_id, until=batch.after) for p in b.pages]
        assert before == [p.url for b in batches[: n + 1] for p in b.pages], n
    assert backend.store.resume_position(job_id) is None
    backend.store.save_resume(job_id, batches[0].after)
    assert backend.store.resume_position(job_id) == batches[0].after
    backend.store.save_resume(job_id, None)
    assert backend.store.resume_position(job_id) is None


class Sent:
    """A task queue that keeps what is pushed."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []

    def push(self, tasks: Any) -> None:
        self.tasks.extend(tasks)


def resuming(store: Any, *, resume_batches: int) -> tuple[StepContext, Sent]:
    """What a resume of a job in ``store`` needs (it writes no document and reads no crawl record), and the
    queue it sends its tasks to."""
    sent = Sent()
    ctx = StepContext(
        store=store,
        queue=sent,  # type: ignore[arg-type]
        documents=None,  # type: ignore[arg-type]
        fetcher=None,  # type: ignore[arg-type]
        crawldb=None,  # type: ignore[arg-type]
        settings=EngineSettings(resume_batches=resume_batches),
    )
    return ctx, sent


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_resume_that_goes_round_to_the_start_sends_no_page_twice(backend, monkeypatch):
    """A resume that reads to the end of the job's open pages goes on from the start only up to where it began:
    with fewer open pages than it may read (15 of 30 settled since the last resume), none is sent twice."""
    monkeypatch.setattr(record_rows, "_PAGE_SIZE", 10)
    job_id = new_job(backend)
    recorded(backend, job_id, 30)
    urls = [page(n).url for n in range(30)]
    ctx, sent = resuming(backend.store, resume_batches=2)
    assert recovery.resume(ctx, job_id, force=True).pages_resent == 20
    claimed = backend.store.claim_pages(job_id, urls[:15], lease("w", 3600), now=NOW)
    done = [PageOutcome(p.model_copy(update={"status": UrlStatus.COMPLETED, "http_status": 200})) for p in claimed]
    backend.store.finish_pages(job_id, done, lease("w", 3600))
    sent.tasks.clear()
    assert recovery.resume(ctx, job_id, force=True).pages_resent == 15
    assert sorted(task.url for task in sent.tasks if isinstance(task, PageTask)) == sorted(urls[15:])


@pytest.mark.parametrize("most", [100, 0])  # (0: no bound on the batches a resume reads)
@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_resume_short_of_time_stops_after_a_batch_and_the_next_goes_on_from_there(backend, monkeypatch, most):
    """A resume given the time left to its invocation (the scheduler's tick) stops reading open pages once
    ``RESUME_RESERVE`` of it is left, however many batches it may read, and stores where it stopped: the next
    resume sends the pages after those."""
    monkeypatch.setattr(record_rows, "_PAGE_SIZE", 10)
    job_id = new_job(backend)
    recorded(backend, job_id, 50)
    urls = [page(n).url for n in range(50)]
    ctx, sent = resuming(backend.store, resume_batches=most)
    clock = iter([300.0, 100.0, recovery.RESUME_RESERVE - 1])  # (seconds left as each batch is read)

    def time_left() -> float:
        return next(clock, 0.0)

    assert recovery.resume(ctx, job_id, force=True, time_left=time_left).pages_resent == 30
    first = [task.url for task in sent.tasks if isinstance(task, PageTask)]
    sent.tasks.clear()
    # (the rest, then round to where it was)
    assert recovery.resume(ctx, job_id, force=True, time_left=lambda: 300.0).pages_resent == 50
    again = [task.url for task in sent.tasks if isinstance(task, PageTask)]
    assert first == urls[:30] and again == urls[30:] + urls[:30]
