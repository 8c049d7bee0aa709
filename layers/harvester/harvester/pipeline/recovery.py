"""Resuming a stalled job: what makes "nothing discovered is lost" true when messages are.

A message can be lost for good (a worker died after recording pages and before sending them, a task went
to a dead-letter queue, a local crawl was killed). The records say what is still open, so resuming a job
means: let its leases lapse, send a task again for every open sitemap and page, and end the job if it is
in fact done. Re-sent tasks are absorbed by the claims, so resuming too often costs messages, never
correctness; the scheduler therefore resumes only jobs without progress for ``stall_after_seconds``.
Every re-sent task still counts its deliveries (``attempts``), so a poisonous URL ends failed rather than
being retried for ever.
"""

from __future__ import annotations

import logging

from msgspec import Struct
from msgspec.structs import asdict

from harvester.model.messages import PageTask
from harvester.model.records import JobStatus, SitemapStatus, UrlStatus
from harvester.pipeline.completion import end, maybe_complete, result_owed, unwritten, write_result
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import task_for
from harvester.pipeline.jobs import seed
from harvester.pipeline.ranking import rank_of

log = logging.getLogger(__name__)

_SEND_CHUNK = 500


class Resumed(Struct):
    job_id: str
    stalled: bool = False
    sitemaps_resent: int = 0
    pages_resent: int = 0
    ended: bool = False
    result_written: bool = False
    #: The job's end was sent apart again (``StepContext.end_apart``): the one sent before is lost.
    end_sent: bool = False


def resume(ctx: StepContext, job_id: str, *, force: bool = False) -> Resumed:
    store = ctx.store
    report = Resumed(job_id)
    snapshot = store.snapshot(job_id)
    if snapshot is None:
        raise KeyError(f"no job {job_id!r}")
    job = snapshot.job
    if job.status.final:
        if result_owed(ctx, job) and ctx.end_apart is None:
            write_result(ctx, job_id)
            report.result_written = True
        elif unwritten(ctx, job):  # (an end sent apart that is still running is not sent again)
            end(ctx, job_id)
            report.end_sent = True
        return report
    idle = (ctx.clock() - snapshot.last_update).total_seconds()
    if not force and idle < ctx.settings.stall_after_seconds:
        return report
    report.stalled = True
    store.release_leases(job_id)
    if job.status is JobStatus.PENDING or not job.seeded:
        seed(ctx, job)
    for status in (SitemapStatus.PENDING, SitemapStatus.PROCESSING):
        tasks = [task_for(job_id, s) for s in store.sitemaps(job_id, status=status)]
        for i in range(0, len(tasks), _SEND_CHUNK):
            ctx.queue.push(tasks[i : i + _SEND_CHUNK])
        report.sitemaps_resent += len(tasks)
    if job.request.fetch_pages:
        now = ctx.clock()
        for status in (UrlStatus.PENDING, UrlStatus.PROCESSING):
            chunk: list[PageTask] = []
            for page in store.pages(job_id, status=status):
                chunk.append(page.task(job_id, rank=rank_of(page, now, ctx.settings)))
                if len(chunk) >= _SEND_CHUNK:
                    ctx.queue.push(chunk)
                    report.pages_resent += len(chunk)
                    chunk = []
            ctx.queue.push(chunk)
            report.pages_resent += len(chunk)
    report.ended = maybe_complete(ctx, job_id)
    log.info("job resumed", extra={"job_id": job_id, **asdict(report)})
    return report
