"""Where a ``PartMaker`` keeps the lines it is given until it writes the parts: a temporary file, and the spools
earlier steps of the job's end stored, read by range from their documents. A sitemap's lines are held as
*runs*, (offset, length) places: a run that ends where the next lines of the same sitemap begin grows, so
memory holds a place per run, not per line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from harvester.archive.stores import DocumentStore

#: Places of lines, per sitemap: (offset, length) runs, in order.
Runs = dict[str, list[tuple[int, int]]]

#: A run's offset names the spool it is in: the temporary file below ``_SEGMENT``; else the ``n``-th spool an
#: earlier step stored (``add_stored``), from ``n * _SEGMENT``.
_SEGMENT = 1 << 40


class PartSpool:
    """Lines by sitemap, in a temporary file and in the stored spools of earlier steps."""

    def __init__(self, documents: DocumentStore) -> None:
        self.documents = documents
        self.file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close)
        self.stored: list[str] = []  # the documents of the spools earlier steps stored

    def keep(self, runs: Runs, sitemap: str, data: bytes) -> None:
        """Spools ``data`` as lines of the sitemap's ``runs`` (a run that ends where these begin grows)."""
        data += b"\n"
        at, held = self.file.tell(), runs.setdefault(sitemap, [])
        if held and sum(held[-1]) == at:
            held[-1] = (held[-1][0], held[-1][1] + len(data))
        else:
            held.append((at, len(data)))
        self.file.write(data)

    def read(self, runs: Iterable[tuple[int, int]]) -> Iterator[bytes]:
        """Each run's lines, at once (a stored spool's with a ranged read of its document)."""
        end = self.file.tell()
        try:
            for offset, length in runs:
                segment, at = divmod(offset, _SEGMENT)
                if segment:
                    yield self.documents.get_range(self.stored[segment - 1], at, length)
                    continue
                self.file.seek(offset)
                yield self.file.read(length)
        finally:
            self.file.seek(end)

    def lines(self, runs: Iterable[tuple[int, int]]) -> Iterator[bytes]:
        """The runs' lines one by one, without their newline."""
        for data in self.read(runs):
            yield from data[:-1].split(b"\n")

    def add_stored(self, key: str) -> int:
        """Takes in the spool an earlier step stored as the document ``key``: what its places are offset by."""
        self.stored.append(key)
        return len(self.stored) * _SEGMENT

    def grouped(self, kinds: tuple[Runs, ...]) -> tuple[Runs, ...]:
        """Writes the lines again, each sitemap's of each kind of ``kinds`` in one run, a sitemap's kinds one
        after the other (a step that reads the spool once it is stored reads a sitemap's lines with a request
        a kind); returns their places, the file now the spool's."""
        grouped = tempfile.TemporaryFile()  # noqa: SIM115 (the spool's file from now on)
        places: tuple[Runs, ...] = tuple({} for _ in kinds)
        for sitemap in dict.fromkeys(sitemap for runs in kinds for sitemap in runs):
            for runs, moved in zip(kinds, places, strict=True):
                at = grouped.tell()
                for data in self.read(runs.get(sitemap, ())):
                    grouped.write(data)
                if grouped.tell() > at:
                    moved[sitemap] = [(at, grouped.tell() - at)]
        self.file.close()
        self.file = grouped
        return places

    def rewound(self) -> IO[bytes]:
        """The file, from its start."""
        self.file.seek(0)
        return self.file

    def close(self) -> None:
        self.file.close()
