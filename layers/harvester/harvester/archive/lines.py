"""JSON Lines written a thousand at a time: the job's records, its change feed, ``harvest sitemaps``'s pages.

A ``write`` per line costs more than serialising the line, so lines are joined and written in batches;
:meth:`LineWriter.flush` writes what is left.
"""

from __future__ import annotations

from typing import IO, Any

import msgspec
from orjson import OPT_APPEND_NEWLINE, dumps

LINES_PER_WRITE = 1000


def json_bytes(value: Any, *, newline: bool = False) -> bytes:
    """``value`` as compact JSON: orjson, or msgspec for what orjson refuses, an integer beyond 64 bits (a
    sitemap's video may say any view count)."""
    try:
        return dumps(value, option=OPT_APPEND_NEWLINE) if newline else dumps(value)
    except TypeError:
        body = msgspec.json.encode(value)
        return body + b"\n" if newline else body


class LineWriter:
    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self._pending: list[bytes] = []

    def add(self, line: bytes) -> None:
        """One line (serialised JSON, without its newline)."""
        self._pending.append(line)
        if len(self._pending) >= LINES_PER_WRITE:
            self.flush()

    def add_block(self, lines: bytes) -> None:
        """Lines joined already (without the last newline), written at once after those pending."""
        self.flush()
        self.file.write(lines)
        self.file.write(b"\n")

    def flush(self) -> None:
        if self._pending:
            self.file.write(b"\n".join(self._pending) + b"\n")
            self._pending = []
