"""The pages of a discovery's tree, on disk: each sitemap's pages as it listed them, read back on demand.

USP (>= 1.0) keeps each page sitemap's pages in a temporary file rather than in memory; so does this, in
one SQLite file per tree. A row is one batch of a sitemap's pages as the sitemap worker counts them (a few
hundred): writing costs one insert per batch, and neither the discovery nor a reader of the pages holds
more than a batch, whatever the site's size. The file goes when the spool does (closed, or collected).
"""

from __future__ import annotations

import pickle
import shutil
import sqlite3
import tempfile
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from harvester.model.records import SitemapURL, utcnow
from harvester.pipeline.listed_rows import listed_page
from harvester.sitemap import PageEntry


class PageSpool:
    """Every page each sitemap of one discovery accepted, whether another sitemap listed it first or not."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="harvest-pages-"))  # (private: mode 0700)
        self.path = self.directory / "pages.db"
        # Written by the discovery's event loop, read by whichever thread walks the tree afterwards.
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.executescript(
            # A scratch file: nothing to recover after a crash, so no journal and no waiting for the disk.
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
            "CREATE TABLE batches (sitemap INTEGER, first INTEGER, pages BLOB, PRIMARY KEY (sitemap, first))"
            " WITHOUT ROWID;"
        )
        self._sitemaps: dict[str, int] = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _remove, self._db, self.directory)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Removes the file now rather than when the spool is collected."""
        with self._lock:
            self._finalizer()

    def add(self, sitemap: str, first: int, listed: list[tuple[str, PageEntry]]) -> None:
        """A batch of ``sitemap``'s pages, the first at position ``first`` among its accepted entries. A
        reading that starts again (resumed at its checkpoint, or from the start of a sitemap that changed)
        gives its positions again: what was written from ``first`` on is replaced, never repeated."""
        # (pickled as the parser made them: the records are built when read, only for those who read them)
        blob = pickle.dumps((utcnow(), listed), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            number = self._sitemaps.setdefault(sitemap, len(self._sitemaps))
            with self._db:
                self._db.execute("DELETE FROM batches WHERE sitemap = ? AND first >= ?", (number, first))
                self._db.execute("INSERT INTO batches VALUES (?, ?, ?)", (number, first, blob))

    def pages(self, sitemap: str) -> Iterator[SitemapURL]:
        """``sitemap``'s pages in its order, read a batch at a time (no cursor stays open between two: the
        tree may be read from several threads, or by several iterators at once)."""
        number = self._sitemaps.get(sitemap)
        if number is None:
            return
        for first in self._firsts(number):
            with self._lock:
                self._check_open()
                (blob,) = self._db.execute(
                    "SELECT pages FROM batches WHERE sitemap = ? AND first = ?", (number, first)
                ).fetchone()
            listed_at, listed = pickle.loads(blob)  # (our own file, in a directory only we can write to)
            for url, entry in listed:
                yield listed_page(url, entry, sitemap, listed_at)

    def _firsts(self, number: int) -> list[int]:
        with self._lock:
            self._check_open()
            rows = self._db.execute("SELECT first FROM batches WHERE sitemap = ? ORDER BY first", (number,))
            return [first for (first,) in rows]

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the sitemap tree is closed: its pages are gone")


def _remove(db: sqlite3.Connection, directory: Path) -> None:
    db.close()
    shutil.rmtree(directory, ignore_errors=True)
