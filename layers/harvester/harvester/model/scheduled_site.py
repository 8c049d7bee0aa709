"""A schedule: a site crawled again every period, one job a period, kept in the registry of scheduled sites
(``ports.ScheduledSites``: the state table on AWS, the state directory locally).

A schedule's periods are its *slots*: the instants ``k * every + offset`` (seconds since the epoch). The
offset is taken from a hash of the schedule's name unless given, so that 100,000 daily sites added at once
start spread over the day, not all at midnight. The job due has the id ``<name>-<next_due>`` (in UTC,
``20261130T141500Z``): however often the scheduler looks, and however many times a tick runs, until the
schedule is moved on to its next slot every look sends that one job (a job id is recorded once:
``pipeline.jobs.start_job``).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Self

import orjson
from msgspec import Meta

from harvester.model.base import Model, ValidationError, invalid
from harvester.model.messages import JobRequest
from harvester.urls import origin_of

#: A schedule's name: it starts its jobs' ids (``<name>-<due time>``), which must stay valid job ids.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z"
#: The shortest period: a job is not started more often than this.
SHORTEST = timedelta(minutes=1)
#: The longest period.
LONGEST = timedelta(days=366)

_DURATION = re.compile(r"^\s*(\d{1,12})\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: str | int, *, period: bool = True) -> timedelta:
    """``30m``, ``6h``, ``1d``, ``1w`` or whole seconds: a period (a minute to 366 days), or (not ``period``)
    an offset into one, ``0`` included."""
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration like 30m, 6h, 1d or 1w")
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if period and seconds < SHORTEST.total_seconds():
        raise ValueError(f"{value!r}: a site cannot be crawled on schedule more often than once a minute")
    if seconds > LONGEST.total_seconds():
        raise ValueError(f"{value!r}: longer than {LONGEST.days} days")
    return timedelta(seconds=seconds)


def duration_text(every: timedelta) -> str:
    """A period as ``parse_duration`` reads it: the largest unit that divides it."""
    seconds = int(every.total_seconds())
    for unit in "wdhm":
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


def default_name(site: str) -> str:
    """A schedule's name from its site: the origin's host and port (``example.com``, ``127.0.0.1-8080``)."""
    host = origin_of(site).split("://", 1)[1]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", host)[:64]


def spread_offset(name: str, every: timedelta) -> int:
    """Where in each period a schedule's slot falls when not given: a hash of its name, so that schedules of
    one period are spread evenly over it."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return digest % max(1, int(every.total_seconds()))


def _stamp(moment: datetime) -> str:
    """``20261130T141500Z``; a moment within a second (``--now``'s) with its microseconds."""
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ" if moment.microsecond else "%Y%m%dT%H%M%SZ")


class ScheduledSite(Model, kw_only=True, frozen=True):
    """One scheduled site: its job request (without a job id: each slot's job gets its own), its period and
    its offset in seconds into each period; when it is next due (None: paused) and the id of the last job
    the scheduler sent."""

    name: Annotated[str, Meta(pattern=NAME_PATTERN)]
    every: timedelta
    offset: Annotated[int, Meta(ge=0)] = 0
    request: JobRequest
    added_at: datetime
    next_due: datetime | None = None
    last_job_id: str | None = None

    def __post_init__(self) -> None:
        if self.request.job_id:
            raise invalid("request", "a schedule's request must not carry a job_id: each run gets its own")
        if not SHORTEST <= self.every <= LONGEST:
            raise invalid(
                "every", f"a site is crawled on schedule once a minute at most, every {LONGEST.days} days at least"
            )
        if self.offset >= self.every.total_seconds():
            raise invalid("offset", f"must be less than the period ({duration_text(self.every)})")

    @classmethod
    def new(
        cls,
        request: JobRequest,
        every: timedelta,
        *,
        now: datetime,
        name: str | None = None,
        offset: int | None = None,
        at_once: bool = False,
    ) -> Self:
        """A schedule as added: due at its next slot, or ``at_once`` (at the scheduler's next look)."""
        name = name or default_name(request.site)
        offset = spread_offset(name, every) if offset is None else offset
        schedule = cls.model_validate(
            {"name": name, "every": every, "offset": offset, "request": request, "added_at": now}
        )
        due = now if at_once else schedule.slot_after(now)
        return schedule.model_copy(update={"next_due": due})

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        """A schedule as given or stored (``every`` a duration like ``1d``, or whole seconds)."""
        if isinstance(value, dict) and isinstance(value.get("every"), str | int) and type(value["every"]) is not bool:
            try:
                value = value | {"every": parse_duration(value["every"])}
            except ValueError as exc:
                raise invalid("every", str(exc), ValidationError) from None
        return super().model_validate(value)

    @classmethod
    def stored(cls, body: str) -> Self:
        """A schedule from ``stored_json``."""
        return cls.model_validate(orjson.loads(body))

    def stored_json(self) -> str:
        """The schedule as a registry keeps it (its period in whole seconds)."""
        body = self.model_dump(mode="json", exclude_none=True)
        body["every"] = int(self.every.total_seconds())
        return orjson.dumps(body).decode()

    def slot_at_or_before(self, moment: datetime) -> datetime:
        period = self.every.total_seconds()
        k = (moment.timestamp() - self.offset) // period
        return datetime.fromtimestamp(k * period + self.offset, UTC)

    def slot_after(self, moment: datetime) -> datetime:
        """The first slot later than ``moment``."""
        return self.slot_at_or_before(moment) + self.every

    @property
    def paused(self) -> bool:
        return self.next_due is None

    def job_id(self) -> str:
        """The id of the job due now: ``<name>-<next_due>`` (a slot, or the moment ``--now`` asked for), so that
        every look until the schedule moves on sends the same job, whatever time it is."""
        assert self.next_due is not None, f"schedule {self.name} is paused: no job is due"
        return f"{self.name}-{_stamp(self.next_due)}"

    def job_request(self) -> JobRequest:
        """The request of the job due now, with its id (``job_id``)."""
        return self.request.model_copy(update={"job_id": self.job_id()})

    def paused_now(self) -> Self:
        return self.model_copy(update={"next_due": None})

    def resumed(self, now: datetime) -> Self:
        """Active again, due at its next slot (a slot missed while paused is not made up); an active one as
        it is."""
        return self if not self.paused else self.model_copy(update={"next_due": self.slot_after(now)})

    def as_json(self) -> dict[str, Any]:
        """The schedule as ``harvest schedule show`` prints it (the period as ``1d``, the request's options
        that differ from their defaults)."""
        body = orjson.loads(self.stored_json())
        body["every"] = duration_text(self.every)
        body["paused"] = self.paused
        body["request"] = {"site": self.request.site} | orjson.loads(
            self.request.model_dump_json(exclude_defaults=True)
        )
        return body


def replaced(old: ScheduledSite, new: ScheduledSite) -> ScheduledSite:
    """``new`` in the place of ``old``: paused if ``old`` was (``resume`` makes it due at its next slot), and
    with the last job ``old`` sent."""
    kept = new.model_copy(update={"last_job_id": old.last_job_id})
    return kept.paused_now() if old.paused else kept
