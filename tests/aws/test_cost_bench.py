"""bench/aws_cost.py's billed units, as facts about the AWS layouts (a small crawl, in a process of its own:
the bench starts its own moto).

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


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "aws_cost.py"), "--pages", str(PAGES), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_warc_location_costs_no_write_unit_and_a_batch_object_fewer_puts(figures):
    loose, warc = figures["loose objects (today)"], figures["WARC, item per URL"]  # (the same state layout)
    for crawl in ("first crawl", "re-crawl"):
        assert warc[crawl]["pages"] == loose[crawl]["pages"] == PAGES
        # (within half a unit a page: a claim that meets another worker's, a lone page's claim, vary by run;
        # a location that pushed items past 1 KB cost 4 units a page more)
        assert warc[crawl]["write_units_per_page"] <= loose[crawl]["write_units_per_page"] + 0.5, crawl
        assert warc[crawl]["index_write_units_per_page"] <= loose[crawl]["index_write_units_per_page"] + 0.5, crawl
    assert warc["first crawl"]["s3_puts_per_page"] < 0.5 * loose["first crawl"]["s3_puts_per_page"]


def test_keeping_the_jobs_state_a_listed_batch_at_a_time_halves_a_fetched_pages_write_units(figures):
    """The batch layout (page_batches.py) against an item per URL, the same WARC output: a fetched page made
    three writes of its own item, two of them transactional (~7.4 units); it now makes its mark (1 unit) and
    shares its batch's few items (its crawl record, written in the settlement, is the rest)."""
    items, batches = figures["WARC, item per URL"], figures["WARC per batch"]
    first, again = batches["first crawl"], batches["re-crawl"]
    assert first["pages"] == items["first crawl"]["pages"] == PAGES
    # (3.6 units a fetched page fewer on 1,000 pages: 7.35 -> 3.74; a small job's fixed costs are the same)
    assert items["first crawl"]["write_units_per_page"] - first["write_units_per_page"] >= 2.5
    # (a mark a page where a claim a page was: about as many requests)
    assert first["requests_per_page"] <= items["first crawl"]["requests_per_page"] + 0.2
    assert again["write_units_per_page"] < items["re-crawl"]["write_units_per_page"]
    assert first["dollars_per_million_pages"] < items["first crawl"]["dollars_per_million_pages"]


def test_a_page_batch_is_one_message(figures):
    """The pages a sitemap sends travel as page batches: every page is delivered, in a message for many."""
    for layout in ("loose objects (today)", "WARC, item per URL", "WARC per batch", "WARC, pointers"):
        first = figures[layout]["first crawl"]
        assert first["page_deliveries_per_page"] == 1.0, layout
        assert 0 < first["page_messages_per_page"] <= 0.1, layout  # (one a page before page batches)


def test_keeping_crawl_records_a_batch_at_a_time_takes_a_fetched_pages_own_writes_to_one(figures):
    """The pointer layout (page_pointers.py) against the batch layout: a fetched page's mark was one unit and its
    crawl record two more (written in the settlement's transaction); its pointer, written once at listing, is
    both now, and its crawl record goes in its batch's items."""
    batches, pointers = figures["WARC per batch"], figures["WARC, pointers"]
    first = pointers["first crawl"]
    assert first["pages"] == batches["first crawl"]["pages"] == PAGES
    # (1.7 units a fetched page fewer on 1,000 pages: 3.74 -> 2.03)
    assert batches["first crawl"]["write_units_per_page"] - first["write_units_per_page"] >= 1.2
    assert first["requests_per_page"] <= batches["first crawl"]["requests_per_page"] + 0.2
    assert pointers["re-crawl"]["write_units_per_page"] < batches["re-crawl"]["write_units_per_page"]


def test_a_first_crawl_costs_at_most_two_dollars_per_million_pages():
    """Issue 11's targets, on the defaults (``StateLayout=pointers``, WARC output), at a size where a page's
    own costs outweigh a job's fixed ones (1,000 pages: a 40-page job's fixed costs are $6 a million).

    What is billed per request and per unit is counted, so it is held here: within $1.80 a million pages,
    which leaves $0.20 of the $2 to Lambda compute (24 ms of the 512 MB page function a page). Compute is
    timed on the machine that runs the bench (moto and the site answering in process), so it is the
    bench's figure to print, not a test's to hold."""
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "aws_cost.py"), "--pages", "1000", "--layout", "pointers", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    first = json.loads(run.stdout.strip().splitlines()[-1])["WARC, pointers"]["first crawl"]
    assert first["pages"] == 1000
    assert first["untimed_dollars_per_million_pages"] <= 1.8
    assert first["requests_per_page"] <= 2.5
