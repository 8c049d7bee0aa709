"""Starting a job: record it once, record its first sitemaps, send their tasks, mark it in progress.

Every step is safe to repeat, because a job request can be delivered twice and a starter can die between
any two writes: the job id makes the record idempotent, sitemap registration is once per job, a re-sent
task is absorbed by its record's claim, and ``mark_seeded`` only moves a pending job.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from harvester.discovery import seed_sitemaps, task_for
from harvester.messages import JobRequest
from harvester.records import JobRecord, JobStatus, SitemapStatus

if TYPE_CHECKING:
    from harvester.engine import Engine

log = logging.getLogger(__name__)


def start_job(engine: Engine, request: JobRequest, *, job_id: str) -> JobRecord:
    now = engine.clock()
    request = request.model_copy(update={"job_id": job_id})
    stored = engine.store.create_job(JobRecord(job_id=job_id, request=request, start_time=now))
    if stored.status is not JobStatus.PENDING:
        log.info("job already started", extra={"job_id": job_id, "status": stored.status.value})
        return stored
    seed(engine, stored)
    return engine.store.get_job(job_id) or stored


def seed(engine: Engine, job: JobRecord) -> None:
    """Records and sends the job's first sitemaps (robots.txt, or those the request names)."""
    records = engine.store.add_sitemaps(job.job_id, seed_sitemaps(job.request, now=engine.clock()))
    engine.queue.send([task_for(job.job_id, r) for r in records if r.status is SitemapStatus.PENDING])
    engine.store.mark_seeded(job.job_id)
    log.info("job started", extra={"job_id": job.job_id, "site": job.site, "seeds": len(records)})
