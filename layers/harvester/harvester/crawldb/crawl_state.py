"""The life of a URL: what a fetch result is, and how listing and fetching move its crawl record.

This is the table of ``reference/crawl-states.md`` (Apache Nutch's CrawlDatum and CrawlDbReducer), kept
pure so that both stores apply exactly the same transitions, and so that a write that lost a race with
another job can simply be re-applied to the record that won. Each function returns the next version
of the record.
"""

from __future__ import annotations

from datetime import datetime
from http import HTTPStatus

from harvester.crawldb.schedule import Schedule
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState, Fetched, FetchResult


def classify_status(status_code: int) -> FetchResult:
    if 200 <= status_code < 300:
        return FetchResult.SUCCESS
    if status_code == 304:
        return FetchResult.NOTMODIFIED
    if status_code in (302, 303, 307):
        return FetchResult.REDIR_TEMP
    if 300 <= status_code < 400:
        return FetchResult.REDIR_PERM
    if status_code in (403, 408, 429) or status_code >= 500:
        return FetchResult.RETRY
    return FetchResult.GONE


def http_error(status_code: int) -> str:
    """How an HTTP status reads in an error message: ``HTTP 404 Not Found``."""
    try:
        return f"HTTP {status_code} {HTTPStatus(status_code).phrase}"
    except ValueError:
        return f"HTTP {status_code}"


def known_failure(record: CrawlRecord) -> str | None:
    """Why a URL a job lists and does not fetch (not due) counts as failed, from what its crawl record says of
    the last fetch: gone (a 404, 410, robots.txt or authorisation), or failing and waiting for its next try;
    None for a URL whose last fetch was good (or that was never fetched). The job's record of it says so
    instead of calling it completed: a known failure is not a success because it was not asked again."""
    failing = record.state is CrawlState.UNFETCHED and record.retries > 0
    if record.state is not CrawlState.GONE and not failing:
        return None
    answer = http_error(record.http_status) if record.http_status else "no usable answer"
    when = f" on {record.last_fetch_time:%Y-%m-%d %H:%M} UTC" if record.last_fetch_time else ""
    due = f"{record.next_fetch_time:%Y-%m-%d %H:%M} UTC"
    if failing:
        return f"failing: {answer} at its last fetch{when} (retry {record.retries}); not due again until {due}"
    return f"gone: {answer} at its last fetch{when}; not due again until {due}"


def listed(
    prior: CrawlRecord | None,
    *,
    url: str,
    lastmod: datetime | None,
    changefreq: str | None,
    priority: float,
    sitemap: str | None,
    job_id: str,
    now: datetime,
    schedule: Schedule,
) -> CrawlRecord:
    """The record after a sitemap listed the URL: created (due at once), or brought back from orphan."""
    if prior is None:  # (every value typed and checked already: by the parser, the URL screen, the schedule)
        return CrawlRecord(
            url=url,
            fetch_interval=float(schedule.initial(changefreq)),
            next_fetch_time=now,
            last_modified=lastmod,
            change_frequency=changefreq,
            priority=priority,
            sitemap=sitemap,
            first_listed=now,
            last_listed=now,
            last_listed_job=job_id,
        )
    update: dict[str, object] = {
        "last_modified": lastmod,
        "change_frequency": changefreq,
        "priority": priority,
        "sitemap": sitemap,
        "last_listed": now,
        "last_listed_job": job_id,
        "version": prior.version + 1,
    }
    if prior.state is CrawlState.ORPHAN:
        update |= {"state": prior.orphan_of or CrawlState.UNFETCHED, "orphan_of": None, "orphaned_job": None}
    return prior.model_copy(update=update)


def listing_change(prior: CrawlRecord | None) -> ChangeKind | None:
    """What a listing changes for the site, whatever the fetch then finds: a URL new to it, or one it had
    orphaned and lists again (``listed`` brings it back)."""
    if prior is None:
        return ChangeKind.NEW
    return ChangeKind.BACK if prior.state is CrawlState.ORPHAN else None


def after_fetch(
    prior: CrawlRecord, fetched: Fetched, *, now: datetime, schedule: Schedule, unwritten: bool = False
) -> CrawlRecord:
    """The record after a job's final word on a fetch (Nutch's CrawlDbReducer, with the adaptive schedule).

    A URL another job orphaned while this one fetched it stays orphan (no sitemap lists it any more); what
    the fetch found becomes the state it returns to if it is listed again. ``unwritten``: ``prior`` is the
    record as a listing left it, not written yet (the settlement writes both at once), so the result takes
    its version rather than the next."""
    record = _fetched(prior, fetched, now=now, schedule=schedule, version=prior.version if unwritten else None)
    if prior.state is CrawlState.ORPHAN:
        return record.model_copy(update={"state": CrawlState.ORPHAN, "orphan_of": record.state})
    return record


def _fetched(
    prior: CrawlRecord, fetched: Fetched, *, now: datetime, schedule: Schedule, version: int | None
) -> CrawlRecord:
    update: dict[str, object] = {
        "last_fetch_time": now,
        "http_status": fetched.http_status,
        "version": prior.version + 1 if version is None else version,
    }
    result = fetched.result
    interval = prior.fetch_interval
    if result is FetchResult.SUCCESS:
        first = prior.signature is None
        if not first and fetched.signature == prior.signature:
            state, interval = CrawlState.NOTMODIFIED, schedule.unchanged(interval)
        else:
            state = CrawlState.FETCHED
            if not first:
                interval = schedule.changed(interval)
                update["changes"] = prior.changes + 1
        update |= _good_fetch(prior, fetched) | {
            "signature": fetched.signature,
            "content_type": fetched.content_type,
            "size": fetched.size,
            "document_key": fetched.document_key,
            "warc": fetched.warc,
        }
    elif result is FetchResult.NOTMODIFIED:
        state, interval = CrawlState.NOTMODIFIED, schedule.unchanged(interval)
        update |= _good_fetch(prior, fetched)
    elif result is FetchResult.RETRY:
        retries = prior.retries + 1
        update["retries"] = retries
        if retries < schedule.retry_max:
            update |= {"state": CrawlState.UNFETCHED, "next_fetch_time": schedule.after(now, schedule.retry(retries))}
            return prior.model_copy(update=update)
        state, interval = CrawlState.GONE, schedule.gone(interval)
    else:  # gone, or a redirect that could not be followed
        state, interval = CrawlState.GONE, schedule.gone(interval)
    if state is CrawlState.GONE:
        # (the lastmod it was gone at is seen: only a later one makes it due before its gone interval)
        update["fetched_last_modified"] = fetched.lastmod
    update |= {"state": state, "fetch_interval": interval, "next_fetch_time": schedule.after(now, interval)}
    return prior.model_copy(update=update)


def _good_fetch(prior: CrawlRecord, fetched: Fetched) -> dict[str, object]:
    """A fetch that gave the content (or confirmed it): the retry counter is reset, validators renewed."""
    return {
        "retries": 0,
        "etag": fetched.etag or prior.etag,
        "http_last_modified": fetched.http_last_modified or prior.http_last_modified,
        "fetched_last_modified": fetched.lastmod,
    }


def orphaned(prior: CrawlRecord, *, job_id: str) -> CrawlRecord:
    """No sitemap of the site lists the URL any more: kept (it may come back), never due."""
    return prior.model_copy(
        update={
            "state": CrawlState.ORPHAN,
            "orphan_of": prior.state,
            "orphaned_job": job_id,
            "version": prior.version + 1,
        }
    )


def verdict(prior: CrawlRecord, fetched: Fetched, after: CrawlRecord) -> ChangeKind:
    """What a fetch says about the URL, compared with its last good fetch."""
    if fetched.result is FetchResult.SUCCESS:
        same = prior.signature is not None and prior.signature == fetched.signature
        return ChangeKind.UNCHANGED if same else ChangeKind.CHANGED
    if fetched.result is FetchResult.NOTMODIFIED:
        return ChangeKind.NOTMODIFIED
    if after.state is CrawlState.GONE:
        return ChangeKind.GONE
    return ChangeKind.FAILED
