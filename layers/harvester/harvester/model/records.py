"""The records a user sees, with the validation rules of the data model.

``SitemapURL`` (one per page URL of a job), ``BulkProcessingJob`` (the job and its progress),
``SitemapIngestionResult`` (written once when a job ends) and ``SitemapRecord`` (one per sitemap of a job:
the distributed form of the seed's loader state). The state stores persist exactly these models, so a rule
checked here holds for what DynamoDB and SQLite hold too.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, Self

from msgspec import Meta, Struct, field
from orjson import OPT_UTC_Z, dumps

from harvester.model.base import Model, NonNegative, invalid
from harvester.model.crawl import (
    ChangeCounts,
    ChangeKind,
    CrawlRecord,
    CrawlState,
    SitemapPart,
    TrustChange,
    WarcLocation,
)
from harvester.model.fetch_stats import FetchStats
from harvester.model.messages import JobRequest, PageTask, SitemapOrigin
from harvester.model.stored_names import crawl_record_values, may_be_old_crawl_body, renamed
from harvester.sitemap.entries import Image, NewsStory, from_json


def body_of(record: Model | ListedRow | CrawlRow) -> str:
    """A record as the state stores keep it: JSON without its empty fields. Every optional field of the
    stored models defaults to None (tests/model/test_records.py checks), so reading it back gives the same
    record, and the empty fields are neither written nor (on DynamoDB) paid for.

    The two records written for every listed URL (its job record and its crawl record) hold only values
    orjson writes (strings, numbers, enums, UTC datetimes, dicts and lists of them): they are written by
    orjson from their fields, faster than through a dict of them; a value orjson refuses (an integer beyond
    64 bits in a sitemap's extension) sends the record to msgspec. The same record read back either way:
    tests/model/test_records.py checks it for every kind of entry. A row (``ListedRow``, ``CrawlRow``)
    is serialised already."""
    kind = type(record)
    if kind is ListedRow or kind is CrawlRow:
        return record.body  # type: ignore[union-attr]
    if kind in _PLAIN_BODIES:
        try:
            return dumps(_without_none(record), default=_without_none, option=OPT_UTC_Z).decode()
        except TypeError:
            pass
    return record.model_dump_json(exclude_none=True)  # type: ignore[union-attr]


def _without_none(record: Any) -> dict[str, Any]:
    if not isinstance(record, Model):
        raise TypeError(f"{type(record).__name__} is written by msgspec")
    return {name: value for name in record.__struct_fields__ if (value := getattr(record, name)) is not None}


def utcnow() -> datetime:
    return datetime.now(UTC)


def key_of(url: str) -> str:
    """A fixed-size key for a URL (DynamoDB sort keys stop at 1,024 bytes; URLs may have 2,048 characters)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:32]


#: ``key_of``, remembered for the URLs of the latest batches: a durable run asks for a listed URL's key
#: again after its reading did (its job record; on DynamoDB its crawl record too). (A throwaway run's
#: reading needs no key, only its bits: ``keyset.url_bits``.)
url_key = lru_cache(maxsize=4096)(key_of)


class UrlStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    #: Not fetched, by rule rather than by failure: robots.txt forbids it, or the address policy refuses
    #: where it leads. Final for the job and no failure; the crawl database records no fetch for it.
    EXCLUDED = "excluded"

    @property
    def final(self) -> bool:
        return self in (UrlStatus.COMPLETED, UrlStatus.FAILED, UrlStatus.EXCLUDED)


class SitemapURL(Model, kw_only=True):
    """One page URL of a job: what its sitemap said, where its processing stands, and its crawl state.

    ``last_modified``, ``change_frequency`` and ``priority`` are what the sitemap said (the seed data
    model's names, which every output uses for them). The crawl fields (``crawl_state``, ``retries``,
    ``next_fetch_time``, ``etag``, ``http_last_modified``: the Last-Modified response header, ``signature``)
    are those the full crawl-state machine and the re-crawl schedule need.

    Its URL is one the sitemap worker screened (harvester.urls.screen) or its store gave back: the record is
    built by the engine, never from a user's input, and does not check it again.
    """

    url: str
    last_modified: datetime | None = None
    change_frequency: str | None = None
    priority: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.5
    status: UrlStatus = UrlStatus.PENDING
    error_message: str | None = None
    sitemap: str | None = None
    extensions: dict[str, Any] = {}
    # crawl state
    crawl_state: CrawlState = CrawlState.UNFETCHED
    retries: NonNegative = 0
    attempts: NonNegative = 0
    next_fetch_time: datetime | None = None
    http_status: int | None = None
    content_type: str | None = None
    size: NonNegative | None = None
    signature: str | None = None
    etag: str | None = None
    #: Read from ``last_modified_header`` too, its old stored name.
    http_last_modified: str | None = None
    final_url: str | None = None
    document_key: str | None = None
    #: This job's capture of the page in the job's WARC files (its response, or a revisit record).
    warc: WarcLocation | None = None
    fetch_time: datetime | None = None
    #: Milliseconds from this job's request to its response's headers (None: no answer, or not fetched).
    fetch_ms: NonNegative | None = None
    discovered_at: datetime | None = None
    finished_at: datetime | None = None
    # the crawl database
    #: The site's crawl record of this URL as this job wrote it when the URL was listed (None before that):
    #: the validators a fetch sends, the signature a new body is compared with, the schedule it moves on.
    known: CrawlRecord | None = None
    #: Why this job fetches the URL (``new``, ``due``, ``lastmod``, ``lastmod_probe``, ``full``), or
    #: ``not_due`` / ``listed`` when it does not.
    fetch_reason: str | None = None
    #: What the job found out about the URL (set when listed for ``new`` / ``back``, else when final).
    change: ChangeKind | None = None

    def __post_init__(self) -> None:
        if not self.error_message and self.status in _NEEDS_REASON:
            raise invalid("error_message", f"{self.url}: a {self.status.value} URL needs an error_message")

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray | memoryview) -> Self:
        """A stored record, whichever names it (or the crawl record it holds) was stored under."""
        if _may_be_old_url_body(data):  # (json: orjson refuses an extension's integer beyond 64 bits)
            return cls.model_validate(json.loads(bytes(data) if isinstance(data, memoryview) else data))
        return super().model_validate_json(data)

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        value = renamed(value, "last_modified_header", "http_last_modified")
        if isinstance(value, dict) and "known" in value:  # a snapshot under the crawl record's old names
            value = value | {"known": crawl_record_values(value["known"])}
        return super().model_validate(value)

    @property
    def key(self) -> str:
        return url_key(self.url)  # cached: a batch asks for its keys several times in a row

    # USP's names (usp.objects.page.SitemapPage) for what the record keeps in ``extensions``: code written
    # for USP's pages reads Harvester's (the Python API's tree) unchanged.

    @property
    def news_story(self) -> NewsStory | None:
        """The Google News story of the page (it also answers to USP's ``publish_date``)."""
        news = self.extensions.get("news")
        return None if news is None else from_json(NewsStory, news)

    @property
    def images(self) -> list[Image] | None:
        """The page's Google Images entries; None when it has none, as in USP."""
        images = self.extensions.get("images")
        return [from_json(Image, i) for i in images] if images else None

    @property
    def alternates(self) -> list[tuple[str, str]] | None:
        """The page's ``xhtml:link rel="alternate"`` links as USP gives them: (language, URL) pairs."""
        links = self.extensions.get("alternates")
        return [(a["hreflang"], a["href"]) for a in links] if links else None

    def task(self, job_id: str, *, rank: float = 0.0, stored: str | None = None) -> PageTask:
        """The page task that fetches this URL (again), served in ``rank`` order (pipeline.ranking), with
        where the state store recorded it (``PageTask.stored``)."""
        return PageTask(
            job_id=job_id,
            url=self.url,
            sitemap=self.sitemap,
            lastmod=self.last_modified,
            changefreq=self.change_frequency,
            priority=self.priority,
            attempt=self.retries,
            rank=rank,
            stored=stored,
        )


#: The models body_of writes with orjson (see there): no field of theirs holds a type it writes otherwise.
_PLAIN_BODIES = (SitemapURL, CrawlRecord)
_NEEDS_REASON = (UrlStatus.FAILED, UrlStatus.EXCLUDED)


def _may_be_old_url_body(body: str | bytes | bytearray | memoryview) -> bool:
    """Whether a stored URL record may use an old name (its header's, or its crawl record's)."""
    text = body if isinstance(body, str) else bytes(body).decode("utf-8", "replace")
    if '"last_modified_header"' in text:
        return True
    at = text.find('"known":')
    return at >= 0 and may_be_old_crawl_body(text[at:])


class ListedRow(Struct):
    """A ``SitemapURL`` serialised already: a record a listing makes final at once (the job does not fetch
    the URL). Such a record is only written, never read back by the step that made it, so it is not built
    as a model only to be serialised. Built only by ``harvester.pipeline.listed_rows``, whose bytes
    tests/pipeline/test_listed_rows.py compares with the model's."""

    url: str
    body: str
    #: What the job's end takes of it, made with it: its change kind and its change-feed line (None for
    #: a kind only counted).
    change: str
    feed: bytes | None
    status: UrlStatus = UrlStatus.COMPLETED

    @property
    def key(self) -> str:
        return url_key(self.url)


class CrawlRow(Struct):
    """A ``CrawlRecord`` serialised already, at ``version`` (see ``ListedRow``)."""

    url: str
    body: str
    version: int = 1


#: What a state store records for a listed URL: its job record, as a model or serialised already.
PageRecord = SitemapURL | ListedRow
#: What the crawl database writes for a listed URL: its crawl record, as a model or serialised already.
CrawlWrite = CrawlRecord | CrawlRow


class JobStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"  # ended by its user before it was done (`harvest jobs cancel`): it has no result

    @property
    def final(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


class JobCounts(Model, kw_only=True, frozen=True):
    """The job's counters. Each is changed only in the same atomic write as the record that justifies it."""

    urls_total: NonNegative = 0
    urls_succeeded: NonNegative = 0
    urls_failed: NonNegative = 0
    urls_excluded: NonNegative = 0  # final, not fetched by rule (robots.txt, address policy)
    sitemaps_total: NonNegative = 0
    sitemaps_done: NonNegative = 0
    sitemaps_ok: NonNegative = 0  # read successfully as a sitemap (robots.txt excluded)

    @property
    def urls_processed(self) -> int:
        return self.urls_succeeded + self.urls_failed + self.urls_excluded

    @property
    def discovery_complete(self) -> bool:
        return self.sitemaps_total > 0 and self.sitemaps_done == self.sitemaps_total

    @property
    def done(self) -> bool:
        return self.discovery_complete and self.urls_processed == self.urls_total

    def __add__(self, other: JobCounts) -> JobCounts:
        return JobCounts(**{name: getattr(self, name) + getattr(other, name) for name in JobCounts.__struct_fields__})


class JobRecord(Model, kw_only=True):
    """What the state store keeps about a job; :class:`BulkProcessingJob` is its public view with counts."""

    job_id: str
    request: JobRequest
    status: JobStatus = JobStatus.PENDING
    start_time: datetime
    end_time: datetime | None = None
    seeded: bool = False
    result_key: str | None = None
    error_message: str | None = None
    #: The site's crawl database held no URL record when the job started: no record can be its orphan.
    empty_site: bool = False

    @property
    def site(self) -> str:
        return self.request.site


class BulkProcessingJob(Model, kw_only=True):
    """A job and its progress. In a distributed job ``total_urls`` grows while discovery runs, so progress is
    processed / total of what is known, and ``discovery_complete`` says whether that total can still grow."""

    job_id: str
    sitemap_url: str
    status: JobStatus
    progress_percentage: Annotated[float, Meta(ge=0.0, le=100.0)]
    current_url_index: NonNegative
    total_urls: NonNegative
    processed_count: NonNegative
    successful_count: NonNegative
    failed_count: NonNegative
    excluded_count: NonNegative = 0
    start_time: datetime
    last_update_time: datetime
    rate_limit_delay: Annotated[float, Meta(ge=0)]
    discovery_complete: bool
    sitemaps_total: NonNegative
    sitemaps_done: NonNegative
    end_time: datetime | None = None
    result_location: str | None = None
    error_message: str | None = None

    def __post_init__(self) -> None:
        if self.current_url_index > self.total_urls:
            raise invalid("current_url_index", "must not exceed total_urls")
        if self.processed_count != self.successful_count + self.failed_count + self.excluded_count:
            raise invalid("processed_count", "must equal successful_count + failed_count + excluded_count")

    @classmethod
    def of(
        cls, job: JobRecord, counts: JobCounts, *, last_update: datetime, result_location: str | None = None
    ) -> BulkProcessingJob:
        processed = counts.urls_processed
        # An empty job is 0 % done until it ends, then 100 %.
        progress = 100.0 * processed / counts.urls_total if counts.urls_total else 100.0 * job.status.final
        return cls(
            job_id=job.job_id,
            sitemap_url=job.request.sitemaps[0] if len(job.request.sitemaps) == 1 else job.site,
            status=job.status,
            progress_percentage=round(min(progress, 100.0), 2),
            current_url_index=processed,
            total_urls=counts.urls_total,
            processed_count=processed,
            successful_count=counts.urls_succeeded,
            failed_count=counts.urls_failed,
            excluded_count=counts.urls_excluded,
            start_time=job.start_time,
            last_update_time=max(last_update, job.start_time),
            rate_limit_delay=job.request.rate_limit_delay,
            discovery_complete=counts.discovery_complete,
            sitemaps_total=counts.sitemaps_total,
            sitemaps_done=counts.sitemaps_done,
            end_time=job.end_time,
            result_location=result_location,
            error_message=job.error_message,
        )


class SitemapStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"  # could not be fetched (HTTP error, refused address, timeouts)
    INVALID = "invalid"  # fetched, but not a sitemap, or recursion, or too deep
    ABSENT = "absent"  # a well-known path that is not there: not worth reporting loudly
    DUPLICATE = "duplicate"  # redirected to a sitemap this job already has

    @property
    def final(self) -> bool:
        return self not in (SitemapStatus.PENDING, SitemapStatus.PROCESSING)


#: Reasons in ``SitemapRecord.dropped`` for children not read: deeper than ``max_depth``, or left out by
#: the job's sitemap patterns or callbacks.
TOO_DEEP = "sitemap_too_deep"
FILTERED = "sitemap_filtered"


class StepDocument(Model, kw_only=True, frozen=True):
    """The document a reading in steps reads, kept by the step that paused first: every later step replays it
    from the document store (no request to the site), so the steps list one version of the sitemap, however
    often the site rewrites it meanwhile. ``key`` names the stored copy (the body that step downloaded whole,
    stored as a reading stores it, or the stored copy a 304 replayed); the rest is what its response said, for
    the outcome and for what the last step remembers (``SitemapCrawl``)."""

    key: str
    #: The SHA-256 of the body (its stored copy's signature).
    signature: str
    #: The signature of the sitemap's stored reading when the first step read it (None: there was none): the
    #: last step remembers this reading only over that one (another job's newer reading is kept).
    read_against: str | None = None
    http_status: int
    final_url: str
    etag: str | None = None
    last_modified: str | None = None
    #: Why the body was cut (the size limit), as a reading's ``truncated``.
    truncated: str | None = None
    #: The WARC response record the first step wrote of the body (a job that keeps WARC; the step archives
    #: the reading), for the last step to remember (a revisit's location is not kept).
    warc: WarcLocation | None = None

    def headers(self) -> dict[str, str]:
        """The validators, as response headers (what ``remembered`` reads)."""
        found = {"etag": self.etag, "last-modified": self.last_modified}
        return {name: value for name, value in found.items() if value is not None}


class SitemapRecord(Model, kw_only=True):
    """One sitemap of a job: the loader state of the seed, made safe for many sitemaps in progress at once.

    ``pages_recorded`` and ``pages_enqueued`` are the per-sitemap checkpoint: after a crash the sitemap is
    read again, entries before ``pages_enqueued`` are skipped, those up to ``pages_recorded`` are sent again
    (their records absorb the duplicate), and the rest is recorded as new.
    """

    url: str
    origin: SitemapOrigin
    depth: NonNegative
    ancestors: tuple[str, ...] = ()
    parent: str | None = None
    status: SitemapStatus = SitemapStatus.PENDING
    kind: str | None = None
    error_message: str | None = None
    truncated: str | None = None
    final_url: str | None = None
    http_status: int | None = None
    pages_recorded: NonNegative = 0
    pages_enqueued: NonNegative = 0
    #: What the checkpoint counted: a digest of the first ``pages_enqueued`` accepted URLs (a reading resumed
    #: on a sitemap that changed meanwhile starts over) and the lastmod probes spent on them.
    checkpoint_digest: str | None = None
    probes_spent: NonNegative = 0
    #: URLs listed not due although their lastmod advanced since their last fetch (an untrusted host, no
    #: lastmod probe left): a part of this reading is not adopted by a job that fetches pages.
    lastmods_held: NonNegative = 0
    #: The checkpoint's reading kept entries for the sitemap's part, unrecorded (``Checkpoint.compared``): a
    #: reading resumed after it compares again, the entries before the checkpoint too, or starts over.
    compared: bool = False
    #: A reading of it started over after pages were recorded, or was resumed on a document whose first bytes
    #: differ from those the checkpoint's entries were read from (``prefix_bytes``, ``prefix_digest``;
    #: pipeline/sitemap_step/prefix.py): the job's records may hold what the document read last does not list,
    #: so the job keeps no part of it. A reading resumed on the same bytes lists what one reading lists.
    restarted: bool = False
    prefix_bytes: NonNegative = 0
    prefix_digest: str | None = None
    pages_new: NonNegative = 0
    children: NonNegative = 0
    dropped: dict[str, int] = {}
    #: Children refused as sitemaps (recursion, too deep), with the reason: USP's InvalidSitemap nodes.
    invalid_children: dict[str, str] = {}
    warnings: dict[str, int] = {}
    document_key: str | None = None
    #: Unchanged since the site's last complete reading of it: its entries were replayed, not parsed.
    not_modified: bool = False
    #: The sitemap's part the job adopted, whole or in part once the reading had listed the rest (its URLs are
    #: the job's, counted): a step delivered again after that finishes the sitemap as it was (the part's
    #: counts of dropped entries and warnings are those of the reading that adopted it), without reading it.
    adopted: SitemapPart | None = None
    #: The document the reading's steps read (set by the step that paused first; ``StepDocument``).
    step_document: StepDocument | None = None
    attempts: NonNegative = 0
    discovered_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def key(self) -> str:
        return url_key(self.url)

    def __post_init__(self) -> None:
        if self.pages_enqueued > self.pages_recorded:
            raise invalid("pages_enqueued", "cannot exceed pages_recorded")


class LoaderState(Model, kw_only=True):
    """The seed's loader state, as a view over a job's sitemap records and counters (``harvest report``)."""

    pending_sitemap_urls: list[str]
    in_progress_sitemaps: dict[str, int]  # url -> entries already handed out (the checkpoint)
    processed_sitemap_urls: list[str]
    total_count: int
    handled_count: int
    completed: bool

    @classmethod
    def of(cls, sitemaps: list[SitemapRecord], counts: JobCounts) -> LoaderState:
        return cls(
            pending_sitemap_urls=[s.url for s in sitemaps if s.status is SitemapStatus.PENDING],
            in_progress_sitemaps={s.url: s.pages_enqueued for s in sitemaps if s.status is SitemapStatus.PROCESSING},
            processed_sitemap_urls=[s.url for s in sitemaps if s.status.final],
            total_count=counts.urls_total,
            handled_count=counts.urls_processed,
            completed=counts.discovery_complete,
        )


class ErrorDetail(Model, kw_only=True):
    url: str
    kind: str  # "page" or "sitemap"
    error: str


class SitemapIngestionResult(Model, kw_only=True):
    """The outcome of a job, written once when it ends.

    The summary JSON holds the counts and errors; ``processed_urls`` (the SitemapURL records) is written
    beside it as JSON Lines, because a 50,000-URL job does not belong inline.
    """

    job_id: str
    site: str
    status: JobStatus
    total_urls: NonNegative
    successful_processing: NonNegative
    failed_processing: NonNegative
    #: Of ``failed_processing``: URLs this job did not fetch (not due) that the crawl database knows gone or
    #: failing from an earlier fetch; their records say why. A known failure is not counted a success.
    known_failures: NonNegative = 0
    #: Not fetched by rule (robots.txt, the address policy): neither a success nor a failure.
    excluded_processing: NonNegative = 0
    #: Where the JSON Lines of the job's records (``SitemapURL``) are.
    processed_urls: str | None = None
    start_time: datetime
    end_time: datetime
    total_duration: Annotated[float, Meta(ge=0)]
    error_details: list[ErrorDetail] = []
    errors_omitted: NonNegative = 0
    #: Why the excluded URLs were not fetched, with how many each reason kept out.
    exclusions: dict[str, int] = {}
    #: Entries the sitemaps listed that URL hygiene refused (``malformed``, ``not_http``, ``out_of_scope``...)
    #: or the job's selection left out (``lastmod_before_since``...: model/selection.py); and the values
    #: hygiene set aside while keeping the entry (``bad_lastmod``, ``bad_priority``...); each summed over
    #: the job's sitemaps (``harvest sitemaps`` shows them sitemap by sitemap).
    entries_dropped: dict[str, int] = {}
    entry_warnings: dict[str, int] = {}
    sitemaps_total: NonNegative = 0
    sitemaps_ok: NonNegative = 0
    #: What the job found out, per kind (see ChangeKind); the lines are in ``changes_location``.
    changes: ChangeCounts = field(default_factory=ChangeCounts)
    changes_location: str | None = None
    #: Per host: what this job's evidence did to the trust in the sitemaps' lastmod.
    lastmod_trust: dict[str, TrustChange] = {}
    #: Where the job's columnar URL index is (the folder ``index/`` of Parquet files: a row per URL, Common
    #: Crawl's columns); None when it could not be written (the records are: see pipeline.job_index).
    url_index: str | None = None
    #: What the job's fetches came to (None in a result written before it was counted).
    fetches: FetchStats | None = None

    def __post_init__(self) -> None:
        if self.total_urls != self.successful_processing + self.failed_processing + self.excluded_processing:
            raise invalid("total_urls", "must equal successful_processing + failed_processing + excluded_processing")
        if not self.start_time < self.end_time:
            raise invalid("start_time", "must be before end_time")
        if self.changes.listed_total() not in (0, self.total_urls):
            raise invalid("changes", "the changes of the job's URLs must add up to total_urls")
