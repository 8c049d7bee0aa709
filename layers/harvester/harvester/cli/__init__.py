"""The `harvest` command: run jobs on this machine, read sitemaps, and feed a deployed stack.

Exit status: 0 when the job completed (even with failed URLs), 1 when it failed (no readable sitemap) or
could not run, 2 for bad input (a usage error names the argument and the reason).

This module builds the argument parser and nothing else: each command lives in a module of its own
(``cli/crawl.py``, ``sitemaps.py``, ``parse.py``, ``report.py``, ``export.py``, ``get.py``, ``remote.py``),
imported only when that command runs. ``harvest parse`` thus loads the parser alone, not the engine, the
HTTP clients or the local adapter.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from harvester import __version__
from harvester.adapters.local.defaults import DEFAULT_STATE_DIR
from harvester.cli.discovery import discovery_arguments
from harvester.cli.errors import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    CommandError,
    UsageError,
)
from harvester.cli.reading import reading_arguments
from harvester.cli.selection import selection_arguments

__all__ = ["CommandError", "UsageError", "build_parser", "main"]


CONCURRENCY_HELP = "requests in flight at once across all sites, 1 to 256 (default 16)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = _command_parser(parser, args)
        command.error(f"unrecognized arguments: {' '.join(unknown)}{_spelling(unknown, command)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code = int(args.run(args) or EXIT_OK)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`harvest parse FILE | head`): stop quietly, as Unix tools do, with the status a
        # shell reports for SIGPIPE; stdout goes to /dev/null so the exit's own flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except CommandError as exc:  # (bad input, a busy or unusable state directory, a stuck job: cli.state)
        print(f"harvest: {exc}", file=sys.stderr)
        return exc.status
    except OSError as exc:  # (a file a command reads or writes, the commands' own messages aside)
        print(f"harvest: {_os_error(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        # Only a crawl (or a run of the scheduled sites) keeps state to resume from; a discovery or a report
        # simply stopped.
        resumes = args.command == "crawl" or (args.command == "schedule" and args.action == "run")
        again = "; run the same command again to resume" if resumes else ""
        print(f"\nharvest: interrupted{again}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command (and action) given, whose usage a mistake in its arguments is shown with."""
    for attribute in ("command", "action"):
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, attribute, None)
        if not actions or chosen not in actions[0].choices:
            break
        parser = actions[0].choices[chosen]
    return parser


def _spelling(unknown: list[str], parser: argparse.ArgumentParser) -> str:
    """``(did you mean --concurrency?)`` for the first unknown option close to one the command has."""
    known = [flag for action in parser._actions for flag in action.option_strings]
    for given in unknown:
        if given.startswith("--"):
            close = difflib.get_close_matches(given.partition("=")[0], known, n=1, cutoff=0.75)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def _os_error(exc: OSError) -> str:
    """An OS error in one line: the path(s) and the reason."""
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    reason = exc.strerror or str(exc)
    return f"{paths}: {reason}" if paths else reason


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harvest",
        description="Sitemap ingestion: discover, parse and fetch every page a site's sitemaps list.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"harvest {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    # -v after the command as well (harvest crawl SITE -v): a subcommand that is not given it leaves the
    # count the main parser made.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log more (-vv for debug)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    crawl = commands.add_parser(
        "crawl",
        parents=[common],
        help="run a job per site on this machine, side by side (resumable: run it again after a kill)",
    )
    _site_arguments(crawl, many=True)
    crawl.add_argument(
        "--sites", type=Path, metavar="FILE", help="also crawl the sites listed in FILE, one per line (# comments)"
    )
    _job_arguments(crawl)
    _state_dir_argument(crawl)
    crawl.add_argument("--concurrency", type=int, default=16, metavar="N", help=CONCURRENCY_HELP)
    crawl.add_argument(
        "--per-host",
        type=int,
        default=None,
        metavar="N",
        help="requests to one host in flight at once, across all workers (default 8, HARVEST_HOST_MAX_IN_FLIGHT)",
    )
    crawl.add_argument(
        "--memory",
        action="store_true",
        help="keep the task queue in memory, not in the state file (killed, the run sends its open work again"
        " from the records)",
    )
    crawl.add_argument(
        "--json",
        action="store_true",
        help="print the SitemapIngestionResult summary as JSON (an object for one site, a list for several)",
    )
    crawl.add_argument("--quiet", action="store_true", help="no progress line")
    crawl.set_defaults(run=_command("crawl", "run_crawl"))

    sitemaps = commands.add_parser(
        "sitemaps", parents=[common], help="discovery only: the sitemap tree, or every page it lists"
    )
    _site_arguments(sitemaps)
    sitemaps.add_argument(
        "--format", choices=("tree", "json", "jsonl"), default="tree", help="tree; the tree as JSON; or one page a line"
    )
    _pattern_arguments(sitemaps)
    _scope_arguments(sitemaps)
    _delay_argument(sitemaps)
    selection_arguments(sitemaps)
    reading_arguments(sitemaps)
    discovery_arguments(sitemaps)
    sitemaps.add_argument("--show-absent", action="store_true", help="also list well-known paths not found")
    sitemaps.set_defaults(run=_command("sitemaps", "run_sitemaps"))

    parse = commands.add_parser(
        "parse", parents=[common], help="parse one local sitemap file; one JSON object per entry"
    )
    parse.add_argument(
        "file", type=Path, help="a urlset, index, text, RSS/Atom sitemap or robots.txt on disk, gzipped or not"
    )
    reading_arguments(parse, parse=True)
    parse.set_defaults(run=_command("parse", "run_parse"))

    report = commands.add_parser(
        "report",
        parents=[common],
        help="a local job's progress and result (no JOB_ID: list jobs), or the crawl database's view of a URL or site",
    )
    report.add_argument("job_id", nargs="?", help="the job to show (none: list the jobs of the state directory)")
    _state_dir_argument(report)
    report.add_argument(
        "--format",
        choices=("json", "jsonl", "csv"),
        default=None,
        help="json (default with a JOB_ID, --url or --site): the job and its result; jsonl / csv: its URL records"
        " (--site: the site's crawl records; --url: the URL's; no JOB_ID: the jobs, a line each by default)",
    )
    report.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="write the job's report page to FILE: one HTML file that loads nothing (its summary, changes,"
        " statuses, failures, latency, sizes, lastmod trust, sitemap tree, the site's crawls)",
    )
    about = report.add_mutually_exclusive_group()
    about.add_argument("--url", help="the crawl record of this URL, in every site that lists it")
    about.add_argument(
        "--site",
        help="a site in the crawl database: its URLs by state, what is due, lastmod trust, sitemaps"
        " (--format jsonl/csv: every crawl record)",
    )
    report.set_defaults(run=_command("report", "run_report"))

    changes = commands.add_parser(
        "changes", parents=[common], help="a local job's change feed (no JOB_ID: the latest job's)"
    )
    changes.add_argument("job_id", nargs="?", help="the job whose changes to print (none: the latest finished job)")
    _state_dir_argument(changes)
    changes.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="one change a line, or CSV")
    changes.set_defaults(run=_command("report", "run_changes"))

    export = commands.add_parser(
        "export",
        parents=[common],
        help="a job's output as one file: its WARC captures, its Parquet URL index, or its records",
    )
    export.add_argument("job_id", help="the job to export (harvest report lists them)")
    export.add_argument(
        "--format",
        choices=("warc", "parquet", "jsonl", "csv"),
        required=True,
        help="warc: every capture as one .warc.gz; parquet: the URL index; jsonl / csv: the URL records",
    )
    export.add_argument(
        "--output",
        type=Path,
        metavar="PATH",
        help="a file, or a folder to write JOB_ID.<format> in (- for stdout; default: stdout for jsonl / csv,"
        " JOB_ID.warc.gz or JOB_ID.parquet); a device or a pipe is written through, a link to what it names",
    )
    export.add_argument(
        "--force", action="store_true", help="replace an existing file at PATH that is not an export of this format"
    )
    _state_dir_argument(export)
    export.add_argument("--stack", help="export a deployed stack's job (its records, WARC objects and index)")
    _region_argument(export)
    export.set_defaults(run=_command("export", "run_export"))

    get = commands.add_parser(
        "get", parents=[common], help="print the stored body of a URL, read back from its WARC record"
    )
    get.add_argument("url", help="a page URL the crawl database holds (a local state directory's, or a stack's)")
    _state_dir_argument(get)
    get.add_argument("--stack", help="read a deployed stack's crawl database and WARC objects instead")
    _region_argument(get)
    get.add_argument("--raw", action="store_true", help="the body as received (its Content-Encoding still on)")
    get.add_argument("--headers", action="store_true", help="the HTTP status line and headers first")
    get.set_defaults(run=_command("get", "run_get"))

    submit = commands.add_parser("submit", parents=[common], help="send a job request to a deployed stack's job queue")
    submit.add_argument("site", help="the site's home page, e.g. https://example.com/")
    target = submit.add_mutually_exclusive_group(required=True)
    target.add_argument("--stack", help="CloudFormation stack name (its JobQueueUrl output is used)")
    target.add_argument("--queue-url", help="the job queue's URL")
    submit.add_argument("--sitemap", action="append", default=[], metavar="URL", help="start here, not discovery")
    _job_arguments(submit, network=False)
    submit.add_argument("--job-id", help="idempotent job id (default: generated)")
    _region_argument(submit)
    submit.set_defaults(run=_command("remote", "run_submit"))

    status = commands.add_parser(
        "status", parents=[common], help="a deployed job's progress (BulkProcessingJob as JSON)"
    )
    status.add_argument("job_id", help="the job id harvest submit printed")
    status.add_argument("--stack", required=True, help="CloudFormation stack name")
    _region_argument(status)
    status.set_defaults(run=_command("remote", "run_status"))

    _schedule_parser(commands, common)

    jobs = commands.add_parser(
        "jobs",
        parents=[common],
        help="the jobs of a state directory: list them, cancel an unfinished one, delete one",
        description="With no action: list the jobs (an unfinished one is resumed by running its crawl"
        " command again). cancel JOB_ID: end an unfinished job for good (no result; the same command then"
        " starts a new job). delete JOB_ID: forget a job, its records and result files (the crawl database"
        " and the stored pages stay).",
    )
    jobs.add_argument(
        "action", nargs="?", choices=("list", "cancel", "delete"), default="list", help="list (default), cancel, delete"
    )
    jobs.add_argument("job_id", nargs="?", help="the job to cancel or delete")
    _state_dir_argument(jobs)
    jobs.add_argument("--json", action="store_true", help="list as JSON: one object per job")
    jobs.set_defaults(run=_command("jobs", "run_jobs"))
    return parser


def _schedule_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    schedule = commands.add_parser(
        "schedule",
        parents=[common],
        help="sites crawled again on schedule: add, list, show, pause, resume, remove; run those due (cron)",
        description="The registry of scheduled sites, in a state directory (default) or a deployed stack"
        " (--stack), whose scheduler function starts each site's job when it is due. Locally, `harvest schedule"
        " run` (from cron, say every 5 minutes) crawls the sites that are due, side by side.",
    )
    actions = schedule.add_subparsers(dest="action", required=True, metavar="ACTION")
    target = argparse.ArgumentParser(add_help=False)
    target.add_argument("--stack", help="a deployed stack's registry (CloudFormation stack name)")
    _region_argument(target)
    _state_dir_argument(target)

    add = actions.add_parser(
        "add",
        parents=[common, target],
        help="schedule sites: a job every period, at a slot of their own",
        description="Each site gets a job every period (--every), at its slot: an offset into the period taken"
        " from a hash of the schedule's name, so that many sites of one period start spread over it (or"
        " --offset). The first job runs at the first slot to come, or at the next look with --now.",
    )
    add.add_argument("site", nargs="*", help="each site's home page, e.g. https://example.com/")
    add.add_argument("--sites", type=Path, metavar="FILE", help="also the sites listed in FILE, one per line")
    add.add_argument("--every", required=True, metavar="PERIOD", help="how often: 30m, 6h, 1d, 1w (a minute at least)")
    add.add_argument("--name", help="the schedule's name (default: the site's host, and port if any)")
    add.add_argument(
        "--offset", metavar="DURATION", help="where in each period its slot falls (e.g. 2h: 02:00 UTC daily)"
    )
    add.add_argument("--now", action="store_true", help="its first job at the next look, not at its first slot")
    add.add_argument("--replace", action="store_true", help="replace a schedule of the same name")
    add.add_argument("--sitemap", action="append", default=[], metavar="URL", help="start here, not discovery")
    _job_arguments(add, network=False)

    for name, text in (
        ("show", "a schedule as JSON"),
        ("pause", "stop starting a schedule's jobs (a running job goes on)"),
        ("resume", "start a paused schedule's jobs again, from its next slot"),
        ("remove", "forget a schedule (its jobs and the crawl database stay)"),
    ):
        action = actions.add_parser(name, parents=[common, target], help=text)
        action.add_argument("name", help="the schedule's name (harvest schedule list shows them)")

    listing = actions.add_parser("list", parents=[common, target], help="every schedule, by name")
    listing.add_argument("--json", action="store_true", help="one schedule a line, as JSON")

    run = actions.add_parser(
        "run",
        parents=[common],
        help="crawl the scheduled sites that are due, side by side (locally; for cron)",
    )
    _state_dir_argument(run)
    run.add_argument("--concurrency", type=int, default=16, metavar="N", help=CONCURRENCY_HELP)
    run.add_argument(
        "--per-host", type=int, default=None, metavar="N", help="requests to one host in flight at once (default 8)"
    )
    _network_arguments(run)
    run.add_argument("--json", action="store_true", help="print the SitemapIngestionResult summaries as JSON")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    run.set_defaults(memory=False, stack=None)
    schedule.set_defaults(run=_command("schedule", "run_schedule"))


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command ``name`` of ``harvester.cli.<module>``, imported when it runs (see the module docstring)."""

    def run(args: argparse.Namespace) -> int:
        command: Callable[[argparse.Namespace], int] = getattr(import_module(f"harvester.cli.{module}"), name)
        return command(args)

    return run


def _site_arguments(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    if many:
        parser.add_argument("site", nargs="*", help="each site's home page, e.g. https://example.com/")
    else:
        parser.add_argument("site", help="the site's home page, e.g. https://example.com/")
    parser.add_argument("--sitemap", action="append", default=[], metavar="URL", help="start here, not discovery")
    _network_arguments(parser)


def _network_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-network",
        action="append",
        default=[],
        metavar="CIDR",
        help="let fetches reach this non-public network (e.g. 127.0.0.0/8 for a local site)",
    )
    parser.add_argument("--user-agent", metavar="TEXT", help="User-Agent to send")


def _job_arguments(parser: argparse.ArgumentParser, *, network: bool = True) -> None:
    parser.add_argument("--no-pages", action="store_true", help="record the pages without fetching them")
    parser.add_argument(
        "--full",
        action="store_true",
        help="fetch every listed page, not only those due (still conditionally: unchanged pages cost a 304)",
    )
    parser.add_argument(
        "--output",
        choices=("warc", "files"),
        default="warc",
        help="keep fetched pages as WARC files with CDXJ indexes (default), or as one file per page version",
    )
    _pattern_arguments(parser)
    _scope_arguments(parser)
    _delay_argument(parser)
    selection_arguments(parser)
    reading_arguments(parser)
    discovery_arguments(parser)
    if network:
        parser.add_argument(
            "--job-id", metavar="ID", help="job id (default: resume the unfinished job of the same command)"
        )


def _region_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", metavar="REGION", help="the stack's AWS region (default: the AWS configuration's)")


def _state_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help=f"where the state and documents live (default {DEFAULT_STATE_DIR})",
    )


def _scope_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scope",
        choices=("same-host", "same-domain", "any"),
        default="same-host",
        help="which sitemaps and pages belong to the site: same host (default), same registrable domain, or any",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        default=10,
        metavar="N",
        help="how deep sitemap indexes may nest below robots.txt and the probed locations (default 10)",
    )


def _delay_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rate-limit-delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help="least seconds between two request starts to one host, across all workers (default 0.05)",
    )


def _pattern_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--include", action="append", default=[], metavar="PAT", help="keep only pages matching (glob, or re:REGEX)")
    add("--exclude", action="append", default=[], metavar="PAT", help="drop pages matching (glob, or re:REGEX)")
    add("--sitemap-include", action="append", default=[], metavar="PAT", help="follow only child sitemaps matching")
    add("--sitemap-exclude", action="append", default=[], metavar="PAT", help="do not follow child sitemaps matching")


if __name__ == "__main__":
    sys.exit(main())
