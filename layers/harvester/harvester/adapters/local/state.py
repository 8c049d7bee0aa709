"""The state store on SQLite: every method is one IMMEDIATE transaction, so each move and its counters
commit together or not at all, and a killed crawl resumes from exactly what was committed.

Composed of parts, each owning its rows: the job's own (job_rows.py: the job, its counters, its
extensions), its sitemaps and their leases (sitemap_rows.py), and its pages (page_rows.py), the last two on
what their rows share (record_rows.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from harvester.adapters.local.job_rows import JobRows
from harvester.adapters.local.page_rows import PageRows
from harvester.adapters.local.record_rows import open_rows
from harvester.adapters.local.sitemap_rows import SitemapRows
from harvester.model import accounting
from harvester.model.crawl import SitemapPart
from harvester.model.records import (
    CrawlWrite,
    JobCounts,
    JobRecord,
    JobStatus,
    PageRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
)
from harvester.model.state import (
    AdoptedPart,
    Checkpoint,
    EndProgress,
    JobSnapshot,
    Lease,
    ListedBatch,
    OpenPages,
    PageOutcome,
    PageRetry,
    Recorded,
    RecordPage,
    Settled,
    SitemapOutcome,
    SitemapRelease,
)


class SqliteStateStore:
    """The StateStore port (and the PageCounter) on the state file (module docstring)."""

    record_batch = PageRows.record_batch
    listing_window = PageRows.record_batch  # (no batches: a page is handed out as its row)

    def __init__(self, conn: sqlite3.Connection, *, keep_pages: bool = True) -> None:
        """``keep_pages=False`` (a throwaway discovery run, whose pages are handed out as they are counted
        and are final at once): pages are counted and de-duplicated by key with ``count_pages`` (the
        PageCounter port), never stored, so memory stays flat and the per-URL work small."""
        self.conn = conn
        self.keep_pages = keep_pages
        self.job_rows = JobRows(conn)
        self.sitemap_rows = SitemapRows(conn, self.job_rows)
        self.page_rows = PageRows(conn, self.job_rows, self.sitemap_rows, keep_pages=keep_pages)

    # jobs -----------------------------------------------------------------------------------------

    def create_job(self, job: JobRecord) -> JobRecord:
        return self.job_rows.create_job(job)

    def get_job(self, job_id: str) -> JobRecord | None:
        return self.job_rows.get_job(job_id)

    def mark_seeded(self, job_id: str) -> None:
        self.job_rows.mark_seeded(job_id)

    def end_job(self, job_id: str, status: JobStatus, *, end_time: datetime, error_message: str | None = None) -> bool:
        return self.job_rows.end_job(job_id, status, end_time=end_time, error_message=error_message)

    def set_result(self, job_id: str, result_key: str) -> None:
        self.job_rows.set_result(job_id, result_key)

    def claim_end(self, job_id: str, *, until: float, now: float, handed: float | None = None) -> EndProgress | None:
        return self.job_rows.claim_end(job_id, until=until, now=now, handed=handed)

    def save_end(self, job_id: str, progress: EndProgress, *, held: float, handed: float) -> bool:
        return self.job_rows.save_end(job_id, progress, held=held, handed=handed)

    def active_job_ids(self) -> list[str]:
        return self.job_rows.active_job_ids()

    def latest_job(self, fingerprint: str) -> tuple[JobRecord, bool] | None:
        """The newest job with this fingerprint, and whether a local run closed it (see ``close_job``)."""
        return self.job_rows.latest_job(fingerprint)

    def add_extensions(self, job_id: str, listings: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.job_rows.add_extensions(job_id, listings)

    def extensions(self, job_id: str) -> dict[str, dict[str, Any]]:
        return self.job_rows.extensions(job_id)

    def open_jobs(self) -> list[JobRecord]:
        """The jobs no local run has closed yet, oldest first: unfinished, or killed before they were
        reported. The same command resumes each; `harvest jobs cancel` ends one."""
        return self.job_rows.open_jobs()

    def is_closed(self, job_id: str) -> bool:
        return self.job_rows.is_closed(job_id)

    def delete_job(self, job_id: str) -> bool:
        """Drops a job and every record of it (counters, sitemaps, URLs, messages). The crawl database is
        the site's and stays; so do the stored pages, which the crawl database points to."""
        if not self.job_rows.delete_job(job_id):
            return False
        self.page_rows.forget_job(job_id)
        return True

    def close_job(self, job_id: str) -> None:
        """A local run's last write: the job is over and reported; the same command now starts a new job."""
        self.job_rows.close_job(job_id)
        self.page_rows.forget_job(job_id)

    def expire_jobs(self, created_before: float) -> int:
        """Drops the URL and sitemap records of closed jobs created before ``created_before`` (epoch seconds):
        what DynamoDB's TTL does to per-job items on AWS. The job itself, its counters and its result files
        stay; the crawl database is the site's memory and is never expired. Returns the jobs expired."""
        expired = self.job_rows.expire_jobs(created_before)
        for job_id in expired:
            self.page_rows.forget_job(job_id)
        return len(expired)

    def all_jobs(self) -> list[JobRecord]:
        return self.job_rows.all_jobs()

    def snapshot(self, job_id: str) -> JobSnapshot | None:
        return self.job_rows.snapshot(job_id)

    def counts(self, job_id: str) -> JobCounts:
        return self.job_rows.counts(job_id)

    # sitemaps -------------------------------------------------------------------------------------

    def add_sitemaps(self, job_id: str, sitemaps: Sequence[SitemapRecord]) -> list[SitemapRecord]:
        return self.sitemap_rows.add_sitemaps(job_id, sitemaps)

    def get_sitemap(self, job_id: str, url: str) -> SitemapRecord | None:
        return self.sitemap_rows.get_sitemap(job_id, url)

    def claim_sitemap(self, job_id: str, url: str, lease: Lease, *, now: float) -> SitemapRecord | None:
        return self.sitemap_rows.claim_sitemap(job_id, url, lease, now=now)

    def record_pages(
        self,
        job_id: str,
        sitemap_url: str,
        pages: Sequence[PageRecord],
        *,
        checkpoint: int,
        lease: Lease,
        site: str | None = None,
        crawl: Mapping[str, CrawlWrite] | None = None,
        enqueued: Checkpoint | None = None,
        keys: Sequence[int] | None = None,
        left: Mapping[str, str] | None = None,
        lanes: Sequence[bool] | None = None,  # (no batches: one lane is as good as another)
    ) -> Recorded:
        return self.page_rows.record_pages(
            job_id,
            sitemap_url,
            pages,
            checkpoint=checkpoint,
            lease=lease,
            site=site,
            crawl=crawl,
            enqueued=enqueued,
            keys=keys,
            left=left,
        )

    def count_pages(
        self,
        job_id: str,
        sitemap_url: str,
        keys: Sequence[int],
        *,
        checkpoint: int,
        lease: Lease,
        enqueued: Checkpoint | None = None,
    ) -> list[int]:
        return self.page_rows.count_pages(
            job_id, sitemap_url, keys, checkpoint=checkpoint, lease=lease, enqueued=enqueued
        )

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        self.sitemap_rows.mark_enqueued(job_id, sitemap_url, checkpoint, lease)

    def finish_sitemap(
        self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease
    ) -> SitemapRecord | None:
        return self.sitemap_rows.finish_sitemap(job_id, sitemap_url, outcome, lease)

    def release_sitemap(self, job_id: str, sitemap_url: str, lease: Lease, release: SitemapRelease) -> bool:
        return self.sitemap_rows.release_sitemap(job_id, sitemap_url, lease, release)

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]:
        return self.sitemap_rows.sitemaps(job_id, status=status)

    def adopt_part(
        self,
        job_id: str,
        sitemap_url: str,
        part: SitemapPart,
        lease: Lease,
        *,
        site: str,
        at: datetime,
        excluded: Sequence[str] = (),
        checkpoint: Checkpoint | None = None,
        listed: Collection[str] = (),
    ) -> bool:
        # (``listed`` is a saving the state file does not need: its records left out are written in SQL)
        return self.page_rows.adopt_part(
            job_id, sitemap_url, part, lease, site=site, at=at, excluded=excluded, checkpoint=checkpoint
        )

    # pages ----------------------------------------------------------------------------------------

    def claim_pages(
        self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float, stored: Mapping[str, str] | None = None
    ) -> list[SitemapURL]:
        return self.page_rows.claim_pages(job_id, urls, lease, now=now)  # (a row a URL: no hint to use)

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        return self.page_rows.finish_pages(job_id, outcomes, lease, site=site)

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        return self.page_rows.retry_pages(job_id, retries, lease)

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
        return self.page_rows.pages(job_id, status=status)

    def page_bodies(self, job_id: str) -> Iterator[str]:
        """The job's URL records: those that were open (fetched, or to be), then those final when listed,
        each kind in the order it was listed."""
        return self.page_rows.page_bodies(job_id)

    def job_records(self, job_id: str) -> Iterator[str | ListedBatch | AdoptedPart]:
        return self.page_rows.job_records(job_id)

    def job_record_pages(self, job_id: str, *, after: str | None = None) -> Iterator[RecordPage]:
        return self.page_rows.job_record_pages(job_id, after=after)

    def get_page(self, job_id: str, url: str) -> SitemapURL | None:
        return self.page_rows.get_page(job_id, url)

    # recovery -------------------------------------------------------------------------------------

    def release_leases(self, job_id: str, *, pages: bool = True) -> int:
        return self.job_rows.release_leases(job_id, pages=pages)

    def open_pages(self, job_id: str, *, after: str | None = None, until: str | None = None) -> Iterator[OpenPages]:
        return open_rows(self.conn, job_id, after=after, until=until)

    def resume_position(self, job_id: str) -> str | None:
        return self.job_rows.resume_position(job_id)

    def save_resume(self, job_id: str, after: str | None) -> None:
        self.job_rows.save_resume(job_id, after)

    def recount(self, job_id: str) -> JobCounts:
        adopted = sum(item.urls for item in self.page_rows.adopted(job_id))
        listed = accounting.recount(self.sitemaps(job_id), self.pages(job_id))
        return listed + JobCounts(urls_total=adopted, urls_succeeded=adopted)
