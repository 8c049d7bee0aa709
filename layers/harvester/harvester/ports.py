"""The ports through which the engine reaches the world: a task queue, a state store, a crawl database, a
document store and WARC files (archive.stores), the hosts' gate (politeness.gate), the registry of scheduled
sites. Protocols only: the values
they take and give are the model's (model.state) and the concerns'.

Each has two adapters: ``harvester.adapters.aws`` (SQS, DynamoDB, S3) and ``harvester.adapters.local``
(SQLite and a folder). The state store is a repository of domain operations rather than a key-value API,
because the guarantees the engine relies on ("registered once per job", "counted in the same atomic
write", "finished exactly once") are properties each adapter must provide with its own primitives:
conditional writes and transactions in DynamoDB, transactions in SQLite. ``tests/contract`` checks that
both adapters keep them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from harvester.archive.stores import DocumentStore, WarcStore
from harvester.model.crawl import Collected, CrawlRecord, SiteCrawl, SitemapCrawl, SitemapPart, UrlPage
from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.model.records import (
    CrawlWrite,
    JobCounts,
    JobRecord,
    JobStatus,
    PageRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
)
from harvester.model.scheduled_site import ScheduledSite
from harvester.model.state import (
    AdoptedPart,
    Checkpoint,
    EndProgress,
    JobSnapshot,
    Lease,
    ListedBatch,
    OpenPages,
    PageOutcome,
    PageRetry,
    Recorded,
    RecordPage,
    Settled,
    SitemapOutcome,
    SitemapRelease,
)
from harvester.politeness.gate import HostGate

__all__ = [
    "CrawlDatabase",
    "Delays",
    "DocumentStore",
    "HostGate",
    "LeaseLost",
    "Message",
    "PageCounter",
    "Popped",
    "QueueUnavailable",
    "ScheduledSites",
    "StateStore",
    "TaskQueue",
    "WarcStore",
    "each_delay",
]

Message = JobRequest | SitemapTask | PageTask


#: A push's delay in seconds: one for every message, or one per message (pages deferred to turns of their own).
Delays = float | Sequence[float]


def each_delay(messages: Sequence[Message], delay_seconds: Delays) -> list[float]:
    """The delay of each message of a push."""
    if isinstance(delay_seconds, int | float):
        return [float(delay_seconds)] * len(messages)
    if len(delay_seconds) != len(messages):
        raise ValueError(f"{len(delay_seconds)} delays for {len(messages)} messages")
    return [float(delay) for delay in delay_seconds]


class QueueUnavailable(RuntimeError):
    """A push failed for a reason that may pass (a dropped connection, a state file locked for longer than a
    push waits): the caller may keep the messages elsewhere for now (the local runner keeps them in memory and
    says so). A full or damaged disk is not one: it fails every write to the state, and the run stops."""


class Popped(Protocol):
    """A message handed out by ``pop``: invisible to others until acknowledged or its visibility ends."""

    @property
    def body(self) -> str: ...


class TaskQueue(Protocol):
    """Fan-out and hand-out of job requests, sitemap tasks and page tasks: the interface of Scrapy's external
    queues (seeds/request-queues.txt), with SQS's at-least-once delivery: a popped message stays the
    queue's until ``ack``, so a worker that dies with it does not lose it."""

    def push(self, messages: Sequence[Message], *, delay_seconds: Delays = 0) -> None:
        """Sends every message or raises (``QueueUnavailable`` when the failure may pass); a message may be
        delivered more than once, never lost. It is not delivered before ``delay_seconds`` (one for all, or
        one per message; at most 900; SQS rounds up to whole seconds)."""

    def pop(self) -> Popped | None:
        """The next message to handle (job requests, then sitemaps, then pages by rank), or None: none is
        visible, or a temporary problem kept the queue from answering (never raised)."""

    def ack(self, popped: Popped) -> None:
        """The popped message is handled: it is removed."""

    def close(self) -> None:
        """Releases what the queue holds (a connection); messages pushed stay where the queue keeps them."""

    def __len__(self) -> int:
        """The messages queued (visible, in flight or delayed). When the count cannot be had, the last known
        one or 1: never 0 because of an error, which would make the queue look finished."""


class StateStore(Protocol):
    """Job, loader and per-URL state. Every method is atomic; every counter moves with its record."""

    #: Listed pages a sitemap reading records per ``record_pages`` call (its last call takes up to as many
    #: more: the remainder goes along rather than alone): each call is one atomic write (and one
    #: checkpoint) where the store allows it, so the size is the store's trade of commits against work
    #: redone after a crash.
    record_batch: int
    #: Listed pages a sitemap reading hands ``record_pages`` at once. A store that keeps pages in batches, each
    #: sent as one page message, takes several batches' worth and records them a lane at a time (``lanes``), so
    #: that a page message holds one batch, which its fetches claim and settle whole; otherwise ``record_batch``.
    listing_window: int

    # jobs -----------------------------------------------------------------------------------------
    def create_job(self, job: JobRecord) -> JobRecord:
        """Stores a new job, or returns the one already stored under its id (job ids are idempotent)."""

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def mark_seeded(self, job_id: str) -> None:
        """pending → in_progress once the first sitemap tasks are recorded."""

    def end_job(self, job_id: str, status: JobStatus, *, end_time: datetime, error_message: str | None = None) -> bool:
        """in_progress → ``status``. True for exactly one caller, however many race."""

    def set_result(self, job_id: str, result_key: str) -> None: ...

    def claim_end(self, job_id: str, *, until: float, now: float, handed: float | None = None) -> EndProgress | None:
        """Takes the writing of an ended job's result until ``until`` (epoch seconds) and returns how far it
        has got (``save_end``'s; an empty ``EndProgress`` at first); None while another writer's claim holds
        (``now`` before its ``until``), so that one end at a time writes it, unless that claim is ``handed``:
        the one a writer handed on with its progress (``save_end``) to the end's next step."""

    def save_end(self, job_id: str, progress: EndProgress, *, held: float, handed: float) -> bool:
        """Stores how far the job's end has got, and hands the claim ``held`` on as ``handed`` (for the end's
        next step to take: ``claim_end``); False when the claim held is no longer this writer's."""

    def active_job_ids(self) -> list[str]:
        """The jobs a scheduler looks after: not yet ended (pending or in progress), or ended and owed their
        result; in a stable order (a tick goes on from a place in it)."""

    def snapshot(self, job_id: str) -> JobSnapshot | None: ...

    def counts(self, job_id: str) -> JobCounts:
        """The counters, cheaply and possibly torn across shards: a pre-check, confirmed by ``snapshot``."""

    # sitemaps (loader state) ----------------------------------------------------------------------
    def add_sitemaps(self, job_id: str, sitemaps: Sequence[SitemapRecord]) -> list[SitemapRecord]:
        """Registers each sitemap URL once per job (counting it) and returns the stored record of every
        given URL: the new ones as given, the known ones as they are."""

    def get_sitemap(self, job_id: str, url: str) -> SitemapRecord | None: ...

    def claim_sitemap(self, job_id: str, url: str, lease: Lease, *, now: float) -> SitemapRecord | None:
        """pending (or processing with a lapsed lease) → processing; None when final or leased elsewhere.
        Increments ``attempts``."""

    def record_pages(
        self,
        job_id: str,
        sitemap_url: str,
        pages: Sequence[PageRecord],
        *,
        checkpoint: int,
        lease: Lease,
        site: str | None = None,
        crawl: Mapping[str, CrawlWrite] | None = None,
        enqueued: Checkpoint | None = None,
        keys: Sequence[int] | None = None,
        left: Mapping[str, str] | None = None,
        lanes: Sequence[bool] | None = None,
    ) -> Recorded:
        """Registers the pages not yet known to the job (counting them, and counting those created final
        as succeeded/failed), writes the crawl record of each of them (``crawl``, by URL, versioned, in the
        crawl database of ``site``) and moves the sitemap's ``pages_recorded`` to ``checkpoint``,
        atomically (a store that writes the pages in several batches, a write each, moves it with the first:
        the pages up to it are sent again by a reading resumed there). A crawl record that another writer
        changed meanwhile makes the write stale: nothing of that transaction is written (the checkpoint does
        not move) and its URLs come back in ``stale``.
        With ``enqueued`` (a batch with no task to send), the write also does :meth:`mark_enqueued`'s.
        ``keys``: the pages' ``bits_of(page.key)`` when the caller has them (a store that de-duplicates in
        memory need not work them out again). ``left``: the sitemap each URL's crawl record named before this
        listing, by URL: their epochs move with the write, as this sitemap's does
        (``CrawlDatabase.sitemap_part``), and a URL a part the job adopted holds is the job's already.
        ``lanes``: each page's page-message lane (True: the priority lane), when its task is to be sent: a store
        that keeps pages in batches never puts two lanes' pages in one batch (``Recorded.batches``).
        Raises :class:`LeaseLost` if the sitemap's lease is not ours."""

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        """Moves the checkpoint on (never back: a reading that started over keeps the further one)."""

    def adopt_part(
        self,
        job_id: str,
        sitemap_url: str,
        part: SitemapPart,
        lease: Lease,
        *,
        site: str,
        at: datetime,
        excluded: Sequence[str] = (),
        checkpoint: Checkpoint | None = None,
        listed: Collection[str] = (),
    ) -> bool:
        """The job takes the sitemap's part (``SitemapPart``), at ``at``, atomically: its URLs become the
        job's (counted, final), the sitemap's checkpoint moves past them, and the site's crawl database
        counts the records the part's jobs listed as listed by this job (``CrawlDatabase.get_urls``).
        False, with nothing done, when the sitemap's reading recorded pages already, the part is not the
        sitemap's current one at the epoch it was made at, or one of its URLs is the job's already (another
        sitemap listed it first). Raises :class:`LeaseLost` if the sitemap's lease is not ours.

        In part (where ``CrawlDatabase.adopts_partly``): but for the URLs ``excluded``, once the reading
        listed the entries it did not keep (their writes, this job's, may have moved the epoch); the
        sitemap's checkpoint moves to ``checkpoint``, past every entry of the reading. ``listed``: those of
        ``excluded`` the reading listed itself (their records are the job's: none to write as they read)."""

    def finish_sitemap(
        self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease
    ) -> SitemapRecord | None:
        """processing → final, counting it done, exactly once: the record as written (None when the lease is
        not ours)."""

    def release_sitemap(self, job_id: str, sitemap_url: str, lease: Lease, release: SitemapRelease) -> bool:
        """processing → pending, giving the lease up, to be read again later (a transient failure, or a
        reading in steps), as ``release`` says. Its checkpoint stays, so the next reading skips what was
        recorded. False when not ours."""

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]: ...

    # pages ----------------------------------------------------------------------------------------
    def claim_pages(
        self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float, stored: Mapping[str, str] | None = None
    ) -> list[SitemapURL]:
        """pending (or processing with a lapsed lease) → processing for each URL that can be claimed;
        increments ``attempts``. Final or elsewhere-leased URLs are left out of the result. ``stored``: where
        ``record_pages`` said it recorded URLs (``Recorded.stored``), a hint the store may check and use."""

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        """processing → completed | failed for the URLs still leased to us, counting each once, each
        together with its new crawl record (versioned; a stale one holds its page back, see Settled)."""

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        """processing → pending with the retry counter moved on; returns the URLs applied."""

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]: ...

    def page_bodies(self, job_id: str) -> Iterator[str]:
        """Every URL record of the job as stored (``body_of``; in the store's order, as ``pages``)."""
        ...

    def job_records(self, job_id: str) -> Iterator[str | ListedBatch | AdoptedPart]:
        """What ``page_bodies`` gives, and the parts the job adopted, for the job's end (which writes the
        records from these without serialising each again): a store that keeps the records written straight
        as JSON a batch at a time hands those over as such (their bodies are in no other item)."""
        ...

    def job_record_pages(self, job_id: str, *, after: str | None = None) -> Iterator[RecordPage]:
        """What ``job_records`` yields, a stored batch's worth at a time, each with the position after it:
        given as ``after``, the pages after that position (the job's end reads its records in steps). An
        ended job's positions are stable: nothing is added to its records."""
        ...

    def get_page(self, job_id: str, url: str) -> SitemapURL | None: ...

    def add_extensions(self, job_id: str, listings: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Keeps what later listings of a URL say in extensions (``news``, ``images``, ...): the first listing
        makes the record, and a second sitemap (a news sitemap after an RSS feed) may be the richer one. The
        first value of each kind is kept; the job's records take the kinds they lack (``extensions``)."""

    def extensions(self, job_id: str) -> dict[str, dict[str, Any]]:
        """What :meth:`add_extensions` kept, by URL (only URLs listed again with extensions: few)."""
        ...

    # recovery -------------------------------------------------------------------------------------
    def release_leases(self, job_id: str, *, pages: bool = True) -> int:
        """Lets every lease of the job lapse now (used when nothing else can be working on it): its sitemaps',
        and with ``pages`` its pages' (else ``open_pages`` lets them go as it reads them)."""

    def open_pages(self, job_id: str, *, after: str | None = None, until: str | None = None) -> Iterator[OpenPages]:
        """The job's pending and processing pages, the leases of the latter let go, a batch of its records at a
        time, each with the position after it: given as ``after``, the batches after that position (a resume
        in steps of bounded size); given ``until``, none past that position."""

    def resume_position(self, job_id: str) -> str | None:
        """Where the last resume of the job stopped (``save_resume``); None: at the start."""

    def save_resume(self, job_id: str, after: str | None) -> None:
        """Keeps where a resume of the job stopped, for the next one to go on from (None: start over)."""

    def recount(self, job_id: str) -> JobCounts:
        """The counts recomputed from the records themselves: what the counters must always equal."""


class PageCounter(Protocol):
    """The state of a throwaway discovery run (``StepContext.counter``): it keeps no page, so a listed URL
    costs it only its key (12 bytes, harvester/keyset.py) and a count."""

    def count_pages(
        self,
        job_id: str,
        sitemap_url: str,
        keys: Sequence[int],
        *,
        checkpoint: int,
        lease: Lease,
        enqueued: Checkpoint | None = None,
    ) -> list[int]:
        """``record_pages`` for pages final at once, given by their ``bits_of(page.key)``: counts those new to
        the job as succeeded and moves the sitemap's checkpoint (and, with ``enqueued``, its sending one),
        atomically; returns the positions in ``keys`` of the new ones. Raises :class:`LeaseLost` if the
        sitemap's lease is not ours."""


class CrawlDatabase(Protocol):
    """The crawl database: each site's memory of its URLs and sitemaps, kept across jobs (never expired).

    Records are keyed by (site, URL), the site being the origin a job's request names. Writes are
    versioned (see :mod:`harvester.model.crawl`): a write whose record moved on meanwhile is refused and
    reported, so two jobs of one site never lose each other's updates.
    """

    def get_urls(self, site: str, urls: Sequence[str]) -> dict[str, CrawlRecord]:
        """The records of the given (normalised) URLs that exist, by URL; read consistently, in batches. A
        record a job listed in a part a later job adopted reads as listed by that job, then (``last_listed``,
        ``last_listed_job``): as it would be had that job listed it one by one. (So does ``site_urls``.)"""

    def job_urls(self, site: str, job_id: str, urls: Sequence[str], *, by_key: bool = False) -> dict[str, CrawlRecord]:
        """The records of the given URLs the job listed, as its own writes left them (a sitemap part's lines
        are made from them at the job's end: a record another job wrote since may be left as the job left it,
        since a part whose sitemap another job wrote is not kept). A backend may read the job's records whole
        once to answer many calls; ``by_key``: the caller asks for a bounded share of them in this process (a
        step of a job's end), read by key, and a URL whose record cannot be found so is missing from the
        answer."""

    def release_job_urls(self) -> None:
        """Lets go of what ``job_urls`` kept to answer the next calls (a job's end calls it once its parts are
        made)."""

    def put_urls(self, site: str, records: Sequence[CrawlRecord], *, writer: str | None = None) -> list[str]:
        """Writes each record whose stored version is ``version - 1`` (or that is new, for version 1);
        returns the URLs refused because their record had moved on. ``writer``: the job making the writes
        (their sitemaps' parts know it as theirs); by default the job each record names (``parts.writer_of``)."""

    def site_urls(self, site: str, *, unless_listed_by: str | None = None) -> Iterator[CrawlRecord]:
        """Every URL record of the site (in no particular order), a page at a time; with
        ``unless_listed_by``, without those that job listed last (the orphan pass needs none of them, and
        on a site's first crawl they are all of them)."""

    def url_pages(
        self, site: str, *, unless_listed_by: str | None = None, after: str | None = None
    ) -> Iterator[UrlPage]:
        """``site_urls`` a page at a time, each page with the position after it: given as ``after``, the
        pages after that position (a pass over a large site in pieces: the orphan pass at a job's end). A page
        may be empty; the pass is over when the pages are."""

    def count_urls(self, site: str) -> int | None:
        """How many URL records the site has, when the backend can tell without reading them all (None
        otherwise): a site with none is on its first crawl (nothing to look up per listed URL), and a job
        that listed as many as there are leaves none unlisted (no orphan pass)."""

    def collect(
        self,
        site: str,
        ended: Callable[[str], bool],
        *,
        by: str | None = None,
        relisted: int | None = None,
        urls: int = 0,
        pause: Callable[[], bool] | None = None,
        resume: bytes | None = None,
    ) -> Collected:
        """Gives back the space the site's records no longer use, of the jobs ``ended`` says are over (on
        DynamoDB, crawl batches no URL's pointer names); says how many units went (batches; none where a URL's
        record is one row, rewritten in place). ``by``: the job whose end collects; ``relisted``: how many of
        its ``urls`` it listed one by one (each may have left garbage), which a backend whose collection reads
        the whole site may add up over jobs until they are worth a collection (None: collect now).

        ``pause``: asked between bounded pieces of work; once it says the time is up, the collection stops
        and returns its state (``Collected.paused``), and a call given it as ``resume`` goes on from there
        (the other arguments then unused)."""

    #: Whether a job may adopt a part of this database in part (``StateStore.adopt_part``'s ``excluded``).
    adopts_partly: bool

    #: Whether ``count_urls`` tells how many URL records a site has (not only whether it has none).
    counts_urls: bool

    #: Whether this database keeps sitemap parts (``put_part`` can keep one): where it does not, a job's end
    #: makes none and every reading lists its URLs one by one.
    keeps_parts: bool

    def sitemap_part(self, site: str, sitemap: str) -> tuple[SitemapPart | None, int]:
        """The sitemap's current part (None when it has none) and its epoch now: how many writes of crawl
        records naming it were made (each write of a URL's record moves the epoch of the sitemaps it names
        before and after, in the same atomic write)."""
        ...

    def put_part(self, site: str, part: SitemapPart, keys: Sequence[str]) -> bool:
        """Makes ``part`` (with its URLs' ``url_key``s) the sitemap's current part, unless its epoch moved
        past ``part.epoch`` or a job other than the part's wrote a record naming the sitemap after the part's
        job first did (its lines may not show that write): False then, and the sitemap keeps none."""
        ...

    def part_keys(self, site: str, part: SitemapPart) -> list[str] | None:
        """The URL keys kept beside the part (``put_part``'s), or None where none are kept or they are gone."""
        ...

    def get_sitemap(self, site: str, url: str) -> SitemapCrawl | None: ...

    def put_sitemap(self, site: str, record: SitemapCrawl) -> bool:
        """Stores the record unless a reading fetched later is stored already (False then)."""

    def site_sitemaps(self, site: str) -> Iterator[SitemapCrawl]: ...

    def get_site(self, site: str) -> SiteCrawl | None: ...

    def put_site(self, record: SiteCrawl) -> bool:
        """Versioned like the URL records; False when the stored one moved on."""


class ScheduledSites(Protocol):
    """The scheduled sites (model.scheduled_site), by name. What a scheduler's look costs grows with the schedules
    due, not with those registered: ``due`` reads an index of the active schedules by due time."""

    def add(self, schedules: Sequence[ScheduledSite], *, replace: bool = False) -> list[str]:
        """Registers the schedules; returns the names already registered, which are left as they are unless
        ``replace`` (then replaced, kept paused if they were: ``scheduled_site.replaced``)."""

    def get(self, name: str) -> ScheduledSite | None: ...

    def all(self) -> Iterator[ScheduledSite]:
        """Every schedule, by name, read a page at a time."""

    def due(self, now: datetime, *, limit: int) -> list[ScheduledSite]:
        """Active schedules due at ``now`` (``next_due`` at or before it), at most ``limit``, earliest first
        within each part of the index (not globally: an index part per shard)."""

    def advance(self, schedule: ScheduledSite, *, job_id: str, next_due: datetime) -> bool:
        """Moves a due schedule to its next slot and records the job it was sent; False (nothing written) when
        the stored schedule differs from ``schedule`` as it was read (another look moved it on, or it was
        paused, replaced or removed)."""

    def pause(self, name: str) -> ScheduledSite | None:
        """The schedule paused (not due until resumed); None when there is no such schedule."""

    def resume(self, name: str, *, now: datetime) -> ScheduledSite | None:
        """Active again, due at its next slot after ``now``; None when there is no such schedule."""

    def remove(self, name: str) -> bool: ...


class LeaseLost(RuntimeError):
    """Our claim on a record lapsed and someone else took it over: stop working on it."""

    @classmethod
    def of_sitemap(cls, job_id: str, url: str) -> LeaseLost:
        return cls(f"sitemap {url} of job {job_id} is no longer leased to this worker")
