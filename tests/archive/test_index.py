"""The Parquet URL index (harvester.archive.index): its SURT key made in DuckDB is the Python one, its columns
and types are Common Crawl's, and a record without a capture has null WARC columns."""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import pytest

from harvester.archive.index import COLUMNS, SURT_SQL, IndexLines, Tee, build_index
from harvester.archive.warc import surt
from tests.archive.checks import index_rows

URLS = [
    "https://www.Example.com/a?b=2&a=1",
    "http://example.com",
    "http://www.com/",
    "https://a.b.www.example.co.uk:8443/X/Y?z&&A=1#frag",
    "http://127.0.0.1:34137/pages/1.html",
    "http://[::1]:8080/p",
    "https://user:pw@Host.example.org:443/p?q",
    "http://example.com:80/",
    "https://example.com:80/",
    "https://example.com/%7Efoo?b=%20&a",
    "http://example.com/?",
    "http://example.com/p?x=1#a?b",
    "https://www.example.com./",
    "https://ex.com/a;b?c=d&c=a",
    "https://bücher.example/ä?ö=1",
]


def test_the_surt_key_duckdb_makes_is_the_python_one():
    con = duckdb.connect()
    con.execute(SURT_SQL)
    for url in URLS:
        assert con.execute("SELECT surt(?)", [url]).fetchone() == (surt(url),), url


WARC = {
    "filename": "warc/j/j-1-00000.warc.gz",
    "offset": 1241,
    "length": 532,
    "record_type": "response",
    "payload_digest": "sha1:72YKRO7M3FISATTMZ56YG6YC2ZDM7DB6",
    "date": "2026-01-01T00:00:00Z",
}
RECORDS = [
    {
        "url": "https://www.example.com/b",
        "status": "completed",
        "priority": 0.8,
        "http_status": 200,
        "content_type": "text/HTML; charset=utf-8",
        "fetch_time": "2026-01-01T00:00:00.5Z",
        "last_modified": "2025-05-01T10:00:00+05:30",
        "change_frequency": "daily",
        "sitemap": "https://www.example.com/sitemap.xml",
        "crawl_state": "fetched",
        "change": "new",
        "fetch_reason": "new",
        "warc": WARC,
        "extensions": {"news": {"title": "t"}},
    },
    {"url": "https://example.com/a", "status": "failed", "error_message": "HTTP 404 Not Found", "http_status": 404},
    {"url": "https://example.com/c", "status": "excluded", "error_message": "robots.txt", "priority": 0.5},
    {  # (not fetched by this job: what the crawl database knew of it, from an earlier job's fetch)
        "url": "https://example.com/d",
        "status": "completed",
        "http_status": 200,
        "fetch_time": "2025-12-01T00:00:00Z",
        "crawl_state": "fetched",
        "fetch_reason": "not_due",
        "change": "not_due",
    },
]


@pytest.mark.parametrize("gzipped", [True, False])
def test_an_index_has_common_crawls_columns_a_row_per_record_and_null_warc_columns_without_a_capture(
    tmp_path: Path, gzipped: bool
):
    lines = b"".join(orjson.dumps(r) + b"\n" for r in RECORDS)
    if gzipped:
        copy = IndexLines(str(tmp_path))
        out = bytearray()

        class Sink:
            def write(self, data: bytes) -> int:
                out.extend(data)
                return len(data)

        tee = Tee(Sink(), copy)
        tee.write(lines[:50])
        tee.write(lines[50:])
        records = copy.finish()
        assert bytes(out) == lines  # (the records as they are written, and their copy)
    else:
        records = tmp_path / "records.jsonl"
        records.write_bytes(lines)
    parquet = tmp_path / "index.parquet"

    assert build_index(records, parquet, job_id="j-1", gzipped=gzipped) == 4

    con = duckdb.connect()
    described = con.execute(f"DESCRIBE SELECT * FROM '{parquet}'").fetchall()
    expected = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}
    assert [(d[0], d[1]) for d in described] == [(name, expected.get(kind, kind)) for name, kind, _ in COLUMNS]
    rows = index_rows(parquet)
    assert [r["url_surtkey"] for r in rows] == ["com,example)/a", "com,example)/b", "com,example)/c", "com,example)/d"]
    fetched = rows[1]
    assert fetched == {
        "url": "https://www.example.com/b",
        "url_surtkey": "com,example)/b",
        "fetch_time": "2026-01-01 00:00:00.5+00",
        "fetch_status": 200,
        "content_mime_type": "text/html",
        "content_digest": "72YKRO7M3FISATTMZ56YG6YC2ZDM7DB6",
        "warc_filename": "warc/j/j-1-00000.warc.gz",
        "warc_record_offset": 1241,
        "warc_record_length": 532,
        "warc_record_type": "response",
        "job_id": "j-1",
        "sitemap": "https://www.example.com/sitemap.xml",
        "last_modified": "2025-05-01 04:30:00+00",
        "change_frequency": "daily",
        "priority": 0.8,
        "crawl_state": "fetched",
        "change": "new",
        "status": "completed",
        "error_message": None,
        "fetch_reason": "new",
        "last_fetch_time": "2026-01-01 00:00:00.5+00",
        "last_fetch_status": 200,
    }
    # A URL the job did not fetch: no fetch of this job's (Common Crawl's columns are its captures), the
    # crawl database's last one beside.
    carried = rows[3]
    assert (carried["fetch_time"], carried["fetch_status"], carried["fetch_reason"]) == (None, None, "not_due")
    assert (carried["last_fetch_time"], carried["last_fetch_status"]) == ("2025-12-01 00:00:00+00", 200)
    for row in (rows[0], rows[2]):
        assert all(row[name] is None for name in row if name.startswith("warc_") or name == "content_digest")
    assert (rows[0]["status"], rows[0]["fetch_status"], rows[0]["error_message"]) == (
        "failed",
        404,
        "HTTP 404 Not Found",
    )
    assert (rows[2]["status"], rows[2]["fetch_status"]) == ("excluded", None)


def test_the_copy_of_the_records_is_removed_when_done(tmp_path: Path):
    with IndexLines(str(tmp_path)) as copy:
        copy.write(b'{"url": "https://example.com/"}\n')
        folder = Path(copy.folder)
        assert copy.finish().exists()
    assert not folder.exists()


def test_an_index_of_more_rows_than_its_memory_holds_is_built_and_sorted(tmp_path, monkeypatch):
    """A job's end builds the index beside the engine in a 512 MB function: DuckDB sorts 300,000 rows
    under a memory limit they do not fit in (spilling to disk), and every row is there, in SURT order.
    (With the JSON reader, the sort and the writer in one pass, DuckDB ran out of memory here; the memory
    each build peaks at is bench/index_memory.py's.)"""
    monkeypatch.setattr("harvester.archive.index.MEMORY_LIMIT", "96MB")
    count = 300_000
    copy = IndexLines(str(tmp_path))
    for start in range(0, count, 10_000):
        copy.write(
            b"".join(
                orjson.dumps({"url": f"https://www.example.com/s-{i % 89}/a-{count - i}.html", "status": "completed"})
                + b"\n"
                for i in range(start, start + 10_000)
            )
        )
    parquet = tmp_path / "index.parquet"
    assert build_index(copy.finish(), parquet, job_id="j") == count
    keys = [key for (key,) in duckdb.connect().execute(f"SELECT url_surtkey FROM '{parquet}'").fetchall()]
    assert len(keys) == count and keys == sorted(keys)
    assert not (parquet.parent / "index.parquet.unsorted").exists()
    copy.close()


def test_an_index_of_records_and_many_parts_rows_with_urls_left_out_is_built_under_the_memory_limit(
    tmp_path, monkeypatch
):
    """A re-crawl's index: the rows of the few records it wrote, with the rows of the parts of sixty
    sitemaps it adopted (some in part: the URLs each leaves out have no row from it), sorted under the
    memory limit of a job's end. (A sort fed by a union of the two readers ran out of memory here.)"""
    from harvester.archive.index import MadeRows, RowMaker

    monkeypatch.setattr("harvester.archive.index.MEMORY_LIMIT", "64MB")
    per_part, parts = 5000, 60
    maker = RowMaker(tmp_path)
    made = []
    for n in range(parts):
        lines = tmp_path / f"part-{n}.jsonl"
        lines.write_bytes(
            b"".join(
                orjson.dumps({"url": f"https://www.example.com/s-{n}/p-{i}.html", "status": "completed"}) + b"\n"
                for i in range(per_part)
            )
        )
        maker.make(lines, tmp_path / f"part-{n}.parquet")
        left_out = (
            frozenset(f"https://www.example.com/s-{n}/p-{i}.html" for i in range(0, per_part, 100))
            if n % 2
            else frozenset()
        )
        made.append(MadeRows(tmp_path / f"part-{n}.parquet", "listed", left_out))
    maker.close()
    copy = IndexLines(str(tmp_path))
    copy.write(
        b"".join(
            orjson.dumps({"url": f"https://www.example.com/new-{i}", "change": "new"}) + b"\n" for i in range(4000)
        )
    )
    parquet = tmp_path / "index.parquet"
    expected = 4000 + parts * per_part - (parts // 2) * (per_part // 100)
    assert build_index(copy.finish(), parquet, job_id="j", rows=made) == expected
    con = duckdb.connect()
    keys = [key for (key,) in con.execute(f"SELECT url_surtkey FROM '{parquet}'").fetchall()]
    assert len(keys) == expected and keys == sorted(keys)
    assert con.execute(
        f"SELECT count(*) FROM '{parquet}' WHERE url = 'https://www.example.com/s-1/p-100.html'"
    ).fetchone() == (0,)
    assert con.execute(
        f"SELECT count(*) FROM '{parquet}' WHERE url = 'https://www.example.com/s-2/p-100.html'"
    ).fetchone() == (1,)
    assert con.execute(f"SELECT DISTINCT change FROM '{parquet}' ORDER BY 1").fetchall() == [("listed",), ("new",)]
    copy.close()


def test_a_jobs_rows_split_by_hundreds_of_sitemaps_under_the_memory_limit_lose_no_row(tmp_path, monkeypatch):
    """The parts of a job's end take their index rows from the job's, split by sitemap: 300 sitemaps of
    1,000 rows each, under a memory limit a write partitioned by sitemap ran out of (a row group's buffer for
    each sitemap), each sitemap's rows taken whole, and those of a sitemap not asked for left out."""
    import duckdb

    from harvester.archive.index import RowMaker

    monkeypatch.setattr("harvester.archive.index.MEMORY_LIMIT", "64MB")
    sitemaps, per = 300, 1000
    lines = tmp_path / "rows.jsonl"
    with lines.open("wb") as out:
        for i in range(sitemaps * per):  # (interleaved, as a job's records are)
            record = {
                "url": f"https://www.example.com/p-{i}.html",
                "sitemap": f"https://www.example.com/s-{i % sitemaps}.xml",
            }
            out.write(orjson.dumps({**record, "status": "completed", "crawl_state": "fetched"}) + b"\n")
    maker = RowMaker(tmp_path)
    rows = tmp_path / "rows.parquet"
    maker.make(lines, rows)
    groups = {f"https://www.example.com/s-{n}.xml": n for n in range(sitemaps - 1)}  # (the last one not asked)
    split = maker.split(rows, groups, tmp_path / "split.parquet")
    assert split is not None
    for n in (0, 7, 150, sitemaps - 2):
        taken = tmp_path / f"taken-{n}.parquet"
        assert maker.take(split, n, taken) == per
        urls = sorted(u for (u,) in duckdb.sql(f"SELECT url FROM '{taken}'").fetchall())
        assert urls == sorted(f"https://www.example.com/p-{i}.html" for i in range(n, sitemaps * per, sitemaps))
    assert maker.take(split, sitemaps - 1, tmp_path / "none.parquet") == 0
    assert not (tmp_path / "none.parquet").exists()
    maker.close()
