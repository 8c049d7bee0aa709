"""The collection that follows a job's result: the site's crawl database's records no pointer reads deleted
(``CrawlDatabase.collect``), in the step that wrote the result and, on a site whose collection does not fit
its time, in steps of its own after it (``EndProgress.collecting``: ``completion.finish`` runs them)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from harvester.archive.results import collection_key, collection_prefix
from harvester.model.crawl import Collected
from harvester.model.records import JobRecord
from harvester.model.state import EndProgress
from harvester.pipeline.context import StepContext

log = logging.getLogger(__name__)


def collect(
    ctx: StepContext,
    job: JobRecord,
    *,
    relisted: int | None = None,
    urls: int = 0,
    pause: Callable[[], bool] | None = None,
    resume: bytes | None = None,
) -> Collected:
    """Deletes the site's crawl database's records no pointer reads (``CrawlDatabase.collect``), of the jobs
    that ended ``collect_after_seconds`` ago or more (a job whose record expired ended long ago). After the
    result, and never failing the job's end: what is left is collected at the site's next job end.
    ``relisted``: how many of the job's ``urls`` it listed one by one (not adopted with a part). ``pause``: the
    step's time (``Collected.paused`` when it ran out: the state ``resume`` goes on from)."""
    now, after = ctx.clock(), ctx.settings.collect_after_seconds

    def ended(job_id: str) -> bool:
        other = ctx.store.get_job(job_id)
        if other is None:
            return True
        return other.status.final and other.end_time is not None and (now - other.end_time).total_seconds() >= after

    site = job.request.origin
    try:
        collected = ctx.crawldb.collect(
            site, ended, by=job.job_id, relisted=relisted, urls=urls, pause=pause, resume=resume
        )
    except Exception:
        log.exception("the crawl database's unused records could not be collected", extra={"job_id": job.job_id})
        return Collected()
    if collected.batches:
        log.info("crawl batches collected", extra={"job_id": job.job_id, "batches": collected.batches})
    return collected


def going_on(ctx: StepContext, job_id: str, collected: Collected, claim: float) -> EndProgress | None:
    """How far a collection that paused got, for the step that goes on with it (its state stored under the
    step's ``claim``); None when it is over, or when its state could not be stored (it is left, never failing
    the job's end: what is left is collected at the site's next job end)."""
    if collected.paused is None:
        return None
    key = collection_key(job_id, claim)
    try:
        ctx.documents.put(key, collected.paused, content_type="application/octet-stream")
    except Exception:
        log.exception("a collection's state could not be stored; it is left", extra={"job_id": job_id})
        return None
    log.info("the collection goes on in a step of its own", extra={"job_id": job_id})
    return EndProgress(collecting=key)


def collect_on(
    ctx: StepContext, job: JobRecord, stored: str, *, pause: Callable[[], bool], claim: float
) -> EndProgress | None:
    """A step of the collection after the job's result, from the state ``stored``: how far it got, or None
    once it is over (``let_go`` then deletes its states). A state gone (a step that died once it had let
    them go), or one that cannot be read or stored, ends it: what is left is collected at the site's next job
    end."""
    try:
        state = ctx.documents.get(stored)
    except FileNotFoundError:
        log.warning("a collection's state is gone; it is over", extra={"job_id": job.job_id, "state": stored})
        return None
    except Exception:
        log.exception("a collection's state could not be read; it is left", extra={"job_id": job.job_id})
        return None
    return going_on(ctx, job.job_id, collect(ctx, job, pause=pause, resume=state), claim)


def let_go(ctx: StepContext, job_id: str, *keys: str) -> None:
    """Deletes the states of the job's collection ``keys`` (none: all of them); the steps/ lifecycle deletes
    any that could not be."""
    try:
        ctx.documents.delete(*(keys or list(ctx.documents.keys(collection_prefix(job_id)))))
    except Exception:
        log.exception("a collection's states could not be deleted", extra={"job_id": job_id})
