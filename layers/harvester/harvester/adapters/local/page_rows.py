"""A job's page records in the state file: recorded (or, in a store that keeps none, counted) a sitemap's
batch at a time with its checkpoint and counters; claimed, settled and retried under a lease; read back.

An open record (to be fetched) is a row of ``urls``, found by its key through the partial index
``urls_open``; the records final when listed are kept a run at a time in ``url_batches``, read all together
at the job's end."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from itertools import groupby

from harvester.adapters.local import crawl as crawldb
from harvester.adapters.local import part_rows
from harvester.adapters.local.adopted_keys import AdoptedKeys
from harvester.adapters.local.database import Transaction
from harvester.adapters.local.job_rows import JobRows
from harvester.adapters.local.record_rows import body_pages, job_bodies, put_record
from harvester.adapters.local.sitemap_rows import SitemapRows
from harvester.crawldb import parts
from harvester.keyset import KeySet, bits_of
from harvester.model import accounting
from harvester.model.crawl import SitemapPart
from harvester.model.records import (
    CrawlWrite,
    JobCounts,
    ListedRow,
    PageRecord,
    SitemapURL,
    UrlStatus,
    body_of,
    url_key,
)
from harvester.model.state import (
    AdoptedPart,
    Checkpoint,
    Lease,
    ListedBatch,
    PageOutcome,
    PageRetry,
    Recorded,
    RecordPage,
    Settled,
)

#: The condition of the partial index ``urls_open``, written as it is there so that SQLite uses it.
_OPEN = "status IN ('pending', 'processing')"


class _Moved(Exception):
    """A batch's crawl record moved on under it (another job wrote it): the batch is rolled back."""


class PageRows:
    #: Listed URLs per transaction. A commit rewrites every page of the crawl records' index its URLs landed
    #: on (one per URL for a sitemap listing them out of order), so larger batches write little less, while
    #: every reader holds its batch in memory; a crash redoes at most this many. (A store that keeps no
    #: pages hands them out per batch: the same size holds little at once.)
    record_batch = 500

    def __init__(self, conn: sqlite3.Connection, jobs: JobRows, sitemaps: SitemapRows, *, keep_pages: bool) -> None:
        self.conn = conn
        self.job_rows = jobs
        self.sitemap_rows = sitemaps
        self.keep_pages = keep_pages
        #: The keys each job has recorded one by one (and those of the batch being written, forgotten if it
        #: does not commit), read from its records when first needed: with what it holds through the parts
        #: it adopted (``adopted_keys``), what makes a URL new to its job, without a unique index over all of
        #: the job's records (see ``urls_open``).
        #: Right because one process writes a state file (``harvest crawl`` holds its lock).
        self._recorded_keys: dict[str, KeySet] = {}
        self.adopted_keys = AdoptedKeys(conn)
        #: The jobs that recorded URLs whose crawl records no ``left`` named (their listing read none, or
        #: they were recorded before this process): a part adopted whole is checked against their keys too.
        self._unsighted: set[str] = set()

    # recording ------------------------------------------------------------------------------------

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
    ) -> Recorded:
        writes = crawl if site is not None and crawl else {}
        if not self.keep_pages:
            raise ValueError("a store that keeps no pages counts them (count_pages)")
        if keys is None:
            keys = [bits_of(p.key) for p in pages]
        taken: list[int] = []
        try:
            with Transaction(self.conn) as db:
                sitemap = self.sitemap_rows.leased(job_id, sitemap_url, lease)
                if left is None:
                    self._unsighted.add(job_id)
                held = self.adopted_keys.held(db, job_id, [p.url for p in pages], keys, left)
                self._take_new(job_id, keys, taken, held)
                fresh = [pages[i] for i in taken]
                named = set(left.values()) if left else set()
                if site is not None and (writes or named):  # (URLs handed to a fetch write none, but leave ``left``)
                    moved = [writes[p.url] for p in fresh if p.url in writes]
                    if not crawldb.write_listed(db, site, moved, writer=job_id, sitemap=sitemap_url, left=named):
                        raise _Moved  # (rolls the batch back)
                _insert_pages(db, job_id, fresh)
                self.sitemap_rows.recorded(
                    db, job_id, sitemap, checkpoint, accounting.new_pages(fresh), enqueued, lease
                )
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
                sitemap = self.sitemap_rows.leased(job_id, sitemap_url, lease)
                self._take_new(job_id, keys, taken)  # (a store that keeps no pages adopts no part: no crawl)
                new = len(taken)
                self.sitemap_rows.recorded(
                    db, job_id, sitemap, checkpoint, JobCounts(urls_total=new, urls_succeeded=new), enqueued, lease
                )
        except BaseException:
            self._forget(job_id, keys, taken)
            raise
        return taken

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
    ) -> bool:
        """The job takes the sitemap's part (see ``StateStore.adopt_part``): refused when the sitemap's
        reading recorded pages already (adopted whole), the part is not the sitemap's current one, or one of
        the URLs it takes is the job's already (another sitemap listed it first). A part adopted whole holds
        none of the URLs the job listed one by one from the crawl records they had (``adopted_keys``): it is
        checked against the job's keys only when some were listed otherwise; an adoption in part always is.
        A store that keeps no pages adopts none (it keeps no crawl records either)."""
        if not self.keep_pages:
            return False
        partly = checkpoint is not None
        try:
            with Transaction(self.conn) as db:
                sitemap = self.sitemap_rows.leased(job_id, sitemap_url, lease)
                if sitemap.pages_recorded and not partly:
                    return False
                if self._has_records(job_id) and (partly or self._unsighted_keys(job_id)):
                    try:
                        stored = part_rows.part_keys(db, site, part.sitemap, part.job_id)
                    except LookupError:
                        return False
                    left_out = {url_key(url) for url in excluded}
                    recorded = self._keys_of(job_id)
                    if any(bits_of(k) in recorded for k in stored if k not in left_out):
                        raise _Moved
                if not part_rows.adopt(db, job_id, site, part, at, excluded, partly=partly):
                    raise _Moved
                urls = part.urls - len(excluded)
                counts = JobCounts(urls_total=urls, urls_succeeded=urls)
                taking = sitemap.model_copy(update={"adopted": part})
                moved = checkpoint or Checkpoint(part.urls)
                self.sitemap_rows.recorded(db, job_id, taking, moved.enqueued, counts, moved, lease)
        except _Moved:
            return False
        self.adopted_keys.add(job_id, part, site, excluded)
        return True

    def adopted(self, job_id: str) -> list[AdoptedPart]:
        return [
            AdoptedPart(part, at, excluded or frozenset(), partly=excluded is not None)
            for part, at, _, excluded in part_rows.adopted_by(self.conn, job_id)
        ]

    def _has_records(self, job_id: str) -> bool:
        """Whether the job listed URLs one by one (those it took with parts are never in two of them: a URL
        one lists, written since by a listing of another, moved the epoch of both)."""
        if job_id in self._recorded_keys:
            return True
        return any(
            self.conn.execute(f"SELECT 1 FROM {table} WHERE job_id = ? LIMIT 1", (job_id,)).fetchone()
            for table in ("urls", "url_batches")
        )

    def _unsighted_keys(self, job_id: str) -> bool:
        self._keys_of(job_id)  # (loaded: keys recorded before this process are unsighted)
        return job_id in self._unsighted

    def forget_job(self, job_id: str) -> None:
        """Drops the job's keys from memory (its rows are gone, or it is over): read again if ever needed."""
        self._recorded_keys.pop(job_id, None)
        self.adopted_keys.forget(job_id)
        self._unsighted.discard(job_id)

    def _take_new(self, job_id: str, keys: Sequence[int], taken: list[int], held: Collection[int] = ()) -> None:
        """Puts in ``taken`` the positions of the keys new to the job (the first of each; none of ``held``,
        the positions of URLs a part the job adopted holds), taking them as the job's at once: the caller
        forgets them if the batch's transaction does not commit (one probe a URL, where checking now and
        adding after the commit would take two)."""
        recorded = self._keys_of(job_id)
        if not held:
            recorded.take(keys, taken)
            return
        asked = [i for i in range(len(keys)) if i not in held]
        new: list[int] = []
        try:
            recorded.take([keys[i] for i in asked], new)
        finally:
            taken.extend(asked[j] for j in new)

    def _forget(self, job_id: str, keys: Sequence[int], taken: list[int]) -> None:
        """A batch that did not commit: its URLs are new to the job again (it will be recorded again)."""
        recorded = self._keys_of(job_id)
        for position in taken:
            recorded.discard(keys[position])

    def _keys_of(self, job_id: str) -> KeySet:
        keys = self._recorded_keys.get(job_id)
        if keys is None:
            keys = self._recorded_keys[job_id] = KeySet()
            keys.take(bits_of(key) for (key,) in self.conn.execute("SELECT key FROM urls WHERE job_id = ?", (job_id,)))
            for (batch,) in self.conn.execute("SELECT keys FROM url_batches WHERE job_id = ?", (job_id,)):
                keys.take([bits_of(key) for key in batch.split("\n")])
            if keys:
                self._unsighted.add(job_id)
        return keys

    # claims and settlements -----------------------------------------------------------------------

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
                put_record(db, "urls", job_id, page, lease, only=_OPEN)
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
            named: set[str | None] = set()  # (the sitemaps whose epochs the crawl records written move)
            for outcome in outcomes:
                page = outcome.record
                if not page.status.final or not self._leased_page(db, job_id, page.url, lease):
                    continue
                if site is not None and outcome.crawl is not None:
                    if not crawldb.write_url(db, site, outcome.crawl):
                        settled.stale.append(page.url)
                        continue
                    named.add(parts.sitemap_of(outcome.crawl))
                put_record(db, "urls", job_id, page, None, only=_OPEN)
                deltas.append(accounting.page_done(page))
                settled.applied.append(page.url)
            if site is not None:
                part_rows.touch(db, site, named, job_id)
            self.job_rows.count(db, job_id, accounting.total(deltas))
        return settled

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        applied = []
        with Transaction(self.conn) as db:
            for retry in retries:
                if not self._leased_page(db, job_id, retry.url, lease):
                    continue
                page = self.get_page(job_id, retry.url)
                assert page is not None
                put_record(db, "urls", job_id, accounting.retried_page(page, retry), None, only=_OPEN)
                applied.append(retry.url)
            if applied:
                self.job_rows.count(db, job_id, JobCounts())  # progress: a retry is activity too
        return applied

    # readings -------------------------------------------------------------------------------------

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
        for body in job_bodies(self.conn, "urls", job_id, status.value if status else None):
            yield SitemapURL.model_validate_json(body)
        if status is None or status.final:
            for body in self._batched_bodies(job_id):
                page = SitemapURL.model_validate_json(body)
                if status is None or page.status is status:
                    yield page

    def page_bodies(self, job_id: str) -> Iterator[str]:
        """The job's URL records: those that were open (fetched, or to be), then those final when listed,
        each kind in the order it was listed."""
        yield from job_bodies(self.conn, "urls", job_id, None)
        yield from self._batched_bodies(job_id)

    def job_records(self, job_id: str) -> Iterator[str | ListedBatch | AdoptedPart]:
        for page in self.job_record_pages(job_id):
            yield from page.items

    def job_record_pages(self, job_id: str, *, after: str | None = None) -> Iterator[RecordPage]:
        """The records kept one a row, a query page a page (``u<rowid>`` after it), then a batch a page
        (``b<rowid>``), then an adopted part a page (``p<n>`` after the n-th)."""
        kind, at = (after[0], int(after[1:])) if after else ("u", 0)
        if kind == "u":
            for last, bodies in body_pages(self.conn, "urls", job_id, after=at):
                yield RecordPage(list(bodies), f"u{last}")
            kind, at = "b", 0
        if kind == "b":
            for rowid, keys, bodies, feed, kinds in self._batches(job_id, after=at):
                items: list[str | ListedBatch | AdoptedPart]
                if kinds is None:
                    items = list(bodies.split("\n"))
                else:
                    items = [ListedBatch(bodies=bodies, feed=feed, kinds=json.loads(kinds), keys=keys)]
                yield RecordPage(items, f"b{rowid}")
            kind, at = "p", 0
        adopted = self.adopted(job_id)
        for n in range(at, len(adopted)):
            yield RecordPage([adopted[n]], f"p{n + 1}")

    def _batched_bodies(self, job_id: str) -> Iterator[str]:
        for _, _, bodies, _, _ in self._batches(job_id):
            yield from bodies.split("\n")

    def _batches(self, job_id: str, *, after: int = 0) -> Iterator[tuple[int, str, str, bytes, str | None]]:
        """The records batches made final at once (their rowid, keys, bodies and summary, if any), in the
        order they were listed, after the row ``after``: a batch at a time."""
        last = after
        sql = (
            "SELECT rowid, keys, bodies, feed, kinds FROM url_batches WHERE job_id = ? AND rowid > ?"
            " ORDER BY rowid LIMIT 1"
        )
        while (row := self.conn.execute(sql, (job_id, last)).fetchone()) is not None:
            last = row[0]
            yield row

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
