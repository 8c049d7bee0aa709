"""Transient failures: a URL that answers 503 is asked again, on one budget of ``retry_max`` (3) requests in
all (a page through the queue, a sitemap by its fetcher); one that recovers within it completes, one that
never does fails with the reason, and its record says how many requests were sent."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import LOOPBACK, harvest, jsonl


class FlakySite:
    """robots.txt, one urlset, and pages that fail with 503 a set number of times before answering."""

    def __init__(self, sitemaps: dict[str, list[str]], failures: dict[str, int | None]) -> None:
        self.sitemaps = sitemaps  # sitemap path -> its page paths
        self.failures = failures  # path -> number of 503s before a 200 (None: always 503)
        self.requests: Counter[str] = Counter()
        self.base = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                site.requests[self.path] += 1
                limit = site.failures.get(self.path, 0)
                if limit is None or site.requests[self.path] <= limit:
                    self.reply(503, "busy", retry_after="0")
                elif self.path == "/robots.txt":
                    self.reply(200, "".join(f"Sitemap: {site.base}{p}\n" for p in site.sitemaps))
                elif self.path in site.sitemaps:
                    pages = site.sitemaps[self.path]
                    locs = "".join(f"<url><loc>{site.base}{p}</loc></url>" for p in pages)
                    self.reply(200, f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>')
                elif any(self.path in pages for pages in site.sitemaps.values()):
                    self.reply(200, f"<html>{self.path}</html>")
                else:
                    self.reply(404, "not found")

            def reply(self, status: int, body: str, retry_after: str | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.end_headers()
                self.wfile.write(data)

        return Handler


@pytest.fixture
def flaky_site() -> Iterator[FlakySite]:
    site = FlakySite(
        sitemaps={"/pages.xml": ["/steady", "/recovers", "/down"], "/late.xml": ["/late-page"], "/dead.xml": ["/lost"]},
        failures={"/steady": 0, "/recovers": 2, "/down": None, "/late.xml": 2, "/dead.xml": None},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), site.handler())
    server.daemon_threads = True
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield site
    server.shutdown()
    server.server_close()


def test_transient_failures_are_retried_a_bounded_number_of_times(flaky_site, tmp_path):
    run = harvest(
        "crawl", f"{flaky_site.base}/", "--state-dir", str(tmp_path / "s"), "--allow-network", LOOPBACK,
        "--quiet", "--json", env={"HARVEST_RETRY_BACKOFF_SECONDS": "0.05"},
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (4, 3, 1)
    records = {r["url"].removeprefix(flaky_site.base): r for r in jsonl(Path(result["processed_urls"]))}
    assert records["/recovers"]["status"] == "completed" and records["/recovers"]["crawl_state"] == "fetched"
    down = records["/down"]
    # Failed for this job; for the crawl database it is one crawl in a row that failed transiently (Nutch's
    # retry counter): still unfetched, gone only after ``retry_max`` such crawls.
    assert down["status"] == "failed" and down["crawl_state"] == "unfetched" and down["retries"] == 3
    assert down["change"] == "new"
    assert down["error_message"] == "HTTP 503 Service Unavailable (gave up after 3 attempts)"
    # One request per delivery of the page's task, three in all, never more; the record says so.
    assert flaky_site.requests["/down"] == down["attempts"] == 3
    assert flaky_site.requests["/recovers"] == records["/recovers"]["attempts"] == 3  # its third succeeded
    assert flaky_site.requests["/steady"] == records["/steady"]["attempts"] == 1


def test_a_flaky_sitemap_is_read_again_and_a_dead_one_fails_with_its_reason(flaky_site, tmp_path):
    run = harvest(
        "crawl", f"{flaky_site.base}/", "--state-dir", str(tmp_path / "s"), "--allow-network", LOOPBACK,
        "--quiet", "--json", env={"HARVEST_RETRY_BACKOFF_SECONDS": "0.05"},
    )  # fmt: skip

    result = json.loads(run.stdout)
    urls = {r["url"].removeprefix(flaky_site.base) for r in jsonl(Path(result["processed_urls"]))}
    assert "/late-page" in urls and "/lost" not in urls  # the sitemap that recovered was read
    (dead,) = [e for e in result["error_details"] if e["kind"] == "sitemap"]
    assert dead == {
        "url": f"{flaky_site.base}/dead.xml",
        "kind": "sitemap",
        "error": "HTTP 503 Service Unavailable (gave up after 3 attempts)",
    }
    assert flaky_site.requests["/dead.xml"] == 3 and flaky_site.requests["/late.xml"] == 3
