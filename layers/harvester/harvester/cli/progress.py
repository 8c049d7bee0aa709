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
        self._views: dict[str, BulkProcessingJob] = {}

    def __call__(self, view: BulkProcessingJob) -> None:
        self._views[view.job_id] = view
        views = list(self._views.values())
        final = all(v.status.final for v in views)
        line = render(views, elapsed=time.monotonic() - self._started)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._drawn = True
        elif final or time.monotonic() - self._last_piped >= self.interval:
            self.stream.write(line + "\n")
            self._last_piped = time.monotonic()
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def render(views: list[BulkProcessingJob], *, elapsed: float) -> str:
    """One line for the run: its jobs (one per site) added up."""
    processed = sum(v.processed_count for v in views)
    total_urls = sum(v.total_urls for v in views)
    if total_urls:
        percentage = 100.0 * processed / total_urls
    else:
        percentage = sum(v.progress_percentage for v in views) / len(views)
    filled = int(BAR_WIDTH * percentage / 100)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    total = f"{total_urls}{'' if all(v.discovery_complete for v in views) else '+'}"
    rate = processed / elapsed if elapsed > 0 else 0.0
    parts = [
        f"[{bar}] {percentage:5.1f}%",
        f"{processed}/{total} pages",
        f"{sum(v.failed_count for v in views)} failed",
        f"sitemaps {sum(v.sitemaps_done for v in views)}/{sum(v.sitemaps_total for v in views)}",
        f"{rate:.0f}/s",
    ]
    if len(views) > 1:
        parts.insert(0, f"{sum(v.status.final for v in views)}/{len(views)} sites done")
    return " · ".join(parts)
