"""A job's own rows in the state file: its record (``jobs``), its counters (``counters``) and its pages'
extensions (``url_extensions``); and what is done to a job's rows as a whole: deleting them, expiring
them, releasing their leases. Every write is one IMMEDIATE transaction; the sitemaps' and the pages' writes
add their counter deltas (:meth:`JobRows.count`) inside their own."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson

from harvester.adapters.local.database import Transaction
from harvester.model.records import JobCounts, JobRecord, JobStatus, body_of
from harvester.model.state import EndProgress, JobSnapshot

_COUNTER_FIELDS = tuple(JobCounts.__struct_fields__)


#: The tables with a job's rows beside ``jobs``.
JOB_TABLES = (
    "counters",
    "sitemaps",
    "urls",
    "url_batches",
    "url_extensions",
    "job_parts",
    "messages",
    "job_ends",
    "job_resumes",
)
#: The tables an expired job's rows are dropped from (it keeps its record and its counters; its messages
#: are the queue's).
_EXPIRED_TABLES = tuple(t for t in JOB_TABLES if t not in ("counters", "messages"))


class JobRows:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def create_job(self, job: JobRecord) -> JobRecord:
        with Transaction(self.conn) as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO jobs (job_id, fingerprint, status, body, created_at) VALUES (?, ?, ?, ?, ?)",
                (job.job_id, job.request.fingerprint(), job.status.value, body_of(job), time.time()),
            ).rowcount
            if inserted:
                db.execute("INSERT INTO counters (job_id, updated_at) VALUES (?, ?)", (job.job_id, time.time()))
        stored = self.get_job(job.job_id)
        assert stored is not None
        return stored

    def get_job(self, job_id: str) -> JobRecord | None:
        row = self.conn.execute("SELECT body FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return JobRecord.model_validate_json(row[0]) if row else None

    def _update_job(self, db: sqlite3.Connection, job: JobRecord) -> None:
        db.execute(
            "UPDATE jobs SET status = ?, body = ? WHERE job_id = ?",
            (job.status.value, body_of(job), job.job_id),
        )

    def mark_seeded(self, job_id: str) -> None:
        with Transaction(self.conn) as db:
            job = self.get_job(job_id)
            if job is not None and job.status is JobStatus.PENDING:
                self._update_job(db, job.model_copy(update={"status": JobStatus.IN_PROGRESS, "seeded": True}))

    def end_job(self, job_id: str, status: JobStatus, *, end_time: datetime, error_message: str | None = None) -> bool:
        with Transaction(self.conn) as db:
            job = self.get_job(job_id)
            if job is None or job.status is not JobStatus.IN_PROGRESS:
                return False
            update = {"status": status, "end_time": end_time, "error_message": error_message}
            self._update_job(db, job.model_copy(update=update))
            return True

    def claim_end(self, job_id: str, *, until: float, now: float, handed: float | None = None) -> EndProgress | None:
        with Transaction(self.conn) as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone() is None:
                return None
            cursor = db.execute(
                "INSERT INTO job_ends (job_id, until) VALUES (?, ?) ON CONFLICT (job_id)"
                " DO UPDATE SET until = excluded.until WHERE job_ends.until < ? OR job_ends.until = ?",
                (job_id, until, now, handed),
            )
            if cursor.rowcount != 1:
                return None
            (stored,) = db.execute("SELECT progress FROM job_ends WHERE job_id = ?", (job_id,)).fetchone()
            return msgspec.json.decode(stored, type=EndProgress) if stored else EndProgress()

    def save_end(self, job_id: str, progress: EndProgress, *, held: float, handed: float) -> bool:
        with Transaction(self.conn) as db:
            cursor = db.execute(
                "UPDATE job_ends SET until = ?, progress = ? WHERE job_id = ? AND until = ?",
                (handed, msgspec.json.encode(progress).decode(), job_id, held),
            )
            return cursor.rowcount == 1

    def set_result(self, job_id: str, result_key: str) -> None:
        with Transaction(self.conn) as db:
            job = self.get_job(job_id)
            if job is not None:
                self._update_job(db, job.model_copy(update={"result_key": result_key}))

    def active_job_ids(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT job_id FROM jobs"
            " WHERE status IN ('pending', 'in_progress')"
            " OR (json_extract(body, '$.result_key') IS NULL AND status != 'cancelled')"
            " ORDER BY job_id"
        ).fetchall()
        return [r[0] for r in rows]

    def latest_job(self, fingerprint: str) -> tuple[JobRecord, bool] | None:
        """The newest job with this fingerprint, and whether a local run closed it (see ``close_job``)."""
        row = self.conn.execute(
            "SELECT body, closed FROM jobs WHERE fingerprint = ? ORDER BY created_at DESC LIMIT 1", (fingerprint,)
        ).fetchone()
        return (JobRecord.model_validate_json(row[0]), bool(row[1])) if row else None

    def add_extensions(self, job_id: str, listings: Sequence[tuple[str, dict[str, Any]]]) -> None:
        rows = [(job_id, url, kind, orjson.dumps(value)) for url, ext in listings for kind, value in ext.items()]
        if rows:
            with Transaction(self.conn) as db:
                db.executemany("INSERT OR IGNORE INTO url_extensions VALUES (?, ?, ?, ?)", rows)

    def extensions(self, job_id: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        rows = self.conn.execute("SELECT url, kind, value FROM url_extensions WHERE job_id = ?", (job_id,))
        for url, kind, value in rows:
            out.setdefault(url, {})[kind] = orjson.loads(value)
        return out

    def open_jobs(self) -> list[JobRecord]:
        """The jobs no local run has closed yet, oldest first: unfinished, or killed before they were
        reported. The same command resumes each; `harvest jobs cancel` ends one."""
        rows = self.conn.execute("SELECT body FROM jobs WHERE closed = 0 ORDER BY created_at").fetchall()
        return [JobRecord.model_validate_json(r[0]) for r in rows]

    def is_closed(self, job_id: str) -> bool:
        row = self.conn.execute("SELECT closed FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

    def delete_job(self, job_id: str) -> bool:
        """Drops a job and every row of it (counters, sitemaps, URLs, messages); False if there was none."""
        with Transaction(self.conn) as db:
            if db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,)).rowcount == 0:
                return False
            for table in JOB_TABLES:
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
        return True

    def close_job(self, job_id: str) -> None:
        with Transaction(self.conn) as db:
            db.execute("UPDATE jobs SET closed = 1 WHERE job_id = ?", (job_id,))

    def expire_jobs(self, created_before: float) -> list[str]:
        """Drops the URL and sitemap rows of closed jobs created before ``created_before`` (epoch seconds);
        the jobs expired."""
        with Transaction(self.conn) as db:
            expired = [
                row[0]
                for row in db.execute(
                    "SELECT job_id FROM jobs WHERE closed = 1 AND created_at < ?"
                    " AND EXISTS (SELECT 1 FROM urls WHERE urls.job_id = jobs.job_id"
                    " UNION ALL SELECT 1 FROM url_batches WHERE url_batches.job_id = jobs.job_id"
                    " UNION ALL SELECT 1 FROM sitemaps WHERE sitemaps.job_id = jobs.job_id)",
                    (created_before,),
                ).fetchall()
            ]
            for job_id in expired:
                for table in _EXPIRED_TABLES:
                    db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
        return expired

    def all_jobs(self) -> list[JobRecord]:
        rows = self.conn.execute("SELECT body FROM jobs ORDER BY created_at").fetchall()
        return [JobRecord.model_validate_json(r[0]) for r in rows]

    def snapshot(self, job_id: str) -> JobSnapshot | None:
        with Transaction(self.conn):
            job = self.get_job(job_id)
            if job is None:
                return None
            counts, updated_at = self._counts(job_id)
        return JobSnapshot(job=job, counts=counts, last_update=datetime.fromtimestamp(updated_at, UTC))

    def counts(self, job_id: str) -> JobCounts:
        return self._counts(job_id)[0]

    def _counts(self, job_id: str) -> tuple[JobCounts, float]:
        row = self.conn.execute(
            f"SELECT {', '.join(_COUNTER_FIELDS)}, updated_at FROM counters WHERE job_id = ?", (job_id,)
        ).fetchone()
        if row is None:
            return JobCounts(), 0.0
        return JobCounts(**dict(zip(_COUNTER_FIELDS, row[:-1], strict=True))), row[-1]

    def count(self, db: sqlite3.Connection, job_id: str, delta: JobCounts) -> None:
        """Adds ``delta`` to the job's counters (and marks the job active), in the caller's transaction."""
        sets = ", ".join(f"{f} = {f} + ?" for f in _COUNTER_FIELDS)
        db.execute(
            f"UPDATE counters SET {sets}, updated_at = ? WHERE job_id = ?",
            (*(getattr(delta, f) for f in _COUNTER_FIELDS), time.time(), job_id),
        )

    def release_leases(self, job_id: str, *, pages: bool = True) -> int:
        """Makes the job's sitemaps (and with ``pages`` its pages) in processing claimable at once; how many
        there were."""
        with Transaction(self.conn) as db:
            released = 0
            for table in ("sitemaps", "urls") if pages else ("sitemaps",):
                released += db.execute(
                    f"UPDATE {table} SET lease_until = 0 WHERE job_id = ? AND status = 'processing'",
                    (job_id,),
                ).rowcount
            return released

    def resume_position(self, job_id: str) -> str | None:
        row = self.conn.execute("SELECT after FROM job_resumes WHERE job_id = ?", (job_id,)).fetchone()
        return row[0] if row else None

    def save_resume(self, job_id: str, after: str | None) -> None:
        with Transaction(self.conn) as db:
            if after is None:
                db.execute("DELETE FROM job_resumes WHERE job_id = ?", (job_id,))
            else:
                db.execute("INSERT OR REPLACE INTO job_resumes (job_id, after) VALUES (?, ?)", (job_id, after))
