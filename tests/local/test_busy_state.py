"""Locally, a state file another program holds locked is what a throttled table is on AWS: the step waits
(SQLite's busy timeout), then gives its work back without spending the site's attempts, and the crawl ends
exactly as it would have. The lock is a real one: another connection taking the state file's write lock,
again and again, while the crawl runs (the crawl's busy timeout shortened so that it gives up quickly)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harvester.adapters.local import database
from harvester.adapters.local.database import Transaction
from harvester.adapters.local.runner import DB_NAME, LocalHarvest, LocalRunner
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest
from harvester.model.records import JobStatus, SitemapStatus, UrlStatus
from harvester.patience import PATIENCE, Busy
from harvester.settings import EngineSettings

PAGES = 100
POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)
SETTINGS = EngineSettings(retry_backoff_seconds=0.01, busy_give_back_seconds=1.0)


def test_a_write_lock_held_past_the_busy_timeout_is_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "BUSY_TIMEOUT", 0.05)
    monkeypatch.setattr(PATIENCE, "cap", 0.05)
    conn = database.connect(tmp_path / DB_NAME)
    other = sqlite3.connect(tmp_path / DB_NAME, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with PATIENCE.until(3.2), pytest.raises(Busy, match="locked") as busy, Transaction(conn) as db:
        db.execute("INSERT INTO meta VALUES ('x', 'y')")
    assert busy.value.service == "sqlite"
    other.execute("COMMIT")
    with Transaction(conn) as db:  # (free again: nothing of the refused block was kept, the next one lands)
        db.execute("INSERT INTO meta VALUES ('x', 'y')")
    assert conn.execute("SELECT value FROM meta WHERE name = 'x'").fetchone() == ("y",)


@contextmanager
def locking(path: Path, *, hold: float, every: float, after: Callable[[], bool]) -> Iterator[list[int]]:
    """Once ``after()`` is true, another connection takes the file's write lock for ``hold`` seconds, every
    ``every`` seconds."""
    stop = threading.Event()
    held: list[int] = []

    def run() -> None:
        while not after() and not stop.wait(0.005):
            pass
        other = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        while not stop.wait(every):
            other.execute("BEGIN IMMEDIATE")
            time.sleep(hold)
            other.execute("COMMIT")
            held.append(1)
        other.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield held
    finally:
        stop.set()
        thread.join()


def test_a_crawl_whose_state_file_another_program_keeps_locking_ends_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writes wait for the lock (SQLite's busy timeout, then the patience's back-offs): nothing is given
    back, every page is fetched once."""
    monkeypatch.setattr(database, "BUSY_TIMEOUT", 0.01)
    monkeypatch.setattr(PATIENCE, "base", 0.005)
    monkeypatch.setattr(PATIENCE, "cap", 0.02)
    monkeypatch.setattr(PATIENCE, "backoffs", 0)
    site = LiveSite(pages=PAGES, sitemaps=2, gzip_last=True)
    with site.serving():
        site.fail("/pages/3.html", 404)
        state = tmp_path / "state"
        with LocalHarvest.open(state):  # (the file made before the other program opens it)
            pass
        # (from the first page's fetch on: a lock held as the crawl starts is the command's to report)
        underway = lambda: any(hit.page for hit in site.hits)  # noqa: E731
        with (
            locking(state / DB_NAME, hold=0.06, every=0.03, after=underway) as held,
            LocalHarvest.open(state) as harvest,
        ):
            runner = LocalRunner(harvest, policy=POLICY, settings=SETTINGS, concurrency=4)
            # (paced so that the pages take about a second: the other program holds the lock several times)
            outcome = asyncio.run(runner.crawl(JobRequest(site=site.url("/"), rate_limit_delay=0.01)))
        assert len(held) >= 5 and PATIENCE.backoffs > 10, (len(held), PATIENCE.backoffs)
    with LocalHarvest.open(state) as harvest:
        job = outcome.job
        assert job.status is JobStatus.COMPLETED
        counts = harvest.store.counts(job.job_id)
        assert counts == harvest.store.recount(job.job_id)
        assert (counts.urls_total, counts.urls_succeeded, counts.urls_failed) == (PAGES, PAGES - 1, 1)
        pages = list(harvest.store.pages(job.job_id))
        assert sorted(p.url for p in pages) == sorted(site.url(p) for p in site.page_paths())
        assert {p.url: p.attempts for p in pages if p.attempts != 1} == {}  # what the site did: one request each
        assert all(p.status in (UrlStatus.COMPLETED, UrlStatus.FAILED) for p in pages)
        sitemaps = list(harvest.store.sitemaps(job.job_id))
        assert not [s.url for s in sitemaps if s.status in (SitemapStatus.FAILED, SitemapStatus.INVALID)]
        assert {s.attempts for s in sitemaps if s.status is SitemapStatus.COMPLETED} == {1}
        assert harvest.queue.dead_letters(job.job_id) == []
    assert outcome.result is not None and outcome.result.total_urls == PAGES
    hits = Counter(hit.path for hit in site.hits if hit.page)
    assert set(hits) == set(site.page_paths()) and set(hits.values()) == {1}, hits
