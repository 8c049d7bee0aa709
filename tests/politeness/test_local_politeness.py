"""Politeness of `harvest crawl` with 16 workers, measured where it counts: at the servers, on 127.0.0.1 and
127.0.0.2, which log when each request starts.

Tolerance: see ``tests.politeness.support.JITTER``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from harvester.politeness import GateRules, HostReport
from tests.corpus.server import HTML, Hit, Route, RouteServer, serving
from tests.politeness.support import JITTER, crawl, site, storm

#: A host's pace as its site sees the requests: `make test` runs these beside the others, which it nices.
pytestmark = pytest.mark.time_budget


@pytest.fixture
def host1() -> Iterator[RouteServer]:
    with serving("127.0.0.1") as running:
        yield running


@pytest.fixture
def host2() -> Iterator[RouteServer]:
    with serving("127.0.0.2") as running:
        yield running


@pytest.mark.parametrize("wait_max", ["2.0", "0.05"], ids=["waiting", "deferring"])
def test_sixteen_workers_never_start_two_requests_to_a_host_closer_than_the_delay(host1, tmp_path, wait_max):
    """With a short wait bound most pages are deferred through the queue rather than waited for."""
    urls = site(host1, 20)
    done = crawl(host1, tmp_path, delay=0.15, env={"HARVEST_HOST_WAIT_MAX": wait_max})
    assert {r["status"] for r in done.records.values()} == {"completed"} and len(done.records) == len(urls)
    assert len(done.hits) == len(urls)
    assert min(done.gaps()) >= 0.15 - JITTER, sorted(done.gaps())[:3]
    assert done.starts()[-1] - done.starts()[0] < len(urls) * 0.15 * 2  # paced, not stalled


def test_the_sites_crawl_delay_paces_a_host_when_it_asks_for_more(host2, tmp_path):
    urls = site(host2, 8, robots="Crawl-delay: 0.4")
    done = crawl(host2, tmp_path, delay=0.01)
    assert len(done.hits) == len(urls)
    assert min(done.gaps()) >= 0.4 - JITTER, sorted(done.gaps())[:3]


def test_never_more_requests_in_flight_to_a_host_than_allowed(host1, tmp_path):
    urls = site(host1, 24, page=Route("<html>slow</html>", content_type=HTML, delay=0.25))
    done = crawl(host1, tmp_path, delay=0.001, extra=("--per-host", "3"))
    assert len(done.hits) == len(urls)
    assert done.max_in_flight == 3  # the limit, and reached: 16 workers would otherwise have 16 out


def test_a_429_storm_slows_the_host_for_every_worker(host1, tmp_path):
    """Every page request in the 0.3 s after the first one answers 429 without Retry-After: the host pauses
    for the slow-down (one second, once for the whole storm), then comes back gradually."""
    urls = site(host1, 30)
    host1.override = storm(0.3)
    done = crawl(host1, tmp_path, delay=0.01)
    failed = [r for r in done.records.values() if r["status"] != "completed"]
    assert failed == [] and len(done.records) == len(urls)
    first = done.hits[0].at
    # Nothing was sent in the second after the storm began but what had been granted before its answers.
    assert [h for h in done.hits if first + 0.3 < h.at < first + 0.95] == []
    assert max(done.gaps()) >= 0.95
    # and it came back: the turns booked once its first healthy answers halved the slow-down keep that pace
    assert sorted(done.gaps())[len(done.gaps()) // 2] <= 0.5 + JITTER
    throttled = [r for r in done.records.values() if r["attempts"] > 1]
    assert throttled and all(r["attempts"] == 2 for r in throttled)  # each 429'd page asked twice, no more


def test_retry_after_holds_the_whole_host(host1, tmp_path):
    site(host1, 10)
    first = iter([True])

    def throttle(hit: Hit) -> Route | None:
        if hit.path.startswith("/p/") and next(first, False):
            return Route("busy", status=429, content_type="text/plain", headers={"Retry-After": "2"})
        return None

    host1.override = throttle
    done = crawl(host1, tmp_path, delay=0.01)
    assert {r["status"] for r in done.records.values()} == {"completed"}
    answered = done.hits[0].at
    assert [h for h in done.hits if answered + 0.2 < h.at < answered + 1.95] == []
    # The page asked again takes a turn behind those booked at the slowed pace (the host's nine other pages),
    # not one booked ``book_ahead`` (30 s) later.
    again = [h.at - answered for h in done.hits if h.path == done.hits[0].path]
    assert len(again) == 2 and again[1] < 15, again


def test_a_page_that_times_out_is_requested_retry_max_times_in_all(host1, tmp_path):
    urls = site(host1, 3)
    host1.add("/p/1", Route("<html>late</html>", content_type=HTML, delay=2.0))
    done = crawl(host1, tmp_path, delay=0.01, env={"HARVEST_READ_TIMEOUT": "0.4"})
    record = done.records[urls[1]]
    assert record["status"] == "failed"
    assert record["error_message"] == "no response data for 0.4 s (gave up after 3 attempts)"
    assert record["attempts"] == 3 == sum(1 for h in done.hits if h.path == "/p/1")
    assert record["crawl_state"] == "unfetched"  # a transient failure: a later crawl asks again
    assert done.run.seconds < 30


def test_a_hosts_slow_down_outlives_the_run(tmp_path):
    """What a 429 taught the local gate is in the state file for the next run (one process per state
    directory: the gate itself is in memory, its slow-down is kept)."""
    from harvester.adapters.local.database import connect
    from harvester.adapters.local.host_gate import SqliteHostGate

    rules = GateRules(max_in_flight=4)
    conn = connect(tmp_path / "harvest.db")
    gate = SqliteHostGate(conn, rules)
    grant = gate.acquire("example.com", 2, spacing=0.1, now=1000.0)
    gate.release("example.com", grant, HostReport(sent=2, throttled=1, retry_after=30.0), spacing=0.1, now=1000.5)
    conn.close()
    again = SqliteHostGate(sqlite3.connect(tmp_path / "harvest.db"), rules)
    state = again.hosts["example.com"]
    assert (state.slowdown, state.next_start, state.grants, state.slowed_at) == (1.0, 1030.5, {}, 1000.5)
    assert again.acquire("example.com", 1, spacing=0.1, now=1001.0).starts == ()  # still held by Retry-After
    # A 429 to a request of the last run, sent at the old pace, reported after it: one signal, not two.
    late = HostReport(sent=1, throttled=1, granted_at=grant.at)
    again.release("example.com", grant, late, spacing=0.1, now=1031.0)
    assert again.hosts["example.com"].slowdown == 1.0
