"""The change feed: what a job found out about each URL, one JSON line per URL whose state moved.

Written at the end of a job beside its URL records (``changes.jsonl``), from the job's stored records as
they are read back (``stored``: the JSON values, not validated again as models: what the state store holds
was validated, or built from checked values, when written). Every URL of the job has exactly one kind
(see :class:`~harvester.model.crawl.ChangeKind`); ``not_due`` and ``listed`` URLs are only counted (nothing
happened to them), and URLs the site stopped listing are added as ``removed``. The line keeps the previous
and the new signature, HTTP status and crawl state where there are any, so a consumer can act on a line
without reading anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Required, TypedDict

from harvester.model.crawl import ChangeCounts, ChangeKind, CrawlRecord, CrawlState
from harvester.model.records import UrlStatus

#: A job record as read back at the job's end: its stored JSON, parsed (``SitemapURL``'s field names;
#: times as the stored text; no empty field, or null where a body stored without ``body_of`` keeps it).
Stored = Mapping[str, Any]


_KINDS = {kind.value: kind for kind in ChangeKind}


class FeedLine(TypedDict, total=False):
    """A line of the feed: its fields in the order they are written, which is the order of the columns of
    ``harvest changes --format csv`` (derived from here). A line has the fields it has a value for."""

    url: Required[str]
    change: Required[str]
    #: Why the job fetched the URL (``SitemapURL.fetch_reason``).
    reason: str
    sitemap: str
    #: What the sitemap said (``SitemapURL.last_modified``; written ``+00:00`` for UTC).
    last_modified: str
    previous_state: str
    state: str
    previous_status: int
    status: int
    previous_signature: str
    signature: str
    document_key: str
    #: Where this job's capture is in its WARC files (``SitemapURL.warc``): a ranged read of one record.
    warc: dict[str, Any]
    fetch_time: str
    error: str
    #: A removed URL's: when a sitemap of the site last listed it.
    last_listed: str


#: A feed line's field under its old stored name, and the data model's name for it (``last_modified``).
OLD_FEED_NAMES = {"lastmod": "last_modified"}


def kind_of(record: Stored) -> ChangeKind:
    """A final job record's kind (one stored without a ``change`` counts as fetched or failed)."""
    change = record.get("change")
    if change is not None:
        return _KINDS[change]
    return ChangeKind.CHANGED if record.get("status") == UrlStatus.COMPLETED.value else ChangeKind.FAILED


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def feed_time(text: str | None) -> str | None:
    """A stored time as the feed writes times, as ``datetime.isoformat`` does: a record says ``Z`` for UTC
    (msgspec's and orjson's form), the feed says ``+00:00``."""
    if text is not None and text[-1:] == "Z":
        return text[:-1] + "+00:00"
    return text


def feed_line(record: Stored, kind: ChangeKind | None = None) -> dict[str, Any] | None:
    """The line of a job URL (of ``kind``, when the caller knows it), or None for a URL only counted.
    Written for every URL a first crawl lists: the line is built from its present values only."""
    if kind is None:
        kind = kind_of(record)
    if not kind.in_feed:
        return None
    get = record.get
    previous_state = previous_status = previous_signature = None
    if kind is not ChangeKind.NEW:
        # What was known before this job: the snapshot a fetch worked on, or, for a URL the job did not
        # fetch (back, but not due), what its record shows, which the job did not change.
        before = get("known")
        if kind is ChangeKind.BACK:
            previous_state = CrawlState.ORPHAN.value
        elif before:
            previous_state = before.get("state")
        previous_status = (before or record).get("http_status")
        previous_signature = (before or record).get("signature")
    line: dict[str, Any] = {"url": record["url"], "change": kind.value}
    _put(line, "reason", get("fetch_reason"))
    _put(line, "sitemap", get("sitemap"))
    _put(line, "last_modified", feed_time(get("last_modified")))
    _put(line, "previous_state", previous_state)
    line["state"] = get("crawl_state", _UNFETCHED)
    _put(line, "previous_status", previous_status)
    _put(line, "status", get("http_status"))
    _put(line, "previous_signature", previous_signature)
    _put(line, "signature", get("signature"))
    _put(line, "document_key", get("document_key"))
    _put(line, "warc", get("warc"))
    _put(line, "fetch_time", feed_time(get("fetch_time")))
    _put(line, "error", get("error_message"))
    return line


_UNFETCHED = CrawlState.UNFETCHED.value


def _put(line: dict[str, Any], name: str, value: object) -> None:
    if value is not None:
        line[name] = value


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
        "warc": record.warc.model_dump(mode="json", exclude_none=True) if record.warc else None,
        "last_listed": _iso(record.last_listed),
    }
    return {k: v for k, v in line.items() if v is not None}


class ChangeTally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, kind: ChangeKind) -> None:
        self.counts[kind.value] = self.counts.get(kind.value, 0) + 1

    def add_counts(self, kinds: Mapping[str, int]) -> None:
        for kind, count in kinds.items():
            self.counts[kind] = self.counts.get(kind, 0) + count

    def result(self) -> ChangeCounts:
        return ChangeCounts(**self.counts)
