"""The scheduler's tick: start the recurring jobs that are due, and resume or finish stalled jobs.

A recurring job gets one job id per period (``<name>-<period start>``), so however often the schedule
fires, and however many times its event is delivered, each period starts one job.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Self

from msgspec import Meta, Struct, field

from harvester.model.base import Model, ValidationError, invalid
from harvester.model.messages import JobRequest
from harvester.pipeline.context import StepContext
from harvester.pipeline.recovery import Resumed, resume

log = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | int) -> timedelta:
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration like 30m, 6h or 1d")
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 60:
        raise ValueError(f"{value!r}: a recurring job cannot run more often than once a minute")
    return timedelta(seconds=seconds)


class RecurringJob(Model, kw_only=True, frozen=True):
    """One entry of the scheduler's configuration (the ``RecurringJobs`` template parameter): ``every`` is a
    duration like ``30m``, ``6h``, ``1d`` (or seconds) in the configuration, a timedelta once read."""

    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")]
    every: timedelta
    request: JobRequest

    def __post_init__(self) -> None:
        if self.request.job_id:
            raise invalid("request", "a recurring job's request must not carry a job_id: each run gets its own")

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        """An entry of the configuration, its ``every`` read as a duration."""
        if isinstance(value, dict) and isinstance(value.get("every"), str | int) and type(value["every"]) is not bool:
            try:
                value = value | {"every": parse_duration(value["every"])}
            except ValueError as exc:
                raise invalid("every", str(exc), ValidationError) from None
        return super().model_validate(value)

    def job_id(self, now: datetime) -> str:
        period = int(now.timestamp() // self.every.total_seconds())
        start = datetime.fromtimestamp(period * self.every.total_seconds(), UTC)
        return f"{self.name}-{start:%Y%m%dT%H%M%SZ}"


def parse_recurring(raw: str) -> list[RecurringJob]:
    """The configuration is a JSON list; a bad entry is an error naming it (the scheduler logs it)."""
    try:
        entries = json.loads(raw or "[]")
    except json.JSONDecodeError as exc:
        raise ValueError(f"recurring jobs configuration is not JSON: {exc}") from None
    if not isinstance(entries, list):
        raise ValueError("recurring jobs configuration must be a JSON list")
    jobs = []
    for i, entry in enumerate(entries):
        try:
            jobs.append(RecurringJob.model_validate(entry))
        except ValidationError as exc:
            raise ValueError(f"recurring job #{i} ({entry!r:.80}): {exc}") from None
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"recurring job names must be unique: {names}")
    return jobs


class Tick(Struct):
    started: list[str] = field(default_factory=list)
    resumed: list[Resumed] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def tick(ctx: StepContext, recurring: list[RecurringJob], *, now: datetime | None = None) -> Tick:
    now = now or ctx.clock()
    report = Tick()
    due = []
    for job in recurring:
        job_id = job.job_id(now)
        if ctx.store.get_job(job_id) is None:
            due.append(job.request.model_copy(update={"job_id": job_id}))
            report.started.append(job_id)
    ctx.queue.push(due)
    for job in ctx.store.active_jobs():
        try:
            outcome = resume(ctx, job.job_id)
        except Exception as exc:  # one broken job must not keep the others from being looked after
            log.exception("resuming a job failed", extra={"job_id": job.job_id})
            report.errors.append(f"{job.job_id}: {exc}")
            continue
        if outcome.stalled or outcome.result_written or outcome.ended:
            report.resumed.append(outcome)
    return report
