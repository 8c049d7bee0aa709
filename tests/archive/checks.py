"""What a crawl's WARC output must be on either backend, checked the same way for both: every file passes
``warcio check`` and ``warcio index`` (the CDXJ beside it names each of its captures), the Parquet index
counts what the job counted, and each capture it names reads back as the server sent it, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from harvester.archive.results import index_folder
from harvester.archive.warc import parse_record
from harvester.demo.live import LiveSite


def warcio(command: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warcio.cli", command, str(path)], capture_output=True, text=True, check=False
    )


def check_warc_file(path: Path, cdxj: bytes) -> int:
    """``warcio check`` and ``warcio index`` pass, and the file's captures are those its CDXJ lines name (at
    the same offsets); returns how many of them are the live site's pages (``/pages/``: the robots.txt and
    sitemaps a job read are archived too)."""
    checked = warcio("check", path)
    assert checked.returncode == 0, f"warcio check {path.name}: {checked.stdout}{checked.stderr}"
    indexed = warcio("index", path)
    assert indexed.returncode == 0, f"warcio index {path.name}: {indexed.stderr}"
    records = [json.loads(line) for line in indexed.stdout.splitlines()]
    assert records[0]["warc-type"] == "warcinfo"
    captures = [(r["warc-target-uri"], int(r["offset"])) for r in records if r["warc-type"] in ("response", "revisit")]
    named = [json.loads(line.split(" ", 2)[2]) for line in cdxj.decode().splitlines()]
    assert captures == [(n["url"], int(n["offset"])) for n in named]
    return sum(1 for url, _ in captures if "/pages/" in url)


def index_rows(parquet: Path) -> list[dict[str, Any]]:
    """The index's rows as dicts (times as text: reading them as datetimes would need pytz): of one file, or
    of a job's index folder (its files in order, each file's rows in theirs)."""
    source = f"read_parquet('{parquet}')"
    if parquet.is_dir():
        source = (
            f"(SELECT * EXCLUDE (filename, file_row_number) FROM read_parquet('{parquet}/*.parquet',"
            " filename = true, file_row_number = true) ORDER BY filename, file_row_number)"
        )
    con = duckdb.connect()
    try:
        cursor = con.execute(
            "SELECT * REPLACE (fetch_time::VARCHAR AS fetch_time, last_modified::VARCHAR AS last_modified,"
            f" last_fetch_time::VARCHAR AS last_fetch_time) FROM {source}"
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()


def check_index_counts(parquet: Path, result: dict[str, Any], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DuckDB reads the index; its rows, its counts by status and by HTTP status are the job's; returns them."""
    rows = index_rows(parquet)
    assert len(rows) == result["total_urls"] == len(records)
    by_status = Counter(r["status"] for r in rows)
    assert by_status == Counter(
        {
            k: v
            for k, v in {
                "completed": result["successful_processing"],
                "failed": result["failed_processing"],
                "excluded": result["excluded_processing"],
            }.items()
            if v
        }
    )
    assert Counter(r["fetch_status"] for r in rows) == Counter(r.get("http_status") for r in records)
    assert Counter(r["change"] for r in rows) == Counter(
        {k: v for k, v in result["changes"].items() if v and k != "removed"}
    )
    assert {r["job_id"] for r in rows} == {result["job_id"]}
    by_url = {r["url"]: r for r in records}
    for row in rows:
        warc = by_url[row["url"]].get("warc")
        if warc is None:
            assert row["warc_filename"] is None and row["warc_record_offset"] is None and row["content_digest"] is None
        else:
            assert (row["warc_filename"], row["warc_record_offset"], row["warc_record_length"]) == (
                warc["filename"],
                warc["offset"],
                warc["length"],
            )
            assert row["warc_record_type"] == warc["record_type"]
            assert "sha1:" + row["content_digest"] == warc["payload_digest"]
    assert [r["url_surtkey"] for r in rows] == sorted(r["url_surtkey"] for r in rows)
    return rows


def check_read_back(rows: list[dict[str, Any]], read: Callable[[str, int, int], bytes], site: LiveSite) -> int:
    """Each response record the index names, read by its offset and length alone, is what the server sends
    for the page: status, headers and body byte for byte (a gzip page's gzip bytes); returns how many."""
    read_back = 0
    for row in rows:
        if row["warc_record_type"] != "response":
            continue
        stored = parse_record(read(row["warc_filename"], row["warc_record_offset"], row["warc_record_length"]))
        status, headers, body = site.answer(row["url"].removeprefix(site.base), {})
        assert stored.record_type == "response" and stored.url == row["url"]
        assert stored.status == status == row["fetch_status"]
        assert stored.body == body, row["url"]
        sent = dict(stored.headers)
        assert all(sent.get(name) == value for name, value in headers.items()), (sent, headers)
        assert sent["Content-Length"] == str(len(body))
        read_back += 1
    return read_back


def stored_index(documents: Any, job_id: str, into: Path) -> Path:
    """The job's index folder as its end stored it (``documents``: a document store), copied into the folder
    ``into``: each of its files, under its name."""
    into.mkdir(parents=True, exist_ok=True)
    keys = list(documents.keys(index_folder(job_id)))
    assert keys, f"job {job_id} has no index"
    for key in keys:
        (into / key.rsplit("/", 1)[-1]).write_bytes(documents.get(key))
    return into
