"""The host gate in the state table: one item per host, moved by optimistic, versioned writes.

``HOST#<host>`` / ``GATE`` holds the host's state (harvester.politeness.gate) as JSON and a ``version``.
A move is computed on the state this container saw last and written on the condition that the version is
still that one; a write that lost the race gets the current item back with its refusal
(``ReturnValuesOnConditionCheckFailure``) and is computed again on it, so a move costs one write when the
container's view is current and one more per writer it raced. No item expires: a host's slow-down outlives
jobs, and an item is a few hundred bytes.

Never raising for contention is the port's promise: after ``_RACES`` lost races an acquire grants nothing
(its pages are deferred a moment) and a release is given up (its slots lapse with ``slot_seconds``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from harvester.politeness import Arrival, GateRules, Grant, HostReport, HostState, admit, arrive, paced, settle
from harvester.politeness.gate import RECHECK_SECONDS

log = logging.getLogger(__name__)

_RACES = 8
Moved = TypeVar("Moved")


def gate_key(host: str) -> dict[str, Any]:
    return {"pk": {"S": f"HOST#{host}"}, "sk": {"S": "GATE"}}


class DynamoHostGate:
    def __init__(self, client: Any, table: str, rules: GateRules | None = None) -> None:
        self.client = client
        self.table = table
        self.rules = rules or GateRules()
        #: host -> (version, state) as last read or written by this container.
        self._seen: dict[str, tuple[int, HostState]] = {}

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
        token = token or uuid.uuid4().hex
        fresh = False
        for _ in range(_RACES):
            version, seen = self._seen.get(host, (0, HostState()))
            state = seen.copy()
            grant = admit(state, token, want, spacing=spacing, now=now, rules=self.rules, rebook=rebook, lead=lead)
            if not grant.starts:
                if fresh or host not in self._seen:
                    return grant
                self._read(host)  # nothing for us on what we saw: see what is there now, once
                fresh = True
                continue
            if self._write(host, version, state):
                return grant
            fresh = True
        log.warning("host gate contended; pages deferred", extra={"host": host})
        return Grant(token, (), now + RECHECK_SECONDS)

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
        token = uuid.uuid4().hex

        def move(state: HostState) -> Arrival:
            return arrive(state, token, turns, spacing=spacing, now=now, rules=self.rules, lead=lead, ahead=ahead)

        arrival = self._moved(host, move)
        if arrival is None:
            log.warning("host gate contended; pages deferred", extra={"host": host})
            return Arrival(Grant(token, (), now + RECHECK_SECONDS), (None,) * len(turns), now + RECHECK_SECONDS)
        return arrival

    def paced(self, host: str, want: int, *, spacing: float, now: float) -> Grant:
        # Read, not the view of the last move: other containers move the host's turns on (one read a batch,
        # and the acquire that follows starts from it).
        self._read(host)
        return paced(self._seen[host][1], want, spacing=spacing, now=now, rules=self.rules)

    def release(self, host: str, grant: Grant, report: HostReport, *, spacing: float, now: float) -> None:
        def give_back(state: HostState) -> bool:
            settle(state, grant.token, report, spacing=spacing, now=now, rules=self.rules)
            return True

        if self._moved(host, give_back) is None:
            log.warning("host gate contended; a grant is left to lapse", extra={"host": host})

    def _moved(self, host: str, move: Callable[[HostState], Moved]) -> Moved | None:
        """``move`` made on this container's view of the host's state and stored (nothing to store when it
        changed nothing); made again on the item a lost race brought back, up to ``_RACES`` times (None)."""
        for _ in range(_RACES):
            version, seen = self._seen.get(host, (0, HostState()))
            state = seen.copy()
            moved = move(state)
            if state == seen or self._write(host, version, state):
                return moved
        return None

    def _read(self, host: str) -> None:
        item = self.client.get_item(TableName=self.table, Key=gate_key(host), ConsistentRead=True).get("Item")
        self._remember(host, item)

    def _remember(self, host: str, item: dict[str, Any] | None) -> None:
        if item is None:
            self._seen[host] = (0, HostState())
        else:
            self._seen[host] = (int(item["version"]["N"]), HostState.loads(item["state"]["S"]))

    def _write(self, host: str, version: int, state: HostState) -> bool:
        """Stores ``state`` as the version after ``version``; False (and the item now there remembered) when
        another writer moved it first."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "Item": {
                **gate_key(host),
                "state": {"S": state.dumps()},
                "version": {"N": str(version + 1)},
                "updated_at": {"N": str(int(time.time()))},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if version == 0:
            request["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            request["ConditionExpression"] = "version = :seen"
            request["ExpressionAttributeValues"] = {":seen": {"N": str(version)}}
        try:
            self.client.put_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            self._remember(host, exc.response.get("Item"))
            return False
        self._seen[host] = (version + 1, state)
        return True
