"""The records of a URL listed for the first time by a job that fetches nothing, written straight as JSON.

Such a URL is final when listed: its job record (completed, ``listed``, change ``new``) and its new crawl
record (unfetched, due now) follow in full from the parsed entry, the sitemap, the job and the time. They
are the same bytes ``body_of`` makes of the records ``crawl_state.listed`` and the sitemap step's
``listing._unfetched`` build (tests/pipeline/test_listed_rows.py compares them for every kind of entry), without
building two models per URL. Anything else a listing decides (a URL the site knows, a URL to fetch)
takes the model path.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from orjson import OPT_UTC_Z, dumps

from harvester.crawldb.changes import feed_time
from harvester.crawldb.crawl_state import known_failure
from harvester.crawldb.schedule import Schedule
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState
from harvester.model.records import CrawlRow, ListedRow, SitemapURL, UrlStatus
from harvester.sitemap import PageEntry

_COMPLETED = UrlStatus.COMPLETED.value
_UNFETCHED = CrawlState.UNFETCHED.value
_NEW = ChangeKind.NEW.value
_LISTED = "listed"


def first_listings(
    fresh: Sequence[tuple[str, PageEntry]], *, sitemap: str, job_id: str, now: datetime, schedule: Schedule
) -> list[tuple[ListedRow, CrawlRow] | None]:
    """For each (screened URL, entry): its job record (with its feed line) and crawl record, or None where
    orjson cannot write the entry (an integer beyond 64 bits in an extension): the caller builds that one
    as models, which msgspec writes."""
    at = _text(now)  # (one time for the batch, written once)
    # Each record is its URL's values, then those it shares with the whole batch, serialised once: the
    # JSON of the first part without its closing brace, and the second part's members after it.
    page_tail = _members(
        {
            "crawl_state": _UNFETCHED,
            "retries": 0,
            "attempts": 0,
            "next_fetch_time": at,
            "discovered_at": at,
            "finished_at": at,
            "fetch_reason": _LISTED,
            "change": _NEW,
        }
    )
    crawl_tail = _members(
        {"first_listed": at, "last_listed": at, "last_listed_job": job_id, "changes": 0, "version": 1}
    )
    line_tail = _members({"state": _UNFETCHED})
    intervals: dict[str | None, float] = {}
    # A lastmod's text as records and as the feed write it, once per lastmod. (Keyed with the offset too:
    # two lastmods of one instant in other offsets are equal datetimes.)
    texts: dict[tuple[datetime, timedelta | None], tuple[str, str | None]] = {}
    rows: list[tuple[ListedRow, CrawlRow] | None] = []
    keep = rows.append
    for url, entry in fresh:
        changefreq, lastmod = entry.change_frequency, entry.last_modified
        interval = intervals.get(changefreq)
        if interval is None:
            interval = intervals[changefreq] = float(schedule.initial(changefreq))
        # In the models' field order, without their empty fields (as body_of writes them); the feed line as
        # changes.feed_line makes it of the stored record.
        page: dict[str, object] = {"url": url}
        crawl: dict[str, object] = {
            "url": url,
            "state": _UNFETCHED,
            "retries": 0,
            "fetch_interval": interval,
            "next_fetch_time": at,
        }
        line: dict[str, object] = {"url": url, "change": _NEW, "reason": _LISTED, "sitemap": sitemap}
        if lastmod is not None:
            instant = (lastmod, lastmod.utcoffset())
            known = texts.get(instant)
            if known is None:
                stored = _text(lastmod)
                known = texts[instant] = (stored, feed_time(stored))
            page["last_modified"] = crawl["last_modified"] = known[0]
            line["last_modified"] = known[1]
        if changefreq is not None:
            page["change_frequency"] = crawl["change_frequency"] = changefreq
        page["priority"] = crawl["priority"] = entry.priority
        page["status"] = _COMPLETED
        page["sitemap"] = crawl["sitemap"] = sitemap
        page["extensions"] = entry.extensions()
        try:
            page_body = (dumps(page, option=OPT_UTC_Z)[:-1] + page_tail).decode()
        except TypeError:
            keep(None)
            continue
        crawl_body = (dumps(crawl)[:-1] + crawl_tail).decode()
        keep((ListedRow(url, page_body, _NEW, dumps(line)[:-1] + line_tail), CrawlRow(url, crawl_body)))
    return rows


def _members(values: dict[str, object]) -> bytes:
    """``values`` as members to put after others in a JSON object: ``,"a":1,"b":2}``."""
    return b"," + dumps(values)[1:]


def _text(moment: datetime) -> str:
    """A time as the stored records write it (orjson's form, ``Z`` for UTC)."""
    return dumps(moment, option=OPT_UTC_Z).decode()[1:-1]


def listed_fields(url: str, entry: PageEntry, sitemap: str, now: datetime, **more: Any) -> dict[str, Any]:
    """What a listed URL's job record takes from its sitemap entry, whatever the job does with it (and
    ``more``: one dict, built once, on the per-URL path)."""
    return {
        "url": url,
        "last_modified": entry.last_modified,
        "change_frequency": entry.change_frequency,
        "priority": entry.priority,
        "sitemap": sitemap,
        "extensions": entry.extensions(),
        "discovered_at": now,
        **more,
    }


def listed_page(url: str, entry: PageEntry, sitemap: str, now: datetime) -> SitemapURL:
    """A page of a throwaway discovery run: what its sitemap says, final at once."""
    fields = listed_fields(url, entry, sitemap, now, status=UrlStatus.COMPLETED, finished_at=now, fetch_reason="listed")
    return SitemapURL(**fields)


def unfetched(base: dict[str, Any], known: CrawlRecord, now: datetime, reason: str, change: ChangeKind) -> SitemapURL:
    """A URL this job lists but does not fetch: final at once, showing what the crawl database knows of it
    (copied: nothing will fetch it, so it carries no snapshot to fetch on). A URL not due that the crawl
    database knows gone or failing is failed, with the reason (``known_failure``); a job that fetches no
    page (``listed``) only lists."""
    failure = known_failure(known) if reason == "not_due" else None
    if failure is not None:
        base["error_message"] = failure
    base.update(
        status=UrlStatus.FAILED if failure is not None else UrlStatus.COMPLETED,
        finished_at=now,
        fetch_reason=reason,
        change=change,
        crawl_state=known.state,
        next_fetch_time=known.next_fetch_time,
    )
    if known.last_fetch_time is not None or known.signature is not None:  # (a URL never fetched has none of these)
        base.update(
            http_status=known.http_status,
            content_type=known.content_type,
            size=known.size,
            signature=known.signature,
            etag=known.etag,
            http_last_modified=known.http_last_modified,
            document_key=known.document_key,
            fetch_time=known.last_fetch_time,
        )
    return SitemapURL(**base)
