"""The captures of one page batch, written as one chunk of WARC records and stored with one call.

A batch's pages are fetched side by side; each capture is written as its page ends (compressed on the way,
so what is held is the archive's size, not the pages'), into a buffer of the page's own and then appended
to the batch's spooled chunk, and the chunk is handed to the :class:`~harvester.archive.stores.WarcStore` once,
before any page of the batch is settled: a URL record only ever names a record that is stored. On S3 the
chunk becomes one object (one PUT per batch, not per page); a folder appends it to the job's current file.
"""

from __future__ import annotations

import io
import tempfile
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from msgspec.structs import replace

from harvester.archive.warc import Archived, Capture, WarcFile
from harvester.limits import SPOOL_IN_MEMORY
from harvester.model.crawl import WarcLocation
from harvester.urls import normalize

if TYPE_CHECKING:
    from harvester.archive.stores import WarcStore


class WarcBatch:
    def __init__(self) -> None:
        self._chunk = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 (closed by close())
        #: Every capture written, in order; the page's key for those a record names (a redirect hop: None).
        self._captures: list[tuple[str | None, Archived]] = []
        self._writing = threading.Lock()

    def __len__(self) -> int:
        return len(self._captures)

    def add(self, key: str, capture: Capture, *, hops: Sequence[Capture] = ()) -> None:
        """Writes the capture of the page ``key`` (its URL as the job knows it) into the chunk, after the
        redirects that led to it (indexed too, but not what the page's record names).

        The records are written (compressed, digested) into a buffer of the page's own, and only the copy of
        their bytes into the chunk holds the batch's lock: the pages of a batch written in threads (large
        ones, see page_archive.IN_THREAD_BYTES) are compressed side by side, where one at a time they would
        make the batch's last page wait for all the others'."""
        own = io.BytesIO()
        page = WarcFile(own, "", warcinfo=False)  # type: ignore[arg-type]
        written = [(None, page.add(hop)) for hop in hops] + [(key, page.add(capture))]
        with self._writing:
            start = self._chunk.tell()
            self._chunk.write(own.getbuffer())
            self._captures += [(k, replace(at, offset=start + at.offset)) for k, at in written]

    def store(self, warcs: WarcStore, job_id: str) -> dict[str, WarcLocation]:
        """Stores the chunk in the job's WARC files; where each page's record is, by page."""
        if not self._captures:
            return {}
        self._chunk.seek(0)
        placed = warcs.append(job_id, self._chunk, [archived for _, archived in self._captures])  # type: ignore[arg-type]
        keys = [key for key, _ in self._captures]
        return {key: location(key, at) for key, at in zip(keys, placed, strict=True) if key is not None}

    def close(self) -> None:
        self._chunk.close()


def location(url: str, archived: Archived) -> WarcLocation:
    """Where the capture of ``url`` is (with its target URI when the page redirected elsewhere)."""
    return WarcLocation(
        url=archived.url if normalize(archived.url) != url else None,
        filename=archived.filename,
        offset=archived.offset,
        length=archived.length,
        record_type=archived.record_type,
        payload_digest=archived.payload_digest,
        date=archived.fetched_at,
    )


def archived(url: str, place: WarcLocation, *, status: int = 200, mime: str | None = None) -> Archived:
    """A stored location as the capture a revisit refers to."""
    return Archived(
        url=url,
        fetched_at=place.date,
        filename=place.filename,
        offset=place.offset,
        length=place.length,
        payload_digest=place.payload_digest,
        status=status,
        mime=mime,
        record_type=place.record_type,
    )
