"""What every pipeline step works with: the ports (with the crawl database), the fetcher, the settings
and the clock.

Steps take a :class:`StepContext` rather than the :class:`~harvester.engine.Engine`, so they sit below the
engine (which only composes them) and never import it back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from harvester.fetch import Fetcher, RobotsRules
from harvester.model.messages import DEFAULT_RATE_LIMIT_DELAY, JobEnd
from harvester.model.records import JobRecord, utcnow
from harvester.pipeline.sitemap_filter import SitemapCallbacks
from harvester.politeness import MemoryHostGate
from harvester.politeness.turns import waited_turn
from harvester.ports import CrawlDatabase, DocumentStore, HostGate, PageCounter, StateStore, TaskQueue, WarcStore
from harvester.settings import EngineSettings
from harvester.sitemap import PageEntry

_ROBOTS_SPACING = DEFAULT_RATE_LIMIT_DELAY


@dataclass
class StepContext:
    store: StateStore
    queue: TaskQueue
    documents: DocumentStore
    fetcher: Fetcher
    crawldb: CrawlDatabase
    settings: EngineSettings = field(default_factory=EngineSettings)
    #: Where the pages of a job whose output is WARC go (required by such a job when it fetches pages).
    warcs: WarcStore | None = None
    clock: Callable[[], datetime] = utcnow
    #: USP-style callbacks choosing the child sitemaps to follow: in-process runs only (see sitemap_filter).
    callbacks: SitemapCallbacks | None = None
    #: The state of a throwaway discovery run (the Python API, ``harvest sitemaps``), which makes the run
    #: ephemeral: its pages go to ``found`` as they are counted and nothing outlives it, so it neither reads
    #: nor writes the crawl database, keeps no sitemap documents or listings and writes no result. What is
    #: left per listed URL is what discovery itself needs: hygiene, scope, patterns, de-duplication and the
    #: count; the consumer builds what it hands out (a record, a line) from the entry, and only once.
    counter: PageCounter | None = None
    #: Given the pages new to a throwaway run's job as they are counted: the sitemap, then (URL, entry).
    found: Callable[[str, list[tuple[str, PageEntry]]], None] | None = None
    #: Given every page a throwaway run's sitemap accepts, whether another sitemap listed it first or not (a
    #: tree's pages, as USP has them: once per listing sitemap), as they are counted: the sitemap, the
    #: position of the batch's first page among the sitemap's accepted entries, then (URL, entry). A reading
    #: that starts again (at its checkpoint, or from the start of a changed sitemap) gives its positions again.
    listed: Callable[[str, int, list[tuple[str, PageEntry]]], None] | None = None
    #: Awaited between the chunks of a sitemap being read: a consumer of the pages as they are recorded
    #: (``Discovery.pages``) holds the readers back with it while the pages it was handed wait.
    pause: Callable[[], Awaitable[object]] | None = None
    #: The per-host gate every request passes, shared through the state store (``gate``: this, or one in
    #: memory when none is given).
    host_gate: HostGate | None = None
    #: Where the result of a job that ended is written: None here, by the step that ended it; or handed to
    #: this, which has it written apart (AWS: the JobEnd message sent to the job-end function).
    end_apart: Callable[[JobEnd], None] | None = None
    gate: HostGate = field(init=False)
    robots: RobotsRules = field(init=False)
    #: Held while a sitemap's body is read (``settings.sitemaps_read_at_once``).
    reading: asyncio.Semaphore = field(init=False, repr=False)
    _jobs: dict[str, JobRecord] = field(default_factory=dict, init=False, repr=False)
    _first_crawls: dict[str, bool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.gate = self.host_gate or MemoryHostGate(self.settings.gate)
        self.robots = RobotsRules(self.fetcher)
        # Read for its rules by whichever job asks first: spaced at the default pace.
        self.robots.turn = partial(waited_turn, self.gate, spacing=_ROBOTS_SPACING)
        self.reading = asyncio.Semaphore(max(1, self.settings.sitemaps_read_at_once))

    @property
    def ephemeral(self) -> bool:
        return self.counter is not None

    @property
    def sitemap_parts(self) -> bool:
        """Whether sitemaps' parts are made and adopted (``SitemapPart``): on, kept by the crawl database, and
        not a throwaway run (which keeps nothing)."""
        return self.settings.sitemap_parts and self.crawldb.keeps_parts and not self.ephemeral

    @property
    def record_batch(self) -> int:
        """Listed pages per atomic write: the setting, or what suits the state store."""
        return self.settings.record_batch or self.store.record_batch

    @property
    def listing_window(self) -> int:
        """Listed pages a sitemap's reading hands ``record_pages`` at once: the setting (``record_batch``), or
        the state store's window (``StateStore.listing_window``)."""
        return self.settings.record_batch or self.store.listing_window

    def first_crawl(self, job: JobRecord) -> bool:
        """Whether the job lists its site's URLs without looking up their records: its site had none when
        it started (``JobRecord.empty_site``), so every record of the site is one this job wrote (here or in
        another container: its own URLs, not new to it) or one another job wrote since (whose insert is then
        refused as stale, the batch decided again with lookups, and this process looks up from then on:
        ``raced``). Not asked of the crawl database again: the job's other containers' listings are records
        too, and a container that met them would look up every URL it lists (a read unit a page)."""
        first = self._first_crawls.get(job.job_id)
        if first is None:
            first = self._first_crawls[job.job_id] = job.empty_site
        return first

    def raced(self, job: JobRecord) -> None:
        """Another job's records refused a listing of the job's that looked up none: look up from now on."""
        self._first_crawls[job.job_id] = False

    def job(self, job_id: str) -> JobRecord | None:
        """The job's record, cached: its request never changes, and every step re-checks state by claiming."""
        job = self._jobs.get(job_id)
        if job is None:
            job = self.store.get_job(job_id)
            if job is not None:
                self._jobs[job_id] = job
        return job
