"""The WARC store contract: chunks of captures appended to a job's WARC files, each file a valid WARC with
a CDXJ index beside it, every record read back alone by its location (a ranged read)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from harvester.archive.batch import WarcBatch, archived
from harvester.archive.stored import read_capture
from harvester.archive.warc import Capture, payload_digest

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def capture(n: int, body: bytes, **fields: object) -> Capture:
    values: dict[str, object] = {
        "url": f"https://example.com/p/{n}",
        "fetched_at": T0 + timedelta(seconds=n),
        "method": "GET",
        "request_headers": [("User-Agent", "Harvester")],
        "status": 200,
        "reason": "OK",
        "response_headers": [("Content-Type", "text/html"), ("Content-Length", str(len(body)))],
        "body": body,
        "metadata": {"job_id": "j1", "n": n},
    }
    values.update(fields)
    return Capture(**values)  # type: ignore[arg-type]


def batch_of(captures: dict[str, Capture]) -> WarcBatch:
    batch = WarcBatch()
    for key, one in captures.items():
        batch.add(key, one)
    return batch


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(path)], capture_output=True, text=True)


def test_batches_are_stored_and_each_record_reads_back_alone(backend, tmp_path):
    zipped = gzip.compress(b"<p>zipped</p>" * 50, mtime=0)
    first = {
        "https://example.com/p/0": capture(0, b"<p>zero</p>"),
        "https://example.com/p/1": capture(
            1, zipped, response_headers=[("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
        ),
    }
    second = {"https://example.com/p/2": capture(2, b"\x00\xff binary")}
    places = {}
    for captures in (first, second):
        batch = batch_of(captures)
        places |= batch.store(backend.warcs, "j1")
        batch.close()

    files = list(backend.warcs.files("j1"))
    assert files and all(f.startswith("warc/j1/") and f.endswith(".warc.gz") for f in files)
    assert list(backend.warcs.files("other-job")) == []
    for key, place in places.items():
        stored = read_capture(backend.warcs, place)
        assert (stored.url, stored.record_type, stored.status) == (key, "response", 200)
        assert place.filename in files and place.record_type == "response" and place.payload_digest.startswith("sha1:")
    assert read_capture(backend.warcs, places["https://example.com/p/1"]).body == zipped  # as received
    assert read_capture(backend.warcs, places["https://example.com/p/1"]).content == b"<p>zipped</p>" * 50
    assert read_capture(backend.warcs, places["https://example.com/p/2"]).content == b"\x00\xff binary"

    # Each file is a valid WARC (warcio check), and its CDXJ names every capture in it where it is.
    indexed = {}
    for key in files:
        path = tmp_path / key.replace("/", "_")
        path.write_bytes(backend.documents.get(key))
        result = check(path)
        assert result.returncode == 0, result.stdout + result.stderr
        for line in backend.documents.get(key + ".cdxj").decode().splitlines():
            block = json.loads(line.split(" ", 2)[2])
            indexed[block["url"]] = (block["filename"], int(block["offset"]), int(block["length"]))
    assert indexed == {k: (p.filename, p.offset, p.length) for k, p in places.items()}


def test_a_revisit_names_the_record_it_refers_to(backend):
    batch = batch_of({"https://example.com/p/0": capture(0, b"same")})
    (original,) = batch.store(backend.warcs, "j2").values()
    again = batch_of(
        {
            "https://example.com/p/0": capture(
                9, b"", status=304, reason="Not Modified", revisits=archived("https://example.com/p/0", original)
            )
        }
    )
    (revisit,) = again.store(backend.warcs, "j2").values()
    stored = read_capture(backend.warcs, revisit)
    assert (revisit.record_type, stored.record_type, stored.status) == ("revisit", "revisit", 304)
    assert stored.refers_to == ("https://example.com/p/0", "2026-11-25T12:00:00.000000Z")
    assert revisit.payload_digest == original.payload_digest


def test_an_empty_batch_stores_nothing(backend):
    assert WarcBatch().store(backend.warcs, "j3") == {}
    assert list(backend.warcs.files("j3")) == []


class MeetingBody(io.BytesIO):
    """A body whose first read waits until the other page's body is being read too."""

    def __init__(self, data: bytes, meeting: threading.Barrier) -> None:
        super().__init__(data)
        self.meeting = meeting
        self.met = False

    def read(self, size: int | None = -1, /) -> bytes:
        if not self.met:
            self.met = True
            self.meeting.wait()  # (BrokenBarrierError after its timeout: the other page could not start)
        return super().read(size)


def test_the_pages_of_a_batch_are_written_side_by_side(backend):
    """Pages written from threads (large ones are) compress their records at the same time: only the copy
    into the batch's chunk is one at a time, so a batch's last page does not wait for every other's writing."""
    meeting = threading.Barrier(2, timeout=5)
    bodies = {n: b"<p>%d</p>" % n * 4000 for n in (0, 1)}
    batch = WarcBatch()
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            one = msgspec.structs.replace(
                capture(n, bodies[n]),
                body=MeetingBody(bodies[n], meeting),
                body_length=len(bodies[n]),
                body_digest=payload_digest(bodies[n]),
            )
            batch.add(f"https://example.com/p/{n}", one)
        except BaseException as exc:  # (the test's thread: reported below)
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(n,)) for n in (0, 1)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    assert errors == []
    places = batch.store(backend.warcs, "j4")
    for n in (0, 1):
        stored = read_capture(backend.warcs, places[f"https://example.com/p/{n}"])
        assert (stored.url, stored.body) == (f"https://example.com/p/{n}", bodies[n])


def test_a_sweep_removes_what_no_index_covers_and_keeps_every_indexed_record(backend, monkeypatch):
    """What a writer killed between a file's records and their index left (aws: an object without its CDXJ;
    local: a tail past the last indexed record) is removed by the job end's sweep, in steps when it pauses
    (aws: after each page of the listing, two keys a page here); every indexed record still reads back."""
    places = {}
    for n in range(3):
        places.update(batch_of({f"https://example.com/p/{n}": capture(n, b"<p>%d</p>" % n)}).store(backend.warcs, "j1"))
    kept = list(backend.warcs.files("j1"))
    if backend.name == "aws":
        from harvester.adapters.aws import warc_objects

        monkeypatch.setattr(warc_objects, "LISTED", 2)
        s3, bucket = backend.warcs.client, backend.warcs.bucket
        # (named as a writer names them: one before every other, one after: the listing's last key)
        folder, stamp = kept[0].rsplit("/", 1)[0], kept[0].rsplit("/", 1)[1].split("-")[0]
        dead = [f"{folder}/{stamp}-000000000000.warc.gz", f"{folder}/99999999999999-ffffffffffff.warc.gz"]
        for key in dead:
            s3.put_object(Bucket=bucket, Key=key, Body=b"\x1f\x8b partial")
        assert set(backend.warcs.files("j1")) == {*kept, *dead}
        steps, at = 0, None
        while True:
            at = backend.warcs.sweep("j1", after=at, pause=lambda: True)
            steps += 1
            if at is None:
                break
        assert steps > 2
    else:
        backend.warcs.close()  # (the run that wrote them is over)
        path = backend.documents.root / kept[-1]  # type: ignore[attr-defined]
        whole = path.stat().st_size
        with path.open("ab") as file:
            file.write(b"\x1f\x8b a record cut off")
        assert backend.warcs.sweep("j1") is None
        assert path.stat().st_size == whole
    assert list(backend.warcs.files("j1")) == kept
    for url, place in places.items():
        assert read_capture(backend.warcs, place).url == url
