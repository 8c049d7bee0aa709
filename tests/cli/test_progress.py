"""The progress line of `harvest crawl`: this run's rate, elapsed time and time left, and no repeated
lines in a log."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta

from harvester.cli.progress import Pace, ProgressLine, duration, job_pace, rate_text, render
from harvester.model.records import BulkProcessingJob, JobStatus

NOW = datetime(2026, 11, 24, tzinfo=UTC)


def view(processed: int, total: int = 20000, *, done: bool = False, discovered: bool = True) -> BulkProcessingJob:
    return BulkProcessingJob(
        job_id="j",
        sitemap_url="https://e.x/",
        status=JobStatus.COMPLETED if done else JobStatus.IN_PROGRESS,
        progress_percentage=100.0 * processed / total,
        current_url_index=processed,
        total_urls=total,
        processed_count=processed,
        successful_count=processed,
        failed_count=0,
        start_time=NOW,
        last_update_time=NOW,
        rate_limit_delay=0.05,
        discovery_complete=discovered,
        sitemaps_total=4,
        sitemaps_done=4 if discovered else 1,
    )


def test_a_resumed_jobs_rate_counts_only_this_runs_pages_and_the_time_left_is_shown():
    # 19,993 pages were done before the run; 100 more in 10 s: 10/s, not 2009/s.
    line = render([view(20093, 30000)], elapsed=10.0, before=19993)
    assert "10/s" in line
    assert "10s elapsed" in line
    assert "about 16m30s left" in line  # (9,907 pages at 10/s)


def test_no_time_left_while_the_total_can_still_grow():
    assert "left" not in render([view(100, 1000, discovered=False)], elapsed=5.0)


def test_durations_read_as_people_write_them():
    assert [duration(s) for s in (0.4, 42, 185, 7620)] == ["0s", "42s", "3m05s", "2h07m"]


class Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_into_a_log_an_unchanged_line_is_not_written_again():
    log = Log()
    progress = ProgressLine(log, interval_when_piped=0.0)
    for _ in range(5):
        progress(view(100))  # nothing moved: one line, not five
    progress(view(200))
    progress(view(20000, done=True))
    lines = log.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert [line.split(" pages")[0].split()[-1] for line in lines] == ["100/20,000", "200/20,000", "20,000/20,000"]


def test_a_jobs_pace_from_its_start_time_and_counters_reads_like_the_progress_line():
    # 250 of 1,000 pages in the 100 s since the job started: 2.5/s, and 750 pages at 2.5/s is 5 minutes.
    pace = job_pace(view(250, 1000), now=NOW + timedelta(seconds=100))
    assert (pace.rate, pace.elapsed, pace.left) == (2.5, 100.0, 300.0)
    assert pace.as_json() == {
        "pages_per_second": 2.5,
        "elapsed_seconds": 100.0,
        "seconds_left": 300,
        "text": "2.5/s · 1m40s elapsed · about 5m00s left",
    }
    # The progress line words the same figures the same way.
    assert render([view(250, 1000)], elapsed=100.0).endswith(" · " + pace.as_json()["text"])


def test_no_time_left_for_a_job_still_discovering_or_ended_and_an_ended_jobs_pace_stops_at_its_end():
    assert job_pace(view(250, 1000, discovered=False), now=NOW + timedelta(seconds=100)).left is None
    ended = view(1000, 1000, done=True).model_copy(update={"end_time": NOW + timedelta(seconds=400)})
    pace = job_pace(ended, now=NOW + timedelta(days=3))
    assert (pace.rate, pace.elapsed, pace.left) == (2.5, 400.0, None)
    assert pace.as_json()["text"] == "2.5/s · 6m40s elapsed"


def test_a_slow_crawls_rate_keeps_a_decimal():
    assert (rate_text(0.0), rate_text(0.04), rate_text(0.4), rate_text(9.4), rate_text(12.6)) == (
        "0/s",
        "0.0/s",
        "0.4/s",
        "9.4/s",
        "13/s",
    )
    assert Pace.of(0, 0.0, 10, estimable=True) == Pace(0.0, 0.0, None)


def test_the_line_says_what_is_in_flight_and_waiting_and_the_time_left_covers_the_wait():
    from harvester.adapters.local.activity import Activity, Task

    now = NOW.timestamp()
    hang = "https://e.x/p/hang.html"
    doing = Activity(
        in_flight=2,
        longest=Task(hang, 1),
        longest_since=now - 25,
        waiting=1,
        next=Task("https://e.x/p/flaky.html", 3),
        next_at=now + 90,
        last_at=now + 90,
    )
    # 297 of 300 pages in 30 s: 10/s would leave "about 0s"; the page waiting until 90 s from now says more.
    line = render([view(297, 300)], elapsed=30.0, activity=doing, now=now)
    until = datetime.fromtimestamp(now + 90).strftime("%H:%M:%S")
    assert f"2 in flight ({hang} for 25s) · 1 waiting until {until} (https://e.x/p/flaky.html, attempt 3)" in line
    assert line.endswith("about 1m30s left")
    # Out for a few seconds only, a task is not named; on a narrow terminal the bar, the rate and the time
    # elapsed, then the URLs give way.
    brief = Activity(in_flight=1, longest=Task(hang, 1), longest_since=now - 2)
    assert " · 1 in flight · " in render([view(297, 300)], elapsed=30.0, activity=brief, now=now)
    deep = "https://e.x/a/rather/long/path/to/the/page/that/hangs.html"
    long_out = Activity(in_flight=1, longest=Task(deep, 1), longest_since=now - 25)
    narrow = render([view(297, 300)], elapsed=30.0, activity=long_out, now=now, width=115)
    assert narrow.startswith("99.0% · 297/300 pages") and narrow.endswith(" left"), narrow
    assert len(narrow) <= 115 and re.search(
        r" · 1 in flight \(https://e\.x/a\S*…\S*/hangs\.html for 25s\) · about ", narrow
    )
