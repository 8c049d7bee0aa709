"""The document store contract: raw documents and results, stored and read back by key."""

from __future__ import annotations

import io
import os

import pytest


def test_bytes_and_streams_round_trip(backend):
    big = os.urandom(3 * 1024 * 1024 + 17)
    backend.documents.put(
        "jobs/j/pages/a", b"<html>a</html>", content_type="text/html", metadata={"url": "https://e.x/ä"}
    )
    backend.documents.put("jobs/j/pages/b", io.BytesIO(big), content_type="application/octet-stream")
    assert backend.documents.get("jobs/j/pages/a") == b"<html>a</html>"
    assert backend.documents.get("jobs/j/pages/b") == big
    assert backend.documents.exists("jobs/j/pages/a")
    assert not backend.documents.exists("jobs/j/pages/zzz")
    assert sorted(backend.documents.keys("jobs/j/")) == ["jobs/j/pages/a", "jobs/j/pages/b"]
    assert "jobs/j/pages/a" in backend.documents.location("jobs/j/pages/a")


def test_a_second_put_replaces_the_first(backend):
    backend.documents.put("jobs/j/result.json", b"1")
    backend.documents.put("jobs/j/result.json", b"2")
    assert backend.documents.get("jobs/j/result.json") == b"2"
    assert list(backend.documents.keys("jobs/j/")) == ["jobs/j/result.json"]


def test_a_stream_is_read_from_its_current_position(backend):
    stream = io.BytesIO(b"skipme:keep")
    stream.seek(7)
    backend.documents.put("k", stream)
    assert backend.documents.get("k") == b"keep"


def _write_and_die(documents, key):
    with documents.writer(key) as out:
        out.write(b"half")
        raise RuntimeError("the writer died")


def test_a_writer_stores_its_document_when_the_block_ends_well_and_not_otherwise(backend):
    big = os.urandom(9 * 1024 * 1024 + 5)  # (beyond what S3's writer keeps in memory)
    with backend.documents.writer("jobs/j/urls.jsonl", content_type="application/x-ndjson") as out:
        out.write(big[:100])
        out.write(big[100:])
        assert not backend.documents.exists("jobs/j/urls.jsonl")  # (nothing shows before the end)
    assert backend.documents.get("jobs/j/urls.jsonl") == big
    with pytest.raises(RuntimeError, match="the writer died"):
        _write_and_die(backend.documents, "jobs/j/urls.jsonl")
    assert backend.documents.get("jobs/j/urls.jsonl") == big  # the document before, whole
    with pytest.raises(RuntimeError, match="the writer died"):
        _write_and_die(backend.documents, "jobs/k/changes.jsonl")
    assert not backend.documents.exists("jobs/k/changes.jsonl")
    assert list(backend.documents.keys("jobs/")) == ["jobs/j/urls.jsonl"]  # (no temporary file listed)


def test_a_reader_gives_the_document_in_pieces(backend):
    big = os.urandom(2 * 1024 * 1024 + 3)
    backend.documents.put("sites/s/sitemaps/x/1", big)
    pieces = []
    with backend.documents.reader("sites/s/sitemaps/x/1") as body:
        while piece := body.read(256 * 1024):
            assert len(piece) <= 256 * 1024
            pieces.append(piece)
    assert len(pieces) > 1 and b"".join(pieces) == big
    # A missing document is FileNotFoundError on both backends (S3's NoSuchKey included), as get's is.
    with pytest.raises(FileNotFoundError), backend.documents.reader("sites/s/sitemaps/x/missing"):
        pass
    with pytest.raises(FileNotFoundError):
        backend.documents.get("sites/s/sitemaps/x/missing")


MIB = 1024 * 1024


@pytest.mark.parametrize(
    "sizes",
    [
        [0, 17, 3 * MIB],  # (less than a part in all: one PUT on S3)
        [3 * MIB, 7 * MIB, 1, 6 * MIB + 5, 4 * MIB, 0, 2 * MIB],  # (heads filling gathered parts, tails gathered)
        [12 * MIB, 5 * MIB, 5 * MIB - 1, 5 * MIB + 1],
    ],
    ids=["small", "mixed", "around the least part"],
)
def test_documents_are_joined_in_order_into_one(backend, sizes):
    parts = [os.urandom(size) for size in sizes]
    keys = [f"jobs/j/end/{n:03d}.jsonl" for n in range(len(parts))]
    for key, body in zip(keys, parts, strict=True):
        backend.documents.put(key, body)
    calls: list[str] = []
    if backend.name == "aws":  # (S3 copies the large runs itself: they are not read)
        backend.documents.client.meta.events.register(
            "before-call.s3.*", lambda event_name, **_: calls.append(event_name)
        )
    location = backend.documents.join("jobs/j/urls.jsonl", keys, content_type="application/x-ndjson")
    if backend.name == "aws":
        copied = sum(event.endswith("UploadPartCopy") for event in calls)
        assert copied == (0 if sum(sizes) < 5 * MIB else {7: 1, 4: 3}[len(sizes)]), calls
    assert backend.documents.get("jobs/j/urls.jsonl") == b"".join(parts)
    assert location == backend.documents.location("jobs/j/urls.jsonl")
    assert [backend.documents.get(key) for key in keys] == parts  # (the parts stay)


def test_a_join_with_a_part_missing_stores_nothing(backend):
    backend.documents.put("jobs/j/end/000.jsonl", b"x" * 10)
    with pytest.raises(FileNotFoundError):
        backend.documents.join("jobs/j/urls.jsonl", ["jobs/j/end/000.jsonl", "jobs/j/end/001.jsonl"])
    assert not backend.documents.exists("jobs/j/urls.jsonl")


def test_a_range_of_a_document_reads_those_bytes_only(backend):
    body = bytes(range(256)) * 40
    backend.documents.put("steps/j/piece-0-1.spool", body)
    get_range = backend.documents.get_range
    assert get_range("steps/j/piece-0-1.spool", 0, 10) == body[:10]
    assert get_range("steps/j/piece-0-1.spool", 5000, 1234) == body[5000:6234]
    assert get_range("steps/j/piece-0-1.spool", len(body) - 3, 3) == body[-3:]
    assert get_range("steps/j/piece-0-1.spool", len(body) - 3, 10) == body[-3:]  # (fewer past the end)
    assert get_range("steps/j/piece-0-1.spool", 100, 0) == b""
    with pytest.raises(FileNotFoundError):
        get_range("steps/j/gone.spool", 0, 10)


def test_documents_are_deleted_many_at_once_and_a_missing_one_is_no_error(backend):
    keys = [f"steps/j/piece-{n:04d}-1.tally.json" for n in range(1003)]  # (past one DeleteObjects request's 1,000)
    for key in keys:
        backend.documents.put(key, b"{}")
    backend.documents.put("steps/j/kept", b"k")
    backend.documents.delete(*keys[:1002], "steps/j/never-written")
    assert sorted(backend.documents.keys("steps/j/")) == ["steps/j/kept", keys[-1]]
    backend.documents.delete(keys[-1])
    backend.documents.delete()
    assert list(backend.documents.keys("steps/j/")) == ["steps/j/kept"]
