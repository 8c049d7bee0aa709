"""Helpers for tests that drive the real `harvest` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LOOPBACK = "127.0.0.0/8"


def harvest(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the real `harvest` command (as installed: ``python -m harvester``) and captures its output."""
    return subprocess.run(
        [sys.executable, "-m", "harvester", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def harvest_json(*args: str, **kwargs: object) -> dict[str, object]:
    result = harvest(*args, "--json", **kwargs)  # type: ignore[arg-type]
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


#: Crawl-record fields that differ between two runs of the same crawl (times, job ids).
RUN_SPECIFIC = frozenset(
    {"last_fetch_time", "next_fetch_time", "first_listed", "last_listed", "last_listed_job", "orphaned_job"}
)


def crawl_database(state: Path, site: str) -> dict[str, dict[str, object]]:
    """A local state directory's crawl records of ``site`` (an origin), without what differs between runs."""
    from harvester.adapters.local.runner import LocalHarvest

    with LocalHarvest.open(state) as local:
        return {r.url: r.model_dump(mode="json", exclude=set(RUN_SPECIFIC)) for r in local.crawldb.site_urls(site)}
