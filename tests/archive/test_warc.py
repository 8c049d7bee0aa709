"""WARC records of fetches: what archive tools read (`warcio check`, `warcio index`), and a capture read back
by its offset and length is what the server sent, byte for byte."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from harvester.archive.warc import (
    COMPRESSION_LEVEL,
    IDENTICAL,
    NOT_MODIFIED,
    Capture,
    WarcFile,
    cdxj_line,
    payload_digest,
    read_record,
    records,
    surt,
)

T0 = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
PAGE = b"<html><body>caf\xc3\xa9 \x00 bytes as sent</body></html>"
GZIPPED = gzip.compress(PAGE, mtime=0)


def capture(url: str = "https://example.com/a?b=2&a=1", **fields: object) -> Capture:
    values: dict[str, object] = {
        "url": url,
        "fetched_at": T0,
        "method": "GET",
        "request_headers": [("User-Agent", "Harvester/1.0"), ("Accept-Encoding", "gzip, deflate")],
        "status": 200,
        "reason": "OK",
        "response_headers": [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Encoding", "gzip"),
            ("Content-Length", str(len(GZIPPED))),
            ("ETag", '"v1"'),
        ],
        "body": GZIPPED,
        "metadata": {
            "job_id": "j",
            "sitemap": "https://example.com/sitemap.xml",
            "crawl_state": "fetched",
            "last_modified": datetime(2026, 2, 1, tzinfo=UTC),
        },
    }
    values.update(fields)
    return Capture(**values)  # type: ignore[arg-type]


def warcio(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from warcio.cli import main; main(sys.argv[1:])", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def archive(tmp_path: Path) -> tuple[Path, list]:
    path = tmp_path / "crawl-00000.warc.gz"
    with path.open("wb") as stream:
        warc = WarcFile(stream, path.name)
        first = warc.add(capture())
        same = warc.add(capture(fetched_at=T0.replace(hour=13), revisits=first))
        not_modified = warc.add(
            capture(fetched_at=T0.replace(hour=14), status=304, reason="Not Modified", body=b"", revisits=first)
        )
        other = warc.add(capture("http://www.Example.com:8080/b", body=b"plain", response_headers=[("X", "y")]))
    return path, [first, same, not_modified, other]


def test_every_record_passes_warcio_check_and_its_index_agrees(archive):
    path, archived = archive

    check = warcio("check", "-v", str(path))
    index = warcio("index", "-f", "warc-type,warc-target-uri,offset,length", str(path))

    assert check.returncode == 0, check.stdout + check.stderr
    assert "digest pass" in check.stdout and "digest fail" not in check.stdout
    lines = [json.loads(line) for line in index.stdout.splitlines()]
    assert [line["warc-type"] for line in lines] == [
        "warcinfo",
        *("request", "metadata", "response"),
        *("request", "metadata", "revisit"),
        *("request", "metadata", "revisit"),
        *("request", "metadata", "response"),
    ]
    mains = [line for line in lines if line["warc-type"] in ("response", "revisit")]
    assert [(int(m["offset"]), int(m["length"])) for m in mains] == [(a.offset, a.length) for a in archived]
    assert [r[0] for r in records(path.open("rb"))][:4] == ["warcinfo", "request", "metadata", "response"]


def test_a_capture_read_back_by_offset_is_what_the_server_sent(archive):
    path, (first, _, not_modified, other) = archive

    with path.open("rb") as stream:
        page = read_record(stream, first.offset, first.length)
        plain = read_record(stream, other.offset, other.length)
        revisit = read_record(stream, not_modified.offset, not_modified.length)

    assert (page.record_type, page.status, page.body) == ("response", 200, GZIPPED)  # (still gzipped, as sent)
    assert gzip.decompress(page.body) == PAGE
    assert page.headers == list(capture().response_headers)
    assert (plain.url, plain.body, plain.headers) == ("http://www.Example.com:8080/b", b"plain", [("X", "y")])
    assert (revisit.record_type, revisit.status, revisit.body) == ("revisit", 304, b"")


def test_revisits_name_their_profile_and_the_capture_they_revisit(archive):
    path, (first, same, not_modified, _) = archive
    from warcio.archiveiterator import ArchiveIterator

    with path.open("rb") as stream:
        revisits = [r.rec_headers for r in ArchiveIterator(stream) if r.rec_type == "revisit"]

    assert [h.get_header("WARC-Profile") for h in revisits] == [IDENTICAL, NOT_MODIFIED]
    assert all(h.get_header("WARC-Refers-To-Target-URI") == first.url for h in revisits)
    assert all(h.get_header("WARC-Refers-To-Date") == "2026-11-25T12:00:00.000000Z" for h in revisits)
    assert same.payload_digest == not_modified.payload_digest == first.payload_digest == payload_digest(GZIPPED)
    assert (same.record_type, not_modified.record_type) == ("revisit", "revisit")


def test_a_cdxj_line_keys_the_capture_by_surt_and_time(archive):
    _, (first, same, _, other) = archive

    key, stamp, block = cdxj_line(first).split(" ", 2)
    assert (key, stamp) == ("com,example)/a?a=1&b=2", "20261125120000")
    assert json.loads(block) == {
        "url": first.url,
        "mime": "text/html",
        "status": "200",
        "digest": first.payload_digest.removeprefix("sha1:"),
        "length": str(first.length),
        "offset": str(first.offset),
        "filename": "crawl-00000.warc.gz",
    }
    assert json.loads(cdxj_line(same).split(" ", 2)[2])["mime"] == "warc/revisit"
    assert cdxj_line(other).startswith("com,example:8080)/b 20261125120000 ")


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://www.example.com/", "com,example)/"),
        ("https://Sub.Example.COM/Path?z=1&a=2", "com,example,sub)/path?a=2&z=1"),
        ("https://example.com:443/x", "com,example)/x"),
        ("http://example.com:81", "com,example:81)/"),
        ("https://www.com/", "com,www)/"),
    ],
)
def test_surt(url, key):
    assert surt(url) == key


def test_each_record_is_its_own_gzip_member_at_the_archive_compression_level(archive):
    """warcio gzips at level 9, about 1.7 times the CPU of zlib's default for ~1 % less on an HTML page
    (bench/warc_write.py); the records are written through warcio uncompressed and gzipped at 6, as
    Heritrix and Common Crawl write them."""
    path, _ = archive
    index = warcio("index", "-f", "offset,length", str(path))
    data = path.read_bytes()
    spans = [(int(m["offset"]), int(m["length"])) for m in map(json.loads, index.stdout.splitlines())]
    members = [data[offset : offset + length] for offset, length in spans]
    assert len(members) == 13 and sum(map(len, members)) == len(data)
    for member in members:
        assert member[:3] == b"\x1f\x8b\x08" and member[8] == 0  # (XFL 2 would say "maximum compression")
        again = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, 31)
        assert again.compress(gzip.decompress(member)) + again.flush() == member


def test_a_metadata_record_writes_times_in_iso_8601(archive):
    path, _ = archive
    with path.open("rb") as stream:
        bodies = [json.loads(r.content_stream().read()) for r in ArchiveIterator(stream) if r.rec_type == "metadata"]
    assert bodies[0]["last_modified"] == "2026-02-01T00:00:00+00:00"
