"""A local crawl's WARC output, its Parquet URL index, `harvest export` and `harvest get`, against a live
site on 127.0.0.1 that sends one page gzipped (Content-Encoding: gzip) and answers one with 404.

Two crawls: the first fetches every page (responses), the second with ``--full`` fetches them again
conditionally (304s and an identical payload: revisits)."""

from __future__ import annotations

import csv
import gzip
import io
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from warcio.archiveiterator import ArchiveIterator

from harvester.demo.live import LiveSite
from tests.archive.checks import check_index_counts, check_read_back, check_warc_file, index_rows
from tests.support import LOOPBACK, harvest, harvest_json, jsonl

GZIP_PAGE = "/pages/gz.html"
PLAIN_PAGE = "/pages/1.html"
NO_VALIDATORS = "/pages/plain.html"
MISSING_PAGE = "/pages/3.html"


@dataclass
class Crawled:
    site: LiveSite
    state: Path
    results: list[dict[str, Any]]

    @property
    def documents(self) -> Path:
        return self.state / "documents"

    def records(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        return jsonl(self.documents / "jobs" / job["job_id"] / "urls.jsonl")

    def warc_files(self, job: dict[str, Any]) -> list[Path]:
        return sorted((self.documents / "warc" / job["job_id"]).glob("*.warc.gz"))


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawled]:
    state = tmp_path_factory.mktemp("warc") / "state"
    site = LiveSite(pages=8)
    site.add(GZIP_PAGE, gzip_body=True)
    site.add(NO_VALIDATORS, etag=False, last_modified=False)
    with site.serving():
        site.fail(MISSING_PAGE, 404)
        results = []
        for extra in ((), ("--full",)):
            results.append(
                harvest_json("crawl", site.url("/"), "--state-dir", str(state), "--allow-network", LOOPBACK, *extra)
            )
        yield Crawled(site, state, results)


def test_every_warc_file_passes_warcio_check_and_index_and_its_cdxj_names_its_captures(crawled):
    for job in crawled.results:
        files = crawled.warc_files(job)
        assert files
        captures = sum(check_warc_file(f, Path(f"{f}.cdxj").read_bytes()) for f in files)
        kept = [r for r in crawled.records(job) if r.get("warc")]
        assert captures == len(kept) == 10  # (every page the site has, and the 404's answer)


def test_the_parquet_index_counts_what_the_job_counted_and_reads_back_byte_for_byte(crawled):
    site = crawled.site
    first, second = crawled.results
    assert first["url_index"] == str(crawled.documents / "jobs" / first["job_id"] / "index")
    rows = check_index_counts(Path(first["url_index"]), first, crawled.records(first))
    assert first["failed_processing"] == 1 and {r["fetch_status"] for r in rows} == {200, 404}

    def read(filename: str, offset: int, length: int) -> bytes:
        with (crawled.documents / filename).open("rb") as file:
            file.seek(offset)
            return file.read(length)

    assert check_read_back(rows, read, site) == 10  # (the 404's answer too, as the server sent it)
    gz = next(r for r in rows if r["url"] == site.url(GZIP_PAGE))
    member = read(gz["warc_filename"], gz["warc_record_offset"], gz["warc_record_length"])
    assert gzip.decompress(member).count(b"Content-Encoding: gzip") == 1
    assert gz["content_mime_type"] == "text/html" and gz["url_surtkey"].endswith(")/pages/gz.html")

    again = check_index_counts(Path(second["url_index"]), second, crawled.records(second))
    kinds = {r["url"]: r["warc_record_type"] for r in again if r["status"] == "completed"}
    assert set(kinds.values()) == {"revisit"} and len(kinds) == 9  # (304s, and one identical payload)
    assert {r["warc_filename"].split("/")[1] for r in again if r["warc_filename"]} == {second["job_id"]}


def export(crawled: Crawled, job: dict[str, Any], fmt: str, *more: str) -> subprocess.CompletedProcess[str]:
    return harvest("export", job["job_id"], "--format", fmt, "--state-dir", str(crawled.state), *more)


def captures_of(data: bytes) -> list[tuple[str, str, str]]:
    """The page captures of a WARC file (its robots.txt and sitemap captures left out)."""
    return [
        (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.rec_headers.get_header("WARC-Payload-Digest"))
        for r in ArchiveIterator(io.BytesIO(data))
        if r.rec_type in ("response", "revisit") and "/pages/" in r.rec_headers.get_header("WARC-Target-URI")
    ]


def test_export_warc_is_one_valid_file_with_every_capture_of_the_job(crawled, tmp_path):
    for job in crawled.results:
        out = tmp_path / f"{job['job_id']}.warc.gz"
        run = export(crawled, job, "warc", "--output", str(out))
        assert run.returncode == 0, run.stderr
        assert check_warc_file_whole(out)
        expected = [c for f in crawled.warc_files(job) for c in captures_of(f.read_bytes())]
        assert captures_of(out.read_bytes()) == expected and len(expected) == 10


def check_warc_file_whole(path: Path) -> bool:
    return subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(path)], capture_output=True).returncode == 0


def test_export_warc_leaves_out_a_tail_no_index_line_covers(crawled, tmp_path):
    """A run killed in the middle of a chunk leaves bytes past the last indexed record: not exported."""
    state = tmp_path / "state"
    shutil.copytree(crawled.state, state)
    job = crawled.results[0]
    (last,) = sorted((state / "documents" / "warc" / job["job_id"]).glob("*.warc.gz"))[-1:]
    with last.open("ab") as file:
        file.write(b"\x1f\x8b\x08\x00half a gzip member")
    done = subprocess.run(  # (no --output: JOB_ID.warc.gz in the working folder)
        [sys.executable, "-m", "harvester", "export", job["job_id"], "--format", "warc", "--state-dir", str(state)],
        capture_output=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    copy = tmp_path / f"{job['job_id']}.warc.gz"
    assert check_warc_file_whole(copy) and not check_warc_file_whole(last)
    assert len(captures_of(copy.read_bytes())) == 10


def test_export_parquet_copies_the_index_merges_its_files_or_builds_it_from_the_records(crawled, tmp_path):
    job = crawled.results[0]
    copied = tmp_path / "copied.parquet"
    assert export(crawled, job, "parquet", "--output", str(copied)).returncode == 0
    assert [copied.read_bytes()] == [file.read_bytes() for file in Path(job["url_index"]).iterdir()]

    state = tmp_path / "state"
    shutil.copytree(crawled.state, state)
    folder = state / "documents" / "jobs" / job["job_id"] / "index"
    (stored,) = folder.iterdir()
    for n, half in enumerate(("n > 5", "n <= 5")):  # (an end in two steps, the later URLs in the first)
        duckdb.sql(
            f"COPY (SELECT * EXCLUDE (n) FROM (SELECT *, row_number() OVER (ORDER BY url_surtkey, url) AS n"
            f" FROM '{stored}') WHERE {half} ORDER BY url_surtkey, url) TO '{folder}/0000{n + 1}.parquet'"
            " (FORMAT PARQUET)"
        )
    stored.unlink()
    merged = tmp_path / "merged.parquet"
    run = harvest("export", job["job_id"], "--format", "parquet", "--state-dir", str(state), "--output", str(merged))
    assert run.returncode == 0 and "merged from 2 files: 10 rows" in run.stderr, run.stderr
    keys = [(r["url_surtkey"], r["url"]) for r in index_rows(merged)]
    assert keys == sorted(keys) and index_rows(merged) != index_rows(folder)  # (sorted as one file)
    assert sorted(map(str, index_rows(merged))) == sorted(map(str, index_rows(copied)))

    shutil.rmtree(folder)
    (folder.parent / "index.parquet").write_bytes(copied.read_bytes())  # (the index as an older version wrote it)
    legacy = tmp_path / "legacy.parquet"
    run = harvest("export", job["job_id"], "--format", "parquet", "--state-dir", str(state), "--output", str(legacy))
    assert run.returncode == 0 and "(copied)" in run.stderr and legacy.read_bytes() == copied.read_bytes()
    (folder.parent / "index.parquet").unlink()
    built = tmp_path / "built.parquet"
    run = harvest("export", job["job_id"], "--format", "parquet", "--state-dir", str(state), "--output", str(built))
    assert run.returncode == 0 and "built: 10 rows" in run.stderr, run.stderr
    assert len(index_rows(built)) == job["total_urls"] == 10

    def same(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:  # (the records' fetch_time: exactly the same)
        return sorted(rows, key=lambda r: r["url"])

    assert same(index_rows(built)) == same(index_rows(copied))


def test_export_jsonl_and_csv_are_the_records_report_prints(crawled, tmp_path):
    job = crawled.results[0]
    state = ("--state-dir", str(crawled.state))
    for fmt in ("jsonl", "csv"):
        printed = export(crawled, job, fmt)
        reported = harvest("report", job["job_id"], "--format", fmt, *state)
        assert printed.returncode == reported.returncode == 0
        assert printed.stdout == reported.stdout
        written = tmp_path / f"records.{fmt}"
        assert export(crawled, job, fmt, "--output", str(written)).returncode == 0
        assert written.read_text() == printed.stdout
    assert len(export(crawled, job, "jsonl").stdout.splitlines()) == job["total_urls"]
    assert len(list(csv.DictReader(io.StringIO(export(crawled, job, "csv").stdout)))) == job["total_urls"]


def test_export_refuses_binary_to_a_terminal_and_an_unknown_job(crawled):
    job = crawled.results[0]
    state = ("--state-dir", str(crawled.state))
    main, side = os.openpty()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "harvester", "export", job["job_id"], "--format", "warc", "--output", "-", *state],
            stdout=side,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(main)
        os.close(side)
    assert run.returncode == 2 and "not written to a terminal" in run.stderr
    unknown = export(crawled, {"job_id": "no-such-job"}, "warc")
    assert unknown.returncode == 2 and unknown.stderr.strip() == f"harvest: no job 'no-such-job' in {crawled.state}"


def get(crawled: Crawled, url: str, *more: str, state: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "harvester", "get", url, "--state-dir", str(state or crawled.state), *more],
        capture_output=True,
        check=False,
    )


def test_get_prints_the_stored_body_and_raw_gives_the_gzip_bytes(crawled):
    site = crawled.site
    _, headers, sent = site.answer(PLAIN_PAGE, {})
    assert get(crawled, site.url(PLAIN_PAGE)).stdout == sent and "Content-Encoding" not in headers

    _, headers, sent = site.answer(GZIP_PAGE, {})
    assert headers["Content-Encoding"] == "gzip"
    content = get(crawled, site.url(GZIP_PAGE))
    raw = get(crawled, site.url(GZIP_PAGE), "--raw")
    assert content.returncode == raw.returncode == 0
    assert raw.stdout == sent and content.stdout == gzip.decompress(sent) != sent
    assert content.stdout == site.site[GZIP_PAGE].body

    shown = get(crawled, site.url(GZIP_PAGE), "--headers", "--raw").stdout
    head, _, body = shown.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK" and "Content-Encoding: gzip" in lines and body == sent


def test_get_names_what_is_wrong_in_one_line(crawled, tmp_path):
    site = crawled.site
    unknown = get(crawled, site.url("/pages/never-listed.html"))
    gone = get(crawled, site.url(MISSING_PAGE))
    assert unknown.returncode == gone.returncode == 2
    assert (
        unknown.stderr.decode()
        == f"harvest: {site.url('/pages/never-listed.html')}: not in the crawl database of {crawled.state}\n"
    )
    assert gone.stderr.decode().startswith(f"harvest: {site.url(MISSING_PAGE)}: no content stored (last fetched ")
    assert gone.stderr.decode().endswith(": HTTP 404)\n") and gone.stderr.count(b"\n") == 1

    listed_only = tmp_path / "listed"
    with LiveSite(pages=2).serving() as other:  # (its pages listed, never fetched)
        args = ("--state-dir", str(listed_only), "--allow-network", LOOPBACK, "--no-pages")
        assert harvest("crawl", other.url("/"), *args).returncode == 0
        never = get(crawled, other.url(PLAIN_PAGE), state=listed_only)
    assert never.returncode == 2
    assert never.stderr.decode() == f"harvest: {other.url(PLAIN_PAGE)}: never fetched (crawl state unfetched)\n"

    state = tmp_path / "state"
    shutil.copytree(crawled.state, state)
    for path in (state / "documents" / "warc").rglob("*.warc.gz"):
        path.unlink()
    missing = get(crawled, crawled.site.url(PLAIN_PAGE), state=state)
    assert missing.returncode == 2 and missing.stdout == b""
    (line,) = missing.stderr.decode().splitlines()
    assert line.startswith(f"harvest: {crawled.site.url(PLAIN_PAGE)}: its WARC file warc/") and line.endswith(
        " is missing"
    )


def test_export_into_a_folder_writes_the_job_file_inside_it_and_through_a_link(crawled, tmp_path):
    job = crawled.results[0]
    folder = tmp_path / "exports"
    folder.mkdir()
    run = export(crawled, job, "warc", "--output", str(folder))
    written = folder / f"{job['job_id']}.warc.gz"
    assert run.returncode == 0 and run.stderr.strip().startswith(f"harvest: wrote {written}:"), run.stderr
    assert folder.is_dir() and check_warc_file_whole(written)
    assert export(crawled, job, "csv", "--output", str(folder)).returncode == 0
    assert (folder / f"{job['job_id']}.csv").read_text() == export(crawled, job, "csv").stdout

    target, link = tmp_path / "kept.warc.gz", tmp_path / "link.warc.gz"
    target.write_bytes(b"")
    link.symlink_to(target)
    assert export(crawled, job, "warc", "--output", str(link)).returncode == 0
    assert link.is_symlink() and link.resolve() == target and target.read_bytes() == written.read_bytes()


def test_export_writes_through_a_device_or_a_pipe_and_never_replaces_them(crawled, tmp_path):
    job = crawled.results[0]
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # (/dev/full's device: every write fails)
    except PermissionError:
        full.symlink_to("/dev/full")
    run = export(crawled, job, "warc", "--output", str(full))
    assert run.returncode == 1 and run.stderr == f"harvest: --output {full}: No space left on device\n"
    assert full.is_symlink() or stat.S_ISCHR(full.lstat().st_mode)

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    run = export(crawled, job, "jsonl", "--output", str(fifo))
    reader.join(30)
    assert run.returncode == 0, run.stderr
    assert read == [export(crawled, job, "jsonl").stdout.encode()] and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_export_replaces_only_its_own_output_unless_forced(crawled, tmp_path):
    job = crawled.results[0]
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    run = export(crawled, job, "warc", "--output", str(notes))
    assert run.returncode == 2 and notes.read_text() == "my notes\n"
    assert run.stderr == (
        f"harvest: --output {notes}: exists and is not output of this command: not replaced (give another path,"
        " or --force to replace it)\n"
    )
    earlier = tmp_path / "earlier.parquet"
    assert export(crawled, job, "parquet", "--output", str(earlier)).returncode == 0
    assert export(crawled, job, "parquet", "--output", str(earlier)).returncode == 0  # (its own: replaced)
    assert export(crawled, job, "jsonl", "--output", str(earlier)).returncode == 2  # (a parquet file: not jsonl)
    assert export(crawled, job, "warc", "--output", str(notes), "--force").returncode == 0
    assert check_warc_file_whole(notes) and list(tmp_path.glob(".*")) == []


def test_export_to_a_path_it_cannot_write_says_so_in_one_line(crawled, tmp_path):
    job = crawled.results[0]
    for path, reason in (
        ("/proc/harvest.warc.gz", "cannot write in /proc: "),
        (str(tmp_path / "no" / "such" / "x.warc.gz"), f"no folder {tmp_path / 'no' / 'such'}"),
    ):
        run = export(crawled, job, "warc", "--output", path)
        lines = run.stderr.splitlines()
        assert run.returncode in (1, 2) and len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
        assert lines[0].startswith(f"harvest: --output {path}: {reason}"), run.stderr
