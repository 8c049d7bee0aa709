"""The crawl-state table (reference/crawl-states.md) and the adaptive fetch schedule, on crawl records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.crawldb.crawl_state import (
    Fetched,
    FetchResult,
    after_fetch,
    classify_status,
    http_error,
    listed,
    listing_change,
    orphaned,
    verdict,
)
from harvester.crawldb.schedule import DAY, Schedule, due, lastmod_advanced
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState

NOW = datetime(2026, 11, 1, tzinfo=UTC)
SCHEDULE = Schedule()
URL = "https://example.com/a"


@pytest.mark.parametrize(
    ("status", "result"),
    [
        (200, FetchResult.SUCCESS), (301, FetchResult.REDIR_PERM), (308, FetchResult.REDIR_PERM),
        (300, FetchResult.REDIR_PERM), (302, FetchResult.REDIR_TEMP), (303, FetchResult.REDIR_TEMP),
        (307, FetchResult.REDIR_TEMP), (304, FetchResult.NOTMODIFIED), (400, FetchResult.GONE),
        (401, FetchResult.GONE), (404, FetchResult.GONE), (410, FetchResult.GONE), (403, FetchResult.RETRY),
        (429, FetchResult.RETRY), (500, FetchResult.RETRY), (503, FetchResult.RETRY),
    ],
)  # fmt: skip
def test_what_a_fetch_result_is(status, result):
    assert classify_status(status) is result


def new(changefreq: str | None = None, lastmod: datetime | None = None) -> CrawlRecord:
    return listed(
        None,
        url=URL,
        lastmod=lastmod,
        changefreq=changefreq,
        priority=0.5,
        sitemap="https://example.com/s.xml",
        job_id="j1",
        now=NOW,
        schedule=SCHEDULE,
    )


def ok(signature: str, **fields) -> Fetched:
    return Fetched(FetchResult.SUCCESS, http_status=200, signature=signature, document_key=f"doc/{signature}", **fields)


def test_a_new_url_is_unfetched_and_due_at_once_with_its_changefreq_interval():
    record = new("daily")
    assert (record.state, record.version, record.next_fetch_time, record.fetch_interval) == (
        CrawlState.UNFETCHED,
        1,
        NOW,
        DAY,
    )
    assert new().fetch_interval == 30 * DAY and new("never").fetch_interval == SCHEDULE.max_interval
    assert new("always").fetch_interval == 60.0  # the lower bound


def test_first_fetch_keeps_the_interval_then_it_shrinks_on_change_and_grows_when_the_same():
    first = after_fetch(new("daily"), ok("a", etag='"1"'), now=NOW, schedule=SCHEDULE)
    assert (first.state, first.fetch_interval, first.changes, first.version) == (CrawlState.FETCHED, DAY, 0, 2)
    assert first.next_fetch_time == NOW + timedelta(days=1) and first.etag == '"1"' and first.document_key == "doc/a"
    later = NOW + timedelta(days=1)
    changed = after_fetch(first, ok("b"), now=later, schedule=SCHEDULE)
    assert (changed.state, changed.changes) == (CrawlState.FETCHED, 1)
    assert changed.fetch_interval == pytest.approx(0.8 * DAY) and changed.etag == '"1"'  # kept when not resent
    same = after_fetch(changed, ok("b"), now=later, schedule=SCHEDULE)
    assert (same.state, same.changes) == (CrawlState.NOTMODIFIED, 1)
    assert same.fetch_interval == pytest.approx(0.8 * 1.4 * DAY)
    assert same.next_fetch_time == later + timedelta(seconds=same.fetch_interval)
    assert (
        verdict(changed, ok("b"), same) is ChangeKind.UNCHANGED
        and verdict(first, ok("b"), changed) is ChangeKind.CHANGED
    )


def test_304_is_not_modified_and_keeps_the_stored_content():
    first = after_fetch(new(), ok("a"), now=NOW, schedule=SCHEDULE)
    answer = Fetched(FetchResult.NOTMODIFIED, http_status=304)
    again = after_fetch(first, answer, now=NOW, schedule=SCHEDULE)
    assert (again.state, again.signature, again.document_key, again.http_status) == (
        CrawlState.NOTMODIFIED,
        "a",
        "doc/a",
        304,
    )
    assert verdict(first, answer, again) is ChangeKind.NOTMODIFIED


def test_the_interval_stays_within_its_bounds():
    bounded = Schedule(min_interval=3600, max_interval=2 * DAY)
    record = new("daily")
    for _ in range(20):
        record = after_fetch(record, ok("same"), now=NOW, schedule=bounded)
    assert record.fetch_interval == 2 * DAY
    for n in range(40):
        record = after_fetch(record, ok(f"v{n}"), now=NOW, schedule=bounded)
    assert record.fetch_interval == 3600


def test_transient_failures_count_across_crawls_until_gone():
    record = after_fetch(new(), ok("a"), now=NOW, schedule=SCHEDULE)
    fail = Fetched(FetchResult.RETRY, http_status=503)
    one = after_fetch(record, fail, now=NOW, schedule=SCHEDULE)
    two = after_fetch(one, fail, now=NOW, schedule=SCHEDULE)
    three = after_fetch(two, fail, now=NOW, schedule=SCHEDULE)
    assert (one.state, one.retries, one.next_fetch_time) == (CrawlState.UNFETCHED, 1, NOW + timedelta(days=1))
    assert (two.state, two.retries, two.next_fetch_time) == (CrawlState.UNFETCHED, 2, NOW + timedelta(days=2))
    assert (three.state, three.retries) == (CrawlState.GONE, 3)
    assert verdict(one, fail, two) is ChangeKind.FAILED and verdict(two, fail, three) is ChangeKind.GONE
    # The content of the last good fetch is kept: a page that comes back the same is recognised.
    assert three.signature == "a" and three.document_key == "doc/a"
    back = after_fetch(three, ok("a"), now=NOW, schedule=SCHEDULE)
    assert (back.state, back.retries) == (CrawlState.NOTMODIFIED, 0)


def test_gone_is_looked_at_again_rarely():
    gone = after_fetch(new(), Fetched(FetchResult.GONE, http_status=404), now=NOW, schedule=SCHEDULE)
    assert gone.state is CrawlState.GONE and gone.next_fetch_time == NOW + timedelta(days=45)
    never = after_fetch(new("never"), Fetched(FetchResult.GONE, http_status=404), now=NOW, schedule=SCHEDULE)
    assert never.next_fetch_time == NOW + timedelta(seconds=SCHEDULE.max_interval * 0.9)


def test_a_fetch_on_a_listing_not_yet_written_takes_its_version():
    """The settlement writes the listing's record and the fetch's at once: one version, not two."""
    listing = new()
    assert after_fetch(listing, ok("a"), now=NOW, schedule=SCHEDULE).version == listing.version + 1
    assert after_fetch(listing, ok("a"), now=NOW, schedule=SCHEDULE, unwritten=True).version == listing.version
    orphan = orphaned(after_fetch(listing, ok("a"), now=NOW, schedule=SCHEDULE), job_id="j2")
    kept = after_fetch(orphan, ok("b"), now=NOW, schedule=SCHEDULE, unwritten=True)
    assert (kept.version, kept.state) == (orphan.version, CrawlState.ORPHAN)


def test_what_a_listing_changes_for_the_site():
    """New when the site has no record of the URL, back when it had orphaned it, nothing otherwise (what the
    fetch then finds is the fetch's change)."""
    fetched = after_fetch(new(), ok("a"), now=NOW, schedule=SCHEDULE)
    assert listing_change(None) is ChangeKind.NEW
    assert listing_change(orphaned(fetched, job_id="j2")) is ChangeKind.BACK
    assert listing_change(fetched) is None


def test_an_orphan_listed_again_returns_to_its_state():
    fetched = after_fetch(new(), ok("a"), now=NOW, schedule=SCHEDULE)
    orphan = orphaned(fetched, job_id="j2")
    assert (orphan.state, orphan.orphan_of, orphan.orphaned_job) == (CrawlState.ORPHAN, CrawlState.FETCHED, "j2")
    back = listed(
        orphan,
        url=URL,
        lastmod=None,
        changefreq=None,
        priority=0.5,
        sitemap="https://example.com/s.xml",
        job_id="j3",
        now=NOW,
        schedule=SCHEDULE,
    )
    assert (back.state, back.orphan_of, back.last_listed_job, back.version) == (
        CrawlState.FETCHED,
        None,
        "j3",
        orphan.version + 1,
    )


def test_a_fetch_that_ends_after_another_job_orphaned_the_url_keeps_it_orphan():
    orphan = orphaned(after_fetch(new(), ok("a"), now=NOW, schedule=SCHEDULE), job_id="j2")
    later = after_fetch(orphan, ok("b"), now=NOW + timedelta(hours=1), schedule=SCHEDULE)
    assert (later.state, later.orphan_of, later.orphaned_job) == (CrawlState.ORPHAN, CrawlState.FETCHED, "j2")
    assert later.signature == "b" and later.changes == 1 and later.version == orphan.version + 1


def test_what_makes_a_known_url_due():
    fetched = after_fetch(new(), ok("a", lastmod=NOW), now=NOW, schedule=SCHEDULE)
    soon = NOW + timedelta(days=1)

    def decide(record=fetched, *, at=soon, lastmod=NOW, refetch_all=False, trusted=True, may_probe=False):
        return due(
            record, new=False, lastmod=lastmod, now=at, refetch_all=refetch_all, trusted=trusted, may_probe=may_probe
        )

    assert decide().reason is None
    assert decide(at=fetched.next_fetch_time).reason == "due"
    assert decide(refetch_all=True).reason == "full"
    assert decide(lastmod=soon).reason == "lastmod"
    assert decide(lastmod=soon, trusted=False).reason is None
    probe = decide(lastmod=soon, trusted=False, may_probe=True)
    assert (probe.reason, probe.probe) == ("lastmod_probe", True)


def test_lastmod_advances_against_the_lastmod_of_the_last_fetch_not_the_clock():
    future = NOW + timedelta(days=365)  # a site that stamps dates in the future
    fetched = after_fetch(new(lastmod=future), ok("a", lastmod=future), now=NOW, schedule=SCHEDULE)
    assert not lastmod_advanced(fetched, future)
    assert lastmod_advanced(fetched, future + timedelta(seconds=1))
    # A URL never fetched (or known before lastmods were kept) compares with its fetch time.
    plain = after_fetch(new(), ok("a"), now=NOW, schedule=SCHEDULE)
    assert lastmod_advanced(plain, NOW + timedelta(hours=1)) and not lastmod_advanced(plain, NOW)
    assert not lastmod_advanced(new(), NOW + timedelta(days=1))


def test_error_messages_name_the_status():
    assert http_error(404) == "HTTP 404 Not Found"
    assert http_error(599) == "HTTP 599"
