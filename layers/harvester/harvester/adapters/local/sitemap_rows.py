"""A job's sitemap records in the state file (``sitemaps``): registered once per job, leased to one reader
at a time, moved on (checkpoint, outcome, release) only under the lease that holds them, each move with its
counters in one IMMEDIATE transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

from harvester.adapters.local.database import Transaction
from harvester.adapters.local.job_rows import JobRows
from harvester.adapters.local.record_rows import job_bodies, put_record
from harvester.model import accounting
from harvester.model.records import JobCounts, SitemapRecord, SitemapStatus, SitemapURL, body_of, url_key
from harvester.model.state import Checkpoint, Lease, SitemapOutcome, SitemapRelease
from harvester.ports import LeaseLost


class SitemapRows:
    def __init__(self, conn: sqlite3.Connection, jobs: JobRows) -> None:
        self.conn = conn
        self.job_rows = jobs

    def add_sitemaps(self, job_id: str, sitemaps: Sequence[SitemapRecord]) -> list[SitemapRecord]:
        stored = []
        with Transaction(self.conn) as db:
            deltas = []
            for sitemap in accounting.first_per_url(sitemaps):
                if _insert(db, "sitemaps", job_id, sitemap):
                    deltas.append(accounting.new_sitemap(sitemap))
                    stored.append(sitemap)
                else:
                    existing = self.get_sitemap(job_id, sitemap.url)
                    assert existing is not None
                    stored.append(existing)
            if deltas:
                self.job_rows.count(db, job_id, accounting.total(deltas))
        return stored

    def get_sitemap(self, job_id: str, url: str) -> SitemapRecord | None:
        row = self.conn.execute(
            "SELECT body FROM sitemaps WHERE job_id = ? AND key = ?", (job_id, url_key(url))
        ).fetchone()
        return SitemapRecord.model_validate_json(row[0]) if row else None

    def leased(self, job_id: str, url: str, lease: Lease) -> SitemapRecord:
        """The sitemap's record, if ``lease`` still holds it; else LeaseLost."""
        row = self.conn.execute(
            "SELECT body, status, lease_token FROM sitemaps WHERE job_id = ? AND key = ?",
            (job_id, url_key(url)),
        ).fetchone()
        if row is None or row[1] != SitemapStatus.PROCESSING.value or row[2] != lease.token:
            raise LeaseLost.of_sitemap(job_id, url)
        return SitemapRecord.model_validate_json(row[0])

    def claim_sitemap(self, job_id: str, url: str, lease: Lease, *, now: float) -> SitemapRecord | None:
        with Transaction(self.conn) as db:
            row = db.execute(
                "SELECT body, status, lease_until FROM sitemaps WHERE job_id = ? AND key = ?",
                (job_id, url_key(url)),
            ).fetchone()
            if row is None or not accounting.claimable(row[1], row[2], now):
                return None
            record = accounting.claimed(SitemapRecord.model_validate_json(row[0]))
            put_record(db, "sitemaps", job_id, record, lease)
            return record

    def recorded(
        self,
        db: sqlite3.Connection,
        job_id: str,
        sitemap: SitemapRecord,
        checkpoint: int,
        new: JobCounts,
        enqueued: Checkpoint | None,
        lease: Lease,
    ) -> None:
        """A batch's sitemap checkpoint and counters (``new``: its pages new to the job), in its transaction."""
        moved = accounting.recorded_sitemap(sitemap, checkpoint, new.urls_total, enqueued)
        put_record(db, "sitemaps", job_id, moved, lease)
        self.job_rows.count(db, job_id, new)

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        with Transaction(self.conn) as db:
            sitemap = self.leased(job_id, sitemap_url, lease)
            put_record(db, "sitemaps", job_id, accounting.enqueued_sitemap(sitemap, checkpoint), lease)

    def finish_sitemap(
        self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease
    ) -> SitemapRecord | None:
        with Transaction(self.conn) as db:
            try:
                sitemap = self.leased(job_id, sitemap_url, lease)
            except LeaseLost:
                return None
            finished = accounting.finished_sitemap(sitemap, outcome)
            put_record(db, "sitemaps", job_id, finished, None)
            self.job_rows.count(db, job_id, accounting.sitemap_done(outcome))
            return finished

    def release_sitemap(self, job_id: str, sitemap_url: str, lease: Lease, release: SitemapRelease) -> bool:
        with Transaction(self.conn) as db:
            try:
                sitemap = self.leased(job_id, sitemap_url, lease)
            except LeaseLost:
                return False
            put_record(db, "sitemaps", job_id, accounting.released_sitemap(sitemap, release), None)
            self.job_rows.count(db, job_id, JobCounts())  # activity, for the stall detection
            return True

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]:
        for body in job_bodies(self.conn, "sitemaps", job_id, status.value if status else None):
            yield SitemapRecord.model_validate_json(body)


def _insert(db: sqlite3.Connection, table: str, job_id: str, record: SitemapRecord | SitemapURL) -> bool:
    """Stores a record unless its URL is already known to the job; True when it was new."""
    return bool(
        db.execute(
            f"INSERT OR IGNORE INTO {table} (job_id, key, status, body) VALUES (?, ?, ?, ?)",
            (job_id, record.key, record.status.value, body_of(record)),
        ).rowcount
    )
