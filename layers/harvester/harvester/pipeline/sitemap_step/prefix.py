"""The first bytes of the document a sitemap reading has read, for its checkpoints: whether a resumed reading
reads the document the readings before it read.

Why: a reading cut short (a kill, an invocation's end) is resumed by another delivery, which downloads the
sitemap again and goes on past the entries recorded before, checking only that their URLs are the same
(``PageListing.reached_checkpoint``). Had the document changed meanwhile in any other field of those entries
(a lastmod), the job's records hold the earlier document's: right for the job, which lists what it read,
but a sitemap's part must hold what the document read last lists, line for line. So each checkpoint
carries the size and SHA-256 of the bytes read up to it, and a resumed reading compares its own first bytes
with them: the same bytes, the same entries. A reading that finds others, or cannot tell (a checkpoint
without them), is one that started over for its part (``SitemapRecord.restarted``).
"""

from __future__ import annotations

import hashlib


class DocumentPrefix:
    """The bytes a reading has read of its document, as they arrive (``update``), against the prefix the
    readings before it checkpointed (``expected``: size and hex digest; None when there were none)."""

    def __init__(self, expected: tuple[int, str] | None = None, *, unknown: bool = False) -> None:
        #: The document's SHA-256 so far (the reading's signature of it once whole).
        self.digest = hashlib.sha256()
        self.size = 0
        self.expected = expected
        #: The bytes read differ from those checkpointed before (or those could not be told).
        self.differs = unknown

    def begin(self) -> None:
        """A download (or a replay of the stored copy) of the document starts: its bytes from the first."""
        self.digest = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        expected = self.expected
        if expected is not None and not self.differs and self.size + len(chunk) >= expected[0]:
            head = self.digest.copy()
            head.update(chunk[: expected[0] - self.size])
            self.differs = head.hexdigest() != expected[1]
            self.expected = None
        self.digest.update(chunk)
        self.size += len(chunk)

    def ended(self) -> None:
        """The document ended (or its reading did): shorter than the prefix checkpointed before, it is
        another, as far as a part can tell."""
        if self.expected is not None:
            self.differs, self.expected = True, None

    def checkpoint(self) -> tuple[int, str]:
        """What a checkpoint records: the bytes read so far, or, until they are found the same as the
        prefix checkpointed before, that prefix (the entries recorded before lie within it)."""
        if self.expected is not None:
            return self.expected
        return self.size, self.digest.hexdigest()
