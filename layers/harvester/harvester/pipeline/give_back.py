"""Giving work back when our own infrastructure stayed busy (``harvester.patience.Busy``).

A sitemap's and a page's ``attempts`` count what the site did; a step that could not write its state, store
a document or send its tasks because DynamoDB, S3, SQS or SQLite kept refusing has learnt nothing about the
site. So such a step gives its work back as it was: its claims go back to pending with the attempts they
had before this delivery, its tasks are sent again after a short, jittered delay (the checkpoint keeps what
a sitemap reading recorded), and its message is done. The giving back runs in the part of the invocation's
time held back for it (``Patience.giving_back``); when even that meets a busy service, Busy goes on up and
the message comes back through its queue (the receive count and the dead-letter queue are the last resort).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from harvester.model.messages import PageTask, SitemapTask
from harvester.model.records import JobRecord, SitemapRecord
from harvester.model.state import Lease, PageRetry, SitemapRelease
from harvester.patience import PATIENCE, Busy
from harvester.pipeline.admission import queue_delay
from harvester.pipeline.completion import ResultUnwritten, maybe_complete
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import task_for

log = logging.getLogger(__name__)


def delay(ctx: StepContext) -> float:
    """When given-back work comes back: a second to ``busy_give_back_seconds`` later, spread so that work
    a storm gave back does not return all at once."""
    return random.uniform(1.0, max(1.0, ctx.settings.busy_give_back_seconds))


def reason(busy: Busy) -> str:
    """What a record given back says of why (its ``error_message`` until its next outcome)."""
    return f"our own infrastructure was busy ({busy}); tried again later"


def sitemap(
    ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease, busy: Busy, *, attempts: int
) -> None:
    """The sitemap ``lease`` holds back to pending with ``attempts`` (what it had before this delivery's
    claim, and the requests the site failed in it), its task sent again."""
    release(ctx, job, record, lease, SitemapRelease(reason(busy), max(0, attempts)), after=delay(ctx))
    log.warning(
        "sitemap given back: our own infrastructure stayed busy",
        extra={"job_id": job.job_id, "url": record.url, "reason": str(busy)},
    )


def release(
    ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease, release: SitemapRelease, *, after: float
) -> None:
    """The sitemap ``lease`` holds back to pending as ``release`` says, its task sent again ``after`` seconds;
    the task is sent whether or not the lease still held it (a task too many is absorbed by the claims; one
    too few, after a release that landed and a send that did not, would leave the sitemap pending for good)."""

    def back() -> None:
        ctx.store.release_sitemap(job.job_id, record.url, lease, release)
        ctx.queue.push([task_for(job.job_id, record)], delay_seconds=after)

    patiently(back)


def page_retry(ctx: StepContext, url: str, busy: Busy) -> PageRetry:
    """A claimed page back to pending for our own infrastructure's sake: its claim's try taken back, its
    retries as they were."""
    when = ctx.clock() + timedelta(seconds=delay(ctx))
    return PageRetry(url=url, retries=None, error_message=reason(busy), not_before=when, untried=True)


def pages(
    ctx: StepContext,
    job: JobRecord,
    tasks: dict[str, PageTask],
    lease: Lease,
    busy: Busy,
    decided: Mapping[str, PageRetry],
) -> list[str]:
    """The pages of ``tasks`` (by URL) that ``lease`` holds back to pending, and their tasks sent again (a
    duplicate of a task is absorbed by the claims). A page whose site answered with a failure to be tried
    again goes back as ``decided`` says (that try counted); the others with their claim's try taken back
    (``retry_pages`` moves only what the lease holds: a claim that met the busy service may or may not have
    landed). Returns the URLs sent again."""
    retries = [decided.get(url) or page_retry(ctx, url, busy) for url in tasks]

    def back() -> None:
        if retries:
            ctx.store.retry_pages(job.job_id, retries, lease)
        now = ctx.clock()
        again = [task_again(tasks[r.url], r) for r in retries]
        ctx.queue.push(again, delay_seconds=[queue_delay((r.not_before - now).total_seconds()) for r in retries])

    patiently(back)
    log.warning(
        "pages given back: our own infrastructure stayed busy",
        extra={"job_id": job.job_id, "pages": len(retries), "reason": str(busy)},
    )
    return list(tasks)


def task_again(task: PageTask, retry: PageRetry) -> PageTask:
    """The task of a page sent back to be tried again: its URL as the retry names it, its retries so far."""
    attempt = task.attempt if retry.retries is None else retry.retries
    return task.model_copy(update={"url": retry.url, "attempt": attempt})


def tasks(ctx: StepContext, again: Sequence[PageTask | SitemapTask], busy: Busy) -> None:
    """Tasks of which nothing was claimed (or whose work is done) sent again, so that what the busy service
    kept from happening (a claim, the job's end) is looked at again soon (a job's result that could not be
    written: once its writer is surely gone, ``ResultUnwritten.after``)."""
    later = max(delay(ctx), busy.after) if isinstance(busy, ResultUnwritten) else delay(ctx)
    patiently(lambda: ctx.queue.push(list(again), delay_seconds=later))
    log.warning(
        "tasks sent again: our own infrastructure stayed busy", extra={"tasks": len(again), "reason": str(busy)}
    )


def complete_or_resend(ctx: StepContext, job_id: str, again: Sequence[PageTask | SitemapTask]) -> None:
    """Ends the job if it is done (``completion.maybe_complete``); when a busy service keeps that from being
    known, the step's tasks are sent again, and their next delivery (their work done) looks again."""
    try:
        maybe_complete(ctx, job_id)
    except Busy as busy:
        tasks(ctx, again, busy)


def patiently(back: Callable[[], None]) -> None:
    """Runs ``back`` (work handed back to the queue; it may run again whole) in the time held back for giving
    work back, trying again while the service stays busy."""
    with PATIENCE.giving_back():
        PATIENCE.retrying(back)
