"""The progress line `harvest crawl` draws on stderr.

On a terminal it redraws one line in place (cut to the terminal's width); into a file or a pipe it writes a
line every few seconds, and only when something moved, so CI logs stay readable. The total carries a ``+``
while discovery is still running, because it can grow. The rate counts this run's pages only (a resumed
job's earlier pages were not done in this run's seconds), and the time left is shown once the total is known.

What the run is doing (``harvest crawl``'s ``LocalRunner.activity``) follows the counts: the tasks in flight
(the one out longest named once it is out for ``LONG_IN_FLIGHT`` seconds: a page that hangs), and the tasks
waiting in the queue for a later time (a retry's wait, a host's turn), the first to come back named with its
time and the request it makes next. The time left is never shorter than the wait for the last of them.

``Pace`` is that rate and time left, worded once: the progress line, ``harvest status`` (AWS) and ``harvest
report`` (local) all show it, the last two from what the state store records (the job's start, its end or
now, its counters), so a job's pace reads the same whichever way it is looked at.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from harvester.model.records import BulkProcessingJob

if TYPE_CHECKING:
    from harvester.adapters.local.activity import Activity

BAR_WIDTH = 28
#: Seconds a task is out before the progress line names it.
LONG_IN_FLIGHT = 10.0


class ProgressLine:
    def __init__(
        self,
        stream: TextIO = sys.stderr,
        *,
        interval_when_piped: float = 5.0,
        activity: Callable[[], Activity | None] | None = None,
    ) -> None:
        self.stream = stream
        #: What the run is doing now, asked at each line drawn (None: not known).
        self.activity = activity
        self.tty = stream.isatty()
        self.interval = interval_when_piped
        self._last_piped = 0.0
        self._started = time.monotonic()
        self._drawn = False
        self._views: dict[str, BulkProcessingJob] = {}
        #: Each job's processed count when this run first saw it (a resumed job starts part done).
        self._before: dict[str, int] = {}
        self._last_state: tuple[object, ...] | None = None

    def __call__(self, view: BulkProcessingJob) -> None:
        self._views[view.job_id] = view
        self._before.setdefault(view.job_id, view.processed_count)
        views = list(self._views.values())
        final = all(v.status.final for v in views)
        doing = None if final or self.activity is None else self.activity()
        line = render(
            views,
            elapsed=time.monotonic() - self._started,
            before=sum(self._before.values()),
            activity=doing,
            now=time.time(),
            width=_width(self.stream) if self.tty else None,
        )
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._drawn = True
        else:
            state = (
                *(
                    (v.processed_count, v.total_urls, v.failed_count, v.excluded_count, v.sitemaps_done, v.status)
                    for v in views
                ),
                doing
                and (
                    doing.in_flight,
                    doing.waiting,
                    doing.next_at,
                    doing.longest if time.time() - doing.longest_since >= LONG_IN_FLIGHT else None,
                ),
            )
            due = time.monotonic() - self._last_piped >= self.interval
            if state != self._last_state and (final or due):
                self.stream.write(line + "\n")
                self._last_piped = time.monotonic()
                self._last_state = state
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def _width(stream: TextIO) -> int:
    """The terminal's width less one (a line as wide as the terminal wraps there, and a carriage return
    then redraws only its last row)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns - 1
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns - 1


def render(
    views: list[BulkProcessingJob],
    *,
    elapsed: float,
    before: int = 0,
    activity: Activity | None = None,
    now: float | None = None,
    width: int | None = None,
) -> str:
    """One line for the run: its jobs (one per site) added up, and what it is doing (``activity`` at ``now``,
    epoch seconds). ``before``: the pages done before this run; ``width``: the most characters it may take
    (the bar is left out first, then the rate and the time elapsed, then the URLs it names are shortened,
    then it is cut)."""
    processed = sum(v.processed_count for v in views)
    total_urls = sum(v.total_urls for v in views)
    if total_urls:
        percentage = 100.0 * processed / total_urls
    else:
        percentage = sum(v.progress_percentage for v in views) / len(views)
    filled = int(BAR_WIDTH * percentage / 100)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    total = f"{total_urls:,}{'' if all(v.discovery_complete for v in views) else '+'}"
    now = time.time() if now is None else now
    pace = Pace.of(
        processed - before,
        elapsed,
        total_urls - processed,
        estimable=all(v.discovery_complete for v in views) and not all(v.status.final for v in views),
        at_least=activity.last_at - now if activity is not None and activity.waiting else None,
    )
    parts = [
        f"[{bar}] {percentage:5.1f}%",
        f"{processed:,}/{total} pages",
        f"{sum(v.failed_count for v in views):,} failed",
        *([f"{excluded:,} excluded"] if (excluded := sum(v.excluded_count for v in views)) else []),
        f"sitemaps {sum(v.sitemaps_done for v in views)}/{sum(v.sitemaps_total for v in views)}",
    ]
    if len(views) > 1:
        parts.insert(0, f"{sum(v.status.final for v in views)}/{len(views)} sites done")
    doing = _doing(activity, now) if activity is not None else []
    line = " · ".join([*parts, *(text for text, _ in doing), *pace.parts()])
    if width is None or len(line) <= width:
        return line
    bar_at = 1 if len(views) > 1 else 0  # (too wide: the bar gives way first, its percentage stays)
    parts[bar_at] = f"{percentage:.1f}%"
    texts = [text for text, _ in doing]
    tail = pace.parts()

    def over() -> int:
        return len(" · ".join([*parts, *texts, *tail])) - width

    while over() > 0 and len(tail) > 1 and tail[0] != tail[-1]:  # (then the rate, the time elapsed)
        tail.pop(0)
    for at, (text, url) in enumerate(doing):  # (then the URLs named, from their middle)
        if url and over() > 0:
            texts[at] = text.replace(url, _shortened(url, max(24, len(url) - over())))
    return " · ".join([*parts, *texts, *tail])[:width]


def _doing(activity: Activity, now: float) -> list[tuple[str, str | None]]:
    """The activity's parts of the line, each with the URL it names (None: none)."""
    parts: list[tuple[str, str | None]] = []
    if activity.in_flight:
        out = now - activity.longest_since
        if activity.longest is not None and out >= LONG_IN_FLIGHT:
            url = activity.longest.url
            parts.append((f"{activity.in_flight} in flight ({url} for {duration(out)})", url))
        else:
            parts.append((f"{activity.in_flight} in flight", None))
    if activity.waiting:
        count = f"{activity.waiting}{'+' if activity.waiting_more else ''}"
        when = datetime.fromtimestamp(activity.next_at).strftime("%H:%M:%S")
        lead = f"{count} waiting until {when}" if activity.waiting == 1 else f"{count} waiting, the next until {when}"
        task = activity.next
        if task is None:
            parts.append((lead, None))
        else:
            attempt = f", attempt {task.attempt}" if task.attempt is not None else ""
            parts.append((f"{lead} ({task.url}{attempt})", task.url))
    return parts


def _shortened(url: str, keep: int) -> str:
    """``http://host/a/b…/page.html``: the URL's start and end, ``keep`` characters in all."""
    if len(url) <= keep:
        return url
    head = (keep - 1) // 2
    return url[:head] + "…" + url[len(url) - (keep - 1 - head) :]


@dataclass(frozen=True)
class Pace:
    """Pages settled per second over ``elapsed`` seconds, and the seconds the rest should take at that rate
    (None when it cannot be told: the total can still grow, the job has ended, or nothing was done yet)."""

    rate: float
    elapsed: float
    left: float | None

    @classmethod
    def of(cls, done: int, elapsed: float, remaining: int, *, estimable: bool, at_least: float | None = None) -> Pace:
        """``done`` pages in ``elapsed`` seconds, ``remaining`` to go; ``estimable``: the total is final and
        the work is not over (a time left is then shown once there is a rate); ``at_least``: the seconds the
        work cannot be over in (the last task waiting in the queue comes back then), which the time left is
        never shorter than."""
        rate = max(0, done) / elapsed if elapsed > 0 else 0.0
        left = remaining / rate if estimable and rate > 0 and remaining > 0 else None
        if estimable and remaining > 0 and at_least is not None and at_least > (left or 0.0):
            left = at_least
        return cls(rate, max(0.0, elapsed), left)

    def parts(self) -> list[str]:
        """``12/s · 3m05s elapsed · about 2m10s left``, as pieces of a line."""
        parts = [rate_text(self.rate), f"{duration(self.elapsed)} elapsed"]
        if self.left is not None:
            parts.append(f"about {duration(self.left)} left")
        return parts

    def as_json(self) -> dict[str, Any]:
        """For ``harvest status`` and ``harvest report``: the figures, and the line's wording of them."""
        return {
            "pages_per_second": round(self.rate, 3),
            "elapsed_seconds": round(self.elapsed, 1),
            "seconds_left": None if self.left is None else round(self.left),
            "text": " · ".join(self.parts()),
        }


def job_pace(view: BulkProcessingJob, *, now: datetime) -> Pace:
    """A job's pace over its life so far: its pages settled from its start time to its end (or to ``now``
    while it runs). The state store keeps no history of the counters, so this is the whole job's average,
    not a recent window's; a job that resumed after a stall shows the stall in its rate."""
    elapsed = ((view.end_time or now) - view.start_time).total_seconds()
    return Pace.of(
        view.processed_count,
        elapsed,
        view.total_urls - view.processed_count,
        estimable=view.discovery_complete and not view.status.final,
    )


def rate_text(rate: float) -> str:
    """``12/s``; a slow crawl (a polite delay, a slow host) keeps one decimal: ``0.4/s``, not ``0/s``."""
    return f"{rate:.1f}/s" if 0 < rate < 9.95 else f"{rate:.0f}/s"


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``: as long as it needs to be and no longer."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
