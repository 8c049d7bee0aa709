"""The document store contract: raw documents and results, stored and read back by key."""

from __future__ import annotations

import io
import os


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
