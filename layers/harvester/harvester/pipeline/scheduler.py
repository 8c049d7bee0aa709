"""The scheduler's tick: start the jobs of the scheduled sites that are due, and resume or finish stalled jobs.

A due schedule's job is sent first, then the schedule is moved to its next slot (``ScheduledSites.advance``):
a tick that dies between the two sends the same job again at the next tick, under the same id (its due
time's: ``ScheduledSite.job_id``), which the job's start records once. Several ticks at once (a schedule
event delivered twice) send the same ids; one of them moves the schedule. A schedule whose slots were missed
(the scheduler stopped for a while) starts one job, named by the slot it was due at, and moves on to the
first slot after now.

A tick starts at most ``limit`` jobs (the registry's index gives the due schedules earliest first): what is
left is due at the next tick, so a tick's time and requests follow the schedules due, never the number
registered. It then looks after the running jobs (``recovery.resume``) while its invocation has time left
(``time_left``, past ``TICK_RESERVE``), from a place in their list drawn from the tick's time: a tick that
cannot look at them all leaves the rest to the next ticks, which begin elsewhere (``start_place``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime

from msgspec import Struct, field

from harvester.model.messages import Unprocessable
from harvester.pipeline.context import StepContext
from harvester.pipeline.recovery import Resumed, resume
from harvester.ports import ScheduledSites

log = logging.getLogger(__name__)

#: The most jobs one tick starts (sent ten a request; the rest wait for the next tick).
MOST_STARTED = 2000
#: Seconds of its invocation a tick keeps when it looks after running jobs: a job's resume is begun with more
#: than this left, and its reading of open pages stops at ``recovery.RESUME_RESERVE`` left (the next resume
#: goes on from there), so a resume begun has time to send some pages, store where it stopped and look at
#: the job's end.
TICK_RESERVE = 60.0


class Tick(Struct):
    started: list[str] = field(default_factory=list)
    resumed: list[Resumed] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Whether more schedules were due than the tick starts (``MOST_STARTED``).
    more_due: bool = False
    #: Running jobs the tick had no time to look after (the next ticks do).
    not_looked_at: int = 0


def start_due(ctx: StepContext, registry: ScheduledSites, *, now: datetime, limit: int = MOST_STARTED) -> Tick:
    """Sends the job of every schedule due at ``now`` (at most ``limit``) and moves each to its next slot."""
    report = Tick()
    due = registry.due(now, limit=limit)
    report.more_due = len(due) >= limit
    requests = [schedule.job_request() for schedule in due]
    ctx.queue.push(requests)
    for schedule, request in zip(due, requests, strict=True):
        assert request.job_id is not None
        report.started.append(request.job_id)
        if not registry.advance(schedule, job_id=request.job_id, next_due=schedule.slot_after(now)):
            log.info("schedule moved by another writer", extra={"schedule": schedule.name, "job_id": request.job_id})
    return report


def tick(
    ctx: StepContext,
    registry: ScheduledSites | None,
    *,
    now: datetime | None = None,
    time_left: Callable[[], float] | None = None,
) -> Tick:
    """Starts the due schedules' jobs, then looks after the running jobs while ``time_left()`` (seconds of the
    invocation) stays above ``TICK_RESERVE``."""
    now = now or ctx.clock()
    report = Tick()
    if registry is not None:
        try:
            report = start_due(ctx, registry, now=now)
        except Exception as exc:  # the registry unreadable must not keep running jobs from being looked after
            log.exception("scheduled jobs not started")
            report.errors.append(f"scheduled jobs not started: {exc}")
    running = ctx.store.active_job_ids()
    if running:
        start = start_place(now, len(running))
        running = running[start:] + running[:start]
    for n, job_id in enumerate(running):
        if time_left is not None and time_left() < TICK_RESERVE:
            report.not_looked_at = len(running) - n
            log.warning("running jobs left to the next ticks", extra={"jobs": report.not_looked_at})
            break
        try:
            outcome = resume(ctx, job_id, time_left=time_left)
        except (Unprocessable, KeyError):
            continue  # (a job of an earlier version's layout, refused by its steps too, or one deleted since)
        except Exception as exc:  # one broken job must not keep the others from being looked after
            log.exception("resuming a job failed", extra={"job_id": job_id})
            report.errors.append(f"{job_id}: {exc}")
            continue
        if outcome.stalled or outcome.result_written or outcome.end_sent or outcome.ended:
            report.resumed.append(outcome)
    return report


def start_place(now: datetime, count: int) -> int:
    """Where in the list of ``count`` running jobs the tick at ``now`` begins: a place drawn from the tick's
    time (the same for the deliveries of one tick, spread evenly whatever the ticks' rate), so that a job the
    ticks have no time for is looked at by a share of them (with time for k of n jobs, k/n of the ticks: a
    job waits n/k ticks on average), none left out for long."""
    digest = hashlib.sha256(now.isoformat().encode()).digest()
    return int.from_bytes(digest[:8], "big") % count
