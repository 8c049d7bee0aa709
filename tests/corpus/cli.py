"""Running the real ``harvest`` command against a corpus site, and reading what it printed.

Unlike ``tests.support.harvest`` this also reports the peak resident memory of *that* run (the gzip bombs
are judged by it). The environment
is the caller's minus every ``HARVEST_*`` setting and proxy variable, plus what the test asks for: the
corpus decides its own settings, also from module-scoped fixtures where pytest's monkeypatch cannot help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: The allow lists the corpus crawls with: exactly one server's address, so that every other loopback
#: address (127.0.0.2, 2130706434, localhost's ::1) stays forbidden.
ONLY_127_0_0_1 = "127.0.0.1/32"
ONLY_127_0_0_2 = "127.0.0.2/32"
PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
#: Retries of 5xx / 429 in the crawl-state machine wait this long (instead of 30 s, doubling).
FAST_RETRIES = {"HARVEST_RETRY_BACKOFF_SECONDS": "0.01"}


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mib: float

    def json(self) -> Any:
        assert self.stdout.strip(), f"no output from harvest {' '.join(self.args)}:\n{self.stderr}"
        return json.loads(self.stdout)

    def jsonl(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


#: ``python -c`` code running ``python -m harvester`` that writes, at exit, the peak resident memory of its
#: own address space (VmHWM) to the file named by its first argument. The child's ``ru_maxrss`` would not
#: do: Linux carries the pre-exec high-water mark over, so a child of a big pytest process looks big.
_PEAK_PROBE = """
import atexit, runpy, sys

def _peak(path=sys.argv.pop(1)):
    with open("/proc/self/status") as status, open(path, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])

atexit.register(_peak)
runpy.run_module("harvester", run_name="__main__", alter_sys=True)
"""


def harvest(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> Run:
    """``python -m harvester ARGS`` to its end; its output, duration and peak memory."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_") and k.lower() not in PROXY_VARIABLES}
    environ.update(env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as scratch:
        peak_file = os.path.join(scratch, "peak-kib")
        start = time.monotonic()
        command = [sys.executable, "-c", _PEAK_PROBE, peak_file, *args]
        proc = subprocess.Popen(command, stdout=out, stderr=err, env=environ)
        try:
            proc.wait(timeout=max(0.0, start + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"harvest {' '.join(args)} did not finish in {timeout} s") from None
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        with open(peak_file) as peak:
            peak_kib = int(peak.read())
        return Run(
            args=args,
            returncode=proc.returncode,
            stdout=out.read().decode(),
            stderr=err.read().decode(),
            seconds=seconds,
            peak_rss_mib=peak_kib / 1024,
        )


# the sitemap tree (`harvest sitemaps --format json`) ------------------------------------------------


class Tree:
    """The JSON tree, indexed: sitemap nodes by URL, and the refused children each node lists."""

    def __init__(self, data: dict[str, Any]) -> None:
        assert data["kind"] == "site"
        self.data = data
        self.nodes: dict[str, dict[str, Any]] = {}
        self.parents: dict[str, str] = {}
        self.refused: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for parent, node in self._walk(data):
            if node.get("origin") is not None:
                assert node["url"] not in self.nodes, f"{node['url']} appears twice in the tree"
                self.nodes[node["url"]] = node
                self.parents[node["url"]] = parent["url"]
            else:
                self.refused.setdefault(node["url"], []).append((parent["url"], node))

    def _walk(self, node: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for child in node.get("children", []):
            yield node, child
            yield from self._walk(child)

    def __getitem__(self, url: str) -> dict[str, Any]:
        assert url in self.nodes, f"no sitemap node {url}; the tree has {sorted(self.nodes)}"
        return self.nodes[url]

    def __contains__(self, url: str) -> bool:
        return url in self.nodes

    def children_of(self, url: str) -> list[str]:
        return [c["url"] for c in self[url]["children"] if c.get("origin") is not None]

    def refusal(self, url: str, parent: str) -> dict[str, Any]:
        """The ``invalid`` node ``parent`` lists for a child it would not follow."""
        for listed_by, node in self.refused.get(url, []):
            if listed_by == parent:
                return node
        raise AssertionError(f"{parent} lists no refused child {url}")


def pages_by_sitemap(lines: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``--format jsonl`` pages grouped: sitemap URL -> page URL -> the page line."""
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for line in lines:
        grouped.setdefault(line["sitemap"], {})[line["url"]] = line
    return grouped
