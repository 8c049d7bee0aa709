"""The crawl database in the state file: three tables beside the jobs', never cleared by a job.

``crawl_urls`` (one row per site and URL, found by the URL itself (see database.py), with its version),
``crawl_sitemaps`` (the last complete reading of each sitemap) and ``crawl_sites`` (lastmod trust). A
versioned write is one UPDATE conditioned on the version read (or an INSERT for a new record), so a write
that lost a race changes nothing and says so.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Iterator, Sequence

from harvester.adapters.local import part_rows
from harvester.adapters.local.database import Transaction, select_in
from harvester.crawldb.parts import Adoptions, Lineage, sitemap_of, writer_of
from harvester.model.crawl import Collected, CrawlRecord, SiteCrawl, SitemapCrawl, SitemapPart, UrlPage
from harvester.model.records import CrawlWrite, body_of, url_key

_PAGE_SIZE = 1000
#: The position after the last page of ``url_pages``.
_PASSED = "~"


def write_url(db: sqlite3.Connection, site: str, record: CrawlWrite) -> bool:
    """One versioned write inside the caller's transaction; False when the stored version moved on. (The
    caller moves the epoch of the sitemap the record names, once for the transaction: ``sitemap_of``.)"""
    body = body_of(record)
    if record.version == 1:
        cursor = db.execute(
            "INSERT OR IGNORE INTO crawl_urls (site, url, version, body) VALUES (?, ?, 1, ?)",
            (site, record.url, body),
        )
    else:
        cursor = db.execute(
            "UPDATE crawl_urls SET version = ?, body = ? WHERE site = ? AND url = ? AND version = ?",
            (record.version, body, site, record.url, record.version - 1),
        )
    return cursor.rowcount == 1


def stale(db: sqlite3.Connection, site: str, records: Sequence[CrawlWrite]) -> list[str]:
    """The URLs of ``records`` that cannot be written now (the stored version moved on): one query per
    500 records."""
    sql = "SELECT url, version FROM crawl_urls WHERE site = ? AND url IN ({marks})"
    stored: dict[str, int] = dict(select_in(db, sql, (site,), list(dict.fromkeys(r.url for r in records))))
    return [r.url for r in records if stored.get(r.url, 0) != r.version - 1]


def write_listed(
    db: sqlite3.Connection,
    site: str,
    records: Sequence[CrawlWrite],
    *,
    writer: str,
    sitemap: str,
    left: Collection[str] = (),
) -> bool:
    """Writes the crawl records a batch of listed URLs moves, in the caller's transaction, each conditioned
    on the version it was decided on (an INSERT for a new record, an UPDATE of the version before): False
    when any did not apply, and the caller rolls the batch back and asks ``stale`` which moved. Checked
    after the writes, not before: a conflict is rare, and a read of every record first would be a query
    per 500 URLs on every batch. The epochs of the sitemaps the records name move with them: ``sitemap``,
    the one listing them, and ``left``, those they named before; also for a batch of URLs handed to a fetch,
    which writes no record here (its settlement writes each, naming ``sitemap``): a part of a sitemap in
    ``left`` holds URLs whose records name ``sitemap`` from this write on, and must not be adopted beside
    ``sitemap``'s."""
    new = [(site, r.url, body_of(r)) for r in records if r.version == 1]
    moved = [(r.version, body_of(r), site, r.url, r.version - 1) for r in records if r.version > 1]
    applied = 0
    if new:
        insert = "INSERT INTO crawl_urls (site, url, version, body) VALUES (?, ?, 1, ?) ON CONFLICT DO NOTHING"
        applied += db.executemany(insert, new).rowcount
    if moved:
        update = "UPDATE crawl_urls SET version = ?, body = ? WHERE site = ? AND url = ? AND version = ?"
        applied += db.executemany(update, moved).rowcount
    part_rows.touch(db, site, [*left, sitemap], writer)  # (rolled back with a failed batch)
    return applied == len(records)


class SqliteCrawlDatabase:
    keeps_parts = True
    adopts_partly = True
    counts_urls = True

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._lineages: dict[tuple[str, ...], Lineage] = {}  # (part_rows.adoptions)

    def get_urls(self, site: str, urls: Sequence[str]) -> dict[str, CrawlRecord]:
        sql = "SELECT body FROM crawl_urls WHERE site = ? AND url IN ({marks})"
        found: dict[str, CrawlRecord] = {}
        adoptions = part_rows.adoptions(self.conn, site, self._lineages)
        for (body,) in select_in(self.conn, sql, (site,), list(dict.fromkeys(urls))):
            record = adoptions.resolve(CrawlRecord.model_validate_json(body))
            found[record.url] = record
        return found

    def job_urls(self, site: str, job_id: str, urls: Sequence[str], *, by_key: bool = False) -> dict[str, CrawlRecord]:
        return self.get_urls(site, urls)  # (as cheap as any other reading here)

    def release_job_urls(self) -> None:
        """Nothing is kept here."""

    def put_urls(self, site: str, records: Sequence[CrawlRecord], *, writer: str | None = None) -> list[str]:
        with Transaction(self.conn) as db:
            refused: list[str] = []
            named: dict[str, set[str | None]] = {}  # by writer: the sitemaps whose epochs the writes move
            for record in records:
                if write_url(db, site, record):
                    by = writer if writer is not None else writer_of(record)
                    named.setdefault(by, set()).add(sitemap_of(record))
                else:
                    refused.append(record.url)
            for by, sitemaps in named.items():
                part_rows.touch(db, site, sitemaps, by)
            return refused

    def site_urls(self, site: str, *, unless_listed_by: str | None = None) -> Iterator[CrawlRecord]:
        for page in self.url_pages(site, unless_listed_by=unless_listed_by):
            yield from page.records

    def url_pages(
        self, site: str, *, unless_listed_by: str | None = None, after: str | None = None
    ) -> Iterator[UrlPage]:
        """Pages in URL order (a position is ``u`` and the page's last URL), then, with ``unless_listed_by``,
        one page of the records left out as of the parts the job adopted that it left URLs out of (``_left_out``:
        as many as those parts' changed entries); the position after that page is ``_PASSED``."""
        if after == _PASSED:
            return
        if after is not None and not after.startswith("u"):
            raise ValueError(f"not a position in a site's URL records: {after!r}")
        last = after[1:] if after else ""
        # Left out in SQL, so that the records are not parsed only to be skipped: those the job listed, and
        # those of the parts it adopted (still as their makers listed them), the URLs it left out of them
        # put back after.
        unlisted = (
            " AND json_extract(body, '$.last_listed_job') IS NOT ? AND NOT EXISTS (SELECT 1 FROM job_parts p"
            " WHERE p.job_id = ? AND p.site = crawl_urls.site AND p.sitemap = json_extract(body, '$.sitemap')"
            " AND json_extract(body, '$.last_listed_job') IN"
            " (SELECT value FROM json_each(coalesce(p.makers, json_array(p.made_by)))))"
            if unless_listed_by
            else ""
        )
        sql = f"SELECT url, body FROM crawl_urls WHERE site = ? AND url > ?{unlisted} ORDER BY url LIMIT {_PAGE_SIZE}"
        adoptions = part_rows.adoptions(self.conn, site, self._lineages)
        while True:
            params = (site, last, unless_listed_by, unless_listed_by) if unless_listed_by else (site, last)
            rows = self.conn.execute(sql, params).fetchall()
            if not rows:
                break
            last = rows[-1][0]
            yield UrlPage([adoptions.resolve(CrawlRecord.model_validate_json(body)) for _, body in rows], f"u{last}")
        if unless_listed_by:
            yield UrlPage(list(self._left_out(site, unless_listed_by, adoptions)), _PASSED)

    def _left_out(self, site: str, job_id: str, adoptions: Adoptions) -> Iterator[CrawlRecord]:
        """The records ``site_urls`` left out as of a part the job adopted whose URLs the job left out of it."""
        for part, _, named, excluded in part_rows.adopted_by(self.conn, job_id):
            urls = (excluded or frozenset()) | set(part.excluded)
            if named != site or not urls:
                continue
            makers = {part.job_id, *part.inherits}
            sql = "SELECT body FROM crawl_urls WHERE site = ? AND url IN ({marks})"
            for (body,) in select_in(self.conn, sql, (site,), sorted(urls)):
                record = CrawlRecord.model_validate_json(body)
                if record.sitemap == part.sitemap and record.last_listed_job in makers:
                    yield adoptions.resolve(record)

    def count_urls(self, site: str) -> int | None:
        return int(self.conn.execute("SELECT count(*) FROM crawl_urls WHERE site = ?", (site,)).fetchone()[0])

    def collect(
        self,
        site: str,
        ended: Callable[[str], bool],
        *,
        by: str | None = None,
        relisted: int | None = None,
        urls: int = 0,
        pause: Callable[[], bool] | None = None,
        resume: bytes | None = None,
    ) -> Collected:
        """Nothing to collect: a URL's record is its one row, rewritten in place."""
        return Collected()

    def find_url(self, url: str) -> list[tuple[str, CrawlRecord]]:
        """Every site's record of ``url`` (a page of one site may be listed by another's sitemaps): one
        lookup per site, since an index by URL alone would cost every listed URL a second index insert."""
        found = []
        for site in self.sites():
            row = self.conn.execute("SELECT body FROM crawl_urls WHERE site = ? AND url = ?", (site, url)).fetchone()
            if row is not None:
                record = CrawlRecord.model_validate_json(row[0])
                found.append((site, part_rows.adoptions(self.conn, site, self._lineages).resolve(record)))
        return found

    def sites(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT DISTINCT site FROM crawl_urls UNION SELECT site FROM crawl_sitemaps ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def sitemap_part(self, site: str, sitemap: str) -> tuple[SitemapPart | None, int]:
        return part_rows.part_of(self.conn, site, sitemap)

    def put_part(self, site: str, part: SitemapPart, keys: Sequence[str]) -> bool:
        return part_rows.put_part(self.conn, site, part, keys)

    def part_keys(self, site: str, part: SitemapPart) -> list[str] | None:
        try:
            return part_rows.part_keys(self.conn, site, part.sitemap, part.job_id)
        except LookupError:
            return None

    def get_sitemap(self, site: str, url: str) -> SitemapCrawl | None:
        row = self.conn.execute(
            "SELECT body FROM crawl_sitemaps WHERE site = ? AND key = ?", (site, url_key(url))
        ).fetchone()
        return SitemapCrawl.model_validate_json(row[0]) if row else None

    def put_sitemap(self, site: str, record: SitemapCrawl) -> bool:
        with Transaction(self.conn) as db:
            cursor = db.execute(
                "INSERT INTO crawl_sitemaps (site, key, fetched_at, body) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (site, key) DO UPDATE SET fetched_at = excluded.fetched_at, body = excluded.body"
                " WHERE excluded.fetched_at >= crawl_sitemaps.fetched_at",
                (site, url_key(record.url), record.fetched_at.timestamp(), body_of(record)),
            )
            return cursor.rowcount == 1

    def site_sitemaps(self, site: str) -> Iterator[SitemapCrawl]:
        rows = self.conn.execute("SELECT body FROM crawl_sitemaps WHERE site = ? ORDER BY key", (site,)).fetchall()
        for (body,) in rows:
            yield SitemapCrawl.model_validate_json(body)

    def get_site(self, site: str) -> SiteCrawl | None:
        row = self.conn.execute("SELECT body FROM crawl_sites WHERE site = ?", (site,)).fetchone()
        return SiteCrawl.model_validate_json(row[0]) if row else None

    def put_site(self, record: SiteCrawl) -> bool:
        with Transaction(self.conn) as db:
            if record.version == 1:
                cursor = db.execute(
                    "INSERT OR IGNORE INTO crawl_sites (site, version, body) VALUES (?, 1, ?)",
                    (record.site, body_of(record)),
                )
            else:
                cursor = db.execute(
                    "UPDATE crawl_sites SET version = ?, body = ? WHERE site = ? AND version = ?",
                    (record.version, body_of(record), record.site, record.version - 1),
                )
            return cursor.rowcount == 1
