"""`harvest schedule` on a state directory: the registry's commands, and `schedule run` crawling what is due
(as cron would run it), resumed after a kill without losing or repeating the slot's job."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from tests.support import LOOPBACK, harvest, killed_part_way, sigint_as_in_a_terminal, urls_processed


def test_the_sites_due_are_crawled_side_by_side_and_moved_to_their_next_slot(site_factory, tmp_path):
    state = str(tmp_path / "state")
    one, two, later = (site_factory(pages=n, broken=0) for n in (8, 12, 5))
    for site in (one, two):
        run = harvest("schedule", "add", f"{site.base_url}/", "--every", "1d", "--now", "--state-dir", state)
        assert run.returncode == 0, run.stderr
        assert "first job at" in run.stdout
    assert harvest("schedule", "add", f"{later.base_url}/", "--every", "1d", "--state-dir", state).returncode == 0

    run = harvest("schedule", "run", "--state-dir", state, "--allow-network", LOOPBACK, "--quiet", "--json")
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert sorted(r["successful_processing"] for r in results) == [8, 12]
    listed = [
        json.loads(line) for line in harvest("schedule", "list", "--json", "--state-dir", state).stdout.splitlines()
    ]
    ran = {s["name"]: s["last_job_id"] for s in listed if "last_job_id" in s}
    assert sorted(ran.values()) == sorted(r["job_id"] for r in results)
    assert all(job_id.startswith(f"{name}-") for name, job_id in ran.items())

    again = harvest("schedule", "run", "--state-dir", state, "--allow-network", LOOPBACK, "--quiet")
    assert again.returncode == 0 and again.stdout == ""
    assert "no scheduled site is due" in again.stderr and "the next is" in again.stderr
    jobs = json.loads(harvest("jobs", "--state-dir", state, "--json").stdout)
    assert len(jobs) == 2


def test_a_run_killed_part_way_is_taken_up_by_the_next_run_as_the_same_job(site_factory, tmp_path):
    state = tmp_path / "state"
    site = site_factory(pages=300, broken=0)
    added = harvest("schedule", "add", f"{site.base_url}/", "--every", "1h", "--now", "--state-dir", str(state))
    assert added.returncode == 0, added.stderr
    args = ("schedule", "run", "--state-dir", str(state), "--allow-network", LOOPBACK, "--quiet", "--concurrency", "2")
    killed_part_way(args, state / "harvest.db", 40)
    (first,) = json.loads(harvest("jobs", "--state-dir", str(state), "--json").stdout)
    assert first["status"] != "completed"

    run = harvest(*args, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert (result["job_id"], result["successful_processing"], result["total_urls"]) == (first["job_id"], 300, 300)
    assert "resuming job" in run.stderr
    (shown,) = [
        json.loads(line)
        for line in harvest("schedule", "list", "--json", "--state-dir", str(state)).stdout.splitlines()
    ]
    assert shown["last_job_id"] == first["job_id"]


def test_two_schedules_of_one_site_interrupted_are_taken_up_by_the_next_run(site_factory, tmp_path):
    state = tmp_path / "state"
    site = site_factory(pages=300, broken=0)
    for name in ("a", "b"):
        # (paced, so that the crawls cannot be over before the interrupt reaches them, however loaded the machine)
        add = harvest(
            *("schedule", "add", f"{site.base_url}/", "--every", "1h", "--now", "--name", name),
            *("--rate-limit-delay", "0.02", "--state-dir", str(state)),
        )
        assert add.returncode == 0, add.stderr
    args = ("schedule", "run", "--state-dir", str(state), "--allow-network", LOOPBACK, "--quiet", "--concurrency", "2")
    process = subprocess.Popen(
        [sys.executable, "-m", "harvester", *args],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_in_a_terminal,
    )
    # (after 40 URLs, or 3 s when the state file cannot be read while the crawls write it: 600 paced fetches of
    # one host take 12 s at least)
    deadline = time.monotonic() + 3
    while urls_processed(state / "harvest.db") < 40 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)  # (Ctrl-C)
    _, err = process.communicate()
    assert "interrupted; run the same command again to resume" in err and "Traceback" not in err

    run = harvest(*args, "--json")
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert sorted(r["job_id"].split("-")[0] for r in results) == ["a", "b"]
    assert all(r["successful_processing"] == 300 for r in results)
    assert len(json.loads(harvest("jobs", "--state-dir", str(state), "--json").stdout)) == 2


def test_a_site_replaced_with_other_options_and_due_now_gets_a_job_of_its_own(site_factory, tmp_path):
    state = str(tmp_path / "state")
    site, other = site_factory(pages=5, broken=0), site_factory(pages=4, broken=0)
    run = ("schedule", "run", "--state-dir", state, "--allow-network", LOOPBACK, "--quiet", "--json")
    add = ("schedule", "add", f"{site.base_url}/", "--every", "1d", "--now", "--name", "s", "--state-dir", state)
    assert harvest(*add).returncode == 0
    (first,) = [json.loads(harvest(*run).stdout)]
    assert harvest(*add, "--replace", "--no-pages").returncode == 0
    assert (
        harvest("schedule", "add", f"{other.base_url}/", "--every", "1d", "--now", "--state-dir", state).returncode == 0
    )

    after = harvest(*run)
    assert after.returncode == 0, after.stderr
    results = {r["job_id"]: r for r in json.loads(after.stdout)}
    assert first["job_id"] not in results and len(results) == 2
    jobs = {j["job_id"]: j for j in json.loads(harvest("jobs", "--state-dir", state, "--json").stdout)}
    (replaced,) = [job_id for job_id in results if job_id.startswith("s-")]
    assert len(jobs) == 3 and "--no-pages" in jobs[replaced]["options"]
    assert "--no-pages" not in jobs[first["job_id"]]["options"]


def test_bad_input_is_one_line_naming_it(tmp_path):
    state = str(tmp_path / "state")
    cases = [
        (("schedule", "add", "--every", "1d"), "give a site to schedule"),
        (("schedule", "add", "https://e.example/", "--every", "30s"), "--every '30s': a site cannot be crawled"),
        (("schedule", "add", "https://e.example/", "--every", "1d", "--name", "a b"), "--name 'a b'"),
        (
            ("schedule", "add", "https://a.example/", "https://b.example/", "--every", "1d", "--name", "x"),
            "--name names one",
        ),
        (("schedule", "add", "ftp://e.example/", "--every", "1d"), "site 'ftp://e.example/': not an http(s) URL"),
        (("schedule", "add", "https://e.example/", "--every", "1000000w"), "longer than 366 days"),
        (("schedule", "add", "https://e.example/", "--every", "99999999999999w"), "not a duration"),
        (("schedule", "show", "nope"), "no harvest state there"),
    ]
    for args, message in cases:
        run = harvest(*args, "--state-dir", state)
        assert run.returncode == 2, (args, run.stderr)
        assert message in run.stderr and "Traceback" not in run.stderr, (args, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert harvest("schedule", "add", "https://e.example/", "--every", "1d", "--state-dir", state).returncode == 0
    twice = harvest("schedule", "add", "https://e.example/", "--every", "6h", "--state-dir", state)
    assert twice.returncode == 2 and "already in" in twice.stderr and "--replace" in twice.stderr
    missing = harvest("schedule", "pause", "nope", "--state-dir", state)
    assert missing.returncode == 2 and "no schedule 'nope'" in missing.stderr
