"""Two jobs of one site at once: the crawl database never loses an update.

Another job's writes are injected at the worst moments of a crawl: right after the sitemap worker read the
crawl records of a batch (so its listing writes are stale), and right before the page worker settles its
fetches (so its fetch results are stale). Both must notice, read again, decide again on what the other job
wrote, and leave records that hold both jobs' changes.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.crawldb.crawl_state import Fetched, FetchResult, after_fetch, listed
from harvester.crawldb.schedule import Schedule
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState
from harvester.model.messages import JobRequest
from harvester.model.records import SitemapURL, UrlStatus, utcnow
from harvester.model.state import PageOutcome
from harvester.pipeline.page_outcomes import relisted, with_listing
from harvester.settings import EngineSettings

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)


def their_fetch(record: CrawlRecord) -> CrawlRecord:
    """What the other job writes: a fetch that found new content ("theirs")."""
    answer = Fetched(FetchResult.SUCCESS, 200, signature="theirs", document_key="theirs")
    return after_fetch(record, answer, now=utcnow(), schedule=Schedule())


class OtherJob:
    """Writes the other job's fetch of each of ``urls`` into the crawl database, once, at ``strike``."""

    def __init__(self, harvest: LocalHarvest, site: str, urls: set[str]) -> None:
        self.harvest, self.site, self.urls = harvest, site, set(urls)

    def strike(self, urls: Any) -> None:
        hit = [u for u in urls if u in self.urls]
        if not hit:
            return
        self.urls -= set(hit)
        current = self.harvest.crawldb.get_urls(self.site, hit)
        assert self.harvest.crawldb.put_urls(self.site, [their_fetch(r) for r in current.values()]) == []


class RaceAfterRead:
    """The crawl database as the sitemap worker sees it: the other job writes right after a batch is read."""

    def __init__(self, inner: Any, other: OtherJob) -> None:
        self._inner, self._other = inner, other

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_urls(self, site: str, urls: Any) -> Any:
        found = self._inner.get_urls(site, urls)
        self._other.strike(urls)
        return found


class RaceBeforeSettle:
    """The state store as the page worker sees it: the other job writes right before the fetches settle."""

    def __init__(self, inner: Any, other: OtherJob) -> None:
        self._inner, self._other = inner, other

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def finish_pages(self, job_id: str, outcomes: Any, lease: Any, **kwargs: Any) -> Any:
        self._other.strike([o.record.url for o in outcomes])
        return self._inner.finish_pages(job_id, outcomes, lease, **kwargs)


def crawl(state: Path, request: JobRequest, wrap: Any = None) -> Any:
    with LocalHarvest.open(state) as harvest:
        if wrap is not None:
            wrap(harvest)
        # (the listing's races: every reading lists its URLs one by one, no sitemap's part is adopted whole)
        runner = LocalRunner(harvest, policy=POLICY, settings=EngineSettings(sitemap_parts=False), concurrency=4)
        return asyncio.run(runner.crawl(request))


def records(state: Path, site: str) -> dict[str, CrawlRecord]:
    with LocalHarvest.open(state) as harvest:
        return {r.url: r for r in harvest.crawldb.site_urls(site)}


def test_a_listing_that_lost_the_race_is_decided_again_on_the_winners_record(tmp_path):
    with LiveSite(pages=6, sitemaps=1).serving() as site:
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001)
        crawl(tmp_path, request)
        raced = {site.url(p) for p in site.page_paths()[:3]}
        before = records(tmp_path, site.base)

        def wrap(harvest: LocalHarvest) -> None:
            harvest.crawldb = RaceAfterRead(harvest.crawldb, OtherJob(harvest, site.base, raced))  # type: ignore[assignment]

        outcome = crawl(tmp_path, request, wrap)

        after = records(tmp_path, site.base)
        assert outcome.result.total_urls == 6
        for url in raced:
            # The other job's fetch stands, and this job listed the URL on top of it.
            assert (after[url].signature, after[url].changes) == ("theirs", before[url].changes + 1)
            assert after[url].last_listed_job == outcome.job.job_id
            assert after[url].version == before[url].version + 2


class RaceOnFirstCrawl:
    """The crawl database of a site's first crawl: empty when the job starts, then the other job lists and
    fetches ``urls`` first (this job looks none of them up: its site had no record when it started)."""

    def __init__(self, inner: Any, site: str, urls: set[str]) -> None:
        self._inner, self._site, self._urls = inner, site, urls
        self.lookups = self.scans = self.counts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def count_urls(self, site: str) -> Any:
        count = self._inner.count_urls(site)
        self.counts += 1
        for url in sorted(self._urls):  # (right after the job's start saw the site empty)
            listing = listed(
                None,
                url=url,
                lastmod=None,
                changefreq=None,
                priority=0.5,
                sitemap=None,
                job_id="their-job",
                now=utcnow(),
                schedule=Schedule(),
            )
            assert self._inner.put_urls(self._site, [listing]) == []
            assert self._inner.put_urls(self._site, [their_fetch(listing)]) == []
        self._urls = set()
        return count

    def get_urls(self, site: str, urls: Any) -> Any:
        self.lookups += 1
        return self._inner.get_urls(site, urls)

    def url_pages(self, site: str, **kwargs: Any) -> Any:
        self.scans += 1
        return self._inner.url_pages(site, **kwargs)


def test_a_first_crawl_looks_up_no_record_and_a_job_that_listed_them_all_scans_none(tmp_path):
    with LiveSite(pages=6, sitemaps=1).serving() as site:
        request = JobRequest(site=site.url("/"), fetch_pages=False)
        spies: list[RaceOnFirstCrawl] = []

        def wrap(harvest: LocalHarvest) -> None:
            spies.append(RaceOnFirstCrawl(harvest.crawldb, site.base, set()))
            harvest.crawldb = spies[-1]  # type: ignore[assignment]

        crawl(tmp_path, request, wrap)
        crawl(tmp_path, request, wrap)
        assert [spy.lookups for spy in spies] == [0, 1]
        # Each job listed every record of the site: no orphan pass reads them again.
        assert [spy.scans for spy in spies] == [0, 0]
        assert all(r.version == 2 for r in records(tmp_path, site.base).values())


class ListingWrites:
    """The state store, with the crawl records each listing batch asked it to write."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.crawl_writes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record_pages(self, *args: Any, **kwargs: Any) -> Any:
        self.crawl_writes.append(len(kwargs.get("crawl") or {}))
        return self._inner.record_pages(*args, **kwargs)


def test_a_fetched_urls_crawl_record_is_written_once_for_its_listing_and_its_fetch(tmp_path):
    """Written at the listing and again at the fetch's end, it was two of the ten write units a fetched page
    cost on DynamoDB; the listing leaves it to the fetch's settlement. A URL the re-crawl does not fetch is
    still written by its listing (nothing else will say it was listed)."""
    with LiveSite(pages=6, sitemaps=1).serving() as site:
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001)
        spies: list[ListingWrites] = []

        def wrap(harvest: LocalHarvest) -> None:
            spies.append(ListingWrites(harvest.store))
            harvest.store = spies[-1]  # type: ignore[assignment]

        first = crawl(tmp_path, request, wrap)
        after_first = records(tmp_path, site.base)
        assert spies[0].crawl_writes and not any(spies[0].crawl_writes)
        assert len(after_first) == 6
        for record in after_first.values():
            assert (record.version, record.last_listed_job, record.state.value) == (1, first.job.job_id, "fetched")
            assert record.last_fetch_time is not None and record.first_listed is not None

        again = crawl(tmp_path, request, wrap)  # nothing due: every URL listed, none fetched
        assert sum(spies[1].crawl_writes) == 6
        for record in records(tmp_path, site.base).values():
            assert (record.version, record.last_listed_job) == (2, again.job.job_id)


def test_a_first_crawl_raced_by_another_job_is_decided_again_on_its_records(tmp_path, caplog):
    """A site's first crawl looks up no record per listed URL; the other job's records, written after it
    saw the site empty, refuse its inserts, and the batch is decided again on them."""
    with LiveSite(pages=6, sitemaps=1).serving() as site:
        request = JobRequest(site=site.url("/"), fetch_pages=False)
        raced = {site.url(p) for p in site.page_paths()[:3]}
        spies: list[RaceOnFirstCrawl] = []

        def wrap(harvest: LocalHarvest) -> None:
            spies.append(RaceOnFirstCrawl(harvest.crawldb, site.base, raced))
            harvest.crawldb = spies[0]  # type: ignore[assignment]

        with caplog.at_level(logging.INFO, logger="harvester.pipeline.sitemap_step.listing"):
            outcome = crawl(tmp_path, request, wrap)

        after = records(tmp_path, site.base)
        assert outcome.result.total_urls == 6 and len(after) == 6
        assert "crawl records moved meanwhile; deciding again" in caplog.messages
        assert spies[0].lookups == 1  # the one batch, decided again after its insert was refused
        for url, record in after.items():
            assert record.last_listed_job == outcome.job.job_id
            if url in raced:  # their listing and fetch stand, and this job listed the URL on top of them
                assert (record.signature, record.version) == ("theirs", 3)
            else:
                assert (record.signature, record.version) == (None, 1)  # listed by this job alone


def test_a_fetch_that_lost_the_race_is_settled_again_on_the_winners_record(tmp_path):
    with LiveSite(pages=6, sitemaps=1).serving() as site:
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001)
        crawl(tmp_path, request)
        paths = site.page_paths()[:3]
        for path in paths:
            site.change(path)
        raced = {site.url(p) for p in paths}
        before = records(tmp_path, site.base)

        def wrap(harvest: LocalHarvest) -> None:
            harvest.store = RaceBeforeSettle(harvest.store, OtherJob(harvest, site.base, raced))  # type: ignore[assignment]

        outcome = crawl(tmp_path, request, wrap)

        after = records(tmp_path, site.base)
        assert outcome.result.changes.changed == 3
        for url in raced:
            # Both changes are counted: the other job's, then this job's fetch found the real content.
            assert after[url].changes == before[url].changes + 2
            assert after[url].signature not in ("theirs", before[url].signature)
            # Their fetch, then this job's listing and fetch in one write (a listing leaves the crawl record of a
            # URL it hands to a fetch to the fetch's settlement), applied again on top of theirs.
            assert after[url].version == before[url].version + 2
            assert after[url].last_listed_job == outcome.job.job_id


def test_an_outcome_without_a_fetch_that_lost_the_race_is_listed_again_on_the_winners_record():
    """A page robots.txt forbids (or one given up without a request) moves no crawl record by a fetch, but
    still writes the one its listing left to it; when another job wrote that record meanwhile, the listing
    is applied again on top of theirs, their fetch kept."""
    url, sitemap, now = "https://example.com/a", "https://example.com/sitemap.xml", utcnow()
    fields = {"lastmod": None, "changefreq": None, "priority": 0.5, "sitemap": sitemap, "now": now}
    known = listed(None, url=url, job_id="mine", schedule=Schedule(), **fields)
    record = SitemapURL(
        url=url,
        status=UrlStatus.EXCLUDED,
        error_message="forbidden",
        change=ChangeKind.NEW,
        sitemap=sitemap,
        discovered_at=now,
        known=known,
    )
    outcome = with_listing(PageOutcome(record))
    assert outcome.crawl == known and outcome.crawl.version == 1

    theirs = their_fetch(listed(None, url=url, job_id="theirs", schedule=Schedule(), **fields))
    starts = {"before": now - timedelta(seconds=5), "after": now + timedelta(seconds=5)}
    ctx = SimpleNamespace(
        clock=utcnow, settings=EngineSettings(), job=lambda job_id: SimpleNamespace(start_time=starts[job_id])
    )
    again = relisted(ctx, SimpleNamespace(job_id="mine"), outcome, theirs)  # type: ignore[arg-type]
    assert again.crawl is not None and again.record.known == again.crawl
    assert again.crawl.version == theirs.version + 1
    assert (again.crawl.last_listed_job, again.crawl.signature) == ("mine", "theirs")
    assert again.crawl.state is theirs.state and again.record.status is UrlStatus.EXCLUDED
    # Listed as new, but another job created the record meanwhile: the URL is not new any more.
    assert (outcome.record.change, again.record.change) == (ChangeKind.NEW, ChangeKind.EXCLUDED)
    fetched = Fetched(FetchResult.SUCCESS, 200, signature="mine", document_key="mine")
    done = record.model_copy(update={"status": UrlStatus.COMPLETED, "error_message": None})
    again = relisted(ctx, SimpleNamespace(job_id="mine"), PageOutcome(done, fetched=fetched), theirs)  # type: ignore[arg-type]
    assert again.crawl is not None and (again.crawl.signature, again.crawl.version) == ("mine", theirs.version + 1)
    assert again.record.change is ChangeKind.CHANGED  # (their content, then this fetch's: not new)

    # Their listing later than this job's stands (the orphan rule asks who listed the URL last, and when).
    later = theirs.model_copy(update={"last_listed": now + timedelta(seconds=5)})
    again = relisted(ctx, SimpleNamespace(job_id="mine"), outcome, later)  # type: ignore[arg-type]
    assert again.crawl is not None and again.crawl.version == theirs.version + 1
    assert (again.crawl.last_listed_job, again.crawl.last_listed) == ("theirs", later.last_listed)

    # Orphaned meanwhile: by a job that started after this listing, it stays orphan (that job's orphan pass
    # would have found this listing older than its start); by one that started before, it is listed again.
    for orphaning, stays in (("after", True), ("before", False)):
        orphaned = theirs.model_copy(
            update={"state": CrawlState.ORPHAN, "orphan_of": theirs.state, "orphaned_job": orphaning}
        )
        again = relisted(ctx, SimpleNamespace(job_id="mine"), outcome, orphaned)  # type: ignore[arg-type]
        assert again.crawl is not None and again.crawl.last_listed_job == "mine"
        assert (again.crawl.state is CrawlState.ORPHAN) is stays, orphaning
        assert again.crawl.orphaned_job == (orphaning if stays else None)
        assert again.record.crawl_state is again.crawl.state
