"""Admission: which pages of a batch may be requested now, and when, by the per-host gate.

A batch asks the gate once per host as it arrives, before its pages are claimed (``arrive``): the pages whose
turns come within the horizon are claimed and fetched now, at their turns; the gate books the turns of the
next ones up to ``GateRules.book_ahead`` and they go back to the queue unclaimed, together, to come back just
before their turns and take them (a batch waits once, in the queue, however busy its host); the rest, for
which the bookings leave no room, take places in the host's waiting line and come back unclaimed shortly
before the pace reaches them, ahead of the batches that joined the line after them (as the priority lane's
batches are). With every slot of the host held, the batch asks again, whole, as the gate says (slots free as
other batches end), within the horizon, so that it is still granted, booked or lined as one; past the horizon
its pages wait for slots in the container each on its own (``Turns.given``). Within a host the batch's pages
take their turns by priority, highest first (FIFO within a priority: the batch's order). Before the gate,
robots.txt says which pages may be asked for at all (the job's discovery reading of it, taken when none is
held: ``robots_copy``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from collections.abc import Mapping

from msgspec import Struct, field

from harvester.model.messages import PageTask
from harvester.model.records import JobRecord
from harvester.patience import PATIENCE
from harvester.pipeline import robots_copy
from harvester.pipeline.context import StepContext
from harvester.pipeline.ranking import PRIORITY_LANE
from harvester.politeness.gate import RECHECK_SECONDS
from harvester.politeness.turns import Turns
from harvester.urls import host_of

log = logging.getLogger(__name__)


class Admitted(Struct):
    """A batch's pages as the gate took them: ``turns`` for those fetched now (claimed next), and those sent
    back unclaimed, by URL, with when each comes back, the turn booked for it (None: none) and its place in
    the host's waiting line (None: none)."""

    turns: Turns = field(default_factory=Turns)
    back: dict[str, tuple[float, float | None, float | None]] = field(default_factory=dict)


async def arrive(ctx: StepContext, job: JobRecord, tasks: Mapping[str, PageTask]) -> Admitted:
    """Asks the gate for turns for a batch's pages (URL: task) robots.txt allows, one move per host (the
    others are settled without a request): see the module's docstring."""
    admitted = Admitted()
    if not job.request.fetch_pages:
        return admitted
    robots_copy.adopt(ctx, job)  # (the job's discovery reading of its site's robots.txt, when none is held)
    by_host, spacing = await _by_host(ctx, job, {url: task.priority for url, task in tasks.items()})
    horizon, early = ctx.gate.rules.horizon, ctx.gate.rules.horizon * 0.9
    lead = ctx.settings.claim_lead_seconds
    for host, urls in by_host.items():
        now = time.time()
        # (back from the host's waiting line, or of the priority lane: ahead of those that joined the line since)
        ahead = any(tasks[u].place is not None or tasks[u].rank > PRIORITY_LANE for u in urls)
        turns = [tasks[u].turn for u in urls]
        arrival = ctx.gate.arrive(host, turns, spacing=spacing[host], now=now, lead=lead, ahead=ahead)
        # (every slot held: the batch asks again, whole, as slots free, within the horizon; a slot frees when
        # a batch ends, so it asks at least every RECHECK_SECONDS, and ahead of its first turn by the lead)
        deadline = now + horizon
        while arrival.every_slot_held and (arrival.grant.later or now) <= deadline and not PATIENCE.out_of_time():
            until = min((arrival.grant.later or now) - lead, now + RECHECK_SECONDS)
            await asyncio.sleep(max(0.01, until - time.time()))
            now = time.time()
            arrival = ctx.gate.arrive(host, turns, spacing=spacing[host], now=now, lead=lead, ahead=ahead)
        grant = arrival.grant
        if arrival.every_slot_held and (grant.later or now) <= now + horizon:  # (still: each page waits for one)
            admitted.turns.given(host, urls, grant, spacing[host], horizon=horizon)
            log.debug("gate %s: every slot held; %d pages wait for one", host, len(urls), extra={"host": host})
            continue
        granted = set(grant.starts)
        if granted:
            admitted.turns.grants[host] = (grant, spacing[host])
        booked = [t for t in arrival.turns if t is not None and t not in granted]
        # (the batch's booked pages come back together, shortly before the first of their turns)
        back = min(booked, default=now) - early
        for url, turn in zip(urls, arrival.turns, strict=True):
            if turn is None:  # (a place in the host's waiting line: back shortly before the pace reaches it)
                place = arrival.later or now
                admitted.back[url] = (max(now, place - early), None, place)
            elif turn in granted:
                admitted.turns.starts[url] = turn
            else:
                admitted.back[url] = (back, turn, None)
        if log.isEnabledFor(logging.DEBUG):
            taking = len([u for u in urls if u in admitted.turns.starts])
            log.debug(
                "gate %s: %d of %d pages take their turns now, %d booked later, %d in its waiting line"
                " (spacing %.2f s)",
                host,
                taking,
                len(urls),
                len(booked),
                sum(1 for t in arrival.turns if t is None),
                spacing[host],
                extra={"host": host, "pages": len(urls), "now": taking, "booked": len(booked)},
            )
    return admitted


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
