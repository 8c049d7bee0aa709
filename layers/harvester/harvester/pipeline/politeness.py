"""Per-host pacing inside one process: request starts to one host are at least ``delay`` seconds apart.

This is the job's ``rate_limit_delay``. It holds across all the coroutines of a process (all local workers,
or all records of a Lambda batch); pacing across Lambda invocations needs shared state and comes with the
politeness work.
"""

from __future__ import annotations

import asyncio
import time

from harvester.urls import host_of


class HostPacer:
    def __init__(self) -> None:
        self._next_start: dict[str, float] = {}
        self._lock = asyncio.Lock()

    async def wait(self, url: str, delay: float) -> None:
        host = host_of(url)
        async with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start.get(host, now))
            self._next_start[host] = start + delay
        if start > now:
            await asyncio.sleep(start - now)
