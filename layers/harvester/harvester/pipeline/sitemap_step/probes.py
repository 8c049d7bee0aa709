"""The well-known paths the site's last job found absent, asked by robots.txt's task: one still not there ends
there.

A job looks for sitemaps at every well-known location robots.txt did not declare (discovery.KNOWN_PATHS, as
USP does), and on most sites all but one or two answer 404, cycle after cycle. Each as a task of its own would
cost, every cycle, a claim, a turn at the host's gate, a finish and a look at whether the job is done: on AWS
about ten requests a path, most of an unchanged small site's cycle. So the paths the site's latest job that
probed them found absent (``SiteCrawl.absent_paths``, noted at its end) are asked by robots.txt's task itself,
under one grant of the host's gate (their requests spaced and bounded as a page batch's are), each with one
GET whose body is not read. A path answering 401, 403, 404 or 410 is registered ended, absent, as its own task
would have ended it; any other answer (the path has a sitemap now, a redirect, a server error) or none, or no
turn at the gate soon, registers it pending, and its own task reads it as every sitemap is read (so a path
that comes back is requested twice in the job that finds it). The other paths (a site's first job, a path
that was there last time) are tasks of their own, read once.
"""

from __future__ import annotations

import asyncio
import time

from harvester.crawldb.crawl_state import http_error
from harvester.fetch import FetchError
from harvester.limits import SITEMAP_MAX_BYTES
from harvester.model import accounting
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.model.state import SitemapOutcome
from harvester.pipeline.context import StepContext
from harvester.politeness.turns import Turns
from harvester.urls import host_of, normalize

#: What a well-known path (or robots.txt) answers when it is simply not there: "no sitemap here".
ABSENT_STATUSES = frozenset({401, 403, 404, 410})


async def asked(ctx: StepContext, job: JobRecord, probes: list[SitemapRecord]) -> list[SitemapRecord]:
    """The probes, those the site's last job found absent asked now, each ended absent when it still is; the
    others as they were (pending, for their tasks)."""
    site = None if ctx.ephemeral or not probes else ctx.crawldb.get_site(job.request.origin)
    absent = set(site.absent_paths) if site is not None else set()
    urls = [p.url for p in probes if p.url in absent]
    if not urls:
        return probes
    host = host_of(urls[0])
    spacing = job.request.rate_limit_delay
    turns = Turns()
    grant = ctx.gate.acquire(host, len(urls), spacing=spacing, now=time.time())
    turns.given(host, urls, grant, spacing, horizon=ctx.gate.rules.horizon)
    try:
        probed = await asyncio.gather(*(_ask(ctx, turns, p) for p in probes if p.url in absent))
    finally:
        turns.release(ctx.gate)
    answered = {record.url: record for record in probed}
    return [answered.get(p.url, p) for p in probes]


async def _ask(ctx: StepContext, turns: Turns, probe: SitemapRecord) -> SitemapRecord:
    url = probe.url
    if not await turns.turn(ctx.gate, url):
        return probe
    sent = time.monotonic()
    try:
        async with ctx.fetcher.open(url, max_bytes=SITEMAP_MAX_BYTES, retries=0) as response:
            status, final_url = response.status_code, normalize(response.url)
            retry_after = response.headers.get("retry-after")
            turns.observe(url, status=status, latency=time.monotonic() - sent, retry_after=retry_after)
    except FetchError as exc:  # (its own task asks again, and says why when it cannot)
        if exc.retryable:
            turns.observe(url, status=None, latency=0.0)
        return probe
    finally:
        await turns.ended(url)
    if status not in ABSENT_STATUSES:
        return probe
    outcome = SitemapOutcome(
        status=SitemapStatus.ABSENT,
        error_message=http_error(status),
        http_status=status,
        final_url=final_url,
        attempts=1,
        finished_at=ctx.clock(),
    )
    return accounting.finished_sitemap(probe, outcome)
