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
from collections.abc import Callable, Sequence
from datetime import timedelta

from harvester.model.messages import PageTask
from harvester.model.records import JobRecord, SitemapRecord
from harvester.patience import PATIENCE, Busy
from harvester.pipeline.completion import ResultUnwritten
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import task_for
from harvester.ports import Lease, PageRetry

log = logging.getLogger(__name__)


def delay(ctx: StepContext) -> float:
    """When given-back work comes back: a second to ``busy_give_back_seconds`` later, spread so that work
    a storm gave back does not return all at once."""
    return random.uniform(1.0, max(1.0, ctx.settings.busy_give_back_seconds))


def reason(busy: Busy) -> str:
    return f"our own infrastructure was busy ({busy}); tried again later"


def sitemap(ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease, busy: Busy, failed: int) -> None:
    """The claimed sitemap back to pending with the attempts it had before this delivery's claim, plus the
    ``failed`` requests the site answered with a failure in it; its task sent again (also when the sitemap
    is no longer this lease's: a task too many is absorbed by the claims, one too few loses the sitemap)."""
    attempts = max(0, record.attempts - 1 + failed)

    def back() -> None:
        ctx.store.release_sitemap(job.job_id, record.url, lease, error_message=reason(busy), attempts=attempts)
        ctx.queue.push([task_for(job.job_id, record)], delay_seconds=delay(ctx))

    patiently(back)
    log.warning(
        "sitemap given back: our own infrastructure stayed busy",
        extra={"job_id": job.job_id, "url": record.url, "reason": str(busy)},
    )


def pages(ctx: StepContext, job: JobRecord, tasks: dict[str, PageTask], lease: Lease, busy: Busy) -> list[str]:
    """The pages of ``tasks`` (by URL) that ``lease`` holds back to pending, each with its claim's try taken
    back (``retry_pages`` moves only what the lease holds: a claim that met the busy service may or may not
    have landed), and their tasks sent again (a duplicate of a task is absorbed by the claims). Returns the
    URLs sent again."""
    again = [task.model_copy(update={"url": url}) for url, task in tasks.items()]

    def back() -> None:
        when = ctx.clock() + timedelta(seconds=delay(ctx))
        retries = [PageRetry(url, None, reason(busy), when, untried=True) for url in tasks]
        if retries:
            ctx.store.retry_pages(job.job_id, retries, lease)
        ctx.queue.push(again, delay_seconds=delay(ctx))

    patiently(back)
    log.warning(
        "pages given back: our own infrastructure stayed busy",
        extra={"job_id": job.job_id, "pages": len(again), "reason": str(busy)},
    )
    return list(tasks)


def tasks(ctx: StepContext, again: Sequence[PageTask], busy: Busy) -> None:
    """Tasks of which nothing was claimed (or whose work is done) sent again, so that what the busy service
    kept from happening (a claim, the job's end) is looked at again soon (a job's result that could not be
    written: once its writer is surely gone, ``ResultUnwritten.after``)."""
    later = max(delay(ctx), busy.after) if isinstance(busy, ResultUnwritten) else delay(ctx)
    patiently(lambda: ctx.queue.push(list(again), delay_seconds=later))
    log.warning(
        "tasks sent again: our own infrastructure stayed busy", extra={"tasks": len(again), "reason": str(busy)}
    )


def patiently(back: Callable[[], None]) -> None:
    """Runs ``back`` (work handed back to the queue; it may run again whole) in the time held back for giving
    work back, trying again while the service stays busy."""
    with PATIENCE.giving_back():
        PATIENCE.retrying(back)
