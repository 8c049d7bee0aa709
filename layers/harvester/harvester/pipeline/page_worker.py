"""Page tasks: claim the pages of a batch, fetch them concurrently, store them, settle each exactly once.

A page is claimed before it is fetched (so a duplicate delivery, or a second worker, leaves it alone),
and its outcome is written together with the job's counters and the URL's crawl record, only if the claim
is still ours. A URL whose content is stored is fetched conditionally (``If-None-Match`` /
``If-Modified-Since``); a 304, or a body with the signature already stored, stores nothing and keeps
pointing at the stored version; a new version is stored once, under a key holding its signature. A
transient failure (429, 5xx, timeouts) sends the page back to pending with a delayed task, up to
``retry_max`` times; then the job gives up on it, and the crawl database counts one retry toward gone.

This module runs the deliveries (claims, turns, requests, storage, settlement); what each comes to is
decided by ``page_outcomes``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from msgspec import Struct, field

from harvester.archive.batch import WarcBatch
from harvester.crawldb.crawl_state import Fetched, FetchResult, classify_status, http_error
from harvester.crawldb.documents import page_key
from harvester.fetch import BlockedAddress, FetchError, FetchResponse, is_transient, parse_retry_after
from harvester.limits import SPOOL_IN_MEMORY
from harvester.model.messages import Output, PageTask
from harvester.model.records import JobRecord, SitemapURL, UrlStatus
from harvester.model.state import Lease, PageOutcome, PageRetry
from harvester.patience import Busy
from harvester.pipeline import fetch_log, give_back, page_archive, page_outcomes
from harvester.pipeline.admission import arrive, queue_delay
from harvester.pipeline.context import StepContext
from harvester.politeness.turns import Turns
from harvester.urls import normalize

log = logging.getLogger(__name__)

#: Times an outcome is settled again when other jobs keep moving its crawl record.
STALE_ATTEMPTS = 8

#: Told a job's id when that job's pages of a batch have made their last request.
RequestsOver = Callable[[str], None]


class PageBatch(Struct):
    """What a batch of page tasks came to (for logs, metrics and the local progress display)."""

    completed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already final, or claimed elsewhere
    deferred: list[str] = field(default_factory=list)  # not their host's turn yet: sent back, delayed
    #: For the metrics: the outcomes settled (what they came to: reasons, bytes), each URL's job, and the
    #: seconds from each answered request's start to its answer's headers, by URL.
    settled: list[PageOutcome] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)


async def process_pages(
    ctx: StepContext, tasks: Sequence[PageTask], *, requests_over: RequestsOver | None = None
) -> PageBatch:
    """The jobs of a batch side by side: one after the other, a fast site's pages would wait for a slow host's
    pages of the same batch, which take their turns through their grant's slots (up to the gate's horizon).
    Every job's pages are seen to the end before a failure is raised, so that no claim is left to lapse.

    ``requests_over(job_id)`` is told when a job's pages of the batch have made their last request (their
    host's grants given back), before their captures are stored and their outcomes settled: a caller that
    counts requests in flight (the local dispatcher) frees their slots then, as the gate does."""
    result = PageBatch()
    by_job: dict[str, list[PageTask]] = defaultdict(list)
    for task in tasks:
        by_job[task.job_id].append(task)
    runs = []
    for job_id, job_tasks in by_job.items():
        job = ctx.job(job_id)
        if job is None:
            log.warning("page tasks for an unknown job dropped", extra={"job_id": job_id})
            result.skipped.extend(t.url for t in job_tasks)
            continue
        runs.append(_process_job_pages(ctx, job, job_tasks, result, requests_over))
    for failure in await asyncio.gather(*runs, return_exceptions=True):
        if isinstance(failure, BaseException):
            raise failure
    return result


async def _process_job_pages(
    ctx: StepContext,
    job: JobRecord,
    tasks: Sequence[PageTask],
    result: PageBatch,
    requests_over: RequestsOver | None,
) -> None:
    store, settings = ctx.store, ctx.settings
    by_url: dict[str, PageTask] = {}
    for task in tasks:
        by_url.setdefault(normalize(task.url), task)
    urls = list(by_url)
    result.jobs.update(dict.fromkeys(urls, job.job_id))
    now = ctx.clock()
    lease = Lease(token=uuid.uuid4().hex, until=now.timestamp() + settings.page_lease_seconds)
    mine: list[str] | None = None  # the pages claimed (None: not known, the claim met a busy service)
    done: set[str] = set()  # settled, or sent back to be tried again
    decided: dict[str, PageRetry] = {}  # to be tried again for the site's sake, not yet written so
    admitted: Turns | None = None
    try:
        arrival = await arrive(ctx, job, by_url)
        admitted = arrival.turns
        if arrival.back:  # (unclaimed: their tries stay as they were)
            back = [
                (by_url[url].model_copy(update={"url": url, "turn": turn, "place": place}), when)
                for url, (when, turn, place) in arrival.back.items()
            ]
            _send_back(ctx, back)
            for url, (when, _, place) in arrival.back.items():
                fetch_log.deferred(job.job_id, url, when, place=place)
            result.deferred.extend(arrival.back)
            result.retried.extend(arrival.back)
            urls = [url for url in urls if url not in arrival.back]
        stored = {url: by_url[url].stored for url in urls if by_url[url].stored}
        claimed = store.claim_pages(job.job_id, urls, lease, now=now.timestamp(), stored=stored)
        mine = [r.url for r in claimed]
        result.skipped.extend(u for u in urls if u not in set(mine))
        if claimed:
            admitted = None  # (given back by the fetch, whatever happens there)
            await _fetch_and_settle(
                ctx, job, by_url, claimed, lease, arrival.turns, result, done, decided, requests_over
            )
    except Busy as busy:  # our own infrastructure, not the site: the pages' attempts stay as they were
        back = {url: by_url[url] for url in (urls if mine is None else mine) if url not in done}
        result.retried.extend(give_back.pages(ctx, job, back, lease, busy, decided))
        return
    finally:
        if admitted is not None:  # (turns granted to pages not claimed, or a claim that failed)
            admitted.release(ctx.gate)
    if urls:  # (with nothing claimed: a delivery again of pages settled already, whose first may have died)
        give_back.complete_or_resend(ctx, job.job_id, [by_url[url] for url in urls])


async def _fetch_and_settle(
    ctx: StepContext,
    job: JobRecord,
    by_url: dict[str, PageTask],
    claimed: list[SitemapURL],
    lease: Lease,
    admission: Turns,
    result: PageBatch,
    done: set[str],
    decided: dict[str, PageRetry],
    requests_over: RequestsOver | None,
) -> None:
    """The claimed pages fetched, stored and settled: each URL settled or sent back is added to ``done`` as it
    is, each the site's answer sends back to ``decided`` until it is (for a give-back to keep that try)."""
    store = ctx.store
    archive = WarcBatch() if job.request.fetch_pages and job.request.output is Output.WARC else None
    try:
        try:
            settled = await asyncio.gather(*(_told(ctx, job, record, admission, archive) for record in claimed))
        finally:
            admission.release(ctx.gate)
            if requests_over is not None:
                requests_over(job.job_id)
        if archive is not None:  # stored before any page names its record
            placed = await page_archive.store(ctx, job, archive)
            settled = [
                page_outcomes.placed(s, placed.get(s.record.url)) if isinstance(s, PageOutcome) else s for s in settled
            ]
    finally:
        if archive is not None:
            archive.close()
    result.deferred.extend(admission.deferred)
    result.latency.update(admission.latency)
    outcomes = [s for s in settled if isinstance(s, PageOutcome)]
    retries = [s for s in settled if isinstance(s, PageRetry)]
    decided.update((r.url, r) for r in retries if not r.untried)
    applied = set(_finish(ctx, job, outcomes, lease, done))
    result.settled.extend(o for o in outcomes if o.record.url in applied)
    for outcome in outcomes:
        record = outcome.record
        if record.url not in applied:
            result.skipped.append(record.url)
        elif record.status is UrlStatus.COMPLETED:
            result.completed.append(record.url)
        else:
            result.failed.append(record.url)
    if retries:
        retried = set(store.retry_pages(job.job_id, retries, lease))
        again = [r for r in retries if r.url in retried]
        _send_back(
            ctx,
            [(give_back.task_again(by_url[r.url], r), r.not_before.timestamp()) for r in again],
        )
        done.update(r.url for r in again)
        result.retried.extend(r.url for r in again)


def _send_back(ctx: StepContext, tasks: Sequence[tuple[PageTask, float]]) -> None:
    """Sends the tasks back to the queue in one push, each delayed to its time (epoch seconds)."""
    now = ctx.clock().timestamp()
    ctx.queue.push([task for task, _ in tasks], delay_seconds=[queue_delay(when - now) for _, when in tasks])


def _finish(ctx: StepContext, job: JobRecord, outcomes: list[PageOutcome], lease: Lease, done: set[str]) -> list[str]:
    """Settles the outcomes with their crawl records (each URL settled added to ``done`` as it is); an outcome
    whose crawl record another job of the site moved meanwhile is computed again on that newer version (the
    listing and the fetch themselves stand) and settled again."""
    site = job.request.origin
    applied: list[str] = []
    outcomes = [page_outcomes.with_listing(o) for o in outcomes]
    for _ in range(STALE_ATTEMPTS):
        settled = ctx.store.finish_pages(job.job_id, outcomes, lease, site=site)
        applied += settled.applied
        done.update(settled.applied)
        if not settled.stale:
            return applied
        stale = set(settled.stale)
        priors = ctx.crawldb.get_urls(site, settled.stale)
        outcomes = [
            page_outcomes.relisted(ctx, job, o, priors.get(o.record.url)) for o in outcomes if o.record.url in stale
        ]
    # Still leased to us: the lease lapses, the task comes back and the page is fetched again.
    log.warning("crawl records kept changing; pages left to their next delivery", extra={"urls": len(outcomes)})
    return applied


async def _told(
    ctx: StepContext, job: JobRecord, record: SitemapURL, admission: Turns, archive: WarcBatch | None
) -> PageOutcome | PageRetry:
    """``_settle``, and its line in the log (``fetch_log``) as soon as the page's delivery is decided."""
    settled = await _settle(ctx, job, record, admission, archive)
    fetch_log.page(
        job.job_id, record, settled, latency=admission.latency.get(record.url), retry_max=ctx.settings.retry_max
    )
    return settled


async def _settle(
    ctx: StepContext, job: JobRecord, record: SitemapURL, admission: Turns, archive: WarcBatch | None
) -> PageOutcome | PageRetry:
    """Fetches one claimed page and decides what becomes of it. Never raises for a fetch problem."""
    settings = ctx.settings
    if record.attempts > min(settings.max_attempts, settings.retry_max):
        # The claims before this one counted tries that never reported back (their workers died): the
        # budget is spent, and this delivery sends nothing.
        spent = record.attempts - 1
        return page_outcomes.failed(
            ctx, page_outcomes.untried(record), f"gave up after {spent} attempts without an outcome", None
        )
    if not job.request.fetch_pages:
        return PageOutcome(page_outcomes.untried(record).model_copy(update={"status": UrlStatus.COMPLETED}))
    try:
        if not await ctx.robots.allowed(record.url):
            robots = await ctx.robots.entry(record.url)
            if robots.disallow_all:  # RFC 9309: robots.txt unreachable, so nothing may be fetched *for now*
                return page_outcomes.retry_or_fail(
                    ctx, record, f"robots.txt unreachable ({robots.status})", tried=False
                )
            return page_outcomes.excluded(ctx, page_outcomes.untried(record), "forbidden by robots.txt")
        if not await admission.turn(ctx.gate, record.url):  # the gate has no turn for it soon: back to the queue
            not_before = datetime.fromtimestamp(admission.deferred[record.url], UTC)
            return PageRetry(record.url, record.retries, "waiting for its host's turn", not_before, untried=True)
        headers = page_outcomes.validators(record.known, warc=archive is not None)
        if headers:
            log.debug("conditional request %s: %s", record.url, headers, extra={"url": record.url, "headers": headers})
        # One request per delivery: a transient failure comes back through the queue, so that every
        # request of the URL is on its one budget (retry_max) and passes the host's gate.
        fetch = ctx.fetcher.open(
            record.url,
            max_bytes=settings.page_max_bytes,
            headers=headers,
            retries=0,
            on_sent=functools.partial(admission.sent, record.url),
        )
        sent = time.monotonic()
        try:
            async with fetch as response:
                latency = time.monotonic() - sent
                admission.observe(
                    record.url,
                    status=response.status_code,
                    latency=latency,
                    retry_after=response.headers.get("retry-after"),
                )
                return await _settle_response(
                    ctx, job, record, response, archive, conditional=bool(headers), latency=latency
                )
        finally:
            await admission.ended(record.url)
    except BlockedAddress as exc:  # the address policy's rule, not the page's failure: it was not fetched
        return page_outcomes.excluded(
            ctx, record if exc.redirects else page_outcomes.untried(record), exc.explain(record.url)
        )
    except Busy as busy:  # (its turn, its document's store): the page alone goes back, its try taken back
        return give_back.page_retry(ctx, record.url, busy)
    except FetchError as exc:
        if exc.retryable:  # (a refusal by the guard or a bad URL never reached the host: not observed)
            admission.observe(record.url, status=None, latency=0.0)
            return page_outcomes.retry_or_fail(ctx, record, exc.explain(record.url))
        return page_outcomes.failed(ctx, record, exc.explain(record.url), Fetched(FetchResult.GONE))


async def _settle_response(
    ctx: StepContext,
    job: JobRecord,
    record: SitemapURL,
    response: FetchResponse,
    archive: WarcBatch | None,
    *,
    conditional: bool,
    latency: float,
) -> PageOutcome | PageRetry:
    code = response.status_code
    record = record.model_copy(
        update={
            "http_status": code,
            "content_type": response.content_type,
            "final_url": response.url if normalize(response.url) != record.url else None,
            "fetch_time": ctx.clock(),
            "fetch_ms": round(latency * 1000),
            "etag": response.headers.get("etag"),
            "http_last_modified": response.headers.get("last-modified"),
        }
    )
    outcome = classify_status(code)
    if outcome is FetchResult.RETRY:
        if is_transient(code):
            asked = parse_retry_after(response.headers.get("retry-after"))
            later = page_outcomes.retry_or_fail(ctx, record, http_error(code), retry_after=asked)
            # Archived whether or not it is the last try: an archive keeps every answer a host gave.
            said = (
                later.record
                if isinstance(later, PageOutcome)
                else record.model_copy(update={"error_message": later.error_message})
            )
            await _archive_answer(job, said, response, archive)
            return later
        # A 403: final for this job, and one more retry toward gone for the crawls to come (Nutch).
        failed = page_outcomes.failed(ctx, record, http_error(code), Fetched(FetchResult.RETRY, http_status=code))
        await _archive_answer(job, failed.record, response, archive)
        return failed
    validators = {"etag": record.etag, "http_last_modified": record.http_last_modified, "lastmod": record.last_modified}
    known = record.known
    if outcome is FetchResult.NOTMODIFIED:
        if not conditional:
            reason = f"{http_error(code)} to a request that was not conditional"
            return page_outcomes.failed(ctx, record, reason, Fetched(FetchResult.RETRY, http_status=code))
        done = page_outcomes.completed(ctx, record, Fetched(FetchResult.NOTMODIFIED, http_status=code, **validators))
        if archive is not None and known is not None and known.warc is not None:
            await page_archive.add_with_hops(archive, job, done.record, response, revisits=known.warc)
        return done
    if outcome is not FetchResult.SUCCESS:
        reason = http_error(code)
        if outcome in (FetchResult.REDIR_PERM, FetchResult.REDIR_TEMP):
            reason += " redirect without a usable Location"
        failed = page_outcomes.failed(ctx, record, reason, Fetched(FetchResult.GONE, http_status=code))
        await _archive_answer(job, failed.record, response, archive)
        return failed

    digest = hashlib.sha256()
    size = 0
    raw = page_archive.RawBody() if archive is not None else None
    response.raw_sink = raw
    with raw.file if raw is not None else tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as body:
        async for chunk in response.iter_bytes():
            if raw is None:
                body.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        if response.truncated:
            return page_outcomes.failed(
                ctx, record, f"page {response.truncated}", Fetched(FetchResult.GONE, http_status=code)
            )
        if not response.complete:
            return page_outcomes.retry_or_fail(ctx, record, "the body was cut off")
        signature = digest.hexdigest()
        kept = {"signature": signature, "content_type": response.content_type, "size": size, **validators}
        if raw is not None and archive is not None:
            # Kept as WARC: a payload identical to the stored one is a revisit of its record, else a response.
            same = page_archive.identical(known.warc if known is not None else None, raw)
            done = page_outcomes.completed(
                ctx, record, Fetched(FetchResult.SUCCESS, http_status=code, warc=same, **kept)
            )
            await page_archive.add_with_hops(archive, job, done.record, response, body=raw, revisits=same)
            return done
        if known is not None and known.signature == signature and known.document_key:
            key = known.document_key  # the same content: stored already, not again
        else:
            key = page_key(job.request.origin, record.url, signature)
            body.seek(0)
            metadata = {"url": record.url, "job-id": job.job_id, "status": str(code)}
            if ctx.documents.writes_inline:  # a local file: quicker than a thread hand-off
                ctx.documents.put(key, body, content_type=response.content_type, metadata=metadata)
            else:
                # In a thread: a store's call (an S3 PUT) must not hold up the pages of the batch waiting for
                # their turn at the host, which would then start late and crowd the turns after theirs.
                await asyncio.to_thread(
                    ctx.documents.put, key, body, content_type=response.content_type, metadata=metadata
                )
    return page_outcomes.completed(
        ctx, record, Fetched(FetchResult.SUCCESS, http_status=code, document_key=key, **kept)
    )


async def _archive_answer(
    job: JobRecord, record: SitemapURL, response: FetchResponse, archive: WarcBatch | None
) -> None:
    """An error answer (403, 404, 410, a redirect that cannot be followed, and each 429 or 5xx, retried or
    not) is archived whole, as an archive keeps every answer (the error page as sent, bounded like a page),
    with ``record`` (its error message) as its metadata. What becomes of the page does not depend on it: an
    error page that breaks off or is too big is left out of the archive, not retried."""
    if archive is None:
        return
    raw = page_archive.RawBody()
    response.raw_sink = raw
    try:
        async for _ in response.iter_bytes():
            pass
        if response.complete:
            await page_archive.add_with_hops(archive, job, record, response, body=raw)
    except FetchError as exc:
        log.info("an error page was not archived", extra={"url": record.url, "error": str(exc)})
    finally:
        raw.close()
