"""The engine: the step context with one method per step.

The Lambda handlers and the local runner both build an :class:`Engine` from their adapters and call the
same steps: ``start_job`` (a job request), ``process_sitemap`` (a sitemap task), ``process_pages`` (page
tasks), ``maybe_complete``, ``finish`` (a job's end written apart) and ``resume`` (the scheduler). Nothing
here imports boto3 or sqlite3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.model.records import BulkProcessingJob, SitemapIngestionResult, SitemapRecord
from harvester.pipeline import completion, jobs, page_worker, recovery, sitemap_step
from harvester.pipeline.context import StepContext


@dataclass
class Engine(StepContext):
    def start_job(self, request: JobRequest, *, job_id: str) -> None:
        jobs.start_job(self, request, job_id=job_id)

    async def process_sitemap(self, task: SitemapTask) -> SitemapRecord | None:
        return await sitemap_step.process_sitemap(self, task)

    async def process_pages(
        self, tasks: Sequence[PageTask], *, requests_over: page_worker.RequestsOver | None = None
    ) -> page_worker.PageBatch:
        return await page_worker.process_pages(self, tasks, requests_over=requests_over)

    def maybe_complete(self, job_id: str) -> bool:
        return completion.maybe_complete(self, job_id)

    def write_result(self, job_id: str) -> SitemapIngestionResult:
        return completion.write_result(self, job_id)

    def finish(self, job_id: str, *, claim: float | None = None) -> SitemapIngestionResult | None:
        return completion.finish(self, job_id, claim=claim)

    def resume(self, job_id: str, *, force: bool = False) -> recovery.Resumed:
        return recovery.resume(self, job_id, force=force)

    def view(self, job_id: str) -> BulkProcessingJob | None:
        return completion.job_view(self, job_id)
