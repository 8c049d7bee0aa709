"""Ending a job exactly once, and writing its SitemapIngestionResult and change feed.

A job is done when discovery is finished (every sitemap it registered is final, so no new URL can
appear) and every URL it registered has an outcome. The check reads the job and its counters as one
snapshot; the end is one conditional write that only one caller can win; the winner closes the crawl
cycle in the crawl database (orphans, lastmod trust) and writes the result, or has it written apart (on
AWS by the job-end function, in steps of bounded time: ``finish``). If the winner dies before the result is
written, ``recovery.resume`` writes it.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

from msgspec.structs import replace

from harvester.archive.results import (
    changes_key,
    piece_key,
    records_key,
    removed_key,
    result_key,
)
from harvester.crawldb.trust import EvidenceTally
from harvester.crawldb.trust import apply as apply_trust
from harvester.model.crawl import ChangeKind, SiteCrawl, TrustChange
from harvester.model.messages import JobEnd, Output, SitemapOrigin
from harvester.model.records import (
    BulkProcessingJob,
    ErrorDetail,
    JobCounts,
    JobRecord,
    JobStatus,
    SitemapIngestionResult,
    SitemapRecord,
    SitemapStatus,
)
from harvester.model.state import EndProgress
from harvester.patience import Busy
from harvester.pipeline.collection import collect, collect_on, going_on, let_go
from harvester.pipeline.context import StepContext
from harvester.pipeline.job_index import store_index
from harvester.pipeline.orphan_pass import STALE_ATTEMPTS, RemovedLines, mark_orphans
from harvester.pipeline.part_documents import keep_parts_index, parts_index_key
from harvester.pipeline.parts import PartMaker
from harvester.pipeline.records_pass import FEED, RECORDS, ReasonTally, RecordsPass, piece_documents
from harvester.report.stored import write_report
from harvester.words import count

log = logging.getLogger(__name__)

#: The most sitemap parts a step of a job's end makes (about 20 requests each): an end in one step with more to
#: make, or whose time is up once its records are read, makes them in steps of their own, this many a step.
PARTS_IN_ONE_STEP = 100


def maybe_complete(ctx: StepContext, job_id: str) -> bool:
    """Ends the job if it is done; True only for the one caller that ended it.

    Called after every step, so it starts with the cheap read of the counters; only when they look done is
    the job read as one consistent snapshot. The worker whose write was the last one always sees "done":
    it reads after every other write has committed.
    """
    if not ctx.store.counts(job_id).done:
        return False
    snapshot = ctx.store.snapshot(job_id)
    if snapshot is not None and unwritten(ctx, snapshot.job):
        end(ctx, job_id)
    if snapshot is None or snapshot.job.status is not JobStatus.IN_PROGRESS or not snapshot.counts.done:
        return False
    job, counts = snapshot.job, snapshot.counts
    end_time = max(ctx.clock(), job.start_time + timedelta(microseconds=1))
    status, error = JobStatus.COMPLETED, None
    if counts.sitemaps_ok == 0:
        status, error = JobStatus.FAILED, f"no readable sitemap found for {job.site}"
    if not ctx.store.end_job(job_id, status, end_time=end_time, error_message=error):
        return False
    log.info(
        "job %s ended %s (%d URLs)",
        job_id,
        status.value,
        counts.urls_total,
        extra={"job_id": job_id, "status": status.value, "total_urls": counts.urls_total},
    )
    if not ctx.ephemeral:  # (a throwaway run has handed its pages out already, and keeps nothing)
        try:
            end(ctx, job_id)
        except Busy as busy:
            raise ResultUnwritten(busy, after=ctx.settings.result_grace_seconds) from busy
    return True


def end(ctx: StepContext, job_id: str) -> None:
    """Writes the result of a job that ended, here or apart (``StepContext.end_apart``)."""
    if ctx.end_apart is not None:
        ctx.end_apart(JobEnd(job_id=job_id))
    else:
        write_result(ctx, job_id)


def finish(ctx: StepContext, job_id: str, *, claim: float | None = None) -> SitemapIngestionResult | None:
    """A job end's own step (``end``'s, apart): writes the result of the job if it ended without one, one
    writer at a time (``StateStore.claim_end``, for ``end_apart_grace_seconds``): a message delivered twice, at
    once or later, or sent again by a resume, finds it claimed or written and does nothing.

    A step that runs out of its time (``end_step_seconds``) in the orphan pass, the records pass (or has read
    ``end_piece_urls`` records) or the parts stores how far it got and hands its claim on (``claim``) to the
    next step: apart, a JobEnd message; here, the next turn of the loop."""
    job = ctx.store.get_job(job_id)
    if job is None:
        return None
    owed = result_owed(ctx, job)
    if not owed and (claim is None or job.result_key is None):  # (a step handed on may be the collection's)
        return None
    grace = ctx.settings.end_apart_grace_seconds
    wrote = False  # (the result, by a step of this call: a collection in steps may follow it here)
    while True:
        now = ctx.clock().timestamp()
        held = now + grace
        progress = ctx.store.claim_end(job_id, until=held, now=now, handed=claim)
        if progress is None:
            log.info("the job's end is being written by another delivery", extra={"job_id": job_id})
            return None  # (a claim lapses: if its writer died, the end sent again after the grace writes it)
        pause = _time_up(ctx.settings.end_step_seconds)
        if progress.collecting is not None:  # (the result is written: its collection goes on)
            written = collect_on(ctx, job, progress.collecting, pause=pause, claim=held)
            if written is None:  # (over: the progress saved empty first, then its states deleted)
                if ctx.store.save_end(job_id, EndProgress(), held=held, handed=ctx.clock().timestamp()):
                    let_go(ctx, job_id)
                return _stored_result(ctx, job_id) if wrote else None
        elif not owed:
            # (a step of a collection that is over, delivered again: the states a step that died after the
            # progress said so left, or that no progress names, are let go)
            let_go(ctx, job_id)
            return None
        else:
            try:
                written = end_step(ctx, job_id, job=job, progress=progress, pause=pause, claim=held)
            except StepsLost as lost:  # (the pass starts over: what it marked already is found marked by this job)
                log.warning("the job's end starts over", extra={"job_id": job_id, "lost": str(lost)})
                written = EndProgress()
            if not isinstance(written, EndProgress):
                return written
            wrote = written.collecting is not None
        claim = ctx.clock().timestamp() + grace
        if not ctx.store.save_end(job_id, written, held=held, handed=claim):
            log.warning("the job's end was taken over by another delivery", extra={"job_id": job_id})
            return None
        log.info("the job's end goes on in a step of its own", extra={"job_id": job_id, "removed": written.removed})
        if progress.collecting not in (None, written.collecting):  # (its successor stored and handed on; two
            let_go(ctx, job_id, progress.collecting)  # steps' claims may round to the same key)
        if ctx.end_apart is not None:
            ctx.end_apart(JobEnd(job_id=job_id, claim=claim))
            return None


def _stored_result(ctx: StepContext, job_id: str) -> SitemapIngestionResult:
    return SitemapIngestionResult.model_validate_json(ctx.documents.get(result_key(job_id)))


class StepsLost(Exception):
    """A document an earlier step of the job's end stored is gone (a chain stalled past its expiry)."""


def _time_up(seconds: float) -> Callable[[], bool]:
    """Whether ``seconds`` have gone by since this was made."""
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


class ResultUnwritten(Busy):
    """The job ended, and its result could not be written: a service stayed busy. A step that meets this
    looks again ``after`` seconds (``result_grace_seconds``): by then the step that ended the job has
    stopped, and the result is the next step's to write (the scheduler's tick writes it too:
    ``recovery.resume``)."""

    def __init__(self, busy: Busy, *, after: float) -> None:
        super().__init__(busy.service, busy.operation, f"the job's result is not written: {busy.reason}")
        self.after = after


def result_owed(ctx: StepContext, job: JobRecord) -> bool:
    """A job that ended without its result, and is owed one (not cancelled, not a throwaway run's)."""
    final = job.status.final and job.status is not JobStatus.CANCELLED
    return final and job.result_key is None and not ctx.ephemeral


def unwritten(ctx: StepContext, job: JobRecord) -> bool:
    """A job that ended without its result long enough ago that whoever ended it, or the end it sent apart,
    is gone (``result_grace_seconds``: the longest a function that ends a job runs; ``end_apart_grace_seconds``
    for an end sent apart: the job-end function's): the result is this caller's to write, or to send."""
    if not result_owed(ctx, job) or job.end_time is None:
        return False
    grace = ctx.settings.result_grace_seconds if ctx.end_apart is None else ctx.settings.end_apart_grace_seconds
    return (ctx.clock() - job.end_time).total_seconds() >= grace


def write_result(ctx: StepContext, job_id: str, *, job: JobRecord | None = None) -> SitemapIngestionResult:
    """The job's end in one step (``end_step``, never paused)."""
    written = end_step(ctx, job_id, job=job)
    assert isinstance(written, SitemapIngestionResult)
    return written


def end_step(
    ctx: StepContext,
    job_id: str,
    *,
    job: JobRecord | None = None,
    progress: EndProgress | None = None,
    pause: Callable[[], bool] | None = None,
    claim: float = 0.0,
) -> SitemapIngestionResult | EndProgress:
    """Ends the job's crawl cycle and writes its result, from a recount of the records themselves.

    In order: the URLs the site stopped listing become orphan (``orphan_pass``), then the per-URL records
    (JSON Lines), their Parquet index and the change feed are written (``records_pass``, ``job_index``) with
    the sitemaps' parts for the next jobs (``parts``), the job's lastmod evidence is counted in the site's
    trust, and the summary and its report page are written (``report.stored``). Every step may run again
    (the writer may die before the result is stored; ``recovery.resume`` then calls this again): orphans are marked with
    the job that orphaned them, and a site remembers the jobs whose evidence it counted, so a second run
    reports the same and changes nothing twice. ``job``: its record, ended, when the caller has just read it.

    ``progress``: how far earlier steps of the end got; when ``pause`` says the step's time is up during the
    orphan pass or the records pass, the pass stops after a page and this returns how far it got (what it
    wrote stored under the step's ``claim``) instead of a result. An end that went in steps makes the parts
    in steps too, a part at a time, after its records pass (``EndProgress.parts_at``). ``StepsLost`` when a
    document of the earlier steps is gone.
    """
    store = ctx.store
    job = job if job is not None and job.end_time is not None else store.get_job(job_id)
    if job is None or job.end_time is None:
        raise ValueError(f"job {job_id} has not ended; there is no result to write yet")
    progress = progress or EndProgress()
    if not progress.warc_swept:
        # (no run of the job writes any more: what a writer killed between a WARC file and its index left is
        # removed before the records are read)
        if ctx.warcs is not None and job.request.output is Output.WARC:
            at = ctx.warcs.sweep(job_id, after=progress.warc_at, pause=pause)
            if at is not None:
                return replace(progress, warc_at=at)
        progress = replace(progress, warc_at=None, warc_swept=True)
    sitemaps = list(store.sitemaps(job_id))
    with RemovedLines() as gone:
        # (a job that read no sitemap says nothing of what is listed; a records pass begun follows the orphans')
        if job.status is JobStatus.COMPLETED and progress.records_at is None and progress.parts_at is None:
            at = mark_orphans(
                ctx,
                job,
                sitemaps,
                gone.add,
                listed=lambda: store.counts(job_id).urls_total,
                after=progress.orphans_at,
                pause=pause,
            )
            if at is not None:
                return _paused(ctx, job_id, progress, gone, claim, orphans_at=at)
        return _write_result(ctx, job, sitemaps, progress, gone, pause=pause, claim=claim)


def _paused(
    ctx: StepContext,
    job_id: str,
    progress: EndProgress,
    gone: RemovedLines,
    claim: float,
    *,
    orphans_at: str | None = None,
    records_at: str | None = None,
    piece: str | None = None,
    parts_at: int | None = None,
) -> EndProgress:
    """How far the end got: the orphan pass at ``orphans_at``, or the records pass at ``records_at`` with what
    this step wrote of it in the documents ``piece``, or the parts at ``parts_at``; the lines of the URLs the
    orphan pass found removed in this step stored as a document of their own."""
    documents = progress.removed_lines
    if gone.count:
        key = removed_key(job_id, len(documents), claim)
        ctx.documents.put(key, gone.rewound(), content_type="application/x-ndjson")
        documents = (*documents, key)
    return EndProgress(
        warc_swept=progress.warc_swept,
        orphans_at=orphans_at or progress.orphans_at,
        removed_lines=documents,
        removed=progress.removed + gone.count,
        records_at=records_at,
        pieces=(*progress.pieces, piece) if piece else progress.pieces,
        parts_at=parts_at,
    )


def _write_result(
    ctx: StepContext,
    job: JobRecord,
    sitemaps: list[SitemapRecord],
    progress: EndProgress,
    gone: RemovedLines,
    *,
    pause: Callable[[], bool] | None = None,
    claim: float = 0.0,
) -> SitemapIngestionResult | EndProgress:
    """The records, their index, the change feed (with the orphan pass's lines: ``progress``'s, ``gone``'s),
    the parts, the site's trust and the summary of the ended ``job``; or, when ``pause`` says so after a page
    of the job's records, how far the records pass got."""
    store, documents, job_id = ctx.store, ctx.documents, job.job_id
    assert job.end_time is not None
    errors: list[ErrorDetail] = []
    dropped, warnings = ReasonTally(), ReasonTally()
    for sitemap in sitemaps:
        dropped.add_counts(sitemap.dropped)
        warnings.add_counts(sitemap.warnings)
        if sitemap.status in (SitemapStatus.FAILED, SitemapStatus.INVALID):
            errors.append(ErrorDetail(url=sitemap.url, kind="sitemap", error=sitemap.error_message or "unknown"))
    extras = store.extensions(job_id)  # (what later listings of a URL added: few)
    # (a part whose lines are an entry's alternates, or its page in a language, is not its elements' listing)
    rewrites = job.request.select is not None and job.request.select.rewrites
    maker = _part_maker(ctx, job, sitemaps, verbatim=not extras and not rewrites)
    stem, pieces = piece_key(job_id, len(progress.pieces), claim), progress.pieces
    # (the parts' spool let go whichever way it ends)
    with RecordsPass(ctx, job, extras=extras, maker=maker) as records, maker or nullcontext():
        try:
            records.carry_on(pieces)
        except FileNotFoundError as lost:
            raise StepsLost(str(lost)) from None
        parts_at, records_at = progress.parts_at, progress.records_at
        if parts_at is None:  # (the records pass is not over)
            for page in store.job_record_pages(job_id, after=records_at):
                records.read(page.items)
                records_at = page.after
                if pause is not None and (pause() or records.counts.listed >= ctx.settings.end_piece_urls):
                    records.store_piece(stem)
                    return _paused(ctx, job_id, progress, gone, claim, records_at=records_at, piece=stem)
            records.flush()
            many = maker is not None and len(maker.wanted) > PARTS_IN_ONE_STEP
            stepped = bool(pieces) or (pause is not None and (many or pause()))
            if maker is not None and stepped and records.counts.listed:
                # (an end in steps, or one whose parts would not fit its step, makes its parts in steps of their
                # own: this step's records are a piece, so that they find every line in the pieces' spools)
                records.store_piece(stem)
                return _paused(ctx, job_id, progress, gone, claim, records_at=records_at, piece=stem, parts_at=0)
            parts_at = 0
        read_any = bool(records.counts.listed)
        try:
            records.take_in(pieces)
        except FileNotFoundError as lost:
            raise StepsLost(str(lost)) from None
        if maker is not None and pieces:  # (the parts a few at a time, before the outputs)
            looked = parts_at < len(maker.wanted)
            made, parts_at = maker.finish(start=parts_at, pause=pause, most=PARTS_IN_ONE_STEP)
            log.info(
                "job %s: %s made",
                job_id,
                count(len(made), "sitemap part"),
                extra={"job_id": job_id, "parts": len(made), "next": parts_at},
            )
            if parts_at is None and looked and pause is not None:  # (the outputs in a step of their own)
                parts_at = len(maker.wanted)
            if parts_at is not None:
                return _paused(ctx, job_id, progress, gone, claim, records_at=records_at, parts_at=parts_at)
        try:
            for key in progress.removed_lines:  # (the orphan pass's lines, after the job's own)
                with documents.reader(key) as lines:
                    shutil.copyfileobj(lines, records.feed, 1024 * 1024)
            gone.copy_to(records.feed)
            ndjson = "application/x-ndjson"
            records.join(records_key(job_id), RECORDS, records.records, pieces, stem, content_type=ndjson)
            records.join(changes_key(job_id), FEED, records.feed, pieces, stem, content_type=ndjson)
        except FileNotFoundError as lost:
            raise StepsLost(str(lost)) from None
        counts = records.counts
        changes = records.changes
        changes.add_counts({ChangeKind.REMOVED.value: progress.removed + gone.count})
        # (in one step, the parts take their rows from the job's, and an index of parts only is kept for the
        # site; in steps, each step's records have a file of the index, and the parts' rows are made apart)
        alone = not pieces
        keep, kept_for = (maker.job_rows if maker else None, job.request.origin) if alone else (None, None)
        files: list[Path | str | None] = list(records.index_files)
        own = None
        if read_any or alone:  # (a step that read no record after the pieces' has no file of its own)
            own = records.build_index(keep=keep, site=kept_for)
            files.append(own)
        try:
            url_index = store_index(ctx, job_id, files)
        except FileNotFoundError as lost:
            raise StepsLost(str(lost)) from None
        if maker is not None and alone:  # (for the next jobs: its documents are the site's, not the job's)
            made, _ = maker.finish()
            log.info(
                "job %s: %s made",
                job_id,
                count(len(made), "sitemap part"),
                extra={"job_id": job_id, "parts": len(made)},
            )
            listed_only = maker.listed_only and sum(p.urls for p in made) == counts.listed
            if own is not None and url_index and made and listed_only:
                # (the job's index is made of these parts' rows alone: sorted, for the next job that adopts them)
                site = job.request.origin
                keep_parts_index(documents, site, parts_index_key(site, [p.index for p in made if p.index]), own)
    room = max(0, ctx.settings.max_error_details - len(errors))  # (the sitemaps' errors first, all of them)
    trust = _update_site(ctx, job, records.evidence, sitemaps)
    snapshot = store.snapshot(job_id)
    now = snapshot.counts if snapshot else JobCounts()
    succeeded, failed, excluded = counts.succeeded, counts.failed, counts.excluded
    # (an adoption counts its part's URLs as succeeded without reading its lines; the pass reads them)
    listing = (now.urls_succeeded - counts.adopted_failed, now.urls_failed + counts.adopted_failed, now.urls_excluded)
    if listing != (succeeded, failed, excluded):
        log.error(
            "counters disagree with a recount of the records; the result uses the recount",
            extra={"job_id": job_id, "counters": now.model_dump(), "recount": [succeeded, failed, excluded]},
        )
    result = SitemapIngestionResult(
        job_id=job_id,
        site=job.site,
        status=job.status,
        total_urls=succeeded + failed + excluded,
        successful_processing=succeeded,
        failed_processing=failed,
        known_failures=counts.known_failed,
        excluded_processing=excluded,
        exclusions=records.exclusions.counts,
        entries_dropped=dropped.counts,
        entry_warnings=warnings.counts,
        processed_urls=documents.location(records_key(job_id)),
        start_time=job.start_time,
        end_time=job.end_time,
        total_duration=(job.end_time - job.start_time).total_seconds(),
        error_details=[*errors, *counts.errors[:room]],
        errors_omitted=counts.omitted + len(counts.errors[room:]),
        sitemaps_total=now.sitemaps_total,
        sitemaps_ok=now.sitemaps_ok,
        changes=changes.result(),
        changes_location=documents.location(changes_key(job_id)),
        lastmod_trust=trust,
        url_index=url_index,
        fetches=records.fetches.stats,
    )
    body = json.dumps(result.model_dump(mode="json"), indent=2).encode()
    documents.put(result_key(job_id), body, content_type="application/json")
    write_report(documents, job.request.origin, result, sitemaps)
    store.set_result(job_id, result_key(job_id))
    done = list(progress.removed_lines)  # (in the outputs now)
    if pieces:  # (and this step's own lines, stored as a piece of its own to be joined)
        done += [key for piece in (*pieces, stem) for key in piece_documents(piece)]
    documents.delete(*done)
    # (in an end in steps, the collection's reads go on in steps of their own: this one's work follows the pieces)
    after = (lambda: True) if pieces and pause is not None else pause
    collected = collect(ctx, job, relisted=result.total_urls - counts.adopted, urls=result.total_urls, pause=after)
    return going_on(ctx, job_id, collected, claim) or result  # (a paused one goes on in steps: ``finish``)


def _part_maker(ctx: StepContext, job: JobRecord, sitemaps: list[SitemapRecord], *, verbatim: bool) -> PartMaker | None:
    """What makes the parts of the sitemaps the job listed one by one, for the next jobs: only a complete job
    keeps them (its readings are whole), and a run that keeps nothing keeps none. ``verbatim``: no record of
    the job has extensions a later listing of its URL added (``SitemapPart.verbatim``)."""
    if not ctx.sitemap_parts or job.status is not JobStatus.COMPLETED:
        return None
    return PartMaker(ctx, job, sitemaps, verbatim=verbatim)


def _update_site(
    ctx: StepContext, job: JobRecord, evidence: EvidenceTally, sitemaps: Sequence[SitemapRecord]
) -> dict[str, TrustChange]:
    """Counts the job's lastmod evidence in the site's trust, once, and notes the well-known paths the job
    found absent (when it probed any); returns what it did to each host. Written only when either changes."""
    site = job.request.origin
    probes = [s for s in sitemaps if s.origin is SitemapOrigin.KNOWN_PATH]
    absent = sorted(s.url for s in probes if s.status is SitemapStatus.ABSENT) if probes else None
    for _ in range(STALE_ATTEMPTS):
        current = ctx.crawldb.get_site(site) or SiteCrawl(site=site)
        noted = absent is None or current.absent_paths == absent
        counted = job.job_id in current.applied or not evidence.hosts
        if counted:
            changes = current.applied.get(job.job_id, {})
            if noted:
                return changes
            updated = current.model_copy(update={"version": current.version + 1})
        else:
            updated, changes = apply_trust(
                current, evidence, job_id=job.job_id, now=ctx.clock(), threshold=ctx.settings.lastmod_trust_threshold
            )
        if not noted:
            updated = updated.model_copy(update={"absent_paths": absent})
        if ctx.crawldb.put_site(updated):
            for host, change in changes.items() if not counted else ():
                log.info("lastmod trust", extra={"site": site, "host": host, "went": change.went})
            return changes
    raise RuntimeError(f"the crawl record of site {site} kept changing; job {job.job_id}'s result is retried")


def job_view(ctx: StepContext, job_id: str) -> BulkProcessingJob | None:
    snapshot = ctx.store.snapshot(job_id)
    if snapshot is None:
        return None
    job = snapshot.job
    location = ctx.documents.location(job.result_key) if job.result_key else None
    return BulkProcessingJob.of(job, snapshot.counts, last_update=snapshot.last_update, result_location=location)
