"""The state store on SQLite: every method is one IMMEDIATE transaction, so each move and its counters
commit together or not at all, and a killed crawl resumes from exactly what was committed."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import groupby
from typing import Any

import orjson

from harvester.adapters.local import crawl as crawldb
from harvester.adapters.local.database import Transaction
from harvester.keyset import KeySet, bits_of
from harvester.model import accounting
from harvester.model.records import (
    CrawlWrite,
    JobCounts,
    JobRecord,
    JobStatus,
    ListedRow,
    PageRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    body_of,
    url_key,
)
from harvester.model.state import (
    Checkpoint,
    JobSnapshot,
    Lease,
    ListedBatch,
    PageOutcome,
    PageRetry,
    Recorded,
    Settled,
    SitemapOutcome,
)
from harvester.ports import LeaseLost

_COUNTER_FIELDS = tuple(JobCounts.__struct_fields__)
#: The condition of the partial index ``urls_open``, written as it is there so that SQLite uses it.
_OPEN = "status IN ('pending', 'processing')"
_PAGE_SIZE = 1000


class _Moved(Exception):
    """A batch's crawl record moved on under it (another job wrote it): the batch is rolled back."""


class SqliteStateStore:
    #: Listed URLs per transaction. A commit rewrites every page of the crawl records' index its URLs landed
    #: on (one per URL for a sitemap listing them out of order), so larger batches write little less, while
    #: every reader holds its batch in memory; a crash redoes at most this many. (A store that keeps no
    #: pages hands them out per batch: the same size holds little at once.)
    record_batch = 500

    def __init__(self, conn: sqlite3.Connection, *, keep_pages: bool = True) -> None:
        """``keep_pages=False`` (a throwaway discovery run, whose pages are handed out as they are counted
        and are final at once): pages are counted and de-duplicated by key with ``count_pages`` (the
        PageCounter port), never stored, so memory stays flat and the per-URL work small."""
        self.conn = conn
        self.keep_pages = keep_pages
        #: The keys each job has recorded (and those of the batch being written, forgotten if it does not
        #: commit), read from its records when first needed: what makes a URL new to its job, without a
        #: unique index over all of the job's records (see ``urls_open``).
        #: Right because one process writes a state file (``harvest crawl`` holds its lock).
        self._recorded_keys: dict[str, KeySet] = {}

    # jobs -----------------------------------------------------------------------------------------

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

    def set_result(self, job_id: str, result_key: str) -> None:
        with Transaction(self.conn) as db:
            job = self.get_job(job_id)
            if job is not None:
                self._update_job(db, job.model_copy(update={"result_key": result_key}))

    def active_jobs(self) -> list[JobRecord]:
        rows = self.conn.execute(
            "SELECT body FROM jobs"
            " WHERE status IN ('pending', 'in_progress')"
            " OR (json_extract(body, '$.result_key') IS NULL AND status != 'cancelled')"
        ).fetchall()
        return [JobRecord.model_validate_json(r[0]) for r in rows]

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
        """Drops a job and every record of it (counters, sitemaps, URLs, messages). The crawl database is
        the site's and stays; so do the stored pages, which the crawl database points to."""
        with Transaction(self.conn) as db:
            if db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,)).rowcount == 0:
                return False
            for table in ("counters", "sitemaps", "urls", "url_batches", "url_extensions", "messages"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
        self._recorded_keys.pop(job_id, None)
        return True

    def close_job(self, job_id: str) -> None:
        """A local run's last write: the job is over and reported; the same command now starts a new job."""
        with Transaction(self.conn) as db:
            db.execute("UPDATE jobs SET closed = 1 WHERE job_id = ?", (job_id,))
        self._recorded_keys.pop(job_id, None)

    def expire_jobs(self, created_before: float) -> int:
        """Drops the URL and sitemap records of closed jobs created before ``created_before`` (epoch seconds):
        what DynamoDB's TTL does to per-job items on AWS. The job itself, its counters and its result files
        stay; the crawl database is the site's memory and is never expired. Returns the jobs expired."""
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
                db.execute("DELETE FROM urls WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM url_batches WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM url_extensions WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM sitemaps WHERE job_id = ?", (job_id,))
                self._recorded_keys.pop(job_id, None)
        return len(expired)

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

    def _count(self, db: sqlite3.Connection, job_id: str, delta: JobCounts) -> None:
        sets = ", ".join(f"{f} = {f} + ?" for f in _COUNTER_FIELDS)
        db.execute(
            f"UPDATE counters SET {sets}, updated_at = ? WHERE job_id = ?",
            (*(getattr(delta, f) for f in _COUNTER_FIELDS), time.time(), job_id),
        )

    # sitemaps -------------------------------------------------------------------------------------

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
                self._count(db, job_id, accounting.total(deltas))
        return stored

    def get_sitemap(self, job_id: str, url: str) -> SitemapRecord | None:
        row = self.conn.execute(
            "SELECT body FROM sitemaps WHERE job_id = ? AND key = ?", (job_id, url_key(url))
        ).fetchone()
        return SitemapRecord.model_validate_json(row[0]) if row else None

    def _leased_sitemap(self, job_id: str, url: str, lease: Lease) -> SitemapRecord:
        row = self.conn.execute(
            "SELECT body, status, lease_token FROM sitemaps WHERE job_id = ? AND key = ?",
            (job_id, url_key(url)),
        ).fetchone()
        if row is None or row[1] != SitemapStatus.PROCESSING.value or row[2] != lease.token:
            raise LeaseLost(f"sitemap {url} of job {job_id} is no longer leased to this worker")
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
            _put(db, "sitemaps", job_id, record, lease)
            return record

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
    ) -> Recorded:
        writes = crawl if site is not None and crawl else {}
        if not self.keep_pages:
            raise ValueError("a store that keeps no pages counts them (count_pages)")
        if keys is None:
            keys = [bits_of(p.key) for p in pages]
        taken: list[int] = []
        try:
            with Transaction(self.conn) as db:
                sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
                self._take_new(job_id, keys, taken)
                fresh = [pages[i] for i in taken]
                if site is not None and writes:
                    moved = [writes[p.url] for p in fresh if p.url in writes]
                    if not crawldb.write_listed(db, site, moved):
                        raise _Moved  # (rolls the batch back)
                _insert_pages(db, job_id, fresh)
                self._recorded(db, job_id, sitemap, checkpoint, accounting.new_pages(fresh), enqueued, lease)
        except _Moved:
            self._forget(job_id, keys, taken)
            assert site is not None  # (for the type checker: only a batch with crawl records moves)
            # Read after the rollback: versions only grow, so every record that did not apply shows as moved.
            return Recorded(stale=crawldb.stale(self.conn, site, moved) or [r.url for r in moved])
        except BaseException:
            self._forget(job_id, keys, taken)
            raise
        return Recorded(new=fresh)

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
        taken: list[int] = []
        try:
            with Transaction(self.conn) as db:
                sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
                self._take_new(job_id, keys, taken)
                new = len(taken)
                self._recorded(
                    db, job_id, sitemap, checkpoint, JobCounts(urls_total=new, urls_succeeded=new), enqueued, lease
                )
        except BaseException:
            self._forget(job_id, keys, taken)
            raise
        return taken

    def _take_new(self, job_id: str, keys: Sequence[int], taken: list[int]) -> None:
        """Puts in ``taken`` the positions of the keys new to the job (the first of each), taking them as the
        job's at once: the caller forgets them if the batch's transaction does not commit (one probe a
        URL, where checking now and adding after the commit would take two)."""
        add = self._keys_of(job_id).add
        keep = taken.append
        for position, key in enumerate(keys):
            if add(key):
                keep(position)

    def _forget(self, job_id: str, keys: Sequence[int], taken: list[int]) -> None:
        """A batch that did not commit: its URLs are new to the job again (it will be recorded again)."""
        recorded = self._keys_of(job_id)
        for position in taken:
            recorded.discard(keys[position])

    def _keys_of(self, job_id: str) -> KeySet:
        keys = self._recorded_keys.get(job_id)
        if keys is None:
            keys = self._recorded_keys[job_id] = KeySet()
            for (key,) in self.conn.execute("SELECT key FROM urls WHERE job_id = ?", (job_id,)):
                keys.add(bits_of(key))
            for (batch,) in self.conn.execute("SELECT keys FROM url_batches WHERE job_id = ?", (job_id,)):
                for key in batch.split("\n"):
                    keys.add(bits_of(key))
        return keys

    def _recorded(
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
        _put(db, "sitemaps", job_id, moved, lease)
        self._count(db, job_id, new)

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        with Transaction(self.conn) as db:
            sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
            _put(db, "sitemaps", job_id, accounting.enqueued_sitemap(sitemap, checkpoint), lease)

    def finish_sitemap(self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease) -> bool:
        with Transaction(self.conn) as db:
            try:
                sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
            except LeaseLost:
                return False
            _put(db, "sitemaps", job_id, accounting.finished_sitemap(sitemap, outcome), None)
            self._count(db, job_id, accounting.sitemap_done(outcome))
            return True

    def release_sitemap(
        self, job_id: str, sitemap_url: str, lease: Lease, *, error_message: str, attempts: int | None = None
    ) -> bool:
        with Transaction(self.conn) as db:
            try:
                sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
            except LeaseLost:
                return False
            _put(db, "sitemaps", job_id, accounting.released_sitemap(sitemap, error_message, attempts), None)
            self._count(db, job_id, JobCounts())  # activity, for the stall detection
            return True

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]:
        for body in self._bodies("sitemaps", job_id, status.value if status else None):
            yield SitemapRecord.model_validate_json(body)

    def _bodies(self, table: str, job_id: str, status: str | None) -> Iterator[str]:
        """Pages through a table by rowid (discovery order), so no cursor stays open across yields.

        Each page is one index range: by (job_id, status, rowid) with a status, else by rowid itself (NOT
        INDEXED: through the job_id index SQLite would sort all of the job's rows again for every page)."""
        last = 0
        if status:
            sql = f"SELECT rowid, body FROM {table} WHERE job_id = ? AND status = ? AND rowid > ?"
        else:
            sql = f"SELECT rowid, body FROM {table} NOT INDEXED WHERE rowid > ? AND job_id = ?"
        sql += f" ORDER BY rowid LIMIT {_PAGE_SIZE}"
        while True:
            params: tuple[object, ...] = (job_id, status, last) if status else (last, job_id)
            rows = self.conn.execute(sql, params).fetchall()
            if not rows:
                return
            for rowid, body in rows:
                last = rowid
                yield body

    # pages ----------------------------------------------------------------------------------------

    def claim_pages(self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float) -> list[SitemapURL]:
        claimed = []
        with Transaction(self.conn) as db:
            for url in urls:
                row = db.execute(
                    f"SELECT body, status, lease_until FROM urls WHERE job_id = ? AND key = ? AND {_OPEN}",
                    (job_id, url_key(url)),
                ).fetchone()
                if row is None or not accounting.claimable(row[1], row[2], now):
                    continue
                page = accounting.claimed(SitemapURL.model_validate_json(row[0]))
                _put(db, "urls", job_id, page, lease, only=_OPEN)
                claimed.append(page)
        return claimed

    def _leased_page(self, db: sqlite3.Connection, job_id: str, url: str, lease: Lease) -> bool:
        row = db.execute(
            f"SELECT status, lease_token FROM urls WHERE job_id = ? AND key = ? AND {_OPEN}", (job_id, url_key(url))
        ).fetchone()
        return row is not None and row[0] == UrlStatus.PROCESSING.value and row[1] == lease.token

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        settled = Settled()
        with Transaction(self.conn) as db:
            deltas = []
            for outcome in outcomes:
                page = outcome.record
                if not page.status.final or not self._leased_page(db, job_id, page.url, lease):
                    continue
                if site is not None and outcome.crawl is not None and not crawldb.write_url(db, site, outcome.crawl):
                    settled.stale.append(page.url)
                    continue
                _put(db, "urls", job_id, page, None, only=_OPEN)
                deltas.append(accounting.page_done(page))
                settled.applied.append(page.url)
            self._count(db, job_id, accounting.total(deltas))
        return settled

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        applied = []
        with Transaction(self.conn) as db:
            for retry in retries:
                if not self._leased_page(db, job_id, retry.url, lease):
                    continue
                page = self.get_page(job_id, retry.url)
                assert page is not None
                _put(db, "urls", job_id, accounting.retried_page(page, retry), None, only=_OPEN)
                applied.append(retry.url)
            if applied:
                self._count(db, job_id, JobCounts())  # progress: a retry is activity too
        return applied

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
        for body in self._bodies("urls", job_id, status.value if status else None):
            yield SitemapURL.model_validate_json(body)
        if status is None or status.final:
            for body in self._batched_bodies(job_id):
                page = SitemapURL.model_validate_json(body)
                if status is None or page.status is status:
                    yield page

    def page_bodies(self, job_id: str) -> Iterator[str]:
        """The job's URL records: those that were open (fetched, or to be), then those final when listed,
        each kind in the order it was listed."""
        yield from self._bodies("urls", job_id, None)
        yield from self._batched_bodies(job_id)

    def job_records(self, job_id: str) -> Iterator[str | ListedBatch]:
        yield from self._bodies("urls", job_id, None)
        for bodies, feed, kinds in self._batches(job_id):
            if kinds is None:
                yield from bodies.split("\n")
            else:
                yield ListedBatch(bodies=bodies, feed=feed, kinds=json.loads(kinds))

    def _batched_bodies(self, job_id: str) -> Iterator[str]:
        for bodies, _, _ in self._batches(job_id):
            yield from bodies.split("\n")

    def _batches(self, job_id: str) -> Iterator[tuple[str, bytes, str | None]]:
        """The records batches made final at once (with their summary, if any), in the order they were
        listed: a batch at a time."""
        last = 0
        sql = "SELECT rowid, bodies, feed, kinds FROM url_batches WHERE job_id = ? AND rowid > ? ORDER BY rowid LIMIT 1"
        while (row := self.conn.execute(sql, (job_id, last)).fetchone()) is not None:
            last = row[0]
            yield row[1], row[2], row[3]

    def get_page(self, job_id: str, url: str) -> SitemapURL | None:
        """An open record through the key index; a final one by reading the job's final records (no
        per-URL path asks for those: see ``urls_open``), then its batches' keys (a key is 32 hexadecimal
        digits a line: only a whole key matches)."""
        key = url_key(url)
        row = self.conn.execute(f"SELECT body FROM urls WHERE job_id = ? AND key = ? AND {_OPEN}", (job_id, key))
        found = (
            row.fetchone()
            or self.conn.execute(
                f"SELECT body FROM urls WHERE job_id = ? AND NOT {_OPEN} AND key = ?",
                (job_id, key),
            ).fetchone()
        )
        if found:
            return SitemapURL.model_validate_json(found[0])
        batch = self.conn.execute(
            "SELECT keys, bodies FROM url_batches WHERE job_id = ? AND instr(keys, ?) > 0", (job_id, key)
        ).fetchone()
        if batch is None:
            return None
        return SitemapURL.model_validate_json(batch[1].split("\n")[batch[0].split("\n").index(key)])

    # recovery -------------------------------------------------------------------------------------

    def release_leases(self, job_id: str) -> int:
        with Transaction(self.conn) as db:
            released = 0
            for table in ("sitemaps", "urls"):
                released += db.execute(
                    f"UPDATE {table} SET lease_until = 0 WHERE job_id = ? AND status = 'processing'",
                    (job_id,),
                ).rowcount
            return released

    def recount(self, job_id: str) -> JobCounts:
        return accounting.recount(self.sitemaps(job_id), self.pages(job_id))


def _put(
    db: sqlite3.Connection,
    table: str,
    job_id: str,
    record: SitemapRecord | SitemapURL,
    lease: Lease | None,
    *,
    only: str = "1",
) -> None:
    """Rewrites a record with its status (indexed) and its lease (set, or cleared when None); ``only``
    narrows the rows (a page's key is indexed only while it is open)."""
    db.execute(
        f"UPDATE {table} SET status = ?, body = ?, lease_token = ?, lease_until = ?"
        f" WHERE job_id = ? AND key = ? AND {only}",
        (
            record.status.value,
            body_of(record),
            lease.token if lease else None,
            lease.until if lease else 0,
            job_id,
            record.key,
        ),
    )


def _insert_pages(db: sqlite3.Connection, job_id: str, pages: Sequence[PageRecord]) -> None:
    """A batch's records new to the job: one row each for the open ones (the page worker claims and settles
    them by key), one row for each run of those final at once, in the order listed (a run of records
    written straight as JSON with what the job's end takes of them: ``ListedBatch``): no row per final
    record, nor an index entry, for records only ever read all together, at the job's end."""
    open_rows: list[tuple[str, str, str, str]] = []
    final: list[PageRecord] = []
    for page in pages:
        if type(page) is ListedRow or page.status.final:
            final.append(page)
        else:
            open_rows.append((job_id, page.key, page.status.value, body_of(page)))
    if open_rows:
        db.executemany("INSERT INTO urls (job_id, key, status, body) VALUES (?, ?, ?, ?)", open_rows)
    insert = "INSERT INTO url_batches (job_id, keys, bodies, feed, kinds) VALUES (?, ?, ?, ?, ?)"
    for written, group in groupby(final, key=lambda page: type(page) is ListedRow):
        run = list(group)  # (a line each: JSON holds no raw line break)
        keys, bodies = "\n".join(p.key for p in run), "\n".join(body_of(p) for p in run)
        if not written:
            db.execute(insert, (job_id, keys, bodies, None, None))
            continue
        rows: list[ListedRow] = run  # type: ignore[assignment]
        feed = b"\n".join([row.feed for row in rows if row.feed is not None])
        kinds = json.dumps(Counter(row.change for row in rows))
        db.execute(insert, (job_id, keys, bodies, feed, kinds))


def _insert(db: sqlite3.Connection, table: str, job_id: str, record: SitemapRecord | SitemapURL) -> bool:
    """Stores a record unless its URL is already known to the job; True when it was new."""
    return bool(
        db.execute(
            f"INSERT OR IGNORE INTO {table} (job_id, key, status, body) VALUES (?, ?, ?, ?)",
            (job_id, record.key, record.status.value, body_of(record)),
        ).rowcount
    )
