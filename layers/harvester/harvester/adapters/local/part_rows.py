"""A site's sitemap parts in the state file (``crawl_parts``, ``part_keys``) and the parts each job adopted
(``job_parts``): see ``SitemapPart`` and ``crawldb.parts``.

``crawl_parts`` has a row per site and sitemap: the sitemap's epoch (a count of writes to the crawl records
that name it, moved by every write in the same transaction: ``touch``), the jobs that made those writes and
when (``writers``), and its current part with its latest adoption. The part's URL keys (what makes a URL
new to a job that adopted it) are a row of ``part_keys``, kept while the part is current or a job that has
not ended adopted it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

from harvester.adapters.local.database import Transaction, select_in
from harvester.crawldb.parts import Adoptions, Lineage
from harvester.model.crawl import CrawlRecord, SitemapPart
from harvester.model.records import body_of

_TOUCH = (
    "INSERT INTO crawl_parts (site, sitemap, epoch, writers) VALUES (?, ?, 1, json_object(?, json_array(1, 1)))"
    " ON CONFLICT (site, sitemap) DO UPDATE SET epoch = epoch + 1, writers = json_set(writers, '$.' || json_quote(?),"
    " json_array(coalesce(json_extract(writers, '$.' || json_quote(?) || '[0]'), epoch + 1), epoch + 1))"
)
#: Lineages a crawl database keeps parsed (``adoptions``).
_LINEAGES_KEPT = 1024
_OPEN_JOBS = "SELECT job_id FROM jobs WHERE status IN ('pending', 'in_progress')"


def touch(db: sqlite3.Connection, site: str, sitemaps: Iterable[str | None], writer: str) -> None:
    """Moves the epoch of each sitemap (``writer`` wrote a crawl record naming it), in the caller's
    transaction; ``writers`` keeps the epochs of each job's first and last such write."""
    rows = [(site, s, writer, writer, writer) for s in dict.fromkeys(sitemaps) if s is not None]
    if rows:
        db.executemany(_TOUCH, rows)


def part_of(conn: sqlite3.Connection, site: str, sitemap: str) -> tuple[SitemapPart | None, int]:
    row = conn.execute("SELECT part, epoch FROM crawl_parts WHERE site = ? AND sitemap = ?", (site, sitemap)).fetchone()
    if row is None:
        return None, 0
    return (SitemapPart.model_validate_json(row[0]) if row[0] else None), int(row[1])


def put_part(conn: sqlite3.Connection, site: str, part: SitemapPart, keys: Sequence[str]) -> bool:
    """Makes ``part`` the sitemap's if its epoch is still the part's and no other job wrote a record naming
    the sitemap since the part's job first did (its lines were read before: each of its URLs was written
    by its job, conditioned on the version it had read, or taken over from the part it inherits, whose
    adoption made the job a writer); False otherwise. The part it replaces is let go."""
    with Transaction(conn) as db:
        row = db.execute(
            "SELECT epoch, writers FROM crawl_parts WHERE site = ? AND sitemap = ?", (site, part.sitemap)
        ).fetchone()
        epoch, writers = (int(row[0]), json.loads(row[1])) if row else (0, {})
        own = writers.get(part.job_id)
        if epoch != part.epoch or (own is None and part.urls):
            return False
        first = own[0] if own else epoch + 1
        if any(job != part.job_id and last >= first for job, (_, last) in writers.items()):
            return False
        kept = {part.job_id: own} if own else {}  # (a write before ``first`` is in what the part read)
        db.execute(
            "INSERT INTO crawl_parts (site, sitemap, epoch, writers, part) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (site, sitemap) DO UPDATE SET writers = excluded.writers, part = excluded.part,"
            " adopted_by = NULL, adopted_at = NULL, adopted_except = NULL",
            (site, part.sitemap, epoch, json.dumps(kept), body_of(part)),
        )
        db.execute(
            "INSERT OR REPLACE INTO part_keys (site, sitemap, made_by, keys) VALUES (?, ?, ?, ?)",
            (site, part.sitemap, part.job_id, "\n".join(keys)),
        )
        db.execute(
            f"DELETE FROM part_keys WHERE site = ? AND sitemap = ? AND made_by != ? AND made_by NOT IN"
            f" (SELECT made_by FROM job_parts WHERE site = ? AND sitemap = ? AND job_id IN ({_OPEN_JOBS}))",
            (site, part.sitemap, part.job_id, site, part.sitemap),
        )
        return True


def adopt(
    db: sqlite3.Connection,
    job_id: str,
    site: str,
    part: SitemapPart,
    at: datetime,
    excluded: Sequence[str] = (),
    *,
    partly: bool = False,
) -> bool:
    """Records, in the caller's transaction, that the job adopted ``part`` (``partly``: but for the URLs
    ``excluded``): False when it is not the sitemap's current part at the epoch it was made at (in part:
    moved on since by none but this job's writes, its listing of the entries it did not keep; the adoption moves it
    again). The records of the URLs left out are written first as they read now (``settle``): the adoption
    makes them read as stored."""
    stored, epoch = part_of(db, site, part.sitemap)
    if stored is None or stored.job_id != part.job_id:
        return False
    if epoch != part.epoch:
        row = db.execute("SELECT writers FROM crawl_parts WHERE site = ? AND sitemap = ?", (site, part.sitemap))
        writers = json.loads(row.fetchone()[0])
        others = [last for job, (_, last) in writers.items() if job != job_id]
        if not partly or any(last > part.epoch for last in others):
            return False
    if partly:
        settle(db, site, excluded, adoptions(db, site))
        # The adoption moves the epoch as a write by the job (it is one: the records it left out read as stored
        # from now on), so that no other job adopts the part after it, whole or in part; a part the job makes
        # of the URLs it kept is refused if another job writes a record of the sitemap in between.
        touch(db, site, [part.sitemap], job_id)
    left_out = json.dumps(list(excluded)) if partly else None
    db.execute(
        "INSERT OR IGNORE INTO job_parts (job_id, sitemap, site, made_by, adopted_at, part, excluded, makers)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (job_id, part.sitemap, site, part.job_id, _text(at), body_of(part), left_out, _makers(part)),
    )
    db.execute(
        "UPDATE crawl_parts SET adopted_by = ?, adopted_at = ?, adopted_except = ? WHERE site = ? AND sitemap = ?"
        " AND (adopted_at IS NULL OR adopted_at <= ?)",
        (job_id, _text(at), left_out, site, part.sitemap, _text(at)),
    )
    return True


def settle(db: sqlite3.Connection, site: str, urls: Sequence[str], read: Adoptions) -> None:
    """Writes the records of ``urls`` that read otherwise than stored as they read (a version more), in the
    caller's transaction: nothing reads differently, and nothing moves the sitemaps' epochs."""
    if not read:
        return
    sql = "SELECT url, version, body FROM crawl_urls WHERE site = ? AND url IN ({marks})"
    for url, version, body in select_in(db, sql, (site,), list(urls)):
        record = CrawlRecord.model_validate_json(body)
        settled = read.resolve(record)
        if settled is not record:
            settled = settled.model_copy(update={"version": version + 1})
            db.execute(
                "UPDATE crawl_urls SET version = ?, body = ? WHERE site = ? AND url = ? AND version = ?",
                (version + 1, body_of(settled), site, url, version),
            )


def part_keys(conn: sqlite3.Connection, site: str, sitemap: str, made_by: str) -> list[str]:
    row = conn.execute(
        "SELECT keys FROM part_keys WHERE site = ? AND sitemap = ? AND made_by = ?", (site, sitemap, made_by)
    ).fetchone()
    if row is None:
        raise LookupError(f"the URL keys of the part of {sitemap} made by job {made_by} are gone")
    return row[0].split("\n") if row[0] else []


def adopted_by(
    conn: sqlite3.Connection, job_id: str
) -> Iterator[tuple[SitemapPart, datetime, str, frozenset[str] | None]]:
    """The parts the job adopted, with when, the site's name for them and the URLs it left out (None: adopted
    whole), in the order it adopted them."""
    rows = conn.execute(
        "SELECT part, adopted_at, site, excluded FROM job_parts WHERE job_id = ? ORDER BY adopted_at, sitemap",
        (job_id,),
    ).fetchall()
    for body, at, site, excluded in rows:
        left_out = frozenset(json.loads(excluded)) if excluded is not None else None
        yield SitemapPart.model_validate_json(body), datetime.fromisoformat(at), site, left_out


def adoptions(conn: sqlite3.Connection, site: str, known: dict[tuple[str, ...], Lineage] | None = None) -> Adoptions:
    """The lineage of each current part of the site whose records read otherwise than stored (adopted, or
    holding earlier jobs' records), by sitemap URL. ``known``: lineages read before from this state file, by
    (site, sitemap, part, adoption), each fixed once made: only the others are read and parsed."""
    rows = conn.execute(
        "SELECT sitemap, json_extract(part, '$.job_id'), json_extract(part, '$.made_at'), adopted_by, adopted_at"
        " FROM crawl_parts WHERE site = ? AND part IS NOT NULL"
        " AND (adopted_by IS NOT NULL OR json_array_length(part, '$.inherits') > 0)",
        (site,),
    ).fetchall()
    lineages = {}
    for sitemap, made_by, made_at, job, at in rows:
        stamp = (site, sitemap, made_by, made_at, job or "", at or "")
        lineage = known.get(stamp) if known is not None else None
        if lineage is None:
            body, excluded = conn.execute(
                "SELECT part, adopted_except FROM crawl_parts WHERE site = ? AND sitemap = ?", (site, sitemap)
            ).fetchone()
            adopter = (job, datetime.fromisoformat(at)) if job else None
            left_out = json.loads(excluded) if excluded else ()
            lineage = Lineage.of(SitemapPart.model_validate_json(body), adopter, left_out)
            if known is not None:
                if len(known) >= _LINEAGES_KEPT:
                    known.clear()
                known[stamp] = lineage
        lineages[sitemap] = lineage
    return Adoptions(lineages)


def _makers(part: SitemapPart) -> str:
    """The jobs whose records the part holds, as ``job_parts.makers`` keeps them (a JSON array)."""
    return json.dumps([part.job_id, *part.inherits])


def _text(at: datetime) -> str:
    """A time as the rows keep it: UTC, to the microsecond, in one form (so that text compares as time)."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")
