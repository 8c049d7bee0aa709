"""A sitemap's listing: every entry one complete reading produced, kept to be replayed when it is unchanged.

A sitemap answered with 304 (or with the same bytes as last time) is not parsed again: its listing is
read back instead and goes through exactly the path parsed entries take (URL hygiene, the job's scope and
patterns, de-duplication, the checkpoint), so a job sees the same URLs, in the same order, as if it had
parsed the document. Entries are stored as the parser gave them, before any job's patterns, because two
jobs of one site may filter differently. Gzipped JSON Lines: about a tenth of the sitemap's size.
"""

from __future__ import annotations

import gzip
import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from harvester.limits import SPOOL_IN_MEMORY
from harvester.lines import LineWriter, json_bytes
from harvester.sitemap import ChildSitemap, PageEntry

#: Fast compression: a listing is written on every complete reading and read back only when unchanged.
GZIP_LEVEL = 1


@dataclass(slots=True)
class ListedPage:
    """A page entry read back from a listing: what the engine uses of a PageEntry."""

    url: str
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float = 0.5
    _extensions: dict[str, Any] = field(default_factory=dict)

    def extensions(self) -> dict[str, Any]:
        return dict(self._extensions)  # (a record's own, as a parsed entry's are)


class ListingWriter:
    """Collects entries while a sitemap is parsed; :meth:`finish` hands the gzipped listing over."""

    def __init__(self) -> None:
        # Closed by finish()'s reader or by close(): it outlives this call by design.
        self._spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
        self._gzip = gzip.GzipFile(fileobj=self._spool, mode="wb", mtime=0, compresslevel=GZIP_LEVEL)
        self._lines = LineWriter(self._gzip)  # (a gzip write per entry cost more than the compression)
        self.entries = 0

    def add(self, entry: PageEntry | ChildSitemap) -> None:
        lastmod = entry.lastmod.isoformat() if entry.lastmod else None
        if isinstance(entry, PageEntry):
            line: dict[str, Any] = {"u": entry.url, "l": lastmod, "c": entry.changefreq, "p": entry.priority}
            extensions = entry.extensions()
            if extensions:
                line["x"] = extensions
        else:
            line = {"s": entry.url, "l": lastmod}
        self._lines.add(json_bytes(line))
        self.entries += 1

    def finish(self) -> IO[bytes]:
        self._lines.flush()
        self._gzip.close()
        self._spool.seek(0)
        return self._spool

    def close(self) -> None:
        self._gzip.close()
        self._spool.close()


def read_listing(body: bytes) -> Iterator[ListedPage | ChildSitemap]:
    with gzip.GzipFile(fileobj=io.BytesIO(body), mode="rb") as lines:
        for raw in lines:
            line = json.loads(raw)  # (not orjson's, which reads an integer beyond 64 bits as a float)
            lastmod = datetime.fromisoformat(line["l"]) if line.get("l") else None
            if "s" in line:
                yield ChildSitemap(url=line["s"], lastmod=lastmod)
            else:
                yield ListedPage(line["u"], lastmod, line.get("c"), line.get("p", 0.5), line.get("x") or {})
