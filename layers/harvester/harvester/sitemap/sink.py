"""Where the format parsers put their entries, and how they stop.

Every format parser hands its entries to one :class:`Sink`, which enforces the per-sitemap entry limit in
one place: the entry past the limit raises :class:`EntryLimitReached`, unwinding out of whatever loop or
expat callback produced it, so that not one more byte of the document is read.
"""

from __future__ import annotations

from harvester.sitemap.entries import Entry, ParseReport
from harvester.words import count


class StopParsing(Exception):
    """Raised inside a format parser to end the parse; ``reason`` goes to the report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EntryLimitReached(StopParsing):
    """The document has more entries than a sitemap may hold; the ones before the limit are kept."""


class Truncated(StopParsing):
    """The document broke off (a syntax error, a cut download) after it was recognised as a sitemap."""


class NotASitemap(StopParsing):
    """The document is something else (an HTML page, an unknown XML vocabulary, a forbidden DTD)."""


class Sink:
    """Collects entries between two ``feed`` calls and counts them against ``max_entries``."""

    __slots__ = ("count", "max_entries", "out", "report")

    def __init__(self, report: ParseReport, max_entries: int) -> None:
        self.report = report
        self.max_entries = max_entries
        self.count = 0
        self.out: list[Entry] = []

    def emit(self, entry: Entry) -> None:
        if self.count >= self.max_entries:
            raise self.overflow()
        self.count += 1
        self.out.append(entry)

    def overflow(self) -> EntryLimitReached:
        """What ends the parse when one more entry arrives at the limit (for parsers that count inline)."""
        return EntryLimitReached(f"more than {count(self.max_entries, 'entry')}")

    def take(self) -> list[Entry]:
        """The entries emitted since the last call, in document order."""
        out = self.out.copy()
        self.out.clear()  # the same list object: parsers may hold on to its ``append``
        return out
