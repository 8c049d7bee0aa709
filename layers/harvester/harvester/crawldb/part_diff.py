"""Which entries of a sitemap read again its part holds the lines of already: a part adopted in part.

A part's line of a URL is what the sitemap's entry said (``url``, ``last_modified``, ``change_frequency``,
``priority``, then ``status`` and ``sitemap``, always the same here, and ``extensions``), then what the URL's
crawl record said, then the listing job's tail (cut off). While the sitemap's epoch has not moved, the crawl
records are the ones the lines were made of; so an entry whose first fields are its line's gets that line
from a listing now, but for the tail (``crawldb.parts``) — unless the URL is due, for a job that fetches
pages. Those entries are the job's through the part; the others are listed one by one, and the part's URLs
not kept are left out of its adoption (``excluded``).
"""

from __future__ import annotations

from datetime import datetime

import orjson

from harvester.keyset import bits_of
from harvester.model.records import SitemapURL, UrlStatus, body_of, url_key
from harvester.sitemap import PageEntry

#: Where a line's fields from the crawl record start: what comes before is the entry's.
_CRAWL_FIELDS = b',"crawl_state":'


def entry_fields(url: str, entry: PageEntry, sitemap: str) -> bytes:
    """The first fields of the line a listing writes for ``entry`` (those it takes from the entry)."""
    page = SitemapURL(
        url=url,
        last_modified=entry.lastmod,
        change_frequency=entry.changefreq,
        priority=entry.priority,
        status=UrlStatus.COMPLETED,
        sitemap=sitemap,
        extensions=entry.extensions(),
    )
    line = body_of(page).encode()
    return line[: line.find(_CRAWL_FIELDS)]


class PartDiff:
    """The part's lines (without their tails) by URL key, for ``keeps`` to compare entries with; with
    ``due_by``, a URL whose next fetch is due by then is never kept (a job that fetches pages)."""

    def __init__(self, lines: bytes, *, sitemap: str, due_by: datetime | None = None) -> None:
        self.sitemap = sitemap
        self.urls: dict[int, str] = {}  # every URL of the part, by its key's bits
        self._fields: dict[int, int] = {}  # of those that may be kept: a hash of their entry's fields
        self.kept: set[int] = set()
        for line in lines.splitlines():
            record = orjson.loads(line + b"}")
            url = record["url"]
            bits = bits_of(url_key(url))
            self.urls[bits] = url
            if due_by is not None:
                when = record.get("next_fetch_time")
                if when is None or datetime.fromisoformat(when) <= due_by:
                    continue
            end = line.find(_CRAWL_FIELDS)
            if end > 0:
                self._fields[bits] = hash(line[:end])

    def keeps(self, url: str, entry: PageEntry, bits: int) -> bool:
        """Whether the part's line of the URL is the one a listing of ``entry`` writes now (then it is kept)."""
        known = self._fields.get(bits)
        if known is None or bits in self.kept or hash(entry_fields(url, entry, self.sitemap)) != known:
            return False
        self.kept.add(bits)
        return True

    def excluded(self) -> list[str]:
        """The part's URLs not kept."""
        kept = self.kept
        return [url for bits, url in self.urls.items() if bits not in kept]
