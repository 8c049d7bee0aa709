"""Starting a job: record it once, record its first sitemaps, send their tasks, mark it in progress.

Every step is safe to repeat, because a job request can be delivered twice and a starter can die between
any two writes: the job id makes the record idempotent, sitemap registration is once per job, a re-sent
task is absorbed by its record's claim, and ``mark_seeded`` only moves a pending job.
"""

from __future__ import annotations

import logging

from harvester.model.messages import JobRequest, Unprocessable
from harvester.model.records import JobRecord, JobStatus, SitemapStatus
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import seed_sitemaps, task_for

log = logging.getLogger(__name__)


def start_job(ctx: StepContext, request: JobRequest, *, job_id: str) -> None:
    now = ctx.clock()
    request = request.validated().model_copy(update={"job_id": job_id})
    empty = not ctx.ephemeral and ctx.crawldb.count_urls(request.origin) == 0  # (read after its start time)
    stored = ctx.store.create_job(JobRecord(job_id=job_id, request=request, start_time=now, empty_site=empty))
    if stored.request.fingerprint() != request.fingerprint():
        raise Unprocessable(conflict(job_id, stored.request, request))
    if stored.status is not JobStatus.PENDING:
        log.info("job %s already started", job_id, extra={"job_id": job_id, "status": stored.status.value})
        return
    seed(ctx, stored)


def conflict(job_id: str, stored: JobRequest, given: JobRequest) -> str:
    """Why a job id cannot be used for ``given``: it names a job that does something else."""
    if stored.site != given.site:
        return f"job id {job_id!r} is already the job of site {stored.site}, not {given.site}: use another job id"
    old, new = stored.model_dump(exclude={"job_id"}), given.model_dump(exclude={"job_id"})
    differ = ", ".join(f"{k} {old[k]!r} (not {new[k]!r})" for k in old if old[k] != new[k])
    return f"job id {job_id!r} is already a job of {stored.site} with other options: {differ}; use another job id"


def seed(ctx: StepContext, job: JobRecord) -> None:
    """Records and sends the job's first sitemaps (robots.txt, or those the request names)."""
    records = ctx.store.add_sitemaps(job.job_id, seed_sitemaps(job.request, now=ctx.clock()))
    ctx.queue.push([task_for(job.job_id, r) for r in records if r.status is SitemapStatus.PENDING])
    ctx.store.mark_seeded(job.job_id)
    log.info(
        "job %s started for %s (%d seeds)",
        job.job_id,
        job.site,
        len(records),
        extra={"job_id": job.job_id, "site": job.site, "seeds": len(records)},
    )
