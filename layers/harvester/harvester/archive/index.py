"""A file of a job's columnar URL index (the folder ``jobs/<job>/index/``: a file a step of its end,
``pipeline.job_index``): one row per URL record, with Common Crawl's core column names, so the queries
written for Common Crawl's columnar index (DuckDB, Athena, Spark) read it as they are.

It is built at the job's end from its records as they are written (``urls.jsonl``): the lines are copied,
gzipped, to a temporary file as they go by (:class:`IndexLines`), and DuckDB turns that file into Parquet
with one ``COPY``, reading it in a stream with explicit column types and spilling its sort to disk. So
memory stays flat whatever the job's size, and no record is parsed again in Python (the records written
straight as JSON a batch at a time stay one write). DuckDB (~58 MB unzipped) is chosen over pyarrow and
numpy (over 200 MB, which with the rest of the layer would pass Lambda's 250 MB) and imported here only,
when a job ends: no handler's cold start loads it.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import zlib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import duckdb

#: A record of a URL the job listed and did not fetch: its ``fetch_time`` and ``http_status`` are the crawl
#: database's, from an earlier job; the index has them as ``last_fetch_time`` / ``last_fetch_status`` only,
#: so that ``fetch_time`` / ``fetch_status`` are this job's fetches (Common Crawl's meaning: its captures).
_CARRIED = "fetch_reason IN ('not_due', 'listed')"

#: The index's columns, in order: Common Crawl's names first (``content_digest`` is its base-32 SHA-1 without
#: the ``sha1:`` prefix, as Common Crawl writes it; ``warc_filename`` a document key: a path under the
#: documents folder, or the key in the bucket), then what Harvester knows of the URL. Each is (name, type,
#: the SQL that gives it from a record).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("url", "VARCHAR", "url"),
    ("url_surtkey", "VARCHAR", "surt(url)"),
    ("fetch_time", "TIMESTAMPTZ", f"CASE WHEN {_CARRIED} THEN NULL ELSE TRY_CAST(fetch_time AS TIMESTAMPTZ) END"),
    ("fetch_status", "SMALLINT", f"CASE WHEN {_CARRIED} THEN NULL ELSE TRY_CAST(http_status AS SMALLINT) END"),
    ("content_mime_type", "VARCHAR", "NULLIF(lower(trim(split_part(content_type, ';', 1))), '')"),
    ("content_digest", "VARCHAR", "regexp_replace(warc.payload_digest, '^sha1:', '')"),
    ("warc_filename", "VARCHAR", "warc.filename"),
    ("warc_record_offset", "BIGINT", 'warc."offset"'),
    ("warc_record_length", "BIGINT", "warc.length"),
    ("warc_record_type", "VARCHAR", "warc.record_type"),
    ("job_id", "VARCHAR", "{job_id}"),
    ("sitemap", "VARCHAR", "sitemap"),
    ("last_modified", "TIMESTAMPTZ", "TRY_CAST(last_modified AS TIMESTAMPTZ)"),
    ("change_frequency", "VARCHAR", "change_frequency"),
    ("priority", "DOUBLE", "priority"),
    ("crawl_state", "VARCHAR", "crawl_state"),
    ("change", "VARCHAR", "change"),
    ("status", "VARCHAR", "status"),
    ("error_message", "VARCHAR", "error_message"),
    ("fetch_reason", "VARCHAR", "fetch_reason"),
    ("last_fetch_time", "TIMESTAMPTZ", "TRY_CAST(fetch_time AS TIMESTAMPTZ)"),
    ("last_fetch_status", "SMALLINT", "TRY_CAST(http_status AS SMALLINT)"),
)
#: A job's own rows next to those it only carried over: this job's columns, for a row of a URL it did not
#: fetch (a part adopted, a not-due URL), what a job that lists and does not fetch writes (``carried``).
_OWN = ("change", "fetch_reason", "fetch_time", "fetch_status")

#: The fields of a record the columns read, as DuckDB reads them from the JSON (times as text, cast above:
#: a sitemap's lastmod may carry any offset; a field a record lacks is NULL, the others are not read).
_RECORD_FIELDS = {
    "url": "VARCHAR",
    "fetch_time": "VARCHAR",
    "http_status": "BIGINT",
    "content_type": "VARCHAR",
    "sitemap": "VARCHAR",
    "last_modified": "VARCHAR",
    "change_frequency": "VARCHAR",
    "priority": "DOUBLE",
    "crawl_state": "VARCHAR",
    "change": "VARCHAR",
    "status": "VARCHAR",
    "error_message": "VARCHAR",
    "fetch_reason": "VARCHAR",
    "warc": 'STRUCT(filename VARCHAR, "offset" BIGINT, length BIGINT, record_type VARCHAR, payload_digest VARCHAR)',
}

#: :func:`harvester.archive.warc.surt` as DuckDB macros: the key is made in DuckDB, since a Python function
#: called from DuckDB needs numpy, which the layer has no room for (tests/archive/test_index.py compares
#: the two on URLs of every shape).
SURT_SQL = r"""
CREATE MACRO surt_host(u) AS
    lower(trim(regexp_extract(u, '^[^:/?#]+://(?:[^@/?#]*@)?(\[[^\]/?#]*\]|[^:/?#]*)', 1), '[]'));
CREATE MACRO surt_labels(h) AS string_split(trim(h, '.'), '.');
CREATE MACRO surt_key(l) AS
    array_to_string(list_reverse(CASE WHEN l[1] = 'www' AND len(l) > 2 THEN l[2:] ELSE l END), ',');
CREATE MACRO surt_port(u) AS TRY_CAST(
    NULLIF(regexp_extract(u, '^[^:/?#]+://(?:[^@/?#]*@)?(?:\[[^\]/?#]*\]|[^:/?#]*):([0-9]+)', 1), '') AS INTEGER);
CREATE MACRO surt_default(u) AS
    CASE lower(regexp_extract(u, '^([^:/?#]+)://', 1)) WHEN 'http' THEN 80 WHEN 'https' THEN 443 END;
CREATE MACRO surt_path(u) AS lower(coalesce(NULLIF(regexp_extract(u, '^[^:/?#]+://[^/?#]*([^?#]*)', 1), ''), '/'));
CREATE MACRO surt_query(u) AS array_to_string(
    list_sort(list_filter(string_split(lower(regexp_extract(u, '^[^?#]*\?([^#]*)', 1)), '&'), lambda q: q <> '')), '&');
CREATE MACRO surt(u) AS surt_key(surt_labels(surt_host(u)))
    || CASE WHEN surt_port(u) > 0 AND surt_port(u) IS DISTINCT FROM surt_default(u) THEN ':' || surt_port(u) ELSE '' END
    || ')' || surt_path(u) || CASE WHEN surt_query(u) <> '' THEN '?' || surt_query(u) ELSE '' END;
"""

#: What DuckDB may hold while it sorts the rows; past it, it spills to its temporary folder. A job ends in
#: a 512 MB Lambda function whose engine has its own share.
MEMORY_LIMIT = "128MB"
#: Rows of a row group, in both passes: the writer holds one row group per thread until it is written.
ROW_GROUP_ROWS = 10_000
#: Names of the temporary tables of URLs left out (``_kept``), and the rows inserted in one statement.
_TABLES = itertools.count()
_INSERTED = 1000
#: The longest record line the JSON reader takes (its buffers are twice this): a URL record with its
#: extensions is a few KB; one with a thousand images' captions stays far below.
MAX_RECORD_BYTES = 4 * 1024 * 1024


class IndexLines:
    """A gzipped temporary copy of a job's record lines, for :func:`build_index`: a file object the record
    writer's lines are also written to (``write``). Level 1: the copy costs a fraction of the records'
    writing and is small on disk (Lambda's /tmp holds the records' own spooled copy too)."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = tempfile.mkdtemp(prefix="harvest-index-", dir=folder)
        self.path = Path(self.folder) / "records.jsonl.gz"
        self._file = self.path.open("wb")
        self._gzip = zlib.compressobj(1, zlib.DEFLATED, 31)  # (31: a gzip member, which DuckDB reads)
        self.written = 0  # bytes of lines

    def write(self, data: bytes) -> int:
        self._file.write(self._gzip.compress(data))
        self.written += len(data)
        return len(data)

    def finish(self) -> Path:
        """The file, complete."""
        if not self._file.closed:
            self._file.write(self._gzip.flush())
            self._file.close()
        return self.path

    def close(self) -> None:
        """Removes the copy and whatever was built beside it."""
        if not self._file.closed:
            self._file.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> IndexLines:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def carried(kind: str) -> dict[str, str]:
    """This job's columns (``_OWN``) of a row made ahead (a part's) for a URL the job lists and does not fetch:
    its change and reason, the job's ``kind`` (an SQL literal: ``not_due`` or ``listed``), and no fetch of
    its own."""
    return {
        "change": kind,
        "fetch_reason": kind,
        "fetch_time": "CAST(NULL AS TIMESTAMPTZ)",
        "fetch_status": "CAST(NULL AS SMALLINT)",
    }


class MadeRows(NamedTuple):
    """Index rows made ahead of a job (``RowMaker``: a sitemap part's), as a job's index takes them: the
    file, the ``change`` its records have in this job, and the URLs whose rows it leaves out (a part adopted
    in part)."""

    path: Path
    change: str
    excluded: Collection[str] = ()


class Tee:
    """Writes to two files at once: the job's records and their copy for the index."""

    def __init__(self, first: object, second: IndexLines) -> None:
        self.first = first
        self.second = second

    def write(self, data: bytes) -> int:
        self.second.write(data)
        return self.first.write(data)  # type: ignore[attr-defined, no-any-return]


def build_index(
    records: Path | None,
    out: Path,
    *,
    job_id: str,
    gzipped: bool = True,
    rows: Sequence[MadeRows] = (),
    keep: Path | None = None,
    sorted_rows: Path | None = None,
) -> int:
    """Writes the Parquet index of the record lines in ``records`` (JSON Lines, gzipped or not; None for a
    job whose every row is in ``rows``) to ``out``,
    sorted by SURT key as Common Crawl's is (a URL's or a host's rows are then in few row groups); returns
    its row count. ``rows``: index rows made already (the Parquet files of the job's adopted parts, but
    for the URLs each leaves out); they join the records' rows. ``keep``:
    where to leave the records' own rows, unsorted (``RowMaker.split`` makes parts' rows of them).
    ``sorted_rows``: an index of exactly ``rows`` built before (by another job): its rows, in its order, are
    this one's, with this job's ``job_id`` and ``change`` (the records have no rows of their own).

    In two passes, so that memory stays flat whatever the job's size: the lines become unsorted Parquet rows
    (DuckDB's JSON reader and its sort at once hold more than its memory limit), then the sort reads those
    and the rows made already as one reader of every file, each row made final as it streams in (the job,
    its change, the URLs a part leaves out), spilling to disk past the limit (a sort fed by a union of
    readers runs out of memory where one reader of the same rows does not). Small row groups and one thread
    keep the writer's buffers small (bench/index_memory.py measures the peak)."""
    con = _connect(out.parent)
    unsorted = out.with_name(out.name + ".unsorted")
    try:
        if sorted_rows is not None:
            change = rows[0].change if rows else None
            con.execute("SET preserve_insertion_order = true")
            own = ", ".join(f"{sql} AS {name}" for name, sql in carried(_literal(change or "")).items())
            (count,) = con.execute(  # type: ignore[misc]
                f"COPY (SELECT * REPLACE ({_literal(job_id)} AS job_id, {own})"
                f" FROM read_parquet({_literal(str(sorted_rows))}))"
                f" TO {_literal(str(out))} (FORMAT PARQUET, COMPRESSION ZSTD, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
            ).fetchone()
            return int(count)
        con.execute(SURT_SQL)
        files: list[tuple[Path, Collection[str]]] = []
        if records is not None:
            _unsorted_rows(con, _json_source(records, gzipped), unsorted, job_id=job_id)
            files.append((unsorted, ()))
        files += [(made.path, made.excluded) for made in rows]
        if rows:  # (one reader of every file, its rows made final as they stream into the sort)
            own = ", ".join(
                "CASE filename "
                + " ".join(
                    f"WHEN {_literal(str(made.path))} THEN {carried(_literal(made.change))[name]}" for made in rows
                )
                + f" ELSE {name} END AS {name}"
                for name in _OWN
            )
            source = (
                f"SELECT * EXCLUDE (filename) REPLACE ({_literal(job_id)} AS job_id, {own}) FROM {_kept(con, files)}"
            )
        else:
            source = f"SELECT * FROM read_parquet({_literal(str(unsorted))})"
        count = _sorted_copy(con, source, out)
        if keep is not None and unsorted.exists():
            unsorted.replace(keep)
        return count
    finally:
        con.close()
        unsorted.unlink(missing_ok=True)


def merge_index(files: Sequence[Path], out: Path) -> int:
    """Writes the rows of a job's index files (each sorted: ``job_index``) to ``out`` as one file sorted by SURT
    key, as an end in one step writes it; returns its row count. DuckDB's sort spills to disk past its limit."""
    con = _connect(out.parent)
    try:
        paths = ", ".join(_literal(str(path)) for path in files)
        return _sorted_copy(con, f"SELECT * FROM read_parquet([{paths}])", out)
    finally:
        con.close()


def _sorted_copy(con: duckdb.DuckDBPyConnection, source: str, out: Path) -> int:
    """The rows of the SQL ``source`` written to ``out`` as an index file, sorted by SURT key; their count."""
    (count,) = con.execute(  # type: ignore[misc]
        f"COPY ({source} ORDER BY url_surtkey, url)"
        f" TO {_literal(str(out))} (FORMAT PARQUET, COMPRESSION ZSTD, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
    ).fetchone()
    return int(count)


class RowMaker:
    """Index rows made ahead of a job, for records whose lines a later job writes (a sitemap's part): the
    unsorted rows of ``build_index``'s first pass, without a job (``job_id`` and ``change`` empty, set by the
    job whose index takes them). One DuckDB for every file it makes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._con: duckdb.DuckDBPyConnection | None = None

    def make(self, records: Path, out: Path) -> int:
        """The rows of the record lines in ``records`` (JSON Lines), written to ``out``; their count."""
        return _unsorted_rows(self._connection(), _json_source(records, False), out, job_id=None)

    def split(
        self,
        rows: Path | None,
        groups: dict[str, int],
        out: Path,
        *,
        kept: Mapping[int, tuple[Path, Collection[str]]] | None = None,
    ) -> Path | None:
        """The rows of ``rows`` (``build_index``'s unsorted rows, kept; None: none) whose ``sitemap`` is in
        ``groups``, without their job's columns, in one file ``out`` sorted by group (a ``part`` column: each
        group's rows are then read with ``take``, its row groups found by their statistics); with, for a group
        in ``kept``, the rows of that file (a part's) but those of the URLs given (the part a job makes of one
        it adopted in part). One query for them all, its sort spilled to disk past the memory limit (a write
        partitioned by group holds a row group's buffer for each group: more than the limit for a few hundred
        sitemaps). ``out``, or None when there is nothing to split."""
        sources = []
        if rows is not None:
            values = ", ".join(f"({_literal(sitemap)}, {n})" for sitemap, n in groups.items())
            sources.append(
                "SELECT r.* REPLACE (CAST(NULL AS VARCHAR) AS job_id, CAST(NULL AS VARCHAR) AS change),"
                f" g.n AS part FROM read_parquet({_literal(str(rows))}) r JOIN (VALUES {values}) g(sitemap, n)"
                " ON r.sitemap = g.sitemap"
            )
        if kept:
            numbers = ", ".join(f"({_literal(str(path))}, {int(n)})" for n, (path, _) in kept.items())
            source = _kept(self._connection(), list(kept.values()))
            sources.append(
                f"SELECT k.* EXCLUDE (filename), m.n AS part FROM {source} k"
                f" JOIN (VALUES {numbers}) m(file, n) ON k.filename = m.file"
            )
        if not sources:
            return None
        self._connection().execute(
            f"COPY ({' UNION ALL BY NAME '.join(sources)} ORDER BY part) TO {_literal(str(out))}"
            f" (FORMAT PARQUET, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
        )
        return out

    def take(self, split: Path, group: int, out: Path) -> int:
        """The rows of one group of a ``split`` file, without its ``part`` column, written to ``out``; their
        count (none: no file)."""
        (count,) = (
            self._connection()
            .execute(  # type: ignore[misc]
                f"COPY (SELECT * EXCLUDE (part) FROM read_parquet({_literal(str(split))}) WHERE part = {int(group)})"
                f" TO {_literal(str(out))} (FORMAT PARQUET, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
            )
            .fetchone()
        )
        if not count:
            out.unlink(missing_ok=True)
        return int(count)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = _connect(self.folder)
            self._con.execute(SURT_SQL)
            # (a split file's footer read once for all the groups ``take`` copies out of it, not once a group)
            self._con.execute("SET parquet_metadata_cache = true")
        return self._con


def _kept(con: duckdb.DuckDBPyConnection, files: Sequence[tuple[Path, Collection[str]]]) -> str:
    """A SQL source of the rows of the Parquet files (read as they are: a file of a partitioned folder takes
    no column from its path), with a ``filename`` column, but those of each file's URLs given: one scan of
    them all, less an anti-join with a temporary table of the (file, URL) pairs left out (a join for each
    file, or a list of literals, holds more memory than an index build has)."""
    paths = ", ".join(_literal(str(path)) for path, _ in files)
    scan = f"read_parquet([{paths}], filename = true, hive_partitioning = false)"
    pairs = [f"({_literal(str(path))}, {_literal(url)})" for path, excluded in files for url in excluded]
    if not pairs:
        return scan
    table = f"excluded_{next(_TABLES)}"
    con.execute(f"CREATE TEMP TABLE {table} (file VARCHAR, url VARCHAR)")
    for start in range(0, len(pairs), _INSERTED):
        con.execute(f"INSERT INTO {table} VALUES {', '.join(pairs[start : start + _INSERTED])}")
    return f"(SELECT r.* FROM {scan} r ANTI JOIN {table} e ON r.filename = e.file AND r.url = e.url)"


def _json_source(records: Path, gzipped: bool) -> str:
    fields = ", ".join(f"{_literal(name)}: {_literal(kind)}" for name, kind in _RECORD_FIELDS.items())
    compression = "gzip" if gzipped else "uncompressed"
    return (
        f"read_json({_literal(str(records))}, format = 'newline_delimited', compression = '{compression}',"
        f" maximum_object_size = {MAX_RECORD_BYTES}, columns = {{{fields}}})"
    )


def _unsorted_rows(con: duckdb.DuckDBPyConnection, source: str, out: Path, *, job_id: str | None) -> int:
    job = _literal(job_id) if job_id is not None else "NULL"
    selected = ", ".join(
        f"CAST({'NULL' if job_id is None and name == 'change' else sql.format(job_id=job)} AS {kind}) AS {name}"
        for name, kind, sql in COLUMNS
    )
    target = f"{_literal(str(out))} (FORMAT PARQUET, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
    (count,) = con.execute(f"COPY (SELECT {selected} FROM {source}) TO {target}").fetchone()  # type: ignore[misc]
    return int(count)


def _connect(work: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose every file is under ``work`` (on Lambda only /tmp is writable: DuckDB's
    home, where it would look for extensions, and its spill folder go there)."""
    import duckdb  # (here only: see the module's docstring)

    spill = work / "duckdb-spill"
    spill.mkdir(exist_ok=True)
    con = duckdb.connect(
        config={
            "home_directory": str(work),
            "temp_directory": str(spill),
            "memory_limit": MEMORY_LIMIT,
            "threads": 1,  # (each thread holds its own reader and writer buffers: see build_index)
            "preserve_insertion_order": False,
            "autoinstall_known_extensions": False,
        }
    )
    con.execute("SET TimeZone = 'UTC'")
    return con


def _literal(text: str) -> str:
    """Text as a SQL string literal (DuckDB binds no parameter into a COPY or a table function's options)."""
    return "'" + text.replace("'", "''") + "'"
