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

from orjson import OPT_UTC_Z, dumps

from harvester.crawldb.parts import block_urls, line_due
from harvester.model.records import SitemapURL, UrlStatus, body_of
from harvester.sitemap import PageEntry

#: Where a line's fields from the crawl record start: what comes before is the entry's.
_CRAWL_FIELDS = b',"crawl_state":'
_COMPLETED = UrlStatus.COMPLETED.value


def entry_fields(url: str, entry: PageEntry, sitemap: str) -> bytes:
    """The first fields of the line a listing writes for ``entry`` (those it takes from the entry), made as
    the listing makes them (``listed_rows``: orjson, or msgspec through the model for what orjson refuses)."""
    page: dict[str, object] = {"url": url}
    if entry.last_modified is not None:
        page["last_modified"] = entry.last_modified
    if entry.change_frequency is not None:
        page["change_frequency"] = entry.change_frequency
    page["priority"] = entry.priority
    page["status"] = _COMPLETED
    page["sitemap"] = sitemap
    page["extensions"] = entry.extensions()
    try:
        return dumps(page, option=OPT_UTC_Z)[:-1]
    except TypeError:  # (an integer beyond 64 bits in an extension)
        model = SitemapURL(
            url=url,
            last_modified=entry.last_modified,
            change_frequency=entry.change_frequency,
            priority=entry.priority,
            status=UrlStatus.COMPLETED,
            sitemap=sitemap,
            extensions=entry.extensions(),
        )
        line = body_of(model).encode()
        return line[: line.find(_CRAWL_FIELDS)]


class KeptTwice(Exception):
    """An entry's URL is one of those kept already by their elements (``PartDiff.keep``): the sitemap lists it
    twice now, and which comes first is not known without reading the kept elements."""


class PartDiff:
    """The part's lines (without their tails) by URL, for ``keeps`` to compare entries with; with ``due_by``,
    a URL whose next fetch is due by then is never kept (a job that fetches pages). A line is looked at only
    when an entry of its URL is compared: a reading that keeps most lines by their elements reads few."""

    def __init__(self, lines: bytes, *, sitemap: str, due_by: datetime | None = None) -> None:
        self.sitemap = sitemap
        self.due_by = due_by
        self.urls: list[str] = block_urls(lines)  # every URL of the part
        self._block = lines
        self._lines: dict[str, bytes] | None = None  # (the lines by URL, made when first compared)
        #: Whether every line may be kept: each has the crawl record's fields, and none is due.
        self._all_comparable = lines.count(_CRAWL_FIELDS) == len(self.urls)
        if due_by is not None and self._all_comparable:
            self._all_comparable = not any(self._due(line) for line in lines.splitlines())
        self.kept: set[str] = set()
        #: The URLs of the part whose entries were compared and not kept (listed one by one).
        self.listed: set[str] = set()
        self._by_elements = False

    def _fields(self, url: str) -> bytes | None:
        """The entry's fields of the URL's line, when the line may be kept."""
        if self._lines is None:
            self._lines = dict(zip(self.urls, self._block.splitlines(), strict=True))
        line = self._lines.get(url)
        if line is None:
            return None
        if self._due(line):
            return None
        end = line.find(_CRAWL_FIELDS)
        return line[:end] if end > 0 else None

    def _due(self, line: bytes) -> bool:
        """Whether the line's URL is due by ``due_by`` (a line that does not say when counts as due)."""
        if self.due_by is None:
            return False
        when = line_due(line)
        return when is None or datetime.fromisoformat(when) <= self.due_by

    @property
    def by_elements(self) -> bool:
        """Whether the lines kept are those of the elements a changed body kept (``keep``)."""
        return self._by_elements

    @property
    def comparable(self) -> bool:
        """Whether every line of the part may be kept (none is due)."""
        return self._all_comparable

    def keep(self, urls: set[str]) -> None:
        """Keeps the lines of these URLs, whose entries are the part's own by their elements (``sitemap.
        elements``): another entry of one of them raises ``KeptTwice``."""
        self.kept = urls
        self._by_elements = True

    def keeps(self, url: str, entry: PageEntry) -> bool:
        """Whether the part's line of the URL is the one a listing of ``entry`` writes now (then it is kept)."""
        if url in self.kept:
            if self._by_elements:
                raise KeptTwice(url)
            return False
        known = self._fields(url)
        if known is None or entry_fields(url, entry, self.sitemap) != known:
            if self._lines is not None and url in self._lines:
                self.listed.add(url)
            return False
        self.kept.add(url)
        return True

    def excluded(self) -> list[str]:
        """The part's URLs not kept."""
        kept = self.kept
        return [url for url in self.urls if url not in kept]
