"""The progress line `harvest crawl` draws on stderr.

On a terminal it redraws one line in place; into a file or a pipe it writes a line every few seconds, so
CI logs stay readable. The total carries a ``+`` while discovery is still running, because it can grow.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from harvester.model.records import BulkProcessingJob

BAR_WIDTH = 28


class ProgressLine:
    def __init__(self, stream: TextIO = sys.stderr, *, interval_when_piped: float = 5.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = interval_when_piped
        self._last_piped = 0.0
        self._started = time.monotonic()
        self._drawn = False

    def __call__(self, view: BulkProcessingJob) -> None:
        line = render(view, elapsed=time.monotonic() - self._started)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._drawn = True
        elif view.status.final or time.monotonic() - self._last_piped >= self.interval:
            self.stream.write(line + "\n")
            self._last_piped = time.monotonic()
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def render(view: BulkProcessingJob, *, elapsed: float) -> str:
    filled = int(BAR_WIDTH * view.progress_percentage / 100)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    total = f"{view.total_urls}{'' if view.discovery_complete else '+'}"
    rate = view.processed_count / elapsed if elapsed > 0 else 0.0
    parts = [
        f"[{bar}] {view.progress_percentage:5.1f}%",
        f"{view.processed_count}/{total} pages",
        f"{view.failed_count} failed",
        f"sitemaps {view.sitemaps_done}/{view.sitemaps_total}",
        f"{rate:.0f}/s",
    ]
    return " · ".join(parts)
