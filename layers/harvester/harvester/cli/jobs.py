"""`harvest jobs`: the jobs of a state directory, listed, cancelled, deleted; and what `harvest crawl` says
of the job it takes up (resumed, with what it had done, or new, and why an unfinished one is left)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from harvester.adapters.local.runner import JobStart, LocalHarvest, running_jobs
from harvester.cli.discovery import discovery_flags
from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.options import FLAGS
from harvester.cli.reading import reading_flags
from harvester.cli.reporting import dump_json
from harvester.cli.selection import selection_flags
from harvester.cli.state import open_state
from harvester.model.discovery import DiscoveryOptions
from harvester.model.messages import JobRequest
from harvester.model.records import JobCounts, JobRecord


def run_jobs(args: argparse.Namespace) -> int:
    if args.action == "list" and args.job_id:
        raise UsageError(f"{args.job_id}: give the action first (harvest jobs cancel|delete JOB_ID)")
    if args.action != "list" and not args.job_id:
        raise UsageError(f"harvest jobs {args.action}: give the JOB_ID (harvest jobs lists them)")
    with open_state(args.state_dir) as harvest:
        if args.action == "cancel":
            return _cancel(harvest, args.job_id)
        if args.action == "delete":
            if not harvest.delete(args.job_id):
                raise UsageError(f"no job {args.job_id!r} in {args.state_dir}")
            print(f"job {args.job_id}: deleted (its records and result files; the crawl database stays)")
            return EXIT_OK
        holder = running_jobs(args.state_dir)
        rows = [_row(harvest, job, holder) for job in harvest.store.all_jobs()]
    if args.json:
        dump_json(rows, sys.stdout)
    elif not rows:
        print(f"no job in {args.state_dir} yet")
    else:
        _table(rows)
    return EXIT_OK


def _table(rows: list[dict[str, Any]]) -> None:
    """The jobs a line each, in aligned columns."""
    cells = [
        (
            row["job_id"],
            row["status"],
            _done(row["processed_count"], row["total_urls"], complete=row["discovery_complete"]),
            row["start_time"][:19].replace("T", " "),
            row["site"] + _note(row),
        )
        for row in rows
    ]
    widths = [max(len(line[n]) for line in cells) for n in range(4)]
    for line in cells:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(line, widths, strict=False)), line[4]]))


def _note(row: dict[str, Any]) -> str:
    if row["running"]:
        return f"  (running now: pid {row['running']})"
    if row["open"] and not row["ended"]:
        return "  (unfinished: its crawl command resumes it)"
    return ""


def _row(harvest: LocalHarvest, job: JobRecord, holder: tuple[str, list[str]] | None) -> dict[str, Any]:
    counts = harvest.store.counts(job.job_id)
    running = holder[0] if holder is not None and job.job_id in holder[1] else None
    return {
        "job_id": job.job_id,
        "site": job.site,
        "status": job.status.value,
        "processed_count": counts.urls_processed,
        "total_urls": counts.urls_total,
        "discovery_complete": counts.discovery_complete,
        "start_time": job.start_time.isoformat(),
        "end_time": job.end_time.isoformat() if job.end_time else None,
        "ended": job.status.final,
        "open": not harvest.store.is_closed(job.job_id),
        #: The pid of the crawl running the job now, if one is.
        "running": running,
        "options": options(job.request),
    }


def _cancel(harvest: LocalHarvest, job_id: str) -> int:
    before = harvest.store.get_job(job_id)
    if before is None:
        raise UsageError(f"no job {job_id!r} in {harvest.state_dir}")
    if before.status.final:
        print(f"job {job_id}: already {before.status.value}; nothing to cancel")
        return EXIT_OK
    job = harvest.cancel(job_id, now=datetime.now(UTC))
    counts = harvest.store.counts(job_id)
    print(f"job {job_id}: {job.status.value} at {_progress(counts)}; the same crawl command now starts a new job")
    return EXIT_OK


def options(request: JobRequest) -> list[str]:
    """The request as the crawl command's options (those that differ from the defaults; the job id is shown
    apart)."""
    default = JobRequest(site=request.site)
    changed = [
        name
        for name in FLAGS
        if name != "job_id" and name not in _SECTIONS and getattr(request, name) != getattr(default, name)
    ]
    changed += [name for name in _SECTIONS if getattr(request, name) is not None]
    return [_flag(name, getattr(request, name)) for name in changed]


def _discovery_words(options: DiscoveryOptions | None) -> str:
    return " ".join(discovery_flags(options)) or "the default discovery"


#: A job request's optional sections, each shown as the flags that give it (or words for its absence).
_SECTIONS: dict[str, Callable[[Any], str]] = {
    "select": selection_flags,
    "reading": reading_flags,
    "discovery": _discovery_words,
}


def _flag(name: str, value: object) -> str:
    if name in _SECTIONS:
        return _SECTIONS[name](value)
    flag = FLAGS.get(name, name)  # (the site itself: kept with its path, or not)
    if name == "fetch_pages":
        return flag if not value else "pages fetched"
    if name == "refetch":
        return flag if value == "all" else "due pages only"
    if isinstance(value, tuple):
        return " ".join(f"{flag} {shlex.quote(str(v))}" for v in value) if value else f"no {flag}"
    return f"{flag} {shlex.quote(str(value))}"


def _progress(counts: JobCounts) -> str:
    return f"{_done(counts.urls_processed, counts.urls_total, complete=counts.discovery_complete)} done"


def _done(processed: int, total: int, *, complete: bool) -> str:
    """``1,971/20,000 URLs``; a ``+`` on the total while discovery can still add to it."""
    return f"{processed:,}/{total:,}{'' if complete else '+'} URLs"


def announce(start: JobStart) -> None:
    """Says which job a crawl takes up, on stderr: a resumed job and what it had done, or a new one; and an
    unfinished job of the site it leaves as it is, with the options that kept it from being resumed."""
    if start.resumed:
        since = f" (started {start.started:%Y-%m-%d %H:%M:%S} UTC)" if start.started else ""
        print(f"harvest: resuming job {start.job_id}{since}: {_progress(start.counts)}", file=sys.stderr)
        return
    print(f"harvest: starting job {start.job_id} for {start.site}", file=sys.stderr)
    for job, fields in start.left:
        if not fields:
            continue
        theirs = ", ".join(_flag(name, getattr(job.request, name)) for name in fields)
        ours = ", ".join(_flag(name, getattr(start.request, name)) for name in fields)
        print(
            f"harvest: job {job.job_id} of this site is unfinished and is not resumed: its options differ"
            f" (it: {theirs}; this command: {ours}); run it with its options to resume it, or end it:"
            f" harvest jobs cancel {job.job_id}",
            file=sys.stderr,
        )
