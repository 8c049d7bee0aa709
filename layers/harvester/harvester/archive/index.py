"""A job's columnar URL index (``jobs/<job>/index.parquet``): one row per URL record of the job, with Common
Crawl's core column names, so the queries written for Common Crawl's columnar index (DuckDB, Athena, Spark)
read it as they are.

It is built at the job's end from its records as they are written (``urls.jsonl``): the lines are copied,
gzipped, to a temporary file as they go by (:class:`IndexLines`), and DuckDB turns that file into Parquet
with one ``COPY``, reading it in a stream with explicit column types and spilling its sort to disk. So
memory stays flat whatever the job's size, and no record is parsed again in Python (the records written
straight as JSON a batch at a time stay one write). DuckDB (~58 MB unzipped) is chosen over pyarrow and
numpy (over 200 MB, which with the rest of the layer would pass Lambda's 250 MB) and imported here only,
when a job ends: no handler's cold start loads it.
"""

from __future__ import annotations

import shutil
import tempfile
import zlib
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

#: The index's columns, in order: Common Crawl's names first (``content_digest`` is its base-32 SHA-1 without
#: the ``sha1:`` prefix, as Common Crawl writes it; ``warc_filename`` a document key: a path under the
#: documents folder, or the key in the bucket), then what Harvester knows of the URL. Each is (name, type,
#: the SQL that gives it from a record).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("url", "VARCHAR", "url"),
    ("url_surtkey", "VARCHAR", "surt(url)"),
    ("fetch_time", "TIMESTAMPTZ", "TRY_CAST(fetch_time AS TIMESTAMPTZ)"),
    ("fetch_status", "SMALLINT", "TRY_CAST(http_status AS SMALLINT)"),
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
)

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

    def write(self, data: bytes) -> int:
        self._file.write(self._gzip.compress(data))
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


class Tee:
    """Writes to two files at once: the job's records and their copy for the index."""

    def __init__(self, first: object, second: IndexLines) -> None:
        self.first = first
        self.second = second

    def write(self, data: bytes) -> int:
        self.second.write(data)
        return self.first.write(data)  # type: ignore[attr-defined, no-any-return]


def build_index(records: Path, out: Path, *, job_id: str, gzipped: bool = True) -> int:
    """Writes the Parquet index of the record lines in ``records`` (JSON Lines, gzipped or not) to ``out``,
    sorted by SURT key as Common Crawl's is (a URL's or a host's rows are then in few row groups); returns
    its row count.

    In two passes, so that memory stays flat whatever the job's size: the lines become unsorted Parquet
    rows (DuckDB's JSON reader and its sort at once hold more than its memory limit), which are then
    sorted, spilling to disk past the limit. Small row groups and one thread keep the writer's buffers
    small (bench/index_memory.py measures the peak)."""
    con = _connect(out.parent)
    unsorted = out.with_name(out.name + ".unsorted")
    try:
        con.execute(SURT_SQL)
        fields = ", ".join(f"{_literal(name)}: {_literal(kind)}" for name, kind in _RECORD_FIELDS.items())
        selected = ", ".join(
            f"CAST({sql.format(job_id=_literal(job_id))} AS {kind}) AS {name}" for name, kind, sql in COLUMNS
        )
        compression = "gzip" if gzipped else "uncompressed"
        source = (
            f"read_json({_literal(str(records))}, format = 'newline_delimited', compression = '{compression}',"
            f" maximum_object_size = {MAX_RECORD_BYTES}, columns = {{{fields}}})"
        )
        con.execute(
            f"COPY (SELECT {selected} FROM {source})"
            f" TO {_literal(str(unsorted))} (FORMAT PARQUET, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
        )
        con.execute(
            f"COPY (SELECT * FROM read_parquet({_literal(str(unsorted))}) ORDER BY url_surtkey, url)"
            f" TO {_literal(str(out))} (FORMAT PARQUET, COMPRESSION ZSTD, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
        )
        (rows,) = con.execute(f"SELECT count(*) FROM read_parquet({_literal(str(out))})").fetchone()  # type: ignore[misc]
        return int(rows)
    finally:
        con.close()
        unsorted.unlink(missing_ok=True)


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
