"""`harvest crawl` says which job it takes up and why; `harvest jobs` lists, cancels and deletes jobs."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time

from tests.support import LOOPBACK, harvest, killed_part_way


def _jobs(state: str) -> list[dict]:
    run = harvest("jobs", "--state-dir", state, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_crawl_says_which_job_it_resumes_or_why_it_starts_another_and_jobs_can_be_cancelled_and_deleted(
    site_factory, tmp_path
):
    site = site_factory(pages=1500, broken=0)
    state = str(tmp_path / "state")
    db = tmp_path / "state" / "harvest.db"
    base = ("crawl", f"{site.base_url}/", "--state-dir", state, "--allow-network", LOOPBACK, "--quiet")
    slow = ("--rate-limit-delay", "0.002")
    killed_part_way((*base, *slow), db, 200)
    (first,) = _jobs(state)
    assert (first["status"], first["open"]) == ("in_progress", True)
    assert first["options"] == ["--rate-limit-delay 0.002"]

    # Other options: a new job, and the unfinished one is named with the option that kept it from resuming.
    other = ("--rate-limit-delay", "0.003")
    killed_part_way((*base, *other), db, 100)
    listed = _jobs(state)
    assert [j["status"] for j in listed] == ["in_progress", "in_progress"]
    second = listed[1]
    run = harvest("jobs", "--state-dir", state)
    assert f"{first['job_id']}  in_progress" in run.stdout
    assert "(unfinished: its crawl command resumes it)" in run.stdout

    # The first job's own command resumes it and says so, with what it had done.
    done = next(j for j in _jobs(state) if j["job_id"] == first["job_id"])["processed_count"]
    resumed = harvest(*base, *slow)
    assert resumed.returncode == 0, resumed.stderr
    said = rf"harvest: resuming job {first['job_id']} \(started [^)]+\): {done:,}/\S+ URLs done"
    assert re.search(said, resumed.stderr)
    assert f"job {first['job_id']}: completed" in resumed.stdout

    # A command whose options differ from the unfinished second job says why it does not resume it.
    third = harvest(*base, "--rate-limit-delay", "0.001", "--no-pages")
    assert third.returncode == 0, third.stderr
    assert re.search(r"harvest: starting job \S+ for ", third.stderr)
    assert (
        f"job {second['job_id']} of this site is unfinished and is not resumed: its options differ (it: pages"
        " fetched, --rate-limit-delay 0.003; this command: --no-pages, --rate-limit-delay 0.001); run it with"
        f" its options to resume it, or end it: harvest jobs cancel {second['job_id']}"
    ) in third.stderr

    # Cancelled: ended for good, no result; its command now starts a new job.
    cancel = harvest("jobs", "cancel", second["job_id"], "--state-dir", state)
    assert cancel.returncode == 0, cancel.stderr
    assert f"job {second['job_id']}: cancelled at " in cancel.stdout
    again = harvest("jobs", "cancel", second["job_id"], "--state-dir", state)
    said = f"job {second['job_id']}: already cancelled; nothing to cancel"
    assert (again.returncode, again.stdout.strip()) == (0, said)
    assert next(j for j in _jobs(state) if j["job_id"] == second["job_id"])["status"] == "cancelled"
    fresh = harvest(*base, *other)
    assert fresh.returncode == 0 and f"resuming job {second['job_id']}" not in fresh.stderr
    assert "starting job" in fresh.stderr
    assert "resuming" not in fresh.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE job_id = ?", (second["job_id"],)).fetchone()[0] == 0

    # Deleted: its records and result files are gone, the crawl database stays.
    folder = tmp_path / "state" / "documents" / "jobs" / first["job_id"]
    assert folder.is_dir()
    deleted = harvest("jobs", "delete", first["job_id"], "--state-dir", state)
    assert deleted.returncode == 0, deleted.stderr
    assert first["job_id"] not in [j["job_id"] for j in _jobs(state)] and not folder.exists()
    with sqlite3.connect(db) as conn:
        for table in ("counters", "sitemaps", "urls", "url_batches", "messages"):
            query = f"SELECT COUNT(*) FROM {table} WHERE job_id = ?"
            rows = conn.execute(query, (first["job_id"],)).fetchone()[0]
            assert rows == 0, table
        assert conn.execute("SELECT COUNT(*) FROM crawl_urls").fetchone()[0] == 1500
    missing = harvest("jobs", "delete", first["job_id"], "--state-dir", state)
    assert missing.returncode == 2 and f"no job {first['job_id']!r}" in missing.stderr
    assert harvest("jobs", "cancel", "--state-dir", state).returncode == 2  # (no JOB_ID)


def test_jobs_names_the_job_a_crawl_is_running_now_in_aligned_columns_and_quotes_options(site_factory, tmp_path):
    site = site_factory(pages=400, broken=0)
    state = tmp_path / "state"
    base = ("crawl", f"{site.base_url}/", "--state-dir", str(state), "--allow-network", LOOPBACK, "--quiet")
    killed_part_way((*base, "--include", "*/pages/1*"), state / "harvest.db", 20)  # (an unfinished job)
    crawl = subprocess.Popen([sys.executable, "-m", "harvester", *base, "--rate-limit-delay", "0.02"], text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_jobs(str(state))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        listed = harvest("jobs", "--state-dir", str(state))
        left, running = _jobs(str(state))
    finally:
        crawl.kill()
        crawl.wait()
    assert (left["running"], running["running"]) == (None, str(crawl.pid))
    lines = listed.stdout.splitlines()
    assert lines[0].endswith("(unfinished: its crawl command resumes it)")
    assert lines[1].endswith(f"(running now: pid {crawl.pid})")
    assert lines[0].index("http://") == lines[1].index("http://")  # (columns aligned)
    assert left["options"] == ["--include '*/pages/1*'"]  # (quoted as a shell needs it)
