"""`harvest crawl` end to end on the embedded default: a real site on 127.0.0.1, the real command."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harvester.crawldb.documents import site_prefix
from harvester.urls import origin_of
from tests.support import LOOPBACK, harvest, harvest_json, jsonl, local_stores, stored_content, stored_versions

FAST = ("--allow-network", LOOPBACK, "--rate-limit-delay", "0.0001", "--quiet")


def documents(state_dir: Path, site: str, kind: str = "pages") -> list[Path] | list[str]:
    """The stored documents of a site: one per version of each URL's content (its pages: loose, or WARC
    response records; ``sites/<site>/sitemaps/`` for the sitemaps). A write cut by ``kill -9`` may leave
    its ``.tmp-`` file behind; it is not a document (the store's own listing skips it too)."""
    if kind == "pages":
        return sorted(stored_versions(local_stores(state_dir)[0], origin_of(site)))
    folder = state_dir / "documents" / site_prefix(origin_of(site), kind)
    if not folder.exists():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".tmp-"))


@pytest.mark.slow
def test_2000_pages_with_a_gzipped_sitemap_are_all_fetched_and_stored(site_factory, tmp_path):
    site = site_factory(pages=2000, broken=0, sitemaps=4, gzip_last=True)
    state = tmp_path / "state"

    result = harvest_json("crawl", f"{site.base_url}/", "--state-dir", str(state), *FAST)

    assert result["status"] == "completed"
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (2000, 2000, 0)
    assert result["error_details"] == []
    stored = documents(state, site.base_url)
    assert len(stored) == 2000
    # The raw documents are the pages themselves, byte for byte.
    records = jsonl(Path(result["processed_urls"]))
    assert sorted(r["url"] for r in records) == sorted(site.page_urls)
    sample = next(r for r in records if r["url"].endswith("/pages/1234.html"))
    body = stored_content(*local_stores(state), sample).decode()
    assert "Demo page 1234" in body
    assert sample["status"] == "completed" and sample["http_status"] == 200 and sample["crawl_state"] == "fetched"
    assert sample["size"] == len(body.encode()) and len(sample["signature"]) == 64
    # The gzipped sitemap was read (its pages are in), and every sitemap's raw document was kept.
    assert len(documents(state, site.base_url, "sitemaps")) == len(site.sitemap_urls) + 1  # + robots.txt
    for key in ("start_time", "end_time", "total_duration"):
        assert result[key]
    assert result["start_time"] < result["end_time"]


@pytest.mark.slow
def test_broken_links_are_failed_each_with_its_error(site_factory, tmp_path):
    site = site_factory(pages=400, broken=9)

    result = harvest_json("crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "s"), *FAST)

    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (409, 400, 9)
    errors = {e["url"]: e["error"] for e in result["error_details"] if e["kind"] == "page"}
    assert set(errors) == set(site.broken_urls)
    assert all(e == "HTTP 404 Not Found" for e in errors.values())
    failed = [r for r in jsonl(Path(result["processed_urls"])) if r["status"] == "failed"]
    assert sorted(r["url"] for r in failed) == sorted(site.broken_urls)
    assert all(r["error_message"] == "HTTP 404 Not Found" and r["crawl_state"] == "gone" for r in failed)


def _processed(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            row = conn.execute("SELECT urls_succeeded + urls_failed FROM counters").fetchone()
    except sqlite3.Error:
        return 0
    return row[0] if row else 0


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [0.15, 0.6])
def test_a_killed_crawl_resumes_and_ends_with_the_same_counts(site_factory, tmp_path, kill_at):
    site = site_factory(pages=2000, broken=7)
    args = ("crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "state"), "--allow-network", LOOPBACK)
    slow = ("--rate-limit-delay", "0.002", "--quiet", "--json")
    process = subprocess.Popen([sys.executable, "-m", "harvester", *args, *slow], stdout=subprocess.PIPE, text=True)
    db = tmp_path / "state" / "harvest.db"
    deadline = time.monotonic() + 120
    while _processed(db) < kill_at * site.listed and time.monotonic() < deadline:
        assert process.poll() is None, "the crawl ended before it could be killed"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = _processed(db)
    assert 0 < killed_at < site.listed

    rerun = harvest(*args, *slow)

    assert rerun.returncode == 0, rerun.stderr
    result = json.loads(rerun.stdout)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (2007, 2000, 7)
    records = jsonl(Path(result["processed_urls"]))
    assert len(records) == len({r["url"] for r in records}) == 2007
    assert len(documents(tmp_path / "state", site.base_url)) == 2000
    # The WARC file the kill cut short was cut back to its last indexed record by the rerun: every file is a
    # valid WARC, and every record a URL names is there.
    for warc in sorted((tmp_path / "state" / "documents" / "warc").rglob("*.warc.gz")):
        check = subprocess.run(
            [sys.executable, "-m", "warcio.cli", "check", str(warc)], capture_output=True, check=False
        )
        assert check.returncode == 0, (warc, check.stdout, check.stderr)
    documents_store, warcs = local_stores(tmp_path / "state")
    for record in records[::50]:
        if record["status"] == "completed":
            assert stored_content(documents_store, warcs, record)
    # The same job was resumed, not a new one started.
    listing = harvest("report", "--state-dir", str(tmp_path / "state")).stdout.splitlines()
    assert len(listing) == 1 and result["job_id"] in listing[0] and "completed" in listing[0]


def test_running_a_finished_command_again_starts_a_new_job(site_factory, tmp_path):
    site = site_factory(pages=20, broken=0)
    args = ("crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "s"), *FAST)
    first, second = harvest_json(*args), harvest_json(*args)
    assert first["job_id"] != second["job_id"]
    assert first["successful_processing"] == second["successful_processing"] == 20
    # The second job re-crawls: nothing is due yet, so no page is fetched again.
    assert (first["changes"]["new"], second["changes"]["not_due"], second["changes"]["new"]) == (20, 20, 0)


def test_no_pages_records_every_url_without_fetching(site_factory, tmp_path):
    site = site_factory(pages=120, broken=3)
    result = harvest_json("crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "s"), "--no-pages", *FAST)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (123, 123, 0)
    assert documents(tmp_path / "s", site.base_url) == []
    record = jsonl(Path(result["processed_urls"]))[0]
    assert record["status"] == "completed" and "http_status" not in record
    assert record["last_modified"] and record["change_frequency"] in ("daily", "weekly", "monthly")


def test_include_and_exclude_patterns_pick_the_pages(site_factory, tmp_path):
    site = site_factory(pages=150, broken=0)
    result = harvest_json(
        "crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "s"), "--no-pages", *FAST,
        "--include", "*/pages/1*.html", "--exclude", r"re:/pages/1\d\.html$",
    )  # fmt: skip
    urls = sorted(r["url"] for r in jsonl(Path(result["processed_urls"])))
    # 1*: pages 1, 10-19 and 100-150; the regex then drops 10-19.
    expected = sorted(f"{site.base_url}/pages/{n}.html" for n in [1, *range(100, 151)])
    assert urls == expected
    assert result["total_urls"] == 52


def test_a_site_without_any_sitemap_fails_with_a_reason(served_dir, tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    (root / "index.html").write_text("<html>hello</html>")
    (root / "sitemap.xml").write_text("<html><body>Not found, but 200</body></html>")  # a soft 404
    base = served_dir(root)

    run = harvest("crawl", f"{base}/", "--state-dir", str(tmp_path / "s"), *FAST, "--json")

    assert run.returncode == 1
    result = json.loads(run.stdout)
    assert result["status"] == "failed" and result["total_urls"] == 0


def test_fetches_refuse_loopback_unless_allowed(site_factory, tmp_path):
    site = site_factory(pages=5, broken=0)
    run = harvest("crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "s"), "--quiet", "--json")
    assert run.returncode == 1
    result = json.loads(run.stdout)
    assert result["status"] == "failed"
    robots = next(e for e in result["error_details"] if e["url"].endswith("/robots.txt"))
    assert "127.0.0.1" in robots["error"]
    assert "--allow-network 127.0.0.0/8 (harvest)" in robots["error"]  # (what the user of the command can type)


def test_memory_keeps_the_queue_out_of_the_state_file(site_factory, tmp_path):
    site = site_factory(pages=60, broken=2)
    state = tmp_path / "s"
    result = harvest_json("crawl", f"{site.base_url}/", "--state-dir", str(state), "--memory", *FAST)
    assert (result["successful_processing"], result["failed_processing"]) == (60, 2)
    assert len(documents(state, site.base_url)) == 60
    with sqlite3.connect(state / "harvest.db") as db:
        sent = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchall()
    assert sent == []  # (no message was ever written to the disk queue)
    again = harvest_json("crawl", f"{site.base_url}/", "--state-dir", str(state), "--memory", *FAST)
    assert again["changes"]["not_due"] == 62  # (the crawl database outlives the run, as without --memory)


def test_tasks_the_state_file_cannot_take_are_crawled_from_memory(site_factory, tmp_path, caplog):
    """A durable push that fails for a reason that may pass (here: twice, for page tasks) keeps those tasks
    in memory for the run, says so, and the crawl ends as an undisturbed one."""
    import asyncio

    from harvester.adapters.local.memory_queue import FallbackQueue
    from harvester.adapters.local.queue import SqliteTaskQueue
    from harvester.adapters.local.runner import LocalHarvest, LocalRunner
    from harvester.fetch import FetchPolicy, parse_networks
    from harvester.model.messages import JobRequest, PageTask
    from harvester.ports import QueueUnavailable

    class Faltering(SqliteTaskQueue):
        failures = 2

        def push(self, messages, *, delay_seconds=0.0):  # type: ignore[no-untyped-def]
            if self.failures and any(isinstance(m, PageTask) for m in messages):
                self.failures -= 1
                raise QueueUnavailable("the state file's queue: database is locked")
            super().push(messages, delay_seconds=delay_seconds)

    site = site_factory(pages=300, broken=3)
    with LocalHarvest.open(tmp_path / "s") as local:
        local.queue = FallbackQueue(Faltering(local.queue.durable.conn))
        runner = LocalRunner(local, policy=FetchPolicy(allow_networks=parse_networks([LOOPBACK])), concurrency=8)
        with caplog.at_level("WARNING"):
            outcome = asyncio.run(runner.crawl(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)))
        assert local.queue.kept_in_memory > 0
    assert outcome.result is not None
    assert (outcome.result.successful_processing, outcome.result.failed_processing) == (300, 3)
    assert "tasks kept in memory for this run: the state file's queue: database is locked" in caplog.text
    assert len(documents(tmp_path / "s", site.base_url)) == 300


def test_an_invalid_message_in_a_page_batch_is_dead_lettered_alone(site_factory, tmp_path, caplog):
    """A worker takes a batch of page messages: one that does not parse is set aside with its reason, the
    rest of its batch is crawled, and its page, left pending, is sent again and crawled too."""
    import asyncio
    import dataclasses

    from harvester.adapters.local.memory_queue import FallbackQueue
    from harvester.adapters.local.queue import SqliteTaskQueue
    from harvester.adapters.local.runner import LocalHarvest, LocalRunner
    from harvester.fetch import FetchPolicy, parse_networks
    from harvester.model.messages import JobRequest

    class Garbling(SqliteTaskQueue):
        garbled = 0

        def take_pages(self, job_ids, host, limit):  # type: ignore[no-untyped-def]
            taken = super().take_pages(job_ids, host, limit)
            if taken and not self.garbled and len(taken) > 1:
                self.garbled = 1
                taken[1] = dataclasses.replace(taken[1], body='{"job_id": "')  # cut short
            return taken

    site = site_factory(pages=40, broken=0)
    with LocalHarvest.open(tmp_path / "s") as local:
        garbling = Garbling(local.queue.durable.conn)
        local.queue = FallbackQueue(garbling)
        runner = LocalRunner(local, policy=FetchPolicy(allow_networks=parse_networks([LOOPBACK])), concurrency=8)
        with caplog.at_level("ERROR"):
            outcome = asyncio.run(runner.crawl(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)))
        assert garbling.garbled == 1
        [(queue, body, reason)] = local.queue.dead_letters(outcome.job.job_id)
    assert queue == "pages"
    assert '"url":' in body  # (the message as it is kept, set aside)
    assert reason.startswith("invalid pages message")
    assert outcome.result is not None
    assert (outcome.result.successful_processing, outcome.result.failed_processing) == (40, 0)
    assert len(documents(tmp_path / "s", site.base_url)) == 40


def test_a_site_that_refuses_every_connection_fails_fast_saying_so(tmp_path):
    """Nothing listens on the port: the job fails in seconds (robots.txt's retries, then no probe waits on a
    dead host for minutes), and the reason is the refused connection."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # (closed again: nothing listens there now)
    started = time.monotonic()
    run = harvest("crawl", f"http://127.0.0.1:{port}/", "--state-dir", str(tmp_path / "s"), "--json", *FAST)
    elapsed = time.monotonic() - started
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "failed"
    assert any("cannot connect to 127.0.0.1" in e["error"] for e in result["error_details"]), result["error_details"]
    assert elapsed < 30, elapsed


def test_a_job_id_reused_for_another_site_is_refused_naming_both(site_factory, tmp_path):
    site = site_factory(pages=3, broken=0)
    state = str(tmp_path / "s")
    first = harvest("crawl", f"{site.base_url}/", "--job-id", "myjob", "--state-dir", state, *FAST)
    assert first.returncode == 0, first.stderr
    other = site.base_url.replace("127.0.0.1", "127.0.0.2")
    again = harvest("crawl", f"{other}/", "--job-id", "myjob", "--state-dir", state, *FAST)
    assert again.returncode == 2
    assert f"job id 'myjob' is already the job of site {site.base_url}/, not {other}/" in again.stderr
    assert again.stdout == ""  # (no old result shown as if it were this run's)


def test_a_request_out_of_bounds_is_refused_before_anything_is_written(tmp_path, site_factory):
    """A request built in code is not checked for types and bounds until it is started: the runner checks it
    first, so a bad one leaves no job behind (stored, it could not be read back: every later run would
    stumble on it); a good one then runs on the same state."""
    import asyncio

    from harvester.adapters.local.runner import LocalHarvest, LocalRunner
    from harvester.fetch import FetchPolicy, parse_networks
    from harvester.model.base import ValidationError
    from harvester.model.messages import JobRequest

    site = site_factory(pages=3, broken=0)
    policy = FetchPolicy(allow_networks=parse_networks([LOOPBACK]))
    with LocalHarvest.open(tmp_path / "s") as local:
        runner = LocalRunner(local, policy=policy, concurrency=2)
        with pytest.raises(ValidationError, match="max_depth"):
            asyncio.run(runner.crawl(JobRequest(site=f"{site.base_url}/", max_depth=100)))
        assert local.store.all_jobs() == []
        outcome = asyncio.run(runner.crawl(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)))
        assert outcome.result is not None and outcome.result.successful_processing == 3
        assert len(local.store.all_jobs()) == 1
