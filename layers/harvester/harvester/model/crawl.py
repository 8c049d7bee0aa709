"""The crawl database's records: a site's memory of its URLs and sitemaps, kept across jobs.

A job's URL record (:class:`~harvester.model.records.SitemapURL`) is the job's view and expires with the
job; a :class:`CrawlRecord` is the site's memory of one URL, Nutch's CrawlDatum: its crawl state, its
fetch schedule, the validators and signature of its last good fetch and where that content is stored.
:class:`SitemapCrawl` lets the next job fetch a sitemap conditionally and, when it did not change, replay
what it listed instead of parsing it again. :class:`SiteCrawl` holds what is known of the site as a
whole: how far its sitemaps' ``lastmod`` can be trusted, host by host.

Every record carries a ``version``: a store writes a record only if the stored one still has
``version - 1`` (or does not exist, for version 1), so two jobs of one site that write the same record
at once never lose an update; the loser reads again and re-applies its change.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

import orjson
from msgspec import Meta, Struct

from harvester.model.base import Model, NonNegative, invalid
from harvester.model.stored_names import crawl_record_values, may_be_old_crawl_body, renamed


class CrawlState(StrEnum):
    """The state of a stored URL in the crawl-state machine (Nutch's CrawlDatum; see crawldb.crawl_state)."""

    UNFETCHED = "unfetched"
    FETCHED = "fetched"
    GONE = "gone"
    REDIR_TEMP = "redir_temp"
    REDIR_PERM = "redir_perm"
    NOTMODIFIED = "notmodified"
    DUPLICATE = "duplicate"
    ORPHAN = "orphan"  # no longer listed by any sitemap of the site: kept, never due


class ChangeKind(StrEnum):
    """What a job found out about one URL: the ``change`` of a line of ``changes.jsonl``.

    Every URL a job lists gets exactly one of the kinds above ``REMOVED``; ``REMOVED`` is for URLs the site
    stopped listing (they are not in the job).
    """

    NEW = "new"  # listed for the first time (whatever its fetch gave)
    BACK = "back"  # listed again after it had become orphan
    CHANGED = "changed"  # fetched, and the content differs from the last good fetch
    UNCHANGED = "unchanged"  # fetched (200), the same content
    NOTMODIFIED = "notmodified"  # the conditional GET was answered 304
    GONE = "gone"  # fetched, and now gone (404, 410, forbidden, or transient failures up to the limit)
    FAILED = "failed"  # fetched without a usable answer, to be tried again by a later crawl
    EXCLUDED = "excluded"  # not fetched by rule: robots.txt forbids it, or the address policy refuses it
    NOT_DUE = "not_due"  # not fetched: its schedule did not ask for it
    LISTED = "listed"  # a job that does not fetch pages listed a known URL again
    REMOVED = "removed"  # no longer listed: now orphan

    @property
    def in_feed(self) -> bool:
        """``not_due``, ``listed`` and ``excluded`` are counted, not written one line each: nothing happened to
        the URL's content."""
        return self not in (ChangeKind.NOT_DUE, ChangeKind.LISTED, ChangeKind.EXCLUDED)


class WarcLocation(Model, kw_only=True, frozen=True):
    """Where a capture's record is in the archive: ``length`` bytes at ``offset`` of ``filename`` (a document
    key: a file under the documents folder, or an S3 key) are one gzip member, the record, which a ranged
    read gives alone. ``payload_digest`` and ``date`` are the record's, so a later capture of identical
    content can be written as a revisit that refers to it (WARC-Refers-To-Target-URI / -Date)."""

    filename: str
    offset: NonNegative
    length: Annotated[int, Meta(gt=0)]
    record_type: str = "response"
    payload_digest: str
    date: datetime
    #: The record's target URI, when it is not the URL's own (the page redirected).
    url: str | None = None


class CrawlRecord(Model, kw_only=True):
    """One URL of a site, across jobs.

    Times are UTC. ``fetch_interval`` (seconds) adapts to how often the content really changes;
    ``next_fetch_time`` is when a job fetches it again without being asked. ``signature``, ``etag``,
    ``http_last_modified`` (the Last-Modified response header), ``content_type``, ``size`` and
    ``document_key`` or ``warc`` describe the last *good* fetch (a later 404 keeps them, so a page that comes back
    unchanged is recognised). ``last_modified``, ``change_frequency`` and ``priority`` are what the sitemap
    said when it last listed the URL (the names of the job's records, ``SitemapURL``);
    ``fetched_last_modified`` is the sitemap's ``last_modified`` that was current at the last good fetch, or at
    the fetch that found the URL gone: the sitemap's lastmod has *advanced* when the first is newer than the
    second (a gone URL is not asked again every job for a lastmod it was found gone at).

    Records stored under the old names (``lastmod``, ``changefreq``, ``fetched_lastmod``, and
    ``last_modified`` for the header) read under these: see :mod:`harvester.model.stored_names`.
    """

    url: str
    state: CrawlState = CrawlState.UNFETCHED
    retries: NonNegative = 0
    fetch_interval: Annotated[float, Meta(gt=0)]
    next_fetch_time: datetime
    last_fetch_time: datetime | None = None
    http_status: int | None = None
    signature: str | None = None
    etag: str | None = None
    http_last_modified: str | None = None
    content_type: str | None = None
    size: NonNegative | None = None
    document_key: str | None = None
    #: The response record holding the last good fetch's content, when the job kept it as WARC.
    warc: WarcLocation | None = None
    last_modified: datetime | None = None
    fetched_last_modified: datetime | None = None
    change_frequency: str | None = None
    priority: float = 0.5
    sitemap: str | None = None
    first_listed: datetime
    last_listed: datetime
    last_listed_job: str
    changes: NonNegative = 0
    #: The state an orphan had before, to return to when it is listed again; and the job that orphaned it.
    orphan_of: CrawlState | None = None
    orphaned_job: str | None = None
    version: Annotated[int, Meta(ge=1)] = 1

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray | memoryview) -> Self:
        """A stored record, whichever names it was stored under (the old ones through Python values)."""
        if may_be_old_crawl_body(data):
            return cls.model_validate(crawl_record_values(orjson.loads(data)))
        return super().model_validate_json(data)

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        return super().model_validate(crawl_record_values(value))


class SitemapCrawl(Model, kw_only=True):
    """What the last complete reading of one sitemap (or robots.txt) left, to read it conditionally next time.

    ``document_key`` names the document as it was read: a 304 next time is answered by parsing it again, so a
    job sees exactly what parsing the unchanged document would. (``listing_key``, the gzipped entries a
    reading stored under a schema below 4 holds beside it, is neither written nor read.)
    """

    url: str
    fetched_at: datetime
    http_status: int
    final_url: str | None = None
    etag: str | None = None
    #: The Last-Modified response header (read from ``last_modified`` too, its old stored name).
    http_last_modified: str | None = None
    signature: str
    document_key: str
    listing_key: str | None = None
    kind: str | None = None
    truncated: str | None = None
    warnings: dict[str, int] = {}
    entries: NonNegative = 0
    #: When a job first found it missing (404, 410, 401, 403) since this reading; the orphan rule lets one
    #: job's miss pass as a glitch, and counts it gone from the next job on.
    absent_since: datetime | None = None
    #: The WARC response record holding this reading's bytes (a job that keeps WARC): what a later job's
    #: 304, or its identical copy, is archived as a revisit of.
    warc: WarcLocation | None = None

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray | memoryview) -> Self:
        """A stored reading, whichever name its Last-Modified header was stored under."""
        if b'"last_modified":' in (data.encode() if isinstance(data, str) else bytes(data)):
            return cls.model_validate(orjson.loads(data))
        return super().model_validate_json(data)

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        return super().model_validate(renamed(value, "last_modified", "http_last_modified"))


class SitemapPart(Model, kw_only=True):
    """A sitemap's part of a job's records, kept for the next jobs: the lines its complete listing gave every
    URL it listed first, as a job that lists them again and fetches none of them writes them, without the
    fields that are that job's own (``crawldb.parts``: the tail). A later job whose reading of the sitemap
    gives the same document (a 304, or the same bytes) adopts the part whole when nothing it holds moved
    since: its lines, its index rows and its counts, instead of listing the URLs one by one.

    ``epoch`` is the sitemap's count of crawl-record writes (``CrawlDatabase.sitemap_part``) when the part was
    made: a write to any of its URLs' records since (a fetch, an orphan, another sitemap listing one) moves it
    on, and a part whose epoch is not the sitemap's is not adopted. ``due_at`` is the earliest
    ``next_fetch_time`` of its URLs and ``held`` the URLs whose advanced lastmod was held back (an untrusted
    host): a job that fetches pages adopts the part only while none of them is due. ``lines`` and ``index`` name
    its documents: the lines without their tail and its index rows (Parquet); the crawl database keeps its URLs'
    keys beside it."""

    sitemap: str
    #: The document's kind (``SitemapKind``: a urlset, a feed, a text file).
    kind: str
    signature: str
    listing: str
    job_id: str
    made_at: datetime
    epoch: NonNegative
    urls: NonNegative
    lines: str
    index: str | None = None
    due_at: datetime | None = None
    held: NonNegative = 0
    #: What the reading counted (``SitemapRecord``'s): entries dropped by reason, and warnings.
    dropped: dict[str, int] = {}
    warnings: dict[str, int] = {}
    #: A part made by a job that adopted the sitemap's part before it in part (``crawldb.parts.Lineage``): the
    #: earlier jobs whose records it holds as they listed them, read as listed by its job at
    #: ``inherited_at`` (or by its latest adopter); ``excluded``, the URLs whose records name one of those
    #: jobs (or its own) and that it does not hold: they read as they are stored.
    inherits: list[str] = []
    inherited_at: datetime | None = None
    excluded: list[str] = []
    #: Every line's first fields are its entry's in the sitemap's document as a listing renders them (no
    #: line carries an extension another sitemap's listing of its URL added): an element of the document
    #: read again byte for byte has its line (``sitemap.elements``).
    verbatim: bool = False


class HostTrust(Model, kw_only=True):
    """How far one host's sitemap ``lastmod`` has proved true.

    ``score`` moves halfway toward each job's precision (of the URLs whose lastmod advanced since their last
    fetch, the share whose content really changed); the host is trusted while the score is at least the
    threshold. It starts trusted, at 1.
    """

    score: Annotated[float, Meta(ge=0.0, le=1.0)] = 1.0
    trusted: bool = True
    confirmed: NonNegative = 0  # all jobs: lastmod advanced and the content changed
    refuted: NonNegative = 0  # all jobs: lastmod advanced and the content was the same
    updated_at: datetime | None = None


class ChangeCounts(Model, kw_only=True):
    """How many URLs of a job got each :class:`ChangeKind`. All but ``removed`` add up to ``total_urls``."""

    new: int = 0
    back: int = 0
    changed: int = 0
    unchanged: int = 0
    notmodified: int = 0
    gone: int = 0
    failed: int = 0
    excluded: int = 0
    not_due: int = 0
    listed: int = 0
    removed: int = 0

    def listed_total(self) -> int:
        """The job's URLs (every kind but ``removed``): what ``total_urls`` counts."""
        return sum(getattr(self, kind.value) for kind in ChangeKind if kind is not ChangeKind.REMOVED)


class TrustChange(Model, kw_only=True):
    """What one job's evidence did to a host's lastmod trust (the job result's ``lastmod_trust``)."""

    confirmed: int = 0
    refuted: int = 0
    score_before: float
    score: float
    trusted_before: bool
    trusted: bool
    #: Which way it went: ``kept``, ``lost``, ``regained`` or ``still_untrusted``.
    went: str = ""

    def __post_init__(self) -> None:
        if self.trusted_before == self.trusted:
            went = "kept" if self.trusted else "still_untrusted"
        else:
            went = "regained" if self.trusted else "lost"
        if self.went and self.went != went:
            raise invalid("went", f"{self.went!r} contradicts trusted {self.trusted_before} -> {self.trusted}")
        self.went = went


class UrlPage(Struct, frozen=True):
    """A page of a site's URL records (``CrawlDatabase.url_pages``) and the position after it, from which a
    pass over the site resumes (opaque: the crawl database's own)."""

    records: list[CrawlRecord]
    after: str


class Collected(Struct, frozen=True):
    """What a call of ``CrawlDatabase.collect`` did: ``batches`` (the database's units) went, once it is over;
    or, when its time was up before, ``paused``: the state it goes on from (opaque: the crawl database's
    own)."""

    batches: int = 0
    paused: bytes | None = None


class SiteCrawl(Model, kw_only=True):
    """A site as a whole: lastmod trust per host, what the latest jobs' evidence did to it, and the
    well-known paths found absent.

    ``applied`` remembers each job whose evidence is counted (and what it did), so that a job's end, if it
    is retried after a crash, neither counts its evidence twice nor forgets what it reported.
    """

    site: str
    hosts: dict[str, HostTrust] = {}
    applied: dict[str, dict[str, TrustChange]] = {}
    #: The well-known paths the site's latest job that probed them found absent: the next job asks them all
    #: in robots.txt's task (pipeline/sitemap_step/probes.py), not each in a task of its own.
    absent_paths: list[str] = []
    #: 0 for a site not stored yet (its first write is version 1).
    version: NonNegative = 0

    def trust(self, host: str) -> HostTrust:
        return self.hosts.get(host) or HostTrust()


class FetchResult(StrEnum):
    SUCCESS = "success"
    REDIR_PERM = "redir_perm"
    REDIR_TEMP = "redir_temp"
    NOTMODIFIED = "notmodified"
    GONE = "gone"
    RETRY = "retry"


class Fetched(Struct, frozen=True):
    """What one job's fetch of a page came to, as far as the crawl record cares.

    ``result`` is RETRY only when the job gave up on a failure that may pass (it counts toward gone across
    crawls); a failure the job will still retry itself is not written to the crawl database at all.
    """

    result: FetchResult
    http_status: int | None = None
    signature: str | None = None
    etag: str | None = None
    http_last_modified: str | None = None
    content_type: str | None = None
    size: int | None = None
    document_key: str | None = None
    #: The WARC response record holding the content (a new one, or the stored one it was identical to).
    warc: WarcLocation | None = None
    #: The sitemap lastmod the job listed the URL with (becomes ``fetched_last_modified`` of a good or gone fetch).
    lastmod: datetime | None = None
