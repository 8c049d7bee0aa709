"""A job's local WARC files after a kill: the next run cuts each file back to its last indexed record, so
every file stays a valid WARC and every record a URL names is still there."""

from __future__ import annotations

import subprocess
import sys

from harvester.adapters.local.warc_files import FolderWarcStore
from harvester.archive.batch import WarcBatch
from harvester.archive.stored import read_capture
from tests.contract.test_warc_store import capture


def store_batch(warcs: FolderWarcStore, job: str, first: int, count: int) -> dict:
    batch = WarcBatch()
    for n in range(first, first + count):
        batch.add(f"https://example.com/p/{n}", capture(n, f"<p>{n}</p>".encode() * 20))
    try:
        return batch.store(warcs, job)
    finally:
        batch.close()


def valid(path) -> bool:
    return subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(path)], capture_output=True).returncode == 0


def test_a_tail_no_index_line_covers_is_cut_off_by_the_next_run(tmp_path):
    warcs = FolderWarcStore(tmp_path)
    kept = store_batch(warcs, "j", 0, 3)
    (key,) = warcs.files("j")
    path, index = tmp_path / key, tmp_path / (key + ".cdxj")
    indexed_size = path.stat().st_size
    # Killed while writing: a chunk written whole but never indexed, then half of another; half an index line.
    store_batch(warcs, "j", 3, 2)
    warcs.close()
    whole = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(b"".join(whole[:3]) + whole[3][:20])
    with path.open("ab") as out:
        out.write(b"\x1f\x8b\x08\x00half a gzip member")
    assert not valid(path)

    again = FolderWarcStore(tmp_path)
    more = store_batch(again, "j", 10, 2)
    again.close()

    assert path.stat().st_size == indexed_size and valid(path)
    assert len(index.read_bytes().splitlines()) == 3
    files = list(again.files("j"))
    assert len(files) == 2 and all(valid(tmp_path / f) for f in files)  # a new file for the new run
    for url, place in (kept | more).items():
        assert read_capture(again, place).url == url


def test_a_file_with_nothing_indexed_is_removed(tmp_path):
    warcs = FolderWarcStore(tmp_path)
    store_batch(warcs, "j", 0, 1)
    warcs.close()
    (key,) = warcs.files("j")
    (tmp_path / (key + ".cdxj")).write_bytes(b"")

    again = FolderWarcStore(tmp_path)
    store_batch(again, "j", 5, 1)
    again.close()
    assert key not in list(again.files("j")) and len(list(again.files("j"))) == 1


def test_files_roll_over_at_the_size_limit(tmp_path):
    warcs = FolderWarcStore(tmp_path, max_file_bytes=2000)
    places = {}
    for first in range(0, 40, 4):
        places |= store_batch(warcs, "j", first, 4)
    warcs.close()
    files = list(warcs.files("j"))
    assert len(files) > 3 and all(valid(tmp_path / f) for f in files)
    assert {p.filename for p in places.values()} == set(files)
    for url, place in places.items():
        assert read_capture(warcs, place).url == url
