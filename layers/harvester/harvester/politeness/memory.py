"""The host gate of one process: the gate's rules over host states kept in memory.

Enough wherever one process is every worker: a throwaway run, and the local runner (one crawl per state
directory at a time), whose adapter keeps what should outlive the run (a slow-down, a Retry-After) in the
state file.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from harvester.politeness.gate import Arrival, GateRules, Grant, HostReport, HostState, admit, arrive, paced, settle


class MemoryHostGate:
    def __init__(self, rules: GateRules | None = None) -> None:
        self.rules = rules or GateRules()
        self.hosts: dict[str, HostState] = {}

    def acquire(
        self,
        host: str,
        want: int,
        *,
        spacing: float,
        now: float,
        token: str | None = None,
        rebook: bool = False,
        lead: float = 0.0,
    ) -> Grant:
        state = self.hosts.setdefault(host, HostState())
        token = token or uuid.uuid4().hex
        return admit(state, token, want, spacing=spacing, now=now, rules=self.rules, rebook=rebook, lead=lead)

    def arrive(
        self,
        host: str,
        turns: Sequence[float | None],
        *,
        spacing: float,
        now: float,
        lead: float = 0.0,
        ahead: bool = False,
    ) -> Arrival:
        state = self.hosts.setdefault(host, HostState())
        token = uuid.uuid4().hex
        return arrive(state, token, turns, spacing=spacing, now=now, rules=self.rules, lead=lead, ahead=ahead)

    def paced(self, host: str, want: int, *, spacing: float, now: float) -> Grant:
        return paced(self.hosts.get(host) or HostState(), want, spacing=spacing, now=now, rules=self.rules)

    def release(self, host: str, grant: Grant, report: HostReport, *, spacing: float, now: float) -> None:
        state = self.hosts.setdefault(host, HostState())
        slowdown = state.slowdown
        settle(state, grant.token, report, spacing=spacing, now=now, rules=self.rules)
        if report.throttled or state.slowdown != slowdown:
            self.changed(host, state)

    def changed(self, host: str, state: HostState) -> None:
        """Called when a host was throttled or its slow-down moved: a store that keeps it across runs writes
        it here."""
