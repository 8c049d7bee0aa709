"""Page tasks: claim the pages of a batch, fetch them concurrently, store them, settle each exactly once.

A page is claimed before it is fetched (so a duplicate delivery, or a second worker, leaves it alone),
and its outcome is written together with the job's counters, only if the claim is still ours. A
transient failure (429, 5xx, timeouts) sends the page back to pending with a delayed task, a bounded
number of times (the crawl-state machine's retry counter); anything else is final.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from harvester.crawl_state import CrawlUpdate, FetchResult, classify_status, http_error, transition
from harvester.fetch import FetchError, FetchResponse, is_transient
from harvester.messages import PageTask
from harvester.ports import Lease, PageOutcome, PageRetry
from harvester.records import CrawlState, JobRecord, SitemapURL, UrlStatus
from harvester.urls import normalize

if TYPE_CHECKING:
    from harvester.engine import Engine

log = logging.getLogger(__name__)

SPOOL_IN_MEMORY = 1024 * 1024


@dataclass
class PageBatch:
    """What a batch of page tasks came to (for logs, metrics and the local progress display)."""

    completed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already final, or claimed elsewhere


async def process_pages(engine: Engine, tasks: Sequence[PageTask]) -> PageBatch:
    result = PageBatch()
    by_job: dict[str, list[PageTask]] = defaultdict(list)
    for task in tasks:
        by_job[task.job_id].append(task)
    for job_id, job_tasks in by_job.items():
        job = engine.job(job_id)
        if job is None:
            log.warning("page tasks for an unknown job dropped", extra={"job_id": job_id})
            result.skipped.extend(t.url for t in job_tasks)
            continue
        await _process_job_pages(engine, job, job_tasks, result)
    return result


async def _process_job_pages(engine: Engine, job: JobRecord, tasks: Sequence[PageTask], result: PageBatch) -> None:
    store, settings = engine.store, engine.settings
    now = engine.clock()
    lease = Lease(token=uuid.uuid4().hex, until=now.timestamp() + settings.page_lease_seconds)
    urls = list(dict.fromkeys(normalize(t.url) for t in tasks))
    claimed = store.claim_pages(job.job_id, urls, lease, now=now.timestamp())
    claimed_urls = {r.url for r in claimed}
    result.skipped.extend(u for u in urls if u not in claimed_urls)
    if not claimed:
        return
    settled = await asyncio.gather(*(_settle(engine, job, record) for record in claimed))
    outcomes = [s for s in settled if isinstance(s, PageOutcome)]
    retries = [s for s in settled if isinstance(s, PageRetry)]
    applied = set(store.finish_pages(job.job_id, outcomes, lease))
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
        by_delay: dict[int, list[PageTask]] = defaultdict(list)
        tasks_by_url = {normalize(t.url): t for t in tasks}
        for retry in retries:
            if retry.url not in retried:
                continue
            delay = max(0, min(900, int((retry.not_before - engine.clock()).total_seconds())))
            base = tasks_by_url[retry.url]
            by_delay[delay].append(base.model_copy(update={"url": retry.url, "attempt": retry.retries}))
            result.retried.append(retry.url)
        for delay, delayed in by_delay.items():
            engine.queue.send(delayed, delay_seconds=delay)
    engine.maybe_complete(job.job_id)


async def _settle(engine: Engine, job: JobRecord, record: SitemapURL) -> PageOutcome | PageRetry:
    """Fetches one claimed page and decides what becomes of it. Never raises for a fetch problem."""
    settings = engine.settings
    if record.attempts > settings.max_attempts:
        return _failed(engine, record, f"gave up after {record.attempts - 1} deliveries without an outcome")
    if not job.request.fetch_pages:
        return PageOutcome(record.model_copy(update={"status": UrlStatus.COMPLETED}))
    try:
        if not await engine.robots.allowed(record.url):
            robots = await engine.robots.entry(record.url)
            if robots.disallow_all:  # RFC 9309: robots.txt unreachable, so nothing may be fetched *for now*
                return _retry_or_fail(engine, record, f"robots.txt unreachable ({robots.status})")
            return _failed(engine, record, "forbidden by robots.txt", crawl_state=CrawlState.GONE)
        # The job's rate_limit_delay, or the site's Crawl-delay when it asks for more (bounded).
        crawl_delay = min(await engine.robots.crawl_delay(record.url) or 0.0, settings.crawl_delay_max)
        await engine.pacer.wait(record.url, max(job.request.rate_limit_delay, crawl_delay))
        headers = {}
        if record.etag:
            headers["If-None-Match"] = record.etag
        if record.last_modified_header:
            headers["If-Modified-Since"] = record.last_modified_header
        async with engine.fetcher.open(record.url, max_bytes=settings.page_max_bytes, headers=headers) as response:
            return await _settle_response(engine, job, record, response)
    except FetchError as exc:
        if exc.retryable:
            return _retry_or_fail(engine, record, exc.explain(record.url))
        return _failed(engine, record, exc.explain(record.url), crawl_state=CrawlState.GONE)


async def _settle_response(
    engine: Engine, job: JobRecord, record: SitemapURL, response: FetchResponse
) -> PageOutcome | PageRetry:
    now = engine.clock()
    fetched = {
        "http_status": response.status_code,
        "content_type": response.content_type,
        "final_url": response.url if normalize(response.url) != record.url else None,
        "fetch_time": now,
        "etag": response.headers.get("etag"),
        "last_modified_header": response.headers.get("last-modified"),
    }
    outcome = classify_status(response.status_code)
    if outcome is FetchResult.RETRY:
        if is_transient(response.status_code):
            return _retry_or_fail(engine, record.model_copy(update=fetched), http_error(response.status_code))
        # A 403: final for this job, while the crawl state keeps Nutch's retry for the crawls to come.
        return _failed(engine, record.model_copy(update=fetched), http_error(response.status_code), result=outcome)
    if outcome is FetchResult.NOTMODIFIED:
        update = transition(outcome, now=now, retries=record.retries, changefreq=record.change_frequency)
        return _completed(record, fetched, update.state, update.next_fetch_time, now)
    if outcome is not FetchResult.SUCCESS:
        reason = http_error(response.status_code)
        if outcome in (FetchResult.REDIR_PERM, FetchResult.REDIR_TEMP):
            reason += " redirect without a usable Location"
        return _failed(engine, record.model_copy(update=fetched), reason, crawl_state=CrawlState.GONE)

    digest = hashlib.sha256()
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as body:
        async for chunk in response.iter_bytes():
            body.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        if response.truncated:
            return _failed(
                engine,
                record.model_copy(update=fetched),
                f"page {response.truncated}",
                crawl_state=CrawlState.GONE,
            )
        if not response.complete:
            return _retry_or_fail(engine, record.model_copy(update=fetched), "the body was cut off")
        body.seek(0)
        key = f"jobs/{job.job_id}/pages/{record.key}"
        engine.documents.put(
            key,
            body,
            content_type=response.content_type,
            metadata={"url": record.url, "job-id": job.job_id, "status": str(response.status_code)},
        )
    signature = digest.hexdigest()
    update = transition(
        outcome,
        now=now,
        retries=record.retries,
        previous_signature=record.signature,
        signature=signature,
        changefreq=record.change_frequency,
    )
    fetched |= {"size": size, "signature": signature, "document_key": key}
    return _completed(record, fetched, update.state, update.next_fetch_time, now)


def _completed(
    record: SitemapURL, fetched: dict[str, object], state: CrawlState, next_fetch: datetime, now: datetime
) -> PageOutcome:
    return PageOutcome(
        record.model_copy(
            update=fetched
            | {
                "status": UrlStatus.COMPLETED,
                "error_message": None,
                "crawl_state": state,
                "retries": 0,
                "next_fetch_time": next_fetch,
                "finished_at": now,
            }
        )
    )


def _failed(
    engine: Engine,
    record: SitemapURL,
    reason: str,
    *,
    crawl_state: CrawlState | None = None,
    result: FetchResult = FetchResult.GONE,
) -> PageOutcome:
    now = engine.clock()
    update = _next_state(engine, record, result, now)
    return PageOutcome(
        record.model_copy(
            update={
                "status": UrlStatus.FAILED,
                "error_message": reason,
                "crawl_state": crawl_state or update.state,
                "retries": update.retries,
                "next_fetch_time": update.next_fetch_time,
                "finished_at": now,
            }
        )
    )


def _retry_or_fail(engine: Engine, record: SitemapURL, reason: str) -> PageOutcome | PageRetry:
    now = engine.clock()
    update = _next_state(engine, record, FetchResult.RETRY, now)
    if update.state is CrawlState.UNFETCHED:
        delay_max = timedelta(seconds=engine.settings.retry_backoff_max_seconds)
        not_before = min(update.next_fetch_time, now + delay_max)
        return PageRetry(url=record.url, retries=update.retries, error_message=reason, not_before=not_before)
    return _failed(engine, record, f"{reason} (gave up after {update.retries} attempts)", result=FetchResult.RETRY)


def _next_state(engine: Engine, record: SitemapURL, result: FetchResult, now: datetime) -> CrawlUpdate:
    """The crawl-state transition of a failed fetch, with the engine's retry bounds."""
    return transition(
        result,
        now=now,
        retries=record.retries,
        changefreq=record.change_frequency,
        retry_max=engine.settings.retry_max,
        retry_backoff=timedelta(seconds=engine.settings.retry_backoff_seconds),
    )
