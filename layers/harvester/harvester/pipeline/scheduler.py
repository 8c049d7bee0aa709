"""The scheduler's tick: start the jobs of the scheduled sites that are due, and resume or finish stalled jobs.

A due schedule's job is sent first, then the schedule is moved to its next slot (``ScheduledSites.advance``):
a tick that dies between the two sends the same job again at the next tick, under the same id (its due
time's: ``ScheduledSite.job_id``), which the job's start records once. Several ticks at once (a schedule
event delivered twice) send the same ids; one of them moves the schedule. A schedule whose slots were missed
(the scheduler stopped for a while) starts one job, named by the slot it was due at, and moves on to the
first slot after now.

A tick starts at most ``limit`` jobs (the registry's index gives the due schedules earliest first): what is
left is due at the next tick, so a tick's time and requests follow the schedules due, never the number
registered.
"""

from __future__ import annotations

import logging
from datetime import datetime

from msgspec import Struct, field

from harvester.pipeline.context import StepContext
from harvester.pipeline.recovery import Resumed, resume
from harvester.ports import ScheduledSites

log = logging.getLogger(__name__)

#: The most jobs one tick starts (sent ten a request; the rest wait for the next tick).
MOST_STARTED = 2000


class Tick(Struct):
    started: list[str] = field(default_factory=list)
    resumed: list[Resumed] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Whether more schedules were due than the tick starts (``MOST_STARTED``).
    more_due: bool = False


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


def tick(ctx: StepContext, registry: ScheduledSites | None, *, now: datetime | None = None) -> Tick:
    now = now or ctx.clock()
    report = Tick()
    if registry is not None:
        try:
            report = start_due(ctx, registry, now=now)
        except Exception as exc:  # the registry unreadable must not keep running jobs from being looked after
            log.exception("scheduled jobs not started")
            report.errors.append(f"scheduled jobs not started: {exc}")
    for job in ctx.store.active_jobs():
        try:
            outcome = resume(ctx, job.job_id)
        except Exception as exc:  # one broken job must not keep the others from being looked after
            log.exception("resuming a job failed", extra={"job_id": job.job_id})
            report.errors.append(f"{job.job_id}: {exc}")
            continue
        if outcome.stalled or outcome.result_written or outcome.end_sent or outcome.ended:
            report.resumed.append(outcome)
    return report
