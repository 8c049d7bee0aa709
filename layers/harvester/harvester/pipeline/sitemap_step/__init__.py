"""One sitemap task: claim the sitemap, fetch it, read it while it downloads, fan out what it lists.

The flow is USP's (fetch, then let the content choose the parser), made safe for a distributed job:

* the sitemap is claimed with a lease, so two deliveries of one task never read it at once;
* page URLs pass URL hygiene (http(s), length, scope, patterns, first declaration only) and are recorded
  in batches, each batch one atomic write that also counts the new URLs and moves the sitemap's checkpoint;
  only then are their page tasks sent, and the checkpoint says how far sending got. A redelivered task
  reads the sitemap again, skips what was sent, re-sends what was recorded but maybe not sent, and records
  the rest — so nothing discovered is lost and nothing is counted twice;
* child sitemaps are registered once per job (recursion and depth checked against the ancestor chain that
  travels with the task) and sent;
* a reading is bounded where the settings say (``sitemap_step_urls``, ``sitemap_step_seconds``: AWS): once
  its step is spent, right after a batch was recorded, the sitemap goes back to pending with the attempts it
  had and its task is sent again at once; the step that pauses first keeps the document it read (stored,
  ``StepDocument``), and every later step replays that copy from its checkpoint, so the steps read one
  version of the sitemap, with no request to the site (a reading in steps is one attempt);
* a transient failure (429, 5xx, timeouts, a broken connection) gives the sitemap back with a delayed
  task, up to ``retry_max`` readings, so a flaky server does not cost a whole subtree;
* a sitemap that cannot be read ends as failed / invalid / absent with its reason: it never fails the job.

``process_sitemap`` claims, reads and settles; the reading itself is ``reading.SitemapReading`` (fetch,
replay, outcome), which hands the entries to ``entries.EntryScreen`` (screening, child sitemaps) and the
pages it accepts to ``listing.PageListing`` (batches, records, tasks, checkpoint).
"""

from __future__ import annotations

import logging
import uuid

from harvester.model.messages import SitemapTask
from harvester.model.records import SitemapRecord, SitemapStatus
from harvester.model.state import Lease, SitemapOutcome, SitemapRelease
from harvester.patience import Busy
from harvester.pipeline import fetch_log, give_back
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step.listing import StepEnded
from harvester.pipeline.sitemap_step.reading import Retry, SitemapReading
from harvester.ports import LeaseLost
from harvester.urls import normalize

__all__ = ["Retry", "process_sitemap"]

log = logging.getLogger(__name__)


async def process_sitemap(ctx: StepContext, task: SitemapTask) -> SitemapRecord | None:
    job = ctx.job(task.job_id)
    if job is None:
        log.warning("sitemap task for an unknown job dropped", extra={"job_id": task.job_id, "url": task.url})
        return None
    url = normalize(task.url)
    store = ctx.store
    registered = store.get_sitemap(job.job_id, url)
    if registered is None:
        # Only a hand-made task names a sitemap nobody registered: register it so that it is counted.
        registered = SitemapRecord(
            url=url, origin=task.origin, depth=task.depth, ancestors=task.ancestors, discovered_at=ctx.clock()
        )
        store.add_sitemaps(job.job_id, [registered])
    now = ctx.clock().timestamp()
    lease = Lease(token=uuid.uuid4().hex, until=now + ctx.settings.sitemap_lease_seconds)
    try:
        record = store.claim_sitemap(job.job_id, url, lease, now=now)
    except Busy as busy:  # (the claim may have landed: given back by its lease, with the attempts it had)
        give_back.sitemap(ctx, job, registered, lease, busy, attempts=registered.attempts)
        return None
    if record is None:
        log.info("sitemap %s already done or in progress elsewhere", url, extra={"job_id": job.job_id, "url": url})
        # (a delivery again of a step whose end of the job met a busy service: the end is looked at again)
        give_back.complete_or_resend(ctx, job.job_id, [task])
        return None
    reading: SitemapReading | None = None
    try:
        if record.attempts > ctx.settings.max_attempts:
            outcome: SitemapOutcome | Retry = SitemapOutcome(
                status=SitemapStatus.FAILED,
                error_message=f"gave up after {record.attempts - 1} attempts to read it",
            )
        else:
            reading = SitemapReading(ctx, job, record, lease)
            outcome = await reading.run()
        finished = None
        if not isinstance(outcome, Retry):
            outcome.finished_at = ctx.clock()
            finished = store.finish_sitemap(job.job_id, url, outcome, lease)
    except LeaseLost:
        # We were too slow: the lease lapsed and another worker took the sitemap over from its checkpoint.
        log.warning("sitemap lease lost to another worker", extra={"job_id": job.job_id, "url": url})
        return None
    except Busy as busy:  # our own infrastructure, not the site: the attempts stay as they were
        failed = reading.failed_tries if reading else 0
        give_back.sitemap(ctx, job, record, lease, busy, attempts=record.attempts - 1 + failed)
        return None
    except StepEnded as step:  # (the reading goes on: not an attempt, and no error)
        failed = reading.failed_tries if reading else 0
        release = SitemapRelease(None, record.attempts - 1 + failed, step.document)
        give_back.release(ctx, job, record, lease, release, after=0)
        log.info(
            "sitemap read in steps: %s goes on from its checkpoint (%d URLs listed in this step)",
            url,
            step.listed,
            extra={"job_id": job.job_id, "url": url, "checkpoint": step.checkpoint, "listed": step.listed},
        )
        return None
    if isinstance(outcome, Retry):
        delay = min(
            ctx.settings.retry_backoff_seconds * 2 ** (record.attempts - 1),
            ctx.settings.retry_backoff_max_seconds,
        )
        give_back.release(ctx, job, record, lease, SitemapRelease(outcome.reason, outcome.attempts), after=delay)
        fetch_log.sitemap_retry(
            job.job_id,
            url,
            outcome.reason,
            attempts=outcome.attempts,
            retry_max=ctx.settings.retry_max,
            until=ctx.clock().timestamp() + delay,
        )
        return None
    if finished is not None:
        fetch_log.sitemap(job.job_id, finished)
    else:
        log.info(
            "sitemap %s: its lease went to another worker before its outcome was written",
            url,
            extra={"job_id": job.job_id, "url": url},
        )
    give_back.complete_or_resend(ctx, job.job_id, [task])
    return finished
