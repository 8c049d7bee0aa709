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
