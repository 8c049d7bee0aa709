"""Where fetched documents and WARC files are kept: the ports the archive writes through (adapters: a folder
locally, S3 on AWS)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from harvester.archive.warc import Archived


class DocumentStore(Protocol):
    """Raw fetched documents and job results, by key (``jobs/<job>/pages/<url key>`` ...)."""

    #: Whether ``put`` is quick enough to call on the event loop (a local file) rather than in a thread
    #: (an S3 PUT, whose wait would hold up the turns of the batch's other pages).
    writes_inline: bool

    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        """Stores the body (a file object is read from its current position) and returns its location."""

    def writer(self, key: str, *, content_type: str | None = None) -> AbstractContextManager[BinaryIO]:
        """A file to write a large document into (a job's records): stored under ``key`` when the block
        ends without an error, not at all otherwise. A folder writes it in place, where a spooled copy
        handed to ``put`` would be written twice."""

    def join(self, key: str, parts: Sequence[str], *, content_type: str | None = None) -> str:
        """Stores under ``key`` the documents ``parts`` one after the other, without holding them whole (a
        job's output made of the pieces its end wrote), and returns its location. A part that is not there
        raises FileNotFoundError, and nothing is stored."""

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes of the document from ``offset`` (fewer past its end). Raises as ``get`` does when the
        key is not there."""

    def reader(self, key: str) -> AbstractContextManager[BinaryIO]:
        """The document as a file read in pieces (a stored sitemap parsed again may inflate to 50 MiB: no
        reader holds it whole). Raises as ``get`` does when the key is not there."""

    def exists(self, key: str) -> bool: ...

    def keys(self, prefix: str) -> Iterator[str]: ...

    def delete(self, *keys: str) -> None:
        """Removes the documents (S3: a thousand a request); one that is not there is no error."""

    def location(self, key: str) -> str:
        """Where a user finds the document (``s3://bucket/key`` or a file path)."""


class WarcStore(Protocol):
    """A job's WARC files: chunks of captures appended (never a file rewritten), records read back by their
    location, and a CDXJ index beside each file. Keys are document keys (``warc/<job>/...``)."""

    #: Whether ``append`` is quick enough to call on the event loop (a local file) rather than in a thread.
    writes_inline: bool

    def append(self, job_id: str, chunk: BinaryIO, captures: Sequence[Archived]) -> list[Archived]:
        """Stores the chunk (whole gzip members, ``captures`` at offsets within it, no warcinfo record) in
        one of the job's WARC files, and their lines in its CDXJ index; returns the captures where they now
        are. Once it returns, the records are stored: a URL record may name them."""

    def read(self, filename: str, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset`` of a file: one record (a ranged GET on S3). FileNotFoundError
        when there is no such file."""

    def files(self, job_id: str) -> Iterator[str]:
        """The job's WARC files, in the order they were written."""

    def sweep(self, job_id: str, *, after: str | None = None, pause: Callable[[], bool] | None = None) -> str | None:
        """Removes what a writer that died between a file's records and their index left of the job's WARC
        files (what no index line covers: no URL record names it), from after the file ``after``; returns
        the last file looked at when ``pause`` said to stop (None: every file was). For a job's end, once no
        run of the job writes any more."""

    def close(self) -> None: ...
