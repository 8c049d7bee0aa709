"""``harvest schedule``: the registry of scheduled sites, in a state directory or a deployed stack (``--stack``):
add, list, show, pause, resume, remove; and ``run``, which crawls the sites of a state directory that are due
(for cron: a deployed stack's scheduler function does this on its own)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.options import site_request, sites_given
from harvester.cli.reporting import dump_json
from harvester.model.base import ValidationError
from harvester.model.records import utcnow
from harvester.model.scheduled_site import ScheduledSite, duration_text, parse_duration
from harvester.ports import ScheduledSites

#: The most scheduled jobs one ``harvest schedule run`` starts (the rest are due at the next run).
MOST_RUN = 200


def run_schedule(args: argparse.Namespace) -> int:
    action = args.action
    if action == "run":
        return _run(args)
    if action == "add":
        schedules = _schedules(args)  # (all checked before a state directory is made)
        with _registry(args, creates=True) as registry:
            return _add(args, registry, schedules)
    with _registry(args, creates=False) as registry:
        if action == "list":
            return _list(args, registry)
        if action == "show":
            return _print(_named(registry.get(args.name), args))
        if action == "pause":
            _named(registry.pause(args.name), args)
            print(f"schedule {args.name}: paused (a job already started goes on)")
            return EXIT_OK
        if action == "resume":
            schedule = _named(registry.resume(args.name, now=utcnow()), args)
            assert schedule.next_due is not None
            print(f"schedule {args.name}: active, next job at {_when(schedule.next_due)}")
            return EXIT_OK
        if not registry.remove(args.name):
            _named(None, args)
        print(f"schedule {args.name}: removed (its jobs and the crawl database stay)")
        return EXIT_OK


@contextlib.contextmanager
def _registry(args: argparse.Namespace, *, creates: bool) -> Iterator[ScheduledSites]:
    if args.stack:
        from harvester.adapters.aws.stack import StackError, stack_scheduled_sites

        try:
            with stack_scheduled_sites(args.stack, region=args.region) as registry:
                yield registry
        except StackError as exc:
            raise UsageError(str(exc)) from None
        return
    from harvester.adapters.local.runner import LocalHarvest
    from harvester.cli.state import engine_failures, open_state

    if creates:
        with engine_failures(args.state_dir), LocalHarvest.open(args.state_dir) as harvest:
            yield harvest.scheduled_sites
    else:
        with open_state(args.state_dir) as harvest:
            yield harvest.scheduled_sites


def _where(args: argparse.Namespace) -> str:
    return f"stack {args.stack!r}" if args.stack else str(args.state_dir)


def _named(schedule: ScheduledSite | None, args: argparse.Namespace) -> ScheduledSite:
    if schedule is None:
        raise UsageError(f"no schedule {args.name!r} in {_where(args)} (harvest schedule list shows them)")
    return schedule


def _print(schedule: ScheduledSite) -> int:
    dump_json(schedule.as_json(), sys.stdout)
    return EXIT_OK


def _schedules(args: argparse.Namespace) -> list[ScheduledSite]:
    try:
        every = parse_duration(args.every)
    except ValueError as exc:
        raise UsageError(f"--every {exc}") from None
    offset = None
    if args.offset is not None:
        try:
            offset = int(parse_duration(args.offset, period=False).total_seconds())
        except ValueError as exc:
            raise UsageError(f"--offset {exc}") from None
    sites = sites_given(
        args, "give a site to schedule (harvest schedule add https://example.com/ --every 1d), or --sites FILE"
    )
    if args.name and len(sites) > 1:
        raise UsageError("--name names one schedule: give it with a single site")
    now = utcnow()
    schedules: list[ScheduledSite] = []
    names: dict[str, str] = {}
    for site, where in sites:
        request = site_request(args, site, where)
        try:
            schedule = ScheduledSite.new(request, every, now=now, name=args.name, offset=offset, at_once=args.now)
        except ValidationError as exc:
            raise UsageError(_reason(exc, args.name, where)) from None
        if schedule.name in names:
            raise UsageError(f"{where}: schedule {schedule.name!r} is given twice (first as {names[schedule.name]})")
        names[schedule.name] = where
        schedules.append(schedule)
    return schedules


def _add(args: argparse.Namespace, registry: ScheduledSites, schedules: list[ScheduledSite]) -> int:
    every = schedules[0].every
    there = registry.add(schedules, replace=args.replace)
    if len(schedules) == 1 and there and not args.replace:
        raise UsageError(f"schedule {there[0]!r} is already in {_where(args)}: --replace replaces it, or give --name")
    if there and not args.replace:
        listed = ", ".join(there[:5]) + (f" and {len(there) - 5} more" if len(there) > 5 else "")
        note = f"; already scheduled, left as they are (--replace replaces them): {listed}"
    else:
        note = f" ({len(there)} replaced)" if there else ""
    added = len(schedules) - (0 if args.replace else len(there))
    if len(schedules) == 1 and added == 1:
        (schedule,) = schedules
        assert schedule.next_due is not None
        print(
            f"schedule {schedule.name}: {schedule.request.site} every {duration_text(every)}, first job at"
            f" {_when(schedule.next_due)}{note}"
        )
    else:
        print(f"{added} of {len(schedules)} sites scheduled every {duration_text(every)} in {_where(args)}{note}")
    return EXIT_OK


def _reason(exc: ValidationError, name: str | None, where: str) -> str:
    if "`$.offset`" in str(exc):
        return f"--offset: {str(exc).split(' - at ')[0]}"
    if "`$.name`" not in str(exc):
        return f"{where}: {exc}"
    rule = "a schedule's name is letters, digits, '.', '_' or '-', 64 at most, starting with a letter or digit"
    return f"--name {name!r}: {rule}" if name else f"{where}: its host makes no schedule name ({rule}): give --name"


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _list(args: argparse.Namespace, registry: ScheduledSites) -> int:
    if args.json:  # (one schedule a line, as stored: a registry of 100,000 streams)
        for schedule in registry.all():
            sys.stdout.write(schedule.stored_json() + "\n")
        return EXIT_OK
    count = 0
    for schedule in registry.all():
        due = "paused" if schedule.next_due is None else f"next {_when(schedule.next_due)}"
        last = f"  last job {schedule.last_job_id}" if schedule.last_job_id else ""
        print(f"{schedule.name}  every {duration_text(schedule.every)}  {due}  {schedule.request.site}{last}")
        count += 1
    if count == 0:
        print(f"no schedule in {_where(args)} (harvest schedule add SITE --every 1d)", file=sys.stderr)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    """Crawls the due sites side by side, then moves each schedule to its next slot. A run that stops before
    the end moves none: the next run takes the same jobs up again (a due schedule's job id is its due time's,
    ``ScheduledSite.job_id``, until it moves on)."""
    from harvester.adapters.local.runner import CrawlOutcome, LocalHarvest
    from harvester.cli.crawl import crawl_requests, run_settings
    from harvester.cli.state import engine_failures

    run_settings(args)  # (its options checked whether or not a site is due)
    now = utcnow()
    with engine_failures(args.state_dir), LocalHarvest.open(args.state_dir) as harvest:
        due = harvest.scheduled_sites.due(now, limit=MOST_RUN)
        requests = [schedule.job_request() for schedule in due]
        # (the earliest of every active schedule: the registry's index, read for the first row)
        upcoming = (
            None if due else next(iter(harvest.scheduled_sites.due(datetime.max.replace(tzinfo=UTC), limit=1)), None)
        )
    if not due:
        when = f"; the next is {upcoming.name} at {_when(upcoming.next_due)}" if upcoming and upcoming.next_due else ""
        print(f"harvest: no scheduled site is due in {args.state_dir}{when}", file=sys.stderr)
        return EXIT_OK

    def ended(harvest: LocalHarvest, outcomes: list[CrawlOutcome]) -> None:
        for schedule, outcome in zip(due, outcomes, strict=True):
            harvest.scheduled_sites.advance(schedule, job_id=outcome.job.job_id, next_due=schedule.slot_after(now))

    return crawl_requests(args, requests, ended=ended)
