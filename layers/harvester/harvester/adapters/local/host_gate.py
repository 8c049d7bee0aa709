"""The local host gate: the gate's rules in memory, a host's slow-down kept in the state file.

One crawl runs per state directory at a time (``runner.exclusive``), so its workers are all in this process
and the states in memory are the gate: no statement per request. What must outlive the run is written
when it moves: a host that answered 429 or asked to wait (Retry-After) is still slowed when the crawl is
resumed. Grants are not kept: a new run's workers hold none.
"""

from __future__ import annotations

import sqlite3
import time

from harvester.adapters.local.database import Transaction
from harvester.politeness import GateRules, HostState, MemoryHostGate


class SqliteHostGate(MemoryHostGate):
    def __init__(self, conn: sqlite3.Connection, rules: GateRules | None = None) -> None:
        super().__init__(rules)
        self.conn = conn
        for host, body in conn.execute("SELECT host, body FROM hosts"):
            state = HostState.loads(body)
            state.grants.clear()
            self.hosts[host] = state

    def changed(self, host: str, state: HostState) -> None:
        saved = HostState(
            next_start=state.next_start,
            slowdown=state.slowdown,
            throttled=state.throttled,
            slowed_at=state.slowed_at,
            slowed_from=state.slowed_from,
        )
        with Transaction(self.conn) as db:
            db.execute(
                "INSERT OR REPLACE INTO hosts (host, body, updated_at) VALUES (?, ?, ?)",
                (host, saved.dumps(), time.time()),
            )
