"""The engine: one object holding the ports, the fetcher and the settings, with one method per step.

The Lambda handlers and the local runner both build an :class:`Engine` from their adapters and call the
same steps: ``start_job`` (a job request), ``process_sitemap`` (a sitemap task), ``process_pages`` (page
tasks), ``maybe_complete`` and ``resume`` (the scheduler). Nothing here imports boto3 or sqlite3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from harvester import completion, jobs, page_worker, recovery, sitemap_worker
from harvester.fetch import Fetcher, RobotsRules
from harvester.messages import JobRequest, PageTask, SitemapTask
from harvester.politeness import HostPacer
from harvester.ports import DocumentStore, StateStore, TaskQueue
from harvester.records import BulkProcessingJob, JobRecord, SitemapIngestionResult, SitemapRecord, utcnow
from harvester.settings import EngineSettings
from harvester.sitemap_filter import SitemapCallbacks


@dataclass
class Engine:
    store: StateStore
    queue: TaskQueue
    documents: DocumentStore
    fetcher: Fetcher
    settings: EngineSettings = field(default_factory=EngineSettings)
    clock: Callable[[], datetime] = utcnow
    #: USP-style callbacks choosing the child sitemaps to follow: in-process runs only (see sitemap_filter).
    callbacks: SitemapCallbacks | None = None
    robots: RobotsRules = field(init=False)
    pacer: HostPacer = field(default_factory=HostPacer)
    _jobs: dict[str, JobRecord] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.robots = RobotsRules(self.fetcher)

    def job(self, job_id: str) -> JobRecord | None:
        """The job's record, cached: its request never changes, and every step re-checks state by claiming."""
        job = self._jobs.get(job_id)
        if job is None:
            job = self.store.get_job(job_id)
            if job is not None:
                self._jobs[job_id] = job
        return job

    def start_job(self, request: JobRequest, *, job_id: str) -> JobRecord:
        return jobs.start_job(self, request, job_id=job_id)

    async def process_sitemap(self, task: SitemapTask) -> SitemapRecord | None:
        return await sitemap_worker.process_sitemap(self, task)

    async def process_pages(self, tasks: Sequence[PageTask]) -> page_worker.PageBatch:
        return await page_worker.process_pages(self, tasks)

    def maybe_complete(self, job_id: str) -> bool:
        return completion.maybe_complete(self, job_id)

    def write_result(self, job_id: str) -> SitemapIngestionResult:
        return completion.write_result(self, job_id)

    def resume(self, job_id: str, *, force: bool = False) -> recovery.Resumed:
        return recovery.resume(self, job_id, force=force)

    def view(self, job_id: str) -> BulkProcessingJob | None:
        return completion.job_view(self, job_id)
