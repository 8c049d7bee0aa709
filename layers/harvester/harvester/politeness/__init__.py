"""Politeness shared by every worker: the per-host gate (start spacing, requests in flight, slow-down)."""

from harvester.politeness.gate import Arrival, GateRules, Grant, HostReport, HostState, admit, arrive, paced, settle
from harvester.politeness.memory import MemoryHostGate

__all__ = [
    "Arrival",
    "GateRules",
    "Grant",
    "HostReport",
    "HostState",
    "MemoryHostGate",
    "admit",
    "arrive",
    "paced",
    "settle",
]
