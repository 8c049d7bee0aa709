"""A job's crawl records read whole (``Pointers.job_records``) kept on disk for the lookups that follow: a
SQLite file in the function's /tmp, keyed by URL, so that the memory a job's end holds does not grow with the
pages the job fetched (at 10 million fetched URLs the records are gigabytes)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")
#: Records inserted, and URLs looked up, in one statement.
_CHUNK = 500


class RecordShelf:
    """The records of one job, by URL (a URL given twice keeps the later record)."""

    def __init__(self, records: Iterable[tuple[str, str]]) -> None:
        handle, self.path = tempfile.mkstemp(prefix="harvest-records-", suffix=".sqlite")
        os.close(handle)
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        try:
            self.conn.executescript(
                "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
                " CREATE TABLE records (url TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;"
            )
            for chunk in _chunks(records):
                self.conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?)", chunk)
            self.conn.commit()
        except BaseException:  # (a read that failed part way: nothing of it is kept)
            self.close()
            raise

    def get(self, urls: Sequence[str]) -> dict[str, str]:
        """The records of those of ``urls`` the job holds."""
        found: dict[str, str] = {}
        for chunk in _chunks(urls):
            marks = ",".join("?" * len(chunk))
            found.update(self.conn.execute(f"SELECT url, body FROM records WHERE url IN ({marks})", chunk).fetchall())
        return found

    def close(self) -> None:
        """Removes the file (again: nothing)."""
        self.conn.close()
        Path(self.path).unlink(missing_ok=True)


def _chunks(items: Iterable[_T]) -> Iterator[list[_T]]:
    it = iter(items)
    while chunk := list(islice(it, _CHUNK)):
        yield chunk
