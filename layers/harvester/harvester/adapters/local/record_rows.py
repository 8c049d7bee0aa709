"""What the state file's sitemap and URL rows have in common: a record a row (``sitemaps``, ``urls``), by job
and URL key, its JSON ``body`` beside the ``status`` and lease (``lease_token``, ``lease_until``) that
conditions and indexes read. A record is rewritten with its lease, and a job's records read back a page at a
time, in discovery order."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from harvester.adapters.local.database import Transaction
from harvester.model.records import SitemapRecord, SitemapURL, body_of
from harvester.model.state import Lease, OpenPages

_PAGE_SIZE = 1000


def put_record(
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


def job_bodies(conn: sqlite3.Connection, table: str, job_id: str, status: str | None) -> Iterator[str]:
    """Pages through a table by rowid (discovery order), so no cursor stays open across yields.

    Each page is one index range: by (job_id, status, rowid) with a status, else by rowid itself (NOT
    INDEXED: through the job_id index SQLite would sort all of the job's rows again for every page)."""
    if not status:
        for _, bodies in body_pages(conn, table, job_id):
            yield from bodies
        return
    last = 0
    sql = f"SELECT rowid, body FROM {table} WHERE job_id = ? AND status = ? AND rowid > ? ORDER BY rowid"
    while rows := conn.execute(f"{sql} LIMIT {_PAGE_SIZE}", (job_id, status, last)).fetchall():
        last = rows[-1][0]
        yield from (body for _, body in rows)


def body_pages(conn: sqlite3.Connection, table: str, job_id: str, *, after: int = 0) -> Iterator[tuple[int, list[str]]]:
    """A job's bodies in a table a page at a time after the row ``after``, each page with its last rowid."""
    sql = f"SELECT rowid, body FROM {table} NOT INDEXED WHERE rowid > ? AND job_id = ? ORDER BY rowid"
    while rows := conn.execute(f"{sql} LIMIT {_PAGE_SIZE}", (after, job_id)).fetchall():
        after = rows[-1][0]
        yield after, [body for _, body in rows]


#: The statuses of a job's open pages, in the order ``open_rows`` reads them.
_OPEN = ("pending", "processing")


def open_rows(
    conn: sqlite3.Connection, job_id: str, *, after: str | None = None, until: str | None = None
) -> Iterator[OpenPages]:
    """The job's open pages a page of rows at a time (the pending, then the processing, each by rowid), the
    leases of the processing ones let go; a position is the status's place and the last rowid read (rows up to
    ``until``'s only, when given)."""
    place, last = (0, 0) if after is None else _open_position(after)
    end = (len(_OPEN), 0) if until is None else _open_position(until)
    for index in range(place, min(end[0] + 1, len(_OPEN))):
        sql = "SELECT rowid, body FROM urls WHERE job_id = ? AND status = ? AND rowid > ?"
        if index == end[0]:
            sql += f" AND rowid <= {end[1]}"
        sql += f" ORDER BY rowid LIMIT {_PAGE_SIZE}"
        while rows := conn.execute(sql, (job_id, _OPEN[index], last)).fetchall():
            last = rows[-1][0]
            if _OPEN[index] == "processing":
                with Transaction(conn) as db:
                    marks = ", ".join("?" * len(rows))
                    db.execute(f"UPDATE urls SET lease_until = 0 WHERE rowid IN ({marks})", [r for r, _ in rows])
            yield OpenPages([SitemapURL.model_validate_json(body) for _, body in rows], f"{index}:{last}")
        last = 0


def _open_position(after: str) -> tuple[int, int]:
    place, _, rowid = after.partition(":")
    if not (place.isdigit() and rowid.isdigit()):
        raise ValueError(f"not a position in a job's open pages: {after!r}")
    return int(place), int(rowid)
