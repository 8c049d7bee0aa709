"""Admission: which claimed pages of a batch may be requested now, and when, by the per-host gate.

A page its host's pace has no turn for within the gate's horizon goes back to the queue before it is claimed
(``unpaced``); one the gate then has no turn for goes back to pending and to the queue without a request (its
claim's try is taken back), unless only a slot was missing and the gate's next turn is within the horizon:
then it asks again in the container (``Turns.given``). Each is delayed to a turn of its own
(politeness/gate.py). Within a host the batch's pages take their turns by priority, highest first (FIFO
within a priority: the batch's order).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from harvester.model.records import JobRecord, SitemapURL
from harvester.pipeline.context import StepContext
from harvester.politeness.turns import Turns
from harvester.urls import host_of


async def admit(ctx: StepContext, job: JobRecord, pages: Sequence[SitemapURL]) -> Turns:
    """Asks the gate for a turn for each claimed page robots.txt allows (the others are settled without a
    request); those it has no turn for within its horizon are ``deferred``, with when to ask again."""
    admission = Turns()
    if not job.request.fetch_pages:
        return admission
    by_host, spacing = await _by_host(ctx, job, {page.url: page.priority for page in pages})
    for host, host_urls in by_host.items():
        grant = ctx.gate.acquire(host, len(host_urls), spacing=spacing[host], now=time.time())
        admission.given(host, host_urls, grant, spacing[host], horizon=ctx.gate.rules.horizon)
    return admission


async def unpaced(ctx: StepContext, job: JobRecord, priority: Mapping[str, float]) -> dict[str, float]:
    """The pages of a batch (URL: priority) their host's pace has no turn for within the horizon, with when
    each should ask again: they go back to the queue before they are claimed. A claimed page's wait would
    cost a claim and its release (4 write units, 2 requests), and it would come back with the others at the
    next free turn."""
    if not job.request.fetch_pages:
        return {}
    by_host, spacing = await _by_host(ctx, job, priority)
    later: dict[str, float] = {}
    for host, host_urls in by_host.items():
        ahead = ctx.gate.paced(host, len(host_urls), spacing=spacing[host], now=time.time())
        waiting = host_urls[len(ahead.starts) :]
        later.update(zip(waiting, ahead.asks(len(waiting)), strict=True))
    return later


async def _by_host(
    ctx: StepContext, job: JobRecord, priority: Mapping[str, float]
) -> tuple[dict[str, list[str]], dict[str, float]]:
    """The URLs robots.txt allows, by host, highest priority first (FIFO within a priority), and each host's
    spacing: the job's rate_limit_delay, or the site's Crawl-delay when it asks for more (bounded)."""
    by_host: dict[str, list[str]] = defaultdict(list)
    spacing: dict[str, float] = defaultdict(float)
    for url in priority:
        if not await ctx.robots.allowed(url):
            continue  # (settled without a request, and without a turn)
        host = host_of(url)
        by_host[host].append(url)
        crawl_delay = min(await ctx.robots.crawl_delay(url) or 0.0, ctx.settings.crawl_delay_max)
        spacing[host] = max(spacing[host], job.request.rate_limit_delay, crawl_delay)
    for host_urls in by_host.values():
        host_urls.sort(key=lambda u: -priority[u])  # stable: FIFO within a priority
    return by_host, spacing


def queue_delay(seconds: float) -> float:
    """A queue delay: never sooner than asked, in hundredths of a second (the local queue keeps them; a
    host's turns may be 0.15 s apart, and tenths would make that 0.2), between 0 and SQS's 900 (SQS rounds up to
    whole seconds)."""
    return math.ceil(max(0.0, min(900.0, seconds)) * 100) / 100
