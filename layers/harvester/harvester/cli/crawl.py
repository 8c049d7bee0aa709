"""``harvest crawl``: a job per site on this machine, side by side, resumable."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from msgspec.structs import replace

from harvester.adapters.local.runner import CrawlOutcome, LocalHarvest, LocalRunner
from harvester.cli.errors import EXIT_FAILED, EXIT_OK, UsageError
from harvester.cli.jobs import announce
from harvester.cli.options import fetch_policy, site_request, sites_given
from harvester.cli.progress import ProgressLine
from harvester.cli.reporting import dump_json, summary_text
from harvester.cli.state import engine_failures
from harvester.model.messages import JobRequest
from harvester.model.records import JobStatus
from harvester.settings import EngineSettings


def run_crawl(args: argparse.Namespace) -> int:
    return crawl_requests(args, _requests(args))


def crawl_requests(
    args: argparse.Namespace,
    requests: list[JobRequest],
    *,
    ended: Callable[[LocalHarvest, list[CrawlOutcome]], None] | None = None,
) -> int:
    """Runs the jobs side by side as ``harvest crawl`` does (its ``--concurrency``, ``--per-host``,
    ``--memory``, ``--quiet`` and ``--json``), prints their summaries and returns the exit status; ``ended``
    is given the state directory and the outcomes once every job has ended (before anything is printed)."""
    settings = run_settings(args)
    progress = None if args.quiet else ProgressLine(sys.stderr)
    state = engine_failures(args.state_dir, resumes=True)
    with state, LocalHarvest.open(args.state_dir, memory_queue=args.memory) as harvest:
        runner = LocalRunner(
            harvest,
            policy=fetch_policy(args),
            settings=settings,
            concurrency=args.concurrency,
            on_progress=progress,
            on_start=announce,
        )
        if progress:
            progress.activity = runner.activity
        try:
            outcomes = asyncio.run(runner.crawl_all(requests))
        finally:
            if progress:
                progress.close()
        if ended is not None:
            ended(harvest, outcomes)
    results = [outcome.result for outcome in outcomes]
    assert all(results)  # (a durable run always writes one)
    if args.json:
        shown = [result.model_dump(mode="json") for result in results if result]
        dump_json(shown[0] if len(shown) == 1 else shown, sys.stdout)
    else:
        print("\n\n".join(summary_text(o.result, resumed=o.resumed) for o in outcomes if o.result))
    completed = all(outcome.job.status is JobStatus.COMPLETED for outcome in outcomes)
    return EXIT_OK if completed else EXIT_FAILED


#: The most workers a run takes (``--concurrency``): each holds a connection and a batch of pages, and past a
#: few hundred they cost memory and scheduling while a host's pace (``--per-host``, the delay) bounds the
#: requests anyway.
MAX_CONCURRENCY = 256


def run_settings(args: argparse.Namespace) -> EngineSettings:
    """The engine's settings with the run's ``--per-host``, its ``--concurrency`` checked."""
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise UsageError(f"--concurrency {args.concurrency}: must be from 1 to {MAX_CONCURRENCY}")
    settings = EngineSettings.from_env()
    if args.per_host is not None:
        if not 1 <= args.per_host <= MAX_CONCURRENCY:
            raise UsageError(f"--per-host {args.per_host}: must be from 1 to {MAX_CONCURRENCY}")
        settings = replace(settings, host_max_in_flight=args.per_host)
    return settings


def _requests(args: argparse.Namespace) -> list[JobRequest]:
    """One job request per site: those on the command line, then those of ``--sites`` (line by line)."""
    sites = sites_given(args, "give a site to crawl (harvest crawl https://example.com/), or --sites FILE")
    if len(sites) > 1 and args.sitemap:
        raise UsageError("--sitemap starts one site's job: give it with a single site")
    if len(sites) > 1 and args.job_id:
        raise UsageError("--job-id names one job: give it with a single site")
    requests: list[JobRequest] = []
    seen: dict[str, str] = {}
    for site, where in sites:
        request = site_request(args, site, where)
        if request.origin in seen:
            raise UsageError(f"{where}: {request.origin} is given twice (first as {seen[request.origin]})")
        seen[request.origin] = where
        requests.append(request)
    return requests
