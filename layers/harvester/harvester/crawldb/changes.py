"""The change feed: what a job found out about each URL, one JSON line per URL whose state moved.

Written at the end of a job beside its URL records (``changes.jsonl``). Every URL of the job has exactly
one kind (see :class:`~harvester.model.crawl.ChangeKind`); ``not_due`` and ``listed`` URLs are only
counted (nothing happened to them), and URLs the site stopped listing are added as ``removed``. The
line keeps the previous and the new signature, HTTP status and crawl state where there are any, so a
consumer can act on a line without reading anything else.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from harvester.model.crawl import ChangeCounts, ChangeKind, CrawlRecord, CrawlState
from harvester.model.records import SitemapURL


def kind_of(record: SitemapURL) -> ChangeKind:
    """A final job record's kind (records written before the crawl database count as fetched or failed)."""
    if record.change is not None:
        return record.change
    return ChangeKind.CHANGED if record.status.value == "completed" else ChangeKind.FAILED


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def feed_line(record: SitemapURL) -> dict[str, Any] | None:
    """The line of a job URL, or None for a URL that is only counted."""
    kind = kind_of(record)
    if not kind.in_feed:
        return None
    # What was known before this job: the snapshot a fetch worked on, or, for a URL the job did not fetch
    # (back, but not due), what its record shows, which the job did not change.
    before = record.known
    previous_status = previous_signature = None
    if kind is not ChangeKind.NEW:
        previous_status = before.http_status if before else record.http_status
        previous_signature = before.signature if before else record.signature
    line: dict[str, Any] = {
        "url": record.url,
        "change": kind.value,
        "reason": record.fetch_reason,
        "sitemap": record.sitemap,
        "lastmod": _iso(record.last_modified),
        "previous_state": _previous_state(record, kind),
        "state": record.crawl_state.value,
        "previous_status": previous_status,
        "status": record.http_status,
        "previous_signature": previous_signature,
        "signature": record.signature,
        "document_key": record.document_key,
        "fetch_time": _iso(record.fetch_time),
        "error": record.error_message,
    }
    return {k: v for k, v in line.items() if v is not None}


def _previous_state(record: SitemapURL, kind: ChangeKind) -> str | None:
    if kind is ChangeKind.NEW:
        return None
    if kind is ChangeKind.BACK:
        return CrawlState.ORPHAN.value
    return record.known.state.value if record.known else None


def removed_line(record: CrawlRecord) -> dict[str, Any]:
    line = {
        "url": record.url,
        "change": ChangeKind.REMOVED.value,
        "sitemap": record.sitemap,
        "previous_state": (record.orphan_of or record.state).value,
        "state": record.state.value,
        "previous_status": record.http_status,
        "previous_signature": record.signature,
        "document_key": record.document_key,
        "last_listed": _iso(record.last_listed),
    }
    return {k: v for k, v in line.items() if v is not None}


class ChangeTally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, kind: ChangeKind) -> None:
        self.counts[kind.value] = self.counts.get(kind.value, 0) + 1

    def result(self) -> ChangeCounts:
        return ChangeCounts(**self.counts)
