"""The one SQLite file under ``--state-dir`` that holds a local crawl's state and its queue.

Keeping both in one file is what makes a local crawl resumable like a Scrapy JOBDIR: every write the
engine makes is a committed transaction, so killing the process loses at most the work in flight, which
the queue hands out again on the next run. WAL mode lets ``harvest report`` read while a crawl writes.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harvester.patience import PATIENCE, Busy

log = logging.getLogger(__name__)

SCHEMA_VERSION = 12
#: Seconds SQLite waits for another connection's lock before a write is refused; a write waits at most
#: LOCK_WAIT_MAX in all (the patience's back-offs between), then it is raised as Busy.
BUSY_TIMEOUT = 30.0
LOCK_WAIT_MAX = 60.0
CACHE_KIB = 8 * 1024
WAL_PAGES = 32768  # 128 MiB
#: Versions this one opens, adding what they lack (tables, indexes) and rebuilding ``urls`` and
#: ``crawl_urls`` (below).
_UPGRADES = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}

#: The job's URL records are found by key only while they are open (the page worker claims and settles
#: them): a final record is only ever read with all of its job's. So the key index is partial, and the
#: records a listing makes final at once (a job that fetches nothing, a URL not due) are not rows here at
#: all but one ``url_batches`` row per batch (since version 5); a job's de-duplication is the store's (a
#: KeySet). A table of version 2 or below has a primary key on (job_id, key): it is rebuilt, once, rows
#: in the same order. Since version 6 a batch of records written straight as JSON (``ListedRow``)
#: keeps their change-feed lines and counts by kind beside them (``feed``, ``kinds``; NULL for the others
#: and for batches of version 5, whose records the job's end reads one by one).
_REBUILD_URLS = """
DROP INDEX IF EXISTS urls_by_status;
ALTER TABLE urls RENAME TO urls_before_v3;
"""
_COPY_URLS = """
INSERT INTO urls (job_id, key, status, lease_token, lease_until, body)
    SELECT job_id, key, status, lease_token, lease_until, body FROM urls_before_v3 ORDER BY rowid;
DROP TABLE urls_before_v3;
"""

#: A site's crawl records are found by their URL, not by a hash of it: a sitemap lists its URLs mostly in
#: an order near theirs (by path, by date, by id), so a batch's index inserts fall on a few neighbouring
#: pages where hash keys would scatter them, one page written per URL per commit. A URL in SQLite has no
#: size limit to fit (DynamoDB's sort key has, and keeps the hash). A table of version 3 or below, keyed by
#: the hash, is rebuilt, once, rows in the same order.
_REBUILD_CRAWL_URLS = "ALTER TABLE crawl_urls RENAME TO crawl_urls_before_v4"
_COPY_CRAWL_URLS = """
INSERT INTO crawl_urls (site, url, version, body)
    SELECT site, json_extract(body, '$.url'), version, body FROM crawl_urls_before_v4 ORDER BY rowid;
DROP TABLE crawl_urls_before_v4;
"""

#: Since version 8 a message carries its page task's rank (pipeline.ranking): pages are received highest
#: first, FIFO within a rank.
_RANK_COLUMN = "ALTER TABLE messages ADD COLUMN priority REAL NOT NULL DEFAULT 0"

#: Since version 9 a message carries the host it will make a request to (its page's, its sitemap's): the
#: runner's dispatcher serves the host with the fewest requests in flight first (adapters.local.dispatch).
#: Messages an older version wrote have none (''): they are served as one host of their own.
_HOST_COLUMN = "ALTER TABLE messages ADD COLUMN host TEXT NOT NULL DEFAULT ''"

#: Since version 10 a job counts the URLs it did not fetch by rule (robots.txt, the address policy) apart
#: from its failures.
_EXCLUDED_COLUMN = "ALTER TABLE counters ADD COLUMN urls_excluded INTEGER NOT NULL DEFAULT 0"

#: A job's end in steps keeps how far it got beside its claim (``EndProgress``).
_PROGRESS_COLUMN = "ALTER TABLE job_ends ADD COLUMN progress TEXT"

_SUMMARY_COLUMNS = """
ALTER TABLE url_batches ADD COLUMN feed BLOB;
ALTER TABLE url_batches ADD COLUMN kinds TEXT
"""

#: Since version 12 a part may be adopted in part: the URLs its latest adoption, and each job's, left out, and
#: the jobs whose records a job's adoption holds (the part's maker and those it inherits).
_EXCEPT_COLUMNS = """
ALTER TABLE crawl_parts ADD COLUMN adopted_except TEXT;
ALTER TABLE job_parts ADD COLUMN excluded TEXT;
ALTER TABLE job_parts ADD COLUMN makers TEXT
"""

_META = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
# (Since version 11 a site's sitemaps have parts, part_rows.py: three tables of their own, created.)
_SCHEMA = f"""
{_META};
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_fingerprint ON jobs (fingerprint, status);
CREATE TABLE IF NOT EXISTS counters (
    job_id TEXT PRIMARY KEY,
    urls_total INTEGER NOT NULL DEFAULT 0,
    urls_succeeded INTEGER NOT NULL DEFAULT 0,
    urls_failed INTEGER NOT NULL DEFAULT 0,
    urls_excluded INTEGER NOT NULL DEFAULT 0,
    sitemaps_total INTEGER NOT NULL DEFAULT 0,
    sitemaps_done INTEGER NOT NULL DEFAULT 0,
    sitemaps_ok INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sitemaps (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    status TEXT NOT NULL,
    lease_token TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, key)
);
CREATE INDEX IF NOT EXISTS sitemaps_by_status ON sitemaps (job_id, status);
CREATE TABLE IF NOT EXISTS urls (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    status TEXT NOT NULL,
    lease_token TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS urls_by_status ON urls (job_id, status);
CREATE UNIQUE INDEX IF NOT EXISTS urls_open ON urls (job_id, key) WHERE status IN ('pending', 'processing');
CREATE TABLE IF NOT EXISTS url_batches (
    job_id TEXT NOT NULL,
    keys TEXT NOT NULL,
    bodies TEXT NOT NULL,
    feed BLOB,
    kinds TEXT
);
CREATE INDEX IF NOT EXISTS url_batches_by_job ON url_batches (job_id);
CREATE TABLE IF NOT EXISTS url_extensions (
    job_id TEXT NOT NULL,
    url TEXT NOT NULL,
    kind TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (job_id, url, kind)
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    job_id TEXT NOT NULL,
    body TEXT NOT NULL,
    available_at REAL NOT NULL,
    in_flight INTEGER NOT NULL DEFAULT 0,
    receive_count INTEGER NOT NULL DEFAULT 0,
    priority REAL NOT NULL DEFAULT 0,
    host TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (job_id, queue, available_at);
CREATE INDEX IF NOT EXISTS messages_by_rank ON messages (job_id, queue, priority DESC, id);
CREATE INDEX IF NOT EXISTS messages_by_host ON messages (host, queue, priority DESC, id);
CREATE TABLE IF NOT EXISTS crawl_urls (
    site TEXT NOT NULL,
    url TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (site, url)
);
DROP INDEX IF EXISTS crawl_urls_by_key;
CREATE TABLE IF NOT EXISTS crawl_sitemaps (
    site TEXT NOT NULL,
    key TEXT NOT NULL,
    fetched_at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (site, key)
);
CREATE TABLE IF NOT EXISTS crawl_parts (
    site TEXT NOT NULL,
    sitemap TEXT NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0,
    writers TEXT NOT NULL DEFAULT '{{}}',
    part TEXT,
    adopted_by TEXT,
    adopted_at TEXT,
    adopted_except TEXT,
    PRIMARY KEY (site, sitemap)
);
CREATE TABLE IF NOT EXISTS part_keys (
    site TEXT NOT NULL,
    sitemap TEXT NOT NULL,
    made_by TEXT NOT NULL,
    keys TEXT NOT NULL,
    PRIMARY KEY (site, sitemap, made_by)
);
CREATE TABLE IF NOT EXISTS job_parts (
    job_id TEXT NOT NULL,
    sitemap TEXT NOT NULL,
    site TEXT NOT NULL,
    made_by TEXT NOT NULL,
    adopted_at TEXT NOT NULL,
    part TEXT NOT NULL,
    excluded TEXT,
    makers TEXT,
    PRIMARY KEY (job_id, sitemap)
);
CREATE TABLE IF NOT EXISTS crawl_sites (
    site TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS job_ends (
    job_id TEXT PRIMARY KEY,
    until REAL NOT NULL,
    progress TEXT
);
CREATE TABLE IF NOT EXISTS job_resumes (
    job_id TEXT PRIMARY KEY,
    after TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS schedules (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    due_at REAL
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (due_at) WHERE due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    job_id TEXT NOT NULL,
    body TEXT NOT NULL,
    reason TEXT NOT NULL,
    failed_at REAL NOT NULL
);
"""


class StateDirError(RuntimeError):
    """The state directory cannot be used (not a directory, not writable, a damaged or another version's file)."""


#: What the storage under a state directory answers when it cannot keep what is written: full, damaged,
#: unwritable. Not a failure of one task: every task after it would fail the same way.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})
_STORAGE_MESSAGES = ("disk is full", "disk I/O error", "malformed", "not a database", "readonly database")


def storage_failure(exc: BaseException) -> str | None:
    """Why the state directory's storage failed (full, damaged, read-only), or None for any other error."""
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
        text = str(exc)
        return text if any(m in text for m in _STORAGE_MESSAGES) else None
    if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
        return exc.strerror or str(exc)
    return None


class StateDirBusy(StateDirError):
    """Another crawl is using the state directory: a moment's condition, not a fault of the directory."""


class StorageFailed(StateDirError):
    """The storage under the state directory failed during a run (full, damaged, read-only). What was
    written before stays: each write is a transaction, so the same command resumes once it is mended."""

    def __init__(self, state_dir: Path, reason: str) -> None:
        super().__init__(f"{state_dir}: the state directory's storage failed: {reason}")
        self.state_dir = state_dir
        self.reason = reason


def connect(path: Path, *, durable: bool = True) -> sqlite3.Connection:
    """Opens (creating if needed) the state file. One connection per process, used from one thread.

    ``durable=False`` is for a file thrown away after the run (a discovery's): transactions stay atomic
    (their journal is kept in memory) but nothing is made to survive a crash."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StateDirError(f"the state directory {path.parent} is a file, not a directory") from None
    except OSError as exc:
        raise StateDirError(f"cannot create the state directory {path.parent}: {exc.strerror or exc}") from None
    if path.is_dir():
        raise StateDirError(f"the state file {path} is a directory")
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise StateDirError(f"cannot open the state file {path}: {exc}") from exc
    try:
        _prepare(conn, path, durable)
    except sqlite3.OperationalError as exc:  # read-only, locked, full, I/O: the file may be fine
        conn.close()
        raise StateDirError(f"cannot use the state file {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        conn.close()
        raise StateDirError(
            f"{path} is not a Harvester state file, or it is damaged ({exc}): move it aside, or give another"
            " --state-dir"
        ) from None
    return conn


def _prepare(conn: sqlite3.Connection, path: Path, durable: bool) -> None:
    """Settings, then the schema created or upgraded in one transaction."""
    # Listed URLs are written a batch at a time into the crawl records' index, where a sitemap listing its
    # URLs out of order dirties a page per URL a commit: the cache (8 MiB) keeps some from being read back,
    # and a WAL of 128 MiB keeps them from being copied and synced into the database every few commits.
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    if durable:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
    else:
        conn.execute("PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=OFF")
    conn.execute(_META)  # (the version is read before anything else is created)
    row = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
    version = int(row[0]) if row else SCHEMA_VERSION
    if version != SCHEMA_VERSION and version not in _UPGRADES:
        raise StateDirError(f"{path} was written by schema version {version}; this Harvester reads {SCHEMA_VERSION}")
    # One transaction: a file is upgraded completely or not at all.
    conn.execute("BEGIN IMMEDIATE")
    try:
        rebuild = "PRIMARY KEY" in (_table(conn, "urls") or "")
        rebuild_crawl = "key TEXT" in (_table(conn, "crawl_urls") or "url TEXT")
        batches = _table(conn, "url_batches")
        if batches is not None and "kinds TEXT" not in batches:
            _script(conn, _SUMMARY_COLUMNS)
        messages = _table(conn, "messages")
        if messages is not None and "priority REAL" not in messages:
            conn.execute(_RANK_COLUMN)
        if messages is not None and "host TEXT" not in messages:
            conn.execute(_HOST_COLUMN)
        counters = _table(conn, "counters")
        if counters is not None and "urls_excluded" not in counters:
            conn.execute(_EXCLUDED_COLUMN)
        parts = _table(conn, "crawl_parts")
        if parts is not None and "adopted_except" not in parts:
            _script(conn, _EXCEPT_COLUMNS)
        ends = _table(conn, "job_ends")
        if ends is not None and "progress TEXT" not in ends:
            conn.execute(_PROGRESS_COLUMN)
        if rebuild:
            _script(conn, _REBUILD_URLS)
        if rebuild_crawl:
            _script(conn, _REBUILD_CRAWL_URLS)
        _script(conn, _SCHEMA)
        if rebuild:
            _script(conn, _COPY_URLS)
        if rebuild_crawl:
            _script(conn, _COPY_CRAWL_URLS)
        if row is None or version != SCHEMA_VERSION:  # (a file already current stays unwritten: no commit to sync)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _table(conn: sqlite3.Connection, name: str) -> str | None:
    """The SQL that created table ``name``, or None when there is no such table."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row[0] if row else None


def _script(conn: sqlite3.Connection, script: str) -> None:
    """Runs the statements of ``script`` in the open transaction (``executescript`` would commit it)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


#: Keys per ``IN (...)`` list: below SQLite's bound on host parameters.
IN_CHUNK = 500


def select_in(db: sqlite3.Connection, sql: str, params: Sequence[Any], keys: Sequence[str]) -> Iterator[Any]:
    """The rows of ``sql`` (whose ``{marks}`` is the ``IN`` list, after ``params``) for all ``keys``, one
    query per ``IN_CHUNK`` of them: batches of listed URLs are read at once."""
    for start in range(0, len(keys), IN_CHUNK):
        chunk = keys[start : start + IN_CHUNK]
        yield from db.execute(sql.format(marks=",".join("?" * len(chunk))), (*params, *chunk))


#: SQLite's words for a database another connection holds (SQLITE_BUSY, SQLITE_LOCKED): a moment's wait.
_LOCKED_MESSAGES = ("database is locked", "database table is locked", "database is busy")


def locked(exc: BaseException) -> bool:
    """Whether SQLite refused for another connection's lock (after its busy timeout), not for a fault."""
    return isinstance(exc, sqlite3.OperationalError) and any(m in str(exc) for m in _LOCKED_MESSAGES)


class Transaction:
    """``with Transaction(conn):`` runs the block as one IMMEDIATE transaction (atomic on a crash).

    Another connection holding the file's write lock (a tool, a second program) is waited for by SQLite's
    busy timeout, and then within the process's patience (``harvester.patience``) as a throttled AWS
    service is, ``LOCK_WAIT_MAX`` in all; a lock held longer than that is raised as Busy: the step gives its
    work back without spending the site's attempts."""

    def __init__(self, conn: sqlite3.Connection, *, waits: bool = True) -> None:
        self.conn = conn
        #: False for a write with somewhere else to go at once (the queue's push, kept in memory) or that
        #: is asked again anyway (the queue's receive): Busy after SQLite's busy timeout alone.
        self.waits = waits

    def __enter__(self) -> sqlite3.Connection:
        tries, started = 0, time.monotonic()
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return self.conn
            except sqlite3.OperationalError as exc:
                if not locked(exc):
                    raise
                tries += 1
                if not self.waits or time.monotonic() - started >= LOCK_WAIT_MAX:
                    raise Busy("sqlite", "BEGIN IMMEDIATE", str(exc)) from exc
                PATIENCE.pause(tries, "sqlite", "BEGIN IMMEDIATE", str(exc))

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type:
            self.conn.execute("ROLLBACK")
            return
        try:
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            if locked(error):  # (nothing of the block was kept: it is undone, and the caller tries again later)
                self.conn.execute("ROLLBACK")
                raise Busy("sqlite", "COMMIT", str(error)) from error
            raise


class Checkpointer:
    """``with Checkpointer(path):`` copies the state file's WAL into the database on a thread of its own, with
    a connection of its own, while the block runs.

    Left to the writing connection (``wal_autocheckpoint``), that copy and its sync run inside whichever
    commit fills the WAL, on the one thread that also parses and decides. A PASSIVE checkpoint takes no
    lock a writer waits for, and SQLite runs it without the GIL, so here it overlaps the crawl's own work.
    The writer's autocheckpoint stays as the bound on the WAL should this thread fall behind or stop."""

    def __init__(self, path: Path, *, every: float = 0.2) -> None:
        self.path = path
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="harvest-checkpoint", daemon=True)

    def __enter__(self) -> Checkpointer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT)
        except sqlite3.Error as exc:
            log.warning("no checkpoints on a thread of their own", extra={"path": str(self.path), "error": str(exc)})
            return
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
            while not self._stop.wait(self.every):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:  # (the writer's own checkpoints carry on)
            log.warning("checkpoints on their own thread stopped", extra={"path": str(self.path), "error": str(exc)})
        finally:
            conn.close()
