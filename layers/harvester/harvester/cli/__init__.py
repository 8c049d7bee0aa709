"""The `harvest` command: run jobs on this machine, read sitemaps, and feed a deployed stack.

Exit status: 0 when the job completed (even with failed URLs), 1 when it failed (no readable sitemap) or
could not run, 2 for bad input (a usage error names the argument and the reason).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from harvester import __version__
from harvester.adapters.local.database import StateDirBusy, StateDirError, StorageFailed, storage_failure
from harvester.adapters.local.runner import DEFAULT_STATE_DIR, JobStuck, LocalHarvest, LocalRunner
from harvester.api.tree import Discovery
from harvester.cli.jobs import add_jobs_command, announce
from harvester.cli.progress import ProgressLine
from harvester.cli.reporting import (
    CRAWL_CSV_FIELDS,
    dump_json,
    listed_lines,
    site_view,
    summary_text,
    write_changes,
    write_csv,
    write_jsonl,
)
from harvester.fetch import FetchPolicy, policy_for
from harvester.model.messages import JobRequest, Unprocessable
from harvester.model.records import JobStatus, LoaderState, utcnow
from harvester.pipeline.completion import changes_key, enriched
from harvester.settings import EngineSettings
from harvester.sitemap import PageEntry, SitemapKind
from harvester.urls import normalize, origin_of, require_http_url

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY, EXIT_STATE = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # (128 + SIGINT)
EXIT_PIPE = 141  # (128 + SIGPIPE: what a shell reports for a writer whose reader closed the pipe)
EXIT_CODES = f"""exit status:
  {EXIT_OK}    done (every job completed; failed URLs are part of a completed job)
  {EXIT_FAILED}    a job failed, or a file given is not what the command reads
  {EXIT_USAGE}    bad input: an option, a site, a job id or a sites file line, named
  {EXIT_BUSY}    the state directory is in use by another running crawl
  {EXIT_STATE}    the state directory cannot be used (a file, not writable, damaged, another version's)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); a crawl resumes when the same command is run again
  {EXIT_PIPE}  the output's reader went away (| head)"""


class UsageError(Exception):
    """Bad input from the command line: the message names the input and the reason."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    except (UsageError, Unprocessable) as exc:
        print(f"harvest: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StateDirBusy as exc:
        print(f"harvest: {exc}", file=sys.stderr)
        return EXIT_BUSY
    except StateDirError as exc:
        print(f"harvest: {exc}{_resume_hint(args, exc)}", file=sys.stderr)
        return EXIT_STATE
    except JobStuck as exc:
        print(f"harvest: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        # Only a crawl keeps state to resume from; a discovery or a report simply stopped.
        again = "; run the same command again to resume" if args.command == "crawl" else ""
        print(f"\nharvest: interrupted{again}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # (the storage failing under a command that reads or writes the state)
        reason = storage_failure(exc)
        if reason is None or not hasattr(args, "state_dir"):
            raise
        failed = StorageFailed(args.state_dir, reason)
        print(f"harvest: {failed}{_resume_hint(args, failed)}", file=sys.stderr)
        return EXIT_STATE


def _resume_hint(args: argparse.Namespace, exc: StateDirError) -> str:
    if not isinstance(exc, StorageFailed):
        return ""
    if args.command == "crawl":
        return " (what was done is kept: free space or mend the disk, then run the same command again to resume)"
    return " (free space or mend the disk, then try again)"


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
    crawl.add_argument("--concurrency", type=int, default=16, help="concurrent workers (default 16)")
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
    crawl.add_argument("--json", action="store_true", help="print the SitemapIngestionResult summary as JSON")
    crawl.add_argument("--quiet", action="store_true", help="no progress line")
    crawl.set_defaults(run=run_crawl)

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
    sitemaps.add_argument("--show-absent", action="store_true", help="also list well-known paths not found")
    sitemaps.set_defaults(run=run_sitemaps)

    parse = commands.add_parser(
        "parse", parents=[common], help="parse one local sitemap file; one JSON object per entry"
    )
    parse.add_argument(
        "file", type=Path, help="a urlset, index, text, RSS/Atom sitemap or robots.txt on disk, gzipped or not"
    )
    parse.set_defaults(run=run_parse)

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
        default="json",
        help="json: the job and its result; jsonl / csv: its URL records (with --site: the site's crawl records)",
    )
    about = report.add_mutually_exclusive_group()
    about.add_argument("--url", help="the crawl record of this URL, in every site that lists it")
    about.add_argument(
        "--site",
        help="a site in the crawl database: its URLs by state, what is due, lastmod trust, sitemaps"
        " (--format jsonl/csv: every crawl record)",
    )
    report.set_defaults(run=run_report)

    changes = commands.add_parser(
        "changes", parents=[common], help="a local job's change feed (no JOB_ID: the latest job's)"
    )
    changes.add_argument("job_id", nargs="?", help="the job whose changes to print (none: the latest finished job)")
    _state_dir_argument(changes)
    changes.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="one change a line, or CSV")
    changes.set_defaults(run=run_changes)

    submit = commands.add_parser("submit", parents=[common], help="send a job request to a deployed stack's job queue")
    submit.add_argument("site", help="the site's home page, e.g. https://example.com/")
    target = submit.add_mutually_exclusive_group(required=True)
    target.add_argument("--stack", help="CloudFormation stack name (its JobQueueUrl output is used)")
    target.add_argument("--queue-url", help="the job queue's URL")
    submit.add_argument("--sitemap", action="append", default=[], metavar="URL", help="start here, not discovery")
    _job_arguments(submit, network=False)
    submit.add_argument("--job-id", help="idempotent job id (default: generated)")
    submit.add_argument("--region", help="the stack's AWS region (default: the AWS configuration's)")
    submit.set_defaults(run=run_submit)

    status = commands.add_parser(
        "status", parents=[common], help="a deployed job's progress (BulkProcessingJob as JSON)"
    )
    status.add_argument("job_id", help="the job id harvest submit printed")
    status.add_argument("--stack", required=True, help="CloudFormation stack name")
    status.add_argument("--region", help="the stack's AWS region (default: the AWS configuration's)")
    status.set_defaults(run=run_status)

    add_jobs_command(commands, common, _state_dir_argument)
    return parser


def _site_arguments(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    if many:
        parser.add_argument("site", nargs="*", help="each site's home page, e.g. https://example.com/")
    else:
        parser.add_argument("site", help="the site's home page, e.g. https://example.com/")
    parser.add_argument("--sitemap", action="append", default=[], metavar="URL", help="start here, not discovery")
    parser.add_argument(
        "--allow-network",
        action="append",
        default=[],
        metavar="CIDR",
        help="let fetches reach this non-public network (e.g. 127.0.0.0/8 for a local site)",
    )
    parser.add_argument("--user-agent", help="User-Agent to send")


def _job_arguments(parser: argparse.ArgumentParser, *, network: bool = True) -> None:
    parser.add_argument("--no-pages", action="store_true", help="record the pages without fetching them")
    parser.add_argument(
        "--full",
        action="store_true",
        help="fetch every listed page, not only those due (still conditionally: unchanged pages cost a 304)",
    )
    _pattern_arguments(parser)
    _scope_arguments(parser)
    _delay_argument(parser)
    if network:
        parser.add_argument("--job-id", help="job id (default: resume the unfinished job of the same command)")


def _state_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
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
        help="how deep sitemap indexes may nest below robots.txt and the probed locations (default 10)",
    )


def _delay_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rate-limit-delay",
        type=float,
        default=None,
        help="least seconds between two request starts to one host, across all workers (default 0.05)",
    )


def _pattern_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--include", action="append", default=[], metavar="PAT", help="keep only pages matching (glob, or re:REGEX)")
    add("--exclude", action="append", default=[], metavar="PAT", help="drop pages matching (glob, or re:REGEX)")
    add("--sitemap-include", action="append", default=[], metavar="PAT", help="follow only child sitemaps matching")
    add("--sitemap-exclude", action="append", default=[], metavar="PAT", help="do not follow child sitemaps matching")


def _request(args: argparse.Namespace, *, fetch_pages: bool | None = None, site: str | None = None) -> JobRequest:
    fields = {
        "site": site or args.site,
        "sitemaps": tuple(args.sitemap),
        "include": tuple(args.include),
        "exclude": tuple(args.exclude),
        "sitemap_include": tuple(args.sitemap_include),
        "sitemap_exclude": tuple(args.sitemap_exclude),
        "scope": args.scope,
        "max_depth": args.max_depth,
        "fetch_pages": (not getattr(args, "no_pages", False)) if fetch_pages is None else fetch_pages,
        "refetch": "all" if getattr(args, "full", False) else "due",
    }
    if getattr(args, "rate_limit_delay", None) is not None:
        fields["rate_limit_delay"] = args.rate_limit_delay
    if getattr(args, "job_id", None):
        fields["job_id"] = args.job_id
    try:
        return JobRequest(**fields)
    except ValidationError as exc:
        raise UsageError(_validation_message(exc)) from None


#: The job request's fields as the command line names them.
_OPTIONS = {
    "rate_limit_delay": "--rate-limit-delay",
    "sitemaps": "--sitemap",
    "include": "--include",
    "exclude": "--exclude",
    "sitemap_include": "--sitemap-include",
    "sitemap_exclude": "--sitemap-exclude",
    "scope": "--scope",
    "max_depth": "--max-depth",
    "job_id": "--job-id",
}
#: URL refusals (harvester.urls) in words.
_URL_REASONS = {
    "not_http": "not an http(s) URL: give it whole, with its scheme (https://example.com/)",
    "no_host": "no host name",
    "malformed": "not a well-formed URL",
    "too_long": "longer than 2048 characters",
}


def _validation_message(exc: ValidationError) -> str:
    """pydantic's complaint about a job request, in the command line's words: the option as it is typed,
    the value as it was given, the reason without pydantic's phrasing."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        code = message.rpartition(": ")[2]
        if code in _URL_REASONS:
            message = _URL_REASONS[code]
        elif message.startswith("Input should be "):
            message = "must be " + message.removeprefix("Input should be ")
        given = error.get("input")
        if field == "site":
            problems.append(f"site {given!r}: {message}")
        elif isinstance(given, dict | tuple | list) or field not in _OPTIONS:
            problems.append(f"{_OPTIONS.get(field, field or 'input')}: {message}")
        else:
            problems.append(f"{_OPTIONS[field]} {given}: {message}")
    return "; ".join(problems)


def _policy(args: argparse.Namespace) -> FetchPolicy:
    try:
        return policy_for(args.allow_network, args.user_agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# commands ------------------------------------------------------------------------------------------


def run_crawl(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise UsageError(f"--concurrency {args.concurrency}: must be at least 1")
    settings = EngineSettings.from_env()
    if args.per_host is not None:
        if args.per_host < 1:
            raise UsageError(f"--per-host {args.per_host}: must be at least 1")
        settings = dataclasses.replace(settings, host_max_in_flight=args.per_host)
    requests = _requests(args)
    progress = None if args.quiet else ProgressLine(sys.stderr)
    with LocalHarvest.open(args.state_dir, memory_queue=args.memory) as harvest:
        runner = LocalRunner(
            harvest,
            policy=_policy(args),
            settings=settings,
            concurrency=args.concurrency,
            on_progress=progress,
            on_start=announce,
        )
        try:
            outcomes = asyncio.run(runner.crawl_all(requests))
        finally:
            if progress:
                progress.close()
    results = [outcome.result for outcome in outcomes]
    assert all(results)  # (a durable run always writes one)
    if args.json:
        shown = [result.model_dump(mode="json") for result in results if result]
        dump_json(shown[0] if len(shown) == 1 else shown, sys.stdout)
    else:
        print("\n\n".join(summary_text(o.result, resumed=o.resumed) for o in outcomes if o.result))
    completed = all(outcome.job.status is JobStatus.COMPLETED for outcome in outcomes)
    return EXIT_OK if completed else EXIT_FAILED


def _requests(args: argparse.Namespace) -> list[JobRequest]:
    """One job request per site: those on the command line, then those of ``--sites`` (line by line)."""
    sites: list[tuple[str, str]] = [(site, f"site {site!r}") for site in args.site]
    if args.sites is not None:
        try:
            lines = args.sites.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--sites {args.sites}: cannot be read ({exc})") from None
        for number, line in enumerate(lines, 1):
            site = line.split("#", 1)[0].strip()
            if site:
                sites.append((site, f"--sites {args.sites} line {number}"))
    if not sites:
        raise UsageError("give a site to crawl (harvest crawl https://example.com/), or --sites FILE")
    if len(sites) > 1 and args.sitemap:
        raise UsageError("--sitemap starts one site's job: give it with a single site")
    if len(sites) > 1 and args.job_id:
        raise UsageError("--job-id names one job: give it with a single site")
    requests: list[JobRequest] = []
    seen: dict[str, str] = {}
    for site, where in sites:
        try:
            request = _request(args, site=site)
        except UsageError as exc:
            message = str(exc)
            raise UsageError(message if message.startswith(where) else f"{where}: {message}") from None
        if request.origin in seen:
            raise UsageError(f"{where}: {request.origin} is given twice (first as {seen[request.origin]})")
        seen[request.origin] = where
        requests.append(request)
    return requests


def run_sitemaps(args: argparse.Namespace) -> int:
    request = _request(args, fetch_pages=False)  # validates the options, naming a bad one
    discovery = Discovery(
        request.site,
        sitemaps=request.sitemaps,
        include=request.include,
        exclude=request.exclude,
        sitemap_include=request.sitemap_include,
        sitemap_exclude=request.sitemap_exclude,
        scope=request.scope,
        max_depth=request.max_depth,
        rate_limit_delay=request.rate_limit_delay,
    )
    discovery.policy = _policy(args)

    async def stream() -> None:
        sys.stdout.flush()
        # Bytes straight to the stream under the text layer where there is one (not decoded to be encoded).
        out = getattr(sys.stdout, "buffer", None)
        write = out.write if out is not None else (lambda data: sys.stdout.write(data.decode()))
        async for lines in discovery.batches(listed_lines if args.format == "jsonl" else _no_lines):
            write(lines)
        if out is not None:
            out.flush()

    asyncio.run(stream())
    tree = discovery.tree
    assert tree is not None
    if args.format == "json":
        dump_json(tree.to_json(), sys.stdout)
    elif args.format == "tree":
        print(tree.render(show_absent=args.show_absent))
    if args.format != "tree":  # (the tree shows them in its own text; data on stdout, failures on stderr)
        for node in tree.invalid():
            print(f"harvest: {node.url}: {node.status}: {node.error or 'no reason recorded'}", file=sys.stderr)
    if tree.status is not JobStatus.COMPLETED:
        if args.format != "tree" or not tree.invalid():
            print(f"harvest: {request.site}: no sitemap of the site could be read", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _no_lines(sitemap: str, listed: list[tuple[str, PageEntry]]) -> bytes:
    return b""


def run_parse(args: argparse.Namespace) -> int:
    from harvester.sitemap import parse_file

    path: Path = args.file
    if path.is_dir():
        raise UsageError(f"{path}: a directory, not a sitemap file")
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    try:
        entries, report = parse_file(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    count = 0
    for entry in entries:  # (read as they are parsed: the report is complete once they are all out)
        sys.stdout.write(json.dumps(entry.to_json()) + "\n")
        count += 1
    if report.error:
        print(f"harvest: {path}: {report.error}", file=sys.stderr)
        return EXIT_FAILED
    if not count and report.kind in (None, SitemapKind.TEXT):
        # Any bytes are read as a text sitemap: with no URL line at all, it is not one (a binary, JSON).
        # (An empty file is the parser's own error, "empty document", above.)
        print(f"harvest: {path}: not a sitemap: no URL in it", file=sys.stderr)
        return EXIT_FAILED
    if report.truncated:
        print(f"harvest: {path}: truncated: {report.truncated}", file=sys.stderr)
    if not count:
        print(f"harvest: {path}: a {report.kind.value if report.kind else 'sitemap'} with no entries", file=sys.stderr)
    return EXIT_OK


def _open_state(state_dir: Path) -> contextlib.AbstractContextManager[LocalHarvest]:
    if not (state_dir / "harvest.db").exists():
        raise UsageError(f"--state-dir {state_dir}: no harvest state there")
    return LocalHarvest.open(state_dir)


def run_report(args: argparse.Namespace) -> int:
    if (args.url or args.site) and args.job_id:
        raise UsageError("give a JOB_ID, or --url / --site, not both")
    with _open_state(args.state_dir) as harvest:
        if args.url:
            return _report_url(harvest, args.url)
        if args.site:
            return _report_site(harvest, args.site, args.format)
        store = harvest.store
        if not args.job_id:
            for job in store.all_jobs():
                print(f"{job.job_id}  {job.status.value:<11}  {job.start_time:%Y-%m-%d %H:%M:%S}  {job.site}")
            return EXIT_OK
        snapshot = store.snapshot(args.job_id)
        if snapshot is None:
            raise UsageError(f"no job {args.job_id!r} in {args.state_dir}")
        extras = store.extensions(args.job_id)
        pages = (enriched(page, extras) for page in store.pages(args.job_id))
        if args.format == "jsonl":
            write_jsonl(pages, sys.stdout)
        elif args.format == "csv":
            write_csv(pages, sys.stdout)
        else:
            from harvester.model.records import BulkProcessingJob

            location = harvest.documents.location(snapshot.job.result_key) if snapshot.job.result_key else None
            view = BulkProcessingJob.of(
                snapshot.job, snapshot.counts, last_update=snapshot.last_update, result_location=location
            )
            result = harvest.result(args.job_id)
            loader = LoaderState.of(list(store.sitemaps(args.job_id)), snapshot.counts)
            dump_json(
                {
                    "job": view.model_dump(mode="json"),
                    "loader_state": loader.model_dump(mode="json"),
                    "result": result.model_dump(mode="json") if result else None,
                },
                sys.stdout,
            )
    return EXIT_OK


def _report_url(harvest: LocalHarvest, url: str) -> int:
    try:
        found = harvest.crawldb.find_url(normalize(require_http_url(url)))
    except ValueError as exc:
        raise UsageError(f"--url: {exc}") from None
    if not found:
        raise UsageError(f"--url {url}: not in the crawl database of {harvest.state_dir}")
    dump_json([{"site": site, **record.model_dump(mode="json")} for site, record in found], sys.stdout)
    return EXIT_OK


def _report_site(harvest: LocalHarvest, site: str, fmt: str) -> int:
    try:
        origin = origin_of(require_http_url(site))
    except ValueError as exc:
        raise UsageError(f"--site: {exc}") from None
    if origin not in harvest.crawldb.sites():
        known = ", ".join(harvest.crawldb.sites()) or "none"
        raise UsageError(f"--site {site}: not in the crawl database of {harvest.state_dir} (sites: {known})")
    records = harvest.crawldb.site_urls(origin)
    if fmt == "jsonl":
        write_jsonl(records, sys.stdout)
    elif fmt == "csv":
        write_csv(records, sys.stdout, CRAWL_CSV_FIELDS)
    else:
        dump_json(site_view(origin, records, harvest.crawldb, now=utcnow()), sys.stdout)
    return EXIT_OK


def run_changes(args: argparse.Namespace) -> int:
    with _open_state(args.state_dir) as harvest:
        job_id = args.job_id
        if job_id is None:
            ended = [j for j in harvest.store.all_jobs() if j.result_key]
            if not ended:
                raise UsageError(f"no finished job in {args.state_dir} yet")
            job_id = ended[-1].job_id
        elif harvest.store.get_job(job_id) is None:
            raise UsageError(f"no job {job_id!r} in {args.state_dir}")
        key = changes_key(job_id)
        if not harvest.documents.exists(key):
            raise UsageError(f"job {job_id} has no change feed (it has not ended, or predates the crawl database)")
        write_changes(harvest.documents.get(key), sys.stdout, fmt=args.format)
    return EXIT_OK


def run_submit(args: argparse.Namespace) -> int:
    from harvester.adapters.aws.stack import StackError, job_queue_url, submit_job

    request = _request(args)
    try:
        queue_url = args.queue_url or job_queue_url(args.stack, region=args.region)
        job_id = submit_job(request, queue_url, region=args.region)
    except StackError as exc:
        raise UsageError(str(exc)) from None
    print(job_id)
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    from harvester.adapters.aws.stack import StackError, job_status

    try:
        view = job_status(args.job_id, args.stack, region=args.region)
    except StackError as exc:
        raise UsageError(str(exc)) from None
    dump_json(view, sys.stdout)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
