"""Ending a job exactly once, and writing its SitemapIngestionResult.

A job is done when discovery is finished (every sitemap it registered is final, so no new URL can
appear) and every URL it registered has an outcome. The check reads the job and its counters as one
snapshot; the end is one conditional write that only one caller can win; the winner writes the result.
If the winner dies before the result is written, ``recovery.resume`` writes it.
"""

from __future__ import annotations

import json
import logging
import tempfile
from datetime import timedelta
from typing import TYPE_CHECKING

from harvester.records import (
    BulkProcessingJob,
    ErrorDetail,
    JobCounts,
    JobStatus,
    SitemapIngestionResult,
    SitemapStatus,
    UrlStatus,
)

if TYPE_CHECKING:
    from harvester.engine import Engine

log = logging.getLogger(__name__)


def result_key(job_id: str) -> str:
    return f"jobs/{job_id}/result.json"


def records_key(job_id: str) -> str:
    return f"jobs/{job_id}/urls.jsonl"


def maybe_complete(engine: Engine, job_id: str) -> bool:
    """Ends the job if it is done; True only for the one caller that ended it.

    Called after every step, so it starts with the cheap read of the counters; only when they look done is
    the job read as one consistent snapshot. The worker whose write was the last one always sees "done":
    it reads after every other write has committed.
    """
    if not engine.store.counts(job_id).done:
        return False
    snapshot = engine.store.snapshot(job_id)
    if snapshot is None or snapshot.job.status is not JobStatus.IN_PROGRESS or not snapshot.counts.done:
        return False
    job, counts = snapshot.job, snapshot.counts
    end_time = max(engine.clock(), job.start_time + timedelta(microseconds=1))
    status, error = JobStatus.COMPLETED, None
    if counts.sitemaps_ok == 0:
        status, error = JobStatus.FAILED, f"no readable sitemap found for {job.site}"
    if not engine.store.end_job(job_id, status, end_time=end_time, error_message=error):
        return False
    log.info("job ended", extra={"job_id": job_id, "status": status.value, "total_urls": counts.urls_total})
    write_result(engine, job_id)
    return True


def write_result(engine: Engine, job_id: str) -> SitemapIngestionResult:
    """Writes the per-URL records (JSON Lines) and the summary, from a recount of the records themselves."""
    store, documents = engine.store, engine.documents
    job = store.get_job(job_id)
    if job is None or job.end_time is None:
        raise ValueError(f"job {job_id} has not ended; there is no result to write yet")
    succeeded = failed = omitted = 0
    errors: list[ErrorDetail] = []
    for sitemap in store.sitemaps(job_id):
        if sitemap.status in (SitemapStatus.FAILED, SitemapStatus.INVALID):
            errors.append(ErrorDetail(url=sitemap.url, kind="sitemap", error=sitemap.error_message or "unknown"))
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as lines:
        for page in store.pages(job_id):
            lines.write(page.model_dump_json(exclude_none=True).encode() + b"\n")
            if page.status is UrlStatus.COMPLETED:
                succeeded += 1
            elif page.status is UrlStatus.FAILED:
                failed += 1
                if len(errors) < engine.settings.max_error_details:
                    errors.append(ErrorDetail(url=page.url, kind="page", error=page.error_message or "unknown"))
                else:
                    omitted += 1
            else:
                log.error("job ended with an open URL", extra={"job_id": job_id, "url": page.url})
        lines.seek(0)
        documents.put(records_key(job_id), lines, content_type="application/x-ndjson")
    snapshot = store.snapshot(job_id)
    counts = snapshot.counts if snapshot else JobCounts()
    if (counts.urls_succeeded, counts.urls_failed) != (succeeded, failed):
        log.error(
            "counters disagree with a recount of the records; the result uses the recount",
            extra={"job_id": job_id, "counters": counts.model_dump(), "recount": [succeeded, failed]},
        )
    result = SitemapIngestionResult(
        job_id=job_id,
        site=job.site,
        status=job.status,
        total_urls=succeeded + failed,
        successful_processing=succeeded,
        failed_processing=failed,
        processed_urls=documents.location(records_key(job_id)),
        start_time=job.start_time,
        end_time=job.end_time,
        total_duration=(job.end_time - job.start_time).total_seconds(),
        error_details=errors,
        errors_omitted=omitted,
        sitemaps_total=counts.sitemaps_total,
        sitemaps_ok=counts.sitemaps_ok,
    )
    body = json.dumps(result.model_dump(mode="json"), indent=2).encode()
    documents.put(result_key(job_id), body, content_type="application/json")
    store.set_result(job_id, result_key(job_id))
    return result


def job_view(engine: Engine, job_id: str) -> BulkProcessingJob | None:
    snapshot = engine.store.snapshot(job_id)
    if snapshot is None:
        return None
    job = snapshot.job
    location = engine.documents.location(job.result_key) if job.result_key else None
    return BulkProcessingJob.of(job, snapshot.counts, last_update=snapshot.last_update, result_location=location)
