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
from collections.abc import Callable, Iterator

from msgspec import Struct
from msgspec.structs import asdict

from harvester.model.messages import PageTask
from harvester.model.records import JobStatus, SitemapStatus
from harvester.model.state import OpenPages
from harvester.pipeline.completion import end, maybe_complete, result_owed, unwritten, write_result
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import task_for
from harvester.pipeline.jobs import seed
from harvester.pipeline.ranking import rank_of

log = logging.getLogger(__name__)

_SEND_CHUNK = 500
#: Seconds of its invocation a resume given its time (``time_left``) keeps for what follows its last batch of
#: pages: their send, where it stopped stored, the job's end looked at.
RESUME_RESERVE = 30.0


class Resumed(Struct):
    job_id: str
    stalled: bool = False
    sitemaps_resent: int = 0
    pages_resent: int = 0
    ended: bool = False
    result_written: bool = False
    #: The job's end was sent apart again (``StepContext.end_apart``): the one sent before is lost.
    end_sent: bool = False


def resume(
    ctx: StepContext, job_id: str, *, force: bool = False, time_left: Callable[[], float] | None = None
) -> Resumed:
    """Resumes the job if it stalled (``force``: whether or not), or writes or sends again its end if that is
    owed. ``time_left``: the seconds left to the caller's invocation; the open pages are read until
    ``RESUME_RESERVE`` of them is left, and the next resume goes on from where this one stopped."""
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
    store.release_leases(job_id, pages=False)  # (the pages' as they are read)
    if job.status is JobStatus.PENDING or not job.seeded:
        seed(ctx, job)
    for status in (SitemapStatus.PENDING, SitemapStatus.PROCESSING):
        tasks = [task_for(job_id, s) for s in store.sitemaps(job_id, status=status)]
        for i in range(0, len(tasks), _SEND_CHUNK):
            ctx.queue.push(tasks[i : i + _SEND_CHUNK])
        report.sitemaps_resent += len(tasks)
    if job.request.fetch_pages:
        report.pages_resent = _send_open_pages(ctx, job_id, time_left)
    report.ended = maybe_complete(ctx, job_id)
    log.info("job %s resumed", job_id, extra={"job_id": job_id, **asdict(report)})
    return report


def _send_open_pages(ctx: StepContext, job_id: str, time_left: Callable[[], float] | None = None) -> int:
    """Sends a task again for each open page of the job, from where the last resume stopped (and round to the
    start), reading at most ``resume_batches`` batches of its records (and no more once ``time_left`` comes
    to ``RESUME_RESERVE``): a resume's size whatever the job's, the job's next stall going on from where it
    stopped; how many were sent."""
    most = ctx.settings.resume_batches
    after = ctx.store.resume_position(job_id) if most or time_left is not None else None
    now, sent, stopped = ctx.clock(), 0, None
    chunk: list[PageTask] = []
    for read, batch in enumerate(_round(ctx, job_id, after), 1):
        chunk.extend(page.task(job_id, rank=rank_of(page, now, ctx.settings)) for page in batch.pages)
        if len(chunk) >= _SEND_CHUNK:
            ctx.queue.push(chunk)
            sent, chunk = sent + len(chunk), []
        if (most and read >= most) or (time_left is not None and time_left() < RESUME_RESERVE):
            stopped = batch.after
            break
    ctx.queue.push(chunk)
    if stopped is not None or after is not None:
        ctx.store.save_resume(job_id, stopped)
    return sent + len(chunk)


def _round(ctx: StepContext, job_id: str, after: str | None) -> Iterator[OpenPages]:
    """The job's open pages from ``after`` to the end, then from the start up to ``after`` (a page before it
    may be open: its message lost since)."""
    yield from ctx.store.open_pages(job_id, after=after)
    if after is not None:
        yield from ctx.store.open_pages(job_id, until=after)
