"""bench/aws_cost.py's billed units, as facts about the AWS outputs and state (a small crawl, in a process of
its own: the bench starts its own moto).

Units are counted from requests and item sizes, not timed, so these hold on any machine: a WARC location in
the records costs no write unit (bodies are stored deflated and stay within 1 KB), and a page batch's WARC
object costs a fraction of the S3 PUTs of one object per page. Issue 11's targets are checked on 1,000 pages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = 40


def bench(*args: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "aws_cost.py"), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    return bench("--pages", str(PAGES))


def test_the_warc_location_costs_no_write_unit_and_a_batch_object_fewer_puts(figures):
    loose, warc = figures["loose objects"], figures["WARC"]  # (the same state)
    for crawl in ("first crawl", "re-crawl"):
        assert warc[crawl]["pages"] == loose[crawl]["pages"] == PAGES
        # (within half a unit a page: a claim that meets another worker's, a lone page's claim, vary by run;
        # a location that pushed items past 1 KB cost 4 units a page more)
        assert warc[crawl]["write_units_per_page"] <= loose[crawl]["write_units_per_page"] + 0.5, crawl
        assert warc[crawl]["index_write_units_per_page"] <= loose[crawl]["index_write_units_per_page"] + 0.5, crawl
    assert warc["first crawl"]["s3_puts_per_page"] < 0.5 * loose["first crawl"]["s3_puts_per_page"]


def test_a_page_batch_is_one_message(figures):
    """The pages a sitemap sends travel as page batches: every page is delivered, in a message for many."""
    for output in ("loose objects", "WARC"):
        first = figures[output]["first crawl"]
        assert first["page_deliveries_per_page"] == 1.0, output
        assert 0 < first["page_messages_per_page"] <= 0.1, output  # (one a page without page batches)


def test_a_first_crawl_costs_at_most_two_dollars_per_million_pages():
    """Issue 11's targets, on the defaults (WARC output), at a size where a page's own costs outweigh a job's
    fixed ones (1,000 pages: a 40-page job's fixed costs are $6 a million).

    What is billed per request and per unit is counted, so it is held here: within $1.80 a million pages,
    which leaves $0.20 of the $2 to Lambda compute (48 ms of the 256 MB page function a page). Compute is
    timed on the machine that runs the bench (moto and the site answering in process), so it is the
    bench's figure to print, not a test's to hold."""
    crawls = bench("--pages", "1000", "--output", "warc")["WARC"]
    first, again = crawls["first crawl"], crawls["re-crawl"]
    assert first["pages"] == 1000
    assert first["untimed_dollars_per_million_pages"] <= 1.8, first
    assert first["requests_per_page"] <= 2.5, first
    # A fetched page's own write is its pointer, once, at listing (one unit); its job record, its states and
    # its crawl record go in its listed batch's few items (2.03 units a page in all, measured).
    assert first["write_units_per_page"] <= 2.2, first
    assert again["write_units_per_page"] < first["write_units_per_page"], (first, again)
