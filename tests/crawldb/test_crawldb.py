"""The crawl database's pure rules: listings, lastmod trust, orphans and the change feed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from harvester.archive.results import stored_record
from harvester.crawldb.changes import feed_line, kind_of, removed_line
from harvester.crawldb.crawl_state import Fetched, FetchResult, after_fetch, listed, orphaned
from harvester.crawldb.orphans import OrphanRule
from harvester.crawldb.schedule import Schedule
from harvester.crawldb.trust import EvidenceTally, apply, evidence_of
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState, SiteCrawl
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import (
    TOO_DEEP,
    JobRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    body_of,
)

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SITE = "https://example.com"
SITEMAP = f"{SITE}/sitemap.xml"


def known(url: str = f"{SITE}/a", *, job: str = "j0", at: datetime = T0, sitemap: str = SITEMAP) -> CrawlRecord:
    schedule = Schedule()
    record = listed(
        None, url=url, lastmod=at, changefreq=None, priority=0.5, sitemap=sitemap, job_id=job, now=at, schedule=schedule
    )
    answer = Fetched(FetchResult.SUCCESS, 200, signature="s1", document_key="d1", lastmod=at)
    return after_fetch(record, answer, now=at, schedule=schedule)


# lastmod trust --------------------------------------------------------------------------------------


def fetched_record(record: CrawlRecord, *, lastmod: datetime, status: int, signature: str | None) -> SitemapURL:
    return SitemapURL(
        url=record.url,
        last_modified=lastmod,
        known=record,
        fetch_reason="lastmod",
        status=UrlStatus.COMPLETED,
        http_status=status,
        signature=signature,
    )


def test_evidence_counts_only_fetches_whose_lastmod_had_advanced():
    record = known()
    later = T0 + timedelta(days=1)
    assert evidence_of(fetched_record(record, lastmod=later, status=200, signature="s2")) is True
    assert evidence_of(fetched_record(record, lastmod=later, status=200, signature="s1")) is False
    assert evidence_of(fetched_record(record, lastmod=later, status=304, signature=None)) is False
    assert evidence_of(fetched_record(record, lastmod=T0, status=200, signature="s2")) is None  # not advanced
    assert evidence_of(fetched_record(record, lastmod=later, status=404, signature=None)) is None
    not_due = fetched_record(record, lastmod=later, status=304, signature="s1").model_copy(
        update={"fetch_reason": "not_due"}
    )
    assert evidence_of(not_due) is None  # not asked by this job


def test_trust_moves_halfway_toward_each_jobs_precision_and_counts_a_job_once():
    tally = EvidenceTally()
    record = known(f"{SITE}/a")
    for signature in ("s1", "s1", "s1", "s2"):  # one of four advanced lastmods was right
        tally.add(fetched_record(record, lastmod=T0 + timedelta(days=1), status=200, signature=signature))
    site = SiteCrawl(site=SITE)

    updated, changes = apply(site, tally, job_id="j1", now=T0, threshold=0.5)

    change = changes["example.com"]
    assert (change.confirmed, change.refuted, change.score_before, change.score) == (1, 3, 1.0, 0.625)
    assert change.trusted and change.went == "kept" and updated.version == 1
    again, repeated = apply(updated, tally, job_id="j1", now=T0, threshold=0.5)
    assert again is updated and repeated == changes  # a retried end reports the same, counts nothing twice
    lower, changes = apply(updated, tally, job_id="j2", now=T0, threshold=0.5)
    assert changes["example.com"].score == pytest.approx(0.4375) and changes["example.com"].went == "lost"
    assert lower.trust("example.com").refuted == 6 and lower.version == 2


# orphans --------------------------------------------------------------------------------------------


def job(**request: object) -> JobRecord:
    return JobRecord(job_id="j2", request=JobRequest(site=f"{SITE}/", **request), start_time=T0 + timedelta(hours=1))


def sitemap(url: str, status: SitemapStatus, truncated: str | None = None) -> SitemapRecord:
    return SitemapRecord(url=url, origin=SitemapOrigin.INDEX, depth=2, status=status, truncated=truncated)


def test_a_url_is_orphaned_only_when_the_job_can_be_sure():
    other = f"{SITE}/other.xml"
    read = [sitemap(SITEMAP, SitemapStatus.COMPLETED), sitemap(other, SitemapStatus.COMPLETED)]
    rule = OrphanRule.of(job(), read)
    assert rule.orphan(known())  # its sitemap was read in full and no longer lists it
    assert not rule.orphan(known(job="j2"))  # this job listed it
    assert not rule.orphan(known(at=T0 + timedelta(hours=2)))  # someone listed it since this job started
    assert not rule.orphan(orphaned(known(), job_id="j1"))  # already orphan
    assert not rule.orphan(known(url="https://elsewhere.example/a"))  # out of this job's scope
    assert not OrphanRule.of(job(include=("*/blog/*",)), read).orphan(known())  # this job is about /blog/
    # Its sitemap failed this time: what it lists is unknown.
    assert not OrphanRule.of(job(), [sitemap(SITEMAP, SitemapStatus.FAILED)]).orphan(known())
    assert not OrphanRule.of(job(), [sitemap(SITEMAP, SitemapStatus.COMPLETED, "body broken off")]).orphan(known())
    # Its sitemap left the tree: orphan if the whole tree was read, not if part of it failed.
    gone = known(sitemap=f"{SITE}/left.xml")
    assert OrphanRule.of(job(), read).orphan(gone)
    assert not OrphanRule.of(job(), [*read, sitemap(f"{SITE}/x.xml", SitemapStatus.FAILED)]).orphan(gone)
    assert not OrphanRule.of(job(sitemap_exclude=("*x*",)), read).orphan(gone)
    assert not OrphanRule.of(job(sitemaps=(f"{SITE}/sitemap.xml",)), read).orphan(known())  # named sitemaps only


def test_another_sitemap_that_failed_may_still_list_a_url():
    """A URL's record names the first sitemap that listed it; another one may list it too. That one failing
    this time leaves the URL's absence unproved, even though the named sitemap was read in full."""
    read = [sitemap(SITEMAP, SitemapStatus.COMPLETED), sitemap(f"{SITE}/news.xml", SitemapStatus.FAILED)]
    assert not OrphanRule.of(job(), read).orphan(known())


def test_children_left_unread_keep_the_urls_they_may_list():
    deep = sitemap(SITEMAP, SitemapStatus.COMPLETED).model_copy(update={"dropped": {TOO_DEEP: 1}})
    assert not OrphanRule.of(job(max_depth=2), [deep]).orphan(known(sitemap=f"{SITE}/deeper.xml"))
    recursive = sitemap(SITEMAP, SitemapStatus.COMPLETED).model_copy(update={"dropped": {"invalid_sitemap": 1}})
    assert OrphanRule.of(job(), [recursive]).orphan(known(sitemap=f"{SITE}/left.xml"))  # nothing left unread


def test_a_sitemap_read_before_that_is_missing_now_keeps_its_urls():
    read = [sitemap(SITEMAP, SitemapStatus.COMPLETED), sitemap(f"{SITE}/x.xml", SitemapStatus.ABSENT)]
    gone = known(sitemap=f"{SITE}/left.xml")
    assert OrphanRule.of(job(), read).orphan(gone)  # an absent probe that never was a sitemap: no doubt
    assert not OrphanRule.of(job(), read, read_before=[f"{SITE}/x.xml"]).orphan(gone)  # it was one before


# the change feed ------------------------------------------------------------------------------------


def stored(page: SitemapURL, *, nulls: bool = False) -> dict[str, Any]:
    """A job record as the job's end reads it back: its stored body, parsed."""
    return stored_record(page.model_dump_json() if nulls else body_of(page))


def test_feed_lines_keep_the_previous_and_the_new_values():
    record = known()
    page = SitemapURL(
        url=record.url,
        known=record,
        status=UrlStatus.COMPLETED,
        change=ChangeKind.CHANGED,
        fetch_reason="due",
        http_status=200,
        signature="s2",
        crawl_state=CrawlState.FETCHED,
    )
    line = feed_line(stored(page))
    assert (
        line
        == feed_line(stored(page, nulls=True))
        == {
            "url": record.url,
            "change": "changed",
            "reason": "due",
            "previous_state": "fetched",
            "state": "fetched",
            "previous_status": 200,
            "status": 200,
            "previous_signature": "s1",
            "signature": "s2",
        }
    )
    not_due = page.model_copy(update={"change": ChangeKind.NOT_DUE})
    assert feed_line(stored(not_due)) is None and kind_of(stored(not_due)) is ChangeKind.NOT_DUE
    removed = removed_line(orphaned(record, job_id="j2"))
    assert (removed["change"], removed["previous_state"], removed["state"]) == ("removed", "fetched", "orphan")
    # Records written before the crawl database have no change: counted by their outcome.
    assert kind_of(stored(page.model_copy(update={"change": None}))) is ChangeKind.CHANGED
    failed = page.model_copy(update={"change": None, "status": UrlStatus.FAILED, "error_message": "HTTP 500"})
    assert kind_of(stored(failed)) is ChangeKind.FAILED


@pytest.mark.parametrize(
    "lastmod",
    [
        datetime(2024, 5, 1, tzinfo=UTC),
        datetime(2024, 5, 1, 12, 30, 5, 120, tzinfo=UTC),
        datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_feed_lines_write_times_as_isoformat_whatever_the_stored_form(lastmod):
    """Stored records say Z for UTC; the feed has always written times as datetime.isoformat (+00:00), and
    a consumer comparing lines across jobs must not see every line change."""
    page = SitemapURL(
        url=f"{SITE}/t",
        last_modified=lastmod,
        status=UrlStatus.COMPLETED,
        change=ChangeKind.NEW,
        fetch_reason="new",
        fetch_time=lastmod,
    )
    for nulls in (False, True):
        line = feed_line(stored(page, nulls=nulls))
        assert line is not None
        assert line["last_modified"] == line["fetch_time"] == lastmod.isoformat()
        assert "previous_state" not in line and line["state"] == CrawlState.UNFETCHED.value
