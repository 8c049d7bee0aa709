"""The records pass's count of a job's fetches (``FetchStats``): each record read at the job's end adds its
answer's status, latency and size, or its failure; nothing is read for it that the pass does not read."""

from __future__ import annotations

from harvester.crawldb.changes import Stored
from harvester.crawldb.trust import UNFETCHED
from harvester.model.fetch_stats import NO_ANSWER, FetchStats
from harvester.model.records import UrlStatus

#: Distinct failure reasons counted; past them, the rest are counted under ``other``.
REASONS_KEPT = 50
#: URLs kept as samples of each failure reason.
SAMPLES_KEPT = 3


class FetchTally:
    """Counts the fetches of the records the pass reads. An end in steps carries it on from the last piece
    (``stats`` as that piece's tally keeps it: ``resume``), so that it counts as one pass would."""

    def __init__(self, stats: FetchStats | None = None) -> None:
        self.stats = stats or FetchStats()

    def resume(self, stats: FetchStats | None) -> None:
        self.stats = stats or FetchStats()

    def add(self, stored: Stored) -> None:
        """A record's share: a failure's reason whatever the URL's fetch reason; the answer of one the job
        set out to fetch."""
        stats, status = self.stats, stored.get("status")
        if status == UrlStatus.FAILED.value:
            self._failure(stored.get("error_message") or "unknown", stored["url"])
        reason = stored.get("fetch_reason")
        if reason is None or reason in UNFETCHED or status == UrlStatus.EXCLUDED.value:
            return
        stats.fetched += 1
        code = stored.get("http_status")
        key = NO_ANSWER if code is None else str(code)
        stats.http_statuses[key] = stats.http_statuses.get(key, 0) + 1
        latency = stored.get("fetch_ms")
        if code is not None and isinstance(latency, int):
            stats.latency_ms.add(latency)
        size = stored.get("size")
        if status == UrlStatus.COMPLETED.value and isinstance(size, int):
            stats.size_bytes.add(size)

    def _failure(self, reason: str, url: str) -> None:
        failures = self.stats.failures
        if reason not in failures and len(failures) >= REASONS_KEPT:
            reason = "other"
        failures[reason] = failures.get(reason, 0) + 1
        samples = self.stats.failure_samples.setdefault(reason, [])
        if len(samples) < SAMPLES_KEPT:
            samples.append(url)
