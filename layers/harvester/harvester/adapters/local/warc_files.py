"""A job's WARC files in the documents folder: ``warc/<job>/<UTC time>-<serial>.warc.gz``, rolling.

Each run of a job opens a file of its own (a file is never reopened to append to) and rolls to the next
once it passes the size limit. A chunk of captures is appended with one write and then indexed (its lines
appended to the ``.cdxj`` beside the file); only then are its pages settled. A run killed in between
leaves a tail no index line covers: the next run of the job cuts every earlier file back to the end of its
last indexed record (each capture's response or revisit comes last), so every file stays a valid WARC,
and the pages of that tail, never settled, are fetched again.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from msgspec.structs import replace

from harvester.archive.warc import Archived, cdxj_line, warcinfo
from harvester.limits import WARC_FILE_MAX_BYTES

SUFFIX = ".warc.gz"


class FolderWarcStore:
    writes_inline = True  # (a chunk is a few page-cache writes)

    def __init__(self, root: Path, *, max_file_bytes: int = WARC_FILE_MAX_BYTES) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self._lock = threading.Lock()
        self._open: dict[str, tuple[str, BinaryIO, BinaryIO]] = {}  # job -> (key, warc, cdxj)
        self._serials: dict[str, int] = {}

    def append(self, job_id: str, chunk: BinaryIO, captures: Sequence[Archived]) -> list[Archived]:
        with self._lock:
            key, warc, index = self._current(job_id)
            base = warc.tell()
            shutil.copyfileobj(chunk, warc, 1024 * 1024)
            warc.flush()
            placed = [replace(c, filename=key, offset=c.offset + base) for c in captures]
            index.write("".join(cdxj_line(p) + "\n" for p in placed).encode())
            index.flush()
            return placed

    def read(self, filename: str, offset: int, length: int) -> bytes:
        with self._path(filename).open("rb") as file:
            file.seek(offset)
            return file.read(length)

    def files(self, job_id: str) -> Iterator[str]:
        folder = self._path(f"warc/{job_id}")
        if folder.is_dir():
            for path in sorted(folder.glob(f"*{SUFFIX}")):
                yield path.relative_to(self.root).as_posix()

    def sweep(self, job_id: str, *, after: str | None = None, pause: Callable[[], bool] | None = None) -> str | None:
        """Cuts the job's files this process is not writing back to their indexed records (``repair``)."""
        with self._lock:
            writing = {key for key, _, _ in self._open.values()}
            for key in self.files(job_id):
                if key not in writing and (after is None or key > after):
                    repair(self._path(key))
        return None

    def close(self) -> None:
        with self._lock:
            for _, warc, index in self._open.values():
                warc.close()
                index.close()
            self._open.clear()

    def _current(self, job_id: str) -> tuple[str, BinaryIO, BinaryIO]:
        current = self._open.get(job_id)
        if current is not None and current[1].tell() < self.max_file_bytes:
            return current
        if current is None:
            earlier = list(self.files(job_id))
            for key in earlier:  # earlier runs' files: cut back to what was indexed
                repair(self._path(key))
            # Serials go on from the earlier runs' (a file's name is never given twice, even to one removed).
            self._serials[job_id] = 1 + max((int(k.removesuffix(SUFFIX)[-5:]) for k in earlier), default=-1)
        else:
            current[1].close()
            current[2].close()
        folder = self._path(f"warc/{job_id}")
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        while True:
            serial = self._serials[job_id]
            self._serials[job_id] = serial + 1
            name = f"{stamp}-{serial:05d}{SUFFIX}"  # (the job is its folder: a record names the key)
            try:
                fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            break
        warc = open(fd, "wb")  # noqa: SIM115 (open while the run writes to it)
        warc.write(warcinfo(name))
        index = (folder / (name + ".cdxj")).open("wb")
        key = (folder / name).relative_to(self.root).as_posix()
        self._open[job_id] = current = (key, warc, index)
        return current

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"WARC file {key!r} leaves the document folder")
        return self.root / key


def repair(path: Path) -> None:
    """Cuts a WARC file back to the end of its last indexed record, and its index to its whole lines."""
    index = path.with_name(path.name + ".cdxj")
    end = 0
    if index.is_file():
        data = index.read_bytes()
        whole, end = _indexed(data)
        if whole != data:
            index.write_bytes(whole)
    if end == 0:  # nothing indexed: no URL record names this file
        path.unlink(missing_ok=True)
        index.unlink(missing_ok=True)
    elif path.stat().st_size > end:
        os.truncate(path, end)


def indexed_end(path: Path) -> int:
    """Where a WARC file's last indexed record ends (0: none is): what of it is whole, even while a run is
    writing to it or after a run was killed in the middle of a chunk (``harvest export`` copies that much)."""
    index = path.with_name(path.name + ".cdxj")
    return _indexed(index.read_bytes())[1] if index.is_file() else 0


def _indexed(data: bytes) -> tuple[bytes, int]:
    """An index's whole lines, and the end of the last record they name."""
    whole = data[: data.rfind(b"\n") + 1]
    end = 0
    for line in whole.splitlines():
        block = json.loads(line.split(b" ", 2)[2])
        end = max(end, int(block["offset"]) + int(block["length"]))
    return whole, end
