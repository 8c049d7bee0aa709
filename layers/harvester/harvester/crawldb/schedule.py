"""When a known URL is fetched again: its fetch interval, how it adapts, and whether a job fetches it now.

The interval starts at the sitemap's ``changefreq`` (or the default) and then follows Nutch's
AdaptiveFetchSchedule: it shrinks when a fetch finds the content changed and grows when it finds it the
same, between settable bounds, so a page that never changes is asked for less and less often and a busy
one more often. The next fetch time is always *now* plus the interval (never a time in the past, which
would make a URL due at every crawl: NUTCH-1564).

A listed URL is fetched by a job when it is new, when its next fetch time has come, or when its sitemap
``lastmod`` advanced since its last good fetch and the host's lastmod is trusted (see ``trust``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from msgspec import Struct

from harvester.model.crawl import CrawlRecord

DAY = 86400.0

CHANGEFREQ_SECONDS = {
    "always": 60.0,
    "hourly": 3600.0,
    "daily": DAY,
    "weekly": 7 * DAY,
    "monthly": 30 * DAY,
    "yearly": 365 * DAY,
}


class Schedule(Struct, frozen=True):
    """The fetch schedule's knobs (``EngineSettings`` carries them, with ``HARVEST_*`` overrides)."""

    default_interval: float = 30 * DAY
    min_interval: float = 60.0
    max_interval: float = 365 * DAY
    #: Nutch's db.fetch.schedule.adaptive.dec_rate / inc_rate.
    shrink: float = 0.2
    grow: float = 0.4
    #: Crawls in a row ending in a transient failure before the URL is gone (Nutch's db.fetch.retry.max).
    retry_max: int = 3
    #: How long after a transient failure a later crawl tries again (doubling with each retry).
    retry_interval: float = DAY

    def clamp(self, seconds: float) -> float:
        return min(max(seconds, self.min_interval), self.max_interval)

    def initial(self, changefreq: str | None) -> float:
        """``never`` means "rarely": the longest interval, not no fetch at all."""
        if changefreq == "never":
            return self.max_interval
        return self.clamp(CHANGEFREQ_SECONDS.get(changefreq or "", self.default_interval))

    def changed(self, interval: float) -> float:
        return self.clamp(interval * (1.0 - self.shrink))

    def unchanged(self, interval: float) -> float:
        return self.clamp(interval * (1.0 + self.grow))

    def gone(self, interval: float) -> float:
        """Gone pages are looked at again, rarely: 1.5 times the interval, at most 0.9 times the maximum."""
        return max(self.min_interval, min(interval * 1.5, self.max_interval * 0.9))

    def retry(self, retries: int) -> float:
        return min(self.retry_interval * 2 ** max(retries - 1, 0), self.max_interval)

    @staticmethod
    def after(now: datetime, seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)


def lastmod_advanced(record: CrawlRecord, lastmod: datetime | None) -> bool:
    """Whether the sitemap claims a change since the last good fetch.

    Compared with the lastmod current at that fetch when there was one (so a lastmod in the future, or a
    date without a time, is judged against what the sitemap said then), else with the fetch time.
    """
    if lastmod is None or record.last_fetch_time is None or record.signature is None:
        return False
    if record.fetched_last_modified is not None:
        return lastmod > record.fetched_last_modified
    return lastmod > record.last_fetch_time


class Due(Struct, frozen=True):
    """Why a job fetches a listed URL (``reason``), or that it does not (``reason`` None)."""

    reason: str | None
    #: lastmod advanced on an untrusted host: fetched anyway, a few per sitemap, to test the trust again.
    probe: bool = False


NOT_DUE = Due(None)


def due(
    record: CrawlRecord,
    *,
    new: bool,
    lastmod: datetime | None,
    now: datetime,
    refetch_all: bool,
    trusted: bool,
    may_probe: bool,
) -> Due:
    """``record`` is the URL's crawl record as this listing wrote it (an orphan already brought back)."""
    if new:
        return Due("new")
    if refetch_all:
        return Due("full")
    if now >= record.next_fetch_time:
        return Due("due")
    if lastmod_advanced(record, lastmod):
        if trusted:
            return Due("lastmod")
        if may_probe:
            return Due("lastmod_probe", probe=True)
    return NOT_DUE
