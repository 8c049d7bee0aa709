"""A state directory whose storage fails during a crawl (a full disk, a damaged file): one clear line and
exit 4, not a traceback per task; what was done is kept, and the same command resumes once it is mended."""

from __future__ import annotations

import json
import resource
import signal
import sqlite3
import subprocess
import sys

from harvester.adapters.local.database import storage_failure
from tests.support import LOOPBACK, harvest

LIMIT = 1 << 20  # bytes: no file of the process may grow past it (RLIMIT_FSIZE: a full disk, file by file)


def _limited() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit then fails with EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_a_full_disk_during_a_crawl_stops_it_with_one_line_and_the_rerun_completes(site_factory, tmp_path):
    site = site_factory(pages=3000, broken=0)
    state = tmp_path / "state"
    args = ("crawl", f"{site.base_url}/", "--state-dir", str(state), "--allow-network", LOOPBACK, "--quiet")
    fast = ("--rate-limit-delay", "0.0001")

    full = subprocess.run(
        [sys.executable, "-m", "harvester", *args, *fast],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limited,
        check=False,
    )

    assert full.returncode == 4, full.stderr
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("harvest: starting job"), full.stderr
    assert lines[1].startswith(f"harvest: {state}: the state directory's storage failed: "), full.stderr
    assert lines[1].endswith("then run the same command again to resume)"), full.stderr
    assert "Traceback" not in full.stderr and "task failed" not in full.stderr

    rerun = harvest(*args, *fast, "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert "harvest: resuming job" in rerun.stderr
    result = json.loads(rerun.stdout)
    assert (result["total_urls"], result["successful_processing"]) == (3000, 3000)


def test_what_counts_as_the_storage_failing():
    assert storage_failure(sqlite3.OperationalError("database or disk is full")) == "database or disk is full"
    assert storage_failure(sqlite3.DatabaseError("database disk image is malformed"))
    assert storage_failure(sqlite3.OperationalError("disk I/O error"))
    assert storage_failure(OSError(28, "No space left on device")) == "No space left on device"
    assert storage_failure(sqlite3.OperationalError("database is locked")) is None  # (it passes)
    assert storage_failure(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
    assert storage_failure(OSError(111, "Connection refused")) is None
    assert storage_failure(ValueError("x")) is None
