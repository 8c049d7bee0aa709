"""The well-known paths, asked by robots.txt's task: a path that is not there ends there.

A job looks for sitemaps at every well-known location robots.txt did not declare (discovery.KNOWN_PATHS, as
USP does), and on most sites all but one or two answer 404. Each as a task of its own would cost, every
cycle, a claim, a turn at the host's gate, a finish and a look at whether the job is done: on AWS about ten
requests a path, most of an unchanged small site's cycle. So robots.txt's task asks them itself, under one
grant of the host's gate (its requests spaced and bounded as a page batch's are), each with one GET whose
body is not read. A path answering 401, 403, 404 or 410 is registered ended, absent, as its own task would
have ended it; any other answer (a sitemap, a redirect, a 304, a server error) or none, or no turn at the gate
soon, registers it pending, and its own task reads it as every sitemap is read. A path that is there is so
requested twice, once here and once to be read (conditionally: a sitemap unchanged answers 304 both times).
"""

from __future__ import annotations

import asyncio
import time

from harvester.crawldb.crawl_state import http_error
from harvester.fetch import FetchError
from harvester.limits import SITEMAP_MAX_BYTES
from harvester.model import accounting
from harvester.model.crawl import SitemapCrawl
from harvester.model.messages import Output
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.model.state import SitemapOutcome
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step import remembered
from harvester.politeness.turns import Turns
from harvester.urls import host_of, normalize

#: What a well-known path (or robots.txt) answers when it is simply not there: "no sitemap here".
ABSENT_STATUSES = frozenset({401, 403, 404, 410})


async def asked(ctx: StepContext, job: JobRecord, probes: list[SitemapRecord]) -> list[SitemapRecord]:
    """The probes, each ended absent when its path answered so, else as it was (pending, for its task)."""
    if not probes:
        return probes
    site = job.request.origin
    urls = [p.url for p in probes]
    priors = {} if ctx.ephemeral else ctx.crawldb.get_sitemaps(site, urls)
    host = host_of(urls[0])
    spacing = job.request.rate_limit_delay
    turns = Turns()
    turns.given(
        host,
        urls,
        ctx.gate.acquire(host, len(urls), spacing=spacing, now=time.time()),
        spacing,
        horizon=ctx.gate.rules.horizon,
    )
    try:
        return list(await asyncio.gather(*(_ask(ctx, job, turns, p, priors.get(p.url)) for p in probes)))
    finally:
        turns.release(ctx.gate)


async def _ask(
    ctx: StepContext, job: JobRecord, turns: Turns, probe: SitemapRecord, prior: SitemapCrawl | None
) -> SitemapRecord:
    url = probe.url
    if not await turns.turn(ctx.gate, url):
        return probe
    headers = remembered.validators(prior, warc=job.request.output is Output.WARC)
    sent = time.monotonic()
    try:
        async with ctx.fetcher.open(url, max_bytes=SITEMAP_MAX_BYTES, headers=headers, retries=0) as response:
            status, final_url = response.status_code, normalize(response.url)
            turns.observe(
                url, status=status, latency=time.monotonic() - sent, retry_after=response.headers.get("retry-after")
            )
    except FetchError as exc:  # (its own task asks again, and says why when it cannot)
        if exc.retryable:
            turns.observe(url, status=None, latency=0.0)
        return probe
    finally:
        await turns.ended(url)
    if status not in ABSENT_STATUSES:
        return probe
    now = ctx.clock()
    if prior is not None and prior.absent_since is None:
        ctx.crawldb.put_sitemap(job.request.origin, prior.model_copy(update={"absent_since": now}))
    outcome = SitemapOutcome(
        status=SitemapStatus.ABSENT,
        error_message=http_error(status),
        http_status=status,
        final_url=final_url,
        attempts=1,
        finished_at=now,
    )
    return accounting.finished_sitemap(probe, outcome)
