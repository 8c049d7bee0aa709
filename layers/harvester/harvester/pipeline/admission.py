"""Admission: which claimed pages of a batch may be requested now, and when, by the per-host gate.

A page the gate has no turn for within its horizon goes back to pending and to the queue, delayed to its
host's next free turn, without a request (its claim's try is taken back). Within a host the batch's pages
take their turns by priority, highest first (FIFO within a priority: the batch's order).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence

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
    priority = {page.url: page.priority for page in pages}
    by_host: dict[str, list[str]] = defaultdict(list)
    spacing: dict[str, float] = defaultdict(float)
    for url in priority:
        if not await ctx.robots.allowed(url):
            continue  # (settled without a request, and without a turn)
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


def queue_delay(seconds: float) -> float:
    """A queue delay: never sooner than asked, in hundredths of a second (the local queue keeps them; a
    host's turns may be 0.15 s apart, and tenths made that 0.2), between 0 and SQS's 900 (SQS rounds up to
    whole seconds)."""
    return math.ceil(max(0.0, min(900.0, seconds)) * 100) / 100
