"""The life of a URL: what a fetch result is, and which crawl state and schedule it leads to.

This is the table of ``reference/crawl-states.md`` (Apache Nutch's CrawlDatum / AbstractFetchSchedule),
kept pure so that both stores apply exactly the same transitions. A sitemap's ``changefreq`` is a better
hint than a fixed interval, so it sets the interval when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from http import HTTPStatus

from harvester.records import CrawlState

DEFAULT_INTERVAL = timedelta(days=30)
MAX_INTERVAL = timedelta(days=90)

CHANGEFREQ_INTERVALS = {
    "always": timedelta(minutes=1),
    "hourly": timedelta(hours=1),
    "daily": timedelta(days=1),
    "weekly": timedelta(days=7),
    "monthly": timedelta(days=30),
    "yearly": timedelta(days=365),
    "never": MAX_INTERVAL,
}


class FetchResult(StrEnum):
    SUCCESS = "success"
    REDIR_PERM = "redir_perm"
    REDIR_TEMP = "redir_temp"
    NOTMODIFIED = "notmodified"
    GONE = "gone"
    RETRY = "retry"


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


@dataclass(frozen=True, slots=True)
class CrawlUpdate:
    state: CrawlState
    retries: int
    next_fetch_time: datetime


def interval_for(changefreq: str | None) -> timedelta:
    return min(CHANGEFREQ_INTERVALS.get(changefreq or "", DEFAULT_INTERVAL), MAX_INTERVAL)


def transition(
    result: FetchResult,
    *,
    now: datetime,
    retries: int,
    previous_signature: str | None = None,
    signature: str | None = None,
    changefreq: str | None = None,
    retry_max: int = 3,
    retry_backoff: timedelta = timedelta(minutes=1),
) -> CrawlUpdate:
    """The new crawl state of a URL after one fetch."""
    interval = interval_for(changefreq)
    if result is FetchResult.SUCCESS:
        same = previous_signature is not None and previous_signature == signature
        state = CrawlState.NOTMODIFIED if same else CrawlState.FETCHED
        return CrawlUpdate(state, 0, now + interval)
    if result is FetchResult.NOTMODIFIED:
        return CrawlUpdate(CrawlState.NOTMODIFIED, 0, now + interval)
    if result is FetchResult.REDIR_PERM:
        return CrawlUpdate(CrawlState.REDIR_PERM, 0, now + interval)
    if result is FetchResult.REDIR_TEMP:
        return CrawlUpdate(CrawlState.REDIR_TEMP, 0, now + interval)
    if result is FetchResult.RETRY:
        retries += 1
        if retries < retry_max:
            return CrawlUpdate(CrawlState.UNFETCHED, retries, now + retry_backoff * (2 ** (retries - 1)))
        return CrawlUpdate(CrawlState.GONE, retries, now + _gone_interval(interval))
    return CrawlUpdate(CrawlState.GONE, retries, now + _gone_interval(interval))


def _gone_interval(interval: timedelta) -> timedelta:
    """Gone pages are looked at again, rarely: 1.5 times the interval, at most 0.9 times the maximum."""
    return min(interval * 1.5, MAX_INTERVAL * 0.9)
