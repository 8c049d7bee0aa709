"""Politeness shared by every worker: the per-host gate (start spacing, requests in flight, slow-down)."""

from harvester.politeness.gate import GateRules, Grant, HostReport, HostState, admit, paced, settle
from harvester.politeness.memory import MemoryHostGate

__all__ = ["GateRules", "Grant", "HostReport", "HostState", "MemoryHostGate", "admit", "paced", "settle"]
