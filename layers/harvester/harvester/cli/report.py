"""``harvest report`` and ``harvest changes``: what a local state directory holds of a job, a URL, a site."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Protocol, TextIO

from harvester.adapters.local.runner import LocalHarvest
from harvester.archive.results import changes_key, enriched
from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.output import output_file, output_target
from harvester.cli.progress import job_pace
from harvester.cli.reporting import (
    CRAWL_CSV_FIELDS,
    dump_json,
    site_view,
    write_changes,
    write_csv,
    write_dicts,
    write_jsonl,
)
from harvester.cli.state import open_state
from harvester.model.records import JobRecord, LoaderState, utcnow
from harvester.pipeline.part_documents import job_pages
from harvester.ports import DocumentStore, StateStore
from harvester.urls import normalize, origin_of, require_http_url


def run_report(args: argparse.Namespace) -> int:
    if (args.url or args.site) and args.job_id:
        raise UsageError("give a JOB_ID, or --url / --site, not both")
    if args.html is not None and (not args.job_id or args.format is not None):
        raise UsageError("--html writes one job's page: give a JOB_ID, and no --format")
    with open_state(args.state_dir) as harvest:
        if args.html is not None:
            return write_page(harvest, args.job_id, args.html, where=args.state_dir)
        if args.url:
            return _report_url(harvest, args.url, args.format or "json")
        if args.site:
            return _report_site(harvest, args.site, args.format or "json")
        store = harvest.store
        if not args.job_id:
            _list_jobs(list(store.all_jobs()), args.format)
            return EXIT_OK
        snapshot = store.snapshot(args.job_id)
        if snapshot is None:
            raise UsageError(f"no job {args.job_id!r} in {args.state_dir}")
        if args.format in ("jsonl", "csv"):
            write_job_records(harvest, args.job_id, args.format, sys.stdout)
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
                    "pace": job_pace(view, now=utcnow()).as_json(),
                    "loader_state": loader.model_dump(mode="json"),
                    "result": result.model_dump(mode="json") if result else None,
                },
                sys.stdout,
            )
    return EXIT_OK


def write_page(harvest: LocalHarvest, job_id: str, target: Path, *, where: object) -> int:
    """``harvest report JOB --html FILE``: the job's report page, with the timeline of every job of its site
    in the state directory up to it (read from their results: those ended before the site's history document
    was kept included)."""
    from harvester.report import history, page

    job = harvest.store.get_job(job_id)
    if job is None:
        raise UsageError(f"no job {job_id!r} in {where}")
    result = harvest.result(job_id)
    if result is None:
        raise UsageError(f"job {job_id} has no result yet ({job.status.value}): its page is written when it ends")
    origin = job.request.origin
    before = sorted(
        (j for j in harvest.store.all_jobs() if j.result_key and j.job_id != job_id and j.request.origin == origin),
        key=lambda j: j.start_time,
    )
    kept = [j for j in before if j.start_time <= job.start_time][-(history.POINTS_KEPT - 1) :]
    earlier = (found for other in kept if (found := harvest.result(other.job_id)) is not None)
    body = page.render(result, list(harvest.store.sitemaps(job_id)), history.points_of(earlier, upto=result))
    name = f"{job_id}.html"
    with output_file(target, default_name=name, ours=_a_report, option="--html") as out:
        out.write(body.encode())
    if str(target) != "-":
        print(f"harvest: wrote {output_target(target, name)}", file=sys.stderr)
    return EXIT_OK


def _a_report(head: bytes) -> bool:
    """Whether an existing file is a report page (which ``--html`` may replace)."""
    return head.lstrip().lower().startswith(b"<!doctype html")


class JobStores(Protocol):
    """What reading a job's records needs: a local state directory's stores, or a deployed stack's."""

    @property
    def store(self) -> StateStore: ...

    @property
    def documents(self) -> DocumentStore: ...


def write_job_records(harvest: JobStores, job_id: str, fmt: str, out: TextIO) -> int:
    """A job's URL records as JSON Lines or CSV (with what later listings of a URL added): what
    `harvest report JOB --format jsonl|csv` prints and `harvest export` writes, one code path for both."""
    extras = harvest.store.extensions(job_id)
    job = harvest.store.get_job(job_id)
    records = job_pages(harvest.store, harvest.documents, job) if job else harvest.store.pages(job_id)
    pages = (enriched(page, extras) for page in records)
    return write_jsonl(pages, out) if fmt == "jsonl" else write_csv(pages, out)


def _list_jobs(jobs: list[JobRecord], fmt: str | None) -> None:
    """The state directory's jobs: a line each (no ``--format``), or as JSON, JSON Lines or CSV."""
    rows = [
        {"job_id": j.job_id, "status": j.status.value, "start_time": j.start_time.isoformat(), "site": j.site}
        for j in jobs
    ]
    if fmt is None:
        for job in jobs:
            print(f"{job.job_id}  {job.status.value:<11}  {job.start_time:%Y-%m-%d %H:%M:%S}  {job.site}")
    else:
        write_dicts(rows, sys.stdout, fmt, ("job_id", "status", "start_time", "site"))


def _report_url(harvest: LocalHarvest, url: str, fmt: str) -> int:
    try:
        found = harvest.crawldb.find_url(normalize(require_http_url(url)))
    except ValueError as exc:
        raise UsageError(f"--url {exc}") from None
    if not found:
        raise UsageError(f"--url {url}: not in the crawl database of {harvest.state_dir}")
    rows = [{"site": site, **record.model_dump(mode="json", exclude_none=fmt != "json")} for site, record in found]
    write_dicts(rows, sys.stdout, fmt, ("site", *CRAWL_CSV_FIELDS))
    return EXIT_OK


def _report_site(harvest: LocalHarvest, site: str, fmt: str) -> int:
    try:
        origin = origin_of(require_http_url(site))
    except ValueError as exc:
        raise UsageError(f"--site {exc}") from None
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
    with open_state(args.state_dir) as harvest:
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
