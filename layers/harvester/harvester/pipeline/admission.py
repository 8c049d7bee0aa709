"""Admission: which claimed pages of a batch may be requested now, and when, by the per-host gate.

A page the gate has no turn for within its horizon goes back to pending and to the queue, delayed to its
host's next free turn, without a request (its claim's try is taken back). Within a host the batch's pages
take their turns by priority, highest first (FIFO within a priority: the batch's order).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from harvester.fetch import parse_retry_after
from harvester.model.records import JobRecord, SitemapURL
from harvester.pipeline.context import StepContext
from harvester.politeness import Grant, HostReport
from harvester.politeness.gate import LATE_MAX, RECHECK_SECONDS
from harvester.urls import host_of

#: Answers that slow the whole host down.
THROTTLING = frozenset({429, 503})
#: Turns a request takes before it gives up and goes back to the queue.
_TURNS = 5


@dataclass
class Admission:
    """What the gate allowed of a batch: a start time per admitted URL (None: settled without a request, as
    a page robots.txt forbids), the deferred URLs with when to try them, and the grants to give back."""

    starts: dict[str, float | None] = field(default_factory=dict)
    deferred: dict[str, float] = field(default_factory=dict)
    grants: dict[str, tuple[Grant, float]] = field(default_factory=dict)
    reports: dict[str, HostReport] = field(default_factory=lambda: defaultdict(HostReport))

    async def turn(self, ctx: StepContext, url: str) -> bool:
        """Waits for the URL's start (at most the gate's horizon, which granted it). A turn missed (the
        worker was busy when it came) is taken again; False when the gate has none left within the horizon
        (then ``deferred`` says when to try)."""
        if url in self.deferred:
            return False
        for _ in range(_TURNS):
            start = self.starts.get(url)
            if start is None:
                return True
            wait = start - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            now = time.time()
            if now - start <= LATE_MAX:
                return True
            host = host_of(url)
            grant, spacing = self.grants[host]
            again = ctx.gate.acquire(host, 1, spacing=spacing, now=now, token=grant.token)
            if not again.starts:
                self.deferred[url] = again.later or now + RECHECK_SECONDS
                return False
            self.starts[url] = again.starts[0]
        self.deferred[url] = time.time() + RECHECK_SECONDS
        return False

    def observe(self, url: str, *, status: int | None, latency: float, retry_after: str | None = None) -> None:
        """One request's answer (``status`` None: no answer, the request failed) for its host's slow-down."""
        report = self.reports[host_of(url)]
        report.sent += 1
        if status in THROTTLING:
            report.throttled += 1
            report.retry_after = max(report.retry_after, parse_retry_after(retry_after) or 0.0)
        elif status is None or status == 408 or status >= 500:
            report.errors += 1
        else:
            report.latency += latency

    def release(self, ctx: StepContext) -> None:
        """Gives every grant back with what its requests came to (unused slots included)."""
        now = time.time()
        for host, (grant, spacing) in self.grants.items():
            report = self.reports.get(host) or HostReport()
            report.granted_at = grant.at
            ctx.gate.release(host, grant, report, spacing=spacing, now=now)
        self.grants.clear()


async def admit(ctx: StepContext, job: JobRecord, pages: Sequence[SitemapURL]) -> Admission:
    """Asks the gate for a turn for each claimed page robots.txt allows (the others are settled without a
    request); those it has no turn for within its horizon are ``deferred``, with when to ask again."""
    admission = Admission()
    if not job.request.fetch_pages:
        return admission
    priority = {page.url: page.priority for page in pages}
    by_host: dict[str, list[str]] = defaultdict(list)
    spacing: dict[str, float] = defaultdict(float)
    for url in priority:
        if not await ctx.robots.allowed(url):
            admission.starts[url] = None
            continue
        host = host_of(url)
        by_host[host].append(url)
        # The job's rate_limit_delay, or the site's Crawl-delay when it asks for more (bounded).
        crawl_delay = min(await ctx.robots.crawl_delay(url) or 0.0, ctx.settings.crawl_delay_max)
        spacing[host] = max(spacing[host], job.request.rate_limit_delay, crawl_delay)
    for host, host_urls in by_host.items():
        host_urls.sort(key=lambda u: -priority[u])  # stable: FIFO within a priority
        grant = ctx.gate.acquire(host, len(host_urls), spacing=spacing[host], now=time.time())
        if grant.starts:
            admission.grants[host] = (grant, spacing[host])
        admission.starts.update(zip(host_urls, grant.starts, strict=False))
        if grant.later is not None:
            admission.deferred.update(dict.fromkeys(host_urls[len(grant.starts) :], grant.later))
    return admission


@asynccontextmanager
async def turn(ctx: StepContext, url: str, spacing: float) -> AsyncIterator[Admission]:
    """One request's turn at its host, waited for (a sitemap is read by the worker that claimed it, and there
    are few of them): the gate's slot is held until the block ends, and what the block observed is
    reported with it. (A sitemap's fetcher retries within the turn, spaced by its own back-off.)"""
    host = host_of(url)
    admission = Admission()
    try:
        while True:
            grant = ctx.gate.acquire(host, 1, spacing=spacing, now=time.time())
            if grant.starts:
                admission.starts[url] = grant.starts[0]
                admission.grants[host] = (grant, spacing)
                if await admission.turn(ctx, url):
                    break
                admission.release(ctx)
                grant = Grant(grant.token, (), admission.deferred.pop(url))
            await asyncio.sleep(max(0.01, min((grant.later or 0.0) - time.time(), ctx.gate.rules.horizon)))
        yield admission
    finally:
        admission.release(ctx)


def ceil_tenth(seconds: float) -> float:
    """A queue delay: never sooner than asked, in tenths of a second, between 0 and SQS's 900."""
    return math.ceil(max(0.0, min(900.0, seconds)) * 10) / 10
