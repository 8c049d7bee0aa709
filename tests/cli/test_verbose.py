"""What `harvest crawl` shows of its work: a log line per fetch, retry and sitemap at `-v` (Scrapy's kind), and
a progress line that says what the run waits on, and until when."""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.corpus import fixtures as f
from tests.corpus.server import HTML, Route, RouteServer, serving
from tests.support import harvest


@pytest.fixture
def site() -> Iterator[RouteServer]:
    """Two pages, one that is gone (404), and one that answers 503 with Retry-After: 1 once, then 200."""
    with serving("127.0.0.1") as server:
        paths = ["/p/0", "/p/1", "/p/missing", "/p/flaky"]
        server.add("/robots.txt", Route(f"Sitemap: {server.url('/sitemap.xml')}\n", content_type="text/plain"))
        server.add("/sitemap.xml", Route(f.urlset(*(f.url(server.url(p)) for p in paths))))
        server.add_prefix("/p/", Route("<html>a page</html>", content_type=HTML))
        server.add("/p/missing", Route("gone", status=404, content_type=HTML))
        busy = Route("busy", status=503, content_type="text/plain", headers={"Retry-After": "1"})
        server.add("/p/flaky", [busy, Route("<html>back</html>", content_type=HTML)])
        yield server


def test_verbose_logs_a_line_per_fetch_retry_and_sitemap(site, tmp_path):
    run = harvest(
        "crawl", site.url("/"), "-v", "--quiet", "--json", "--state-dir", str(tmp_path / "s"),
        "--allow-network", "127.0.0.1/32",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    log = run.stderr
    records = {
        r["url"]: r for r in map(json.loads, Path(json.loads(run.stdout)["processed_urls"]).read_text().splitlines())
    }
    for path in ("/p/0", "/p/1"):
        assert _lines(log, f"fetched 200 {site.url(path)} (attempt 1, ") == 1, log
    flaky = site.url("/p/flaky")
    assert records[flaky]["attempts"] == 2
    assert _lines(log, f"fetched 200 {flaky} (attempt 2, ") == 1, log
    assert _lines(log, f"failed 404 {site.url('/p/missing')} (attempt 1, ") == 1, log
    assert "HTTP 404 Not Found (now gone)" in log
    retry = re.search(
        rf"retry {re.escape(flaky)}: HTTP 503 Service Unavailable \(attempt 1 of 3\), again at (\d\d:\d\d:\d\d)"
        r" \(Retry-After 1 s\)",
        log,
    )
    assert retry, log
    # The wait the server asked for, not the back-off of 30 s the settings give a failure that asks for none.
    first, second = (hit.at for hit in site.hits_of("/p/flaky"))
    assert 0.95 <= second - first < 10
    assert _lines(log, f"sitemap completed {site.url('/sitemap.xml')} (urlset, 200, attempt 1): 4 pages, ") == 1
    assert _lines(log, f"sitemap completed {site.url('/robots.txt')} (robots, 200, attempt 1): 0 pages, 1 sitemap")
    assert "sitemap done" not in log
    # The well-known locations probed and not found are -vv's, not -v's.
    assert "sitemap absent" not in log


def _lines(log: str, start: str) -> int:
    return sum(1 for line in log.splitlines() if line.split(": ", 1)[-1].startswith(start))


class Log(io.StringIO):
    """A piped stderr that notes when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self.lines += [(time.time(), line) for line in text.splitlines() if line]
        return super().write(text)


def test_the_progress_line_names_the_page_waiting_for_its_retry_and_its_time_left_covers_the_wait(site, tmp_path):
    from harvester.adapters.local.runner import LocalHarvest, LocalRunner
    from harvester.cli.progress import ProgressLine
    from harvester.fetch import FetchPolicy, parse_networks
    from harvester.model.messages import JobRequest

    busy = Route("busy", status=503, content_type="text/plain", headers={"Retry-After": "4"})
    site.update({"/p/flaky": [busy, Route("<html>back</html>", content_type=HTML)]})
    out = Log()
    with LocalHarvest.open(tmp_path / "s") as local:
        progress = ProgressLine(out, interval_when_piped=0.0)
        runner = LocalRunner(
            local, policy=FetchPolicy(allow_networks=parse_networks(["127.0.0.1/32"])), on_progress=progress
        )
        progress.activity = runner.activity
        asyncio.run(runner.crawl(JobRequest(site=site.url("/"))))
    flaky = site.url("/p/flaky")
    waiting = [
        (at, line, match)
        for at, line in out.lines
        if (match := re.search(rf"1 waiting until (\d\d:\d\d:\d\d) \({re.escape(flaky)}, attempt 2\)", line))
    ]
    # (the time left is told once discovery is over: the first such line; a loaded machine may still be
    # discovering when the page starts to wait)
    told = [w for w in waiting if "+ pages" not in w[1]]
    assert told, "\n".join(line for _, line in out.lines)
    at, line, match = told[0]
    written = datetime.fromtimestamp(at)
    back = datetime.combine(written.date(), datetime.strptime(match[1], "%H:%M:%S").time())
    back += timedelta(days=1) if back < written - timedelta(hours=12) else timedelta(0)
    # Said while it waited: it was asked again when the line said (to the second), ~4 s after its 503.
    first, second = site.hits_of("/p/flaky")
    asked_again = time.time() - (time.monotonic() - second.at)
    assert second.at - first.at >= 3.95 and abs(asked_again - back.timestamp()) < 2.0, (line, asked_again)
    left = re.search(r"about (?:(\d+)m)?(\d+)s left", line)
    assert left, line
    assert int(left[1] or 0) * 60 + int(left[2]) >= back.timestamp() - at - 1.5, line
