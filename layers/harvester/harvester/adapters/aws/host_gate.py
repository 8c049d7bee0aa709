"""The host gate in the state table: one item per host, moved by optimistic, versioned writes.

``HOST#<host>`` / ``GATE`` holds the host's state (harvester.politeness.gate) as JSON and a ``version``.
A move is computed on the state this container saw last and written on the condition that the version is
still that one; a write that lost the race gets the current item back with its refusal
(``ReturnValuesOnConditionCheckFailure``) and is computed again on it, so a move costs one write when the
container's view is current and one more per writer it raced. No item expires: a host's slow-down outlives
jobs, and an item is a few hundred bytes.

Where many containers move one host (page functions side by side), a container's view is mostly out of date
by its next move, and a write that loses its race is billed as a write. So each container keeps, per host,
how often its view turned out out of date (``_STALE_WEIGHT``: a moving average); while that is above
``_READ_FIRST`` it reads the item (a strongly consistent read: a fifth of a write's price) before a move, and
the move's write then loses only to a writer between the two. A container alone on a host keeps writing on
its own view.

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
#: Read the host's item before a move while this share of this container's views were out of date (a
#: consistent read costs a fifth of a write's price, and a write that loses its race a whole one).
_READ_FIRST = 0.2
#: The weight of the latest view's freshness in the moving average of how often views were out of date.
_STALE_WEIGHT = 0.3
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
        #: host -> how often this container's view of it was out of date at a move (a moving average).
        self._stale: dict[str, float] = {}

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
        fresh = self._read_first(host)
        for race in range(_RACES):
            version, seen = self._seen.get(host, (0, HostState()))
            state = seen.copy()
            grant = admit(state, token, want, spacing=spacing, now=now, rules=self.rules, rebook=rebook, lead=lead)
            if not grant.starts:
                if fresh or host not in self._seen:
                    return grant
                self._read(host)  # nothing for us on what we saw: see what is there now, once
                fresh = True
                continue
            if self._written(host, version, state, first=race == 0 and not fresh):
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

        # (every slot held, on this container's view: looked at again on the item itself before the batch
        # waits for a slot, as a view out of date holds grants given back since)
        arrival = self._moved(host, move, unless=lambda arrival: arrival.every_slot_held)
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

    def _moved(
        self, host: str, move: Callable[[HostState], Moved], *, unless: Callable[[Moved], bool] | None = None
    ) -> Moved | None:
        """``move`` made on this container's view of the host's state and stored (nothing to store when it
        changed nothing); made again on the item a lost race brought back, up to ``_RACES`` times (None).
        A move that changed nothing and is ``unless`` on a view not just read is made again on the item read."""
        read = self._read_first(host)
        for race in range(_RACES):
            version, seen = self._seen.get(host, (0, HostState()))
            state = seen.copy()
            moved = move(state)
            if state == seen:
                if read or unless is None or not unless(moved):
                    return moved
                self._read(host)
                read = True
                continue
            if self._written(host, version, state, first=race == 0 and not read):
                return moved
        return None

    def _read_first(self, host: str) -> bool:
        """Reads the host's item before a move while this container's views of it were mostly out of date
        (True: read), and counts whether this one was."""
        if self._stale.get(host, 0.0) <= _READ_FIRST:
            return False
        before = self._seen.get(host, (0, HostState()))[0]
        self._read(host)
        self._saw(host, stale=self._seen[host][0] != before)
        return True

    def _written(self, host: str, version: int, state: HostState, *, first: bool) -> bool:
        """``_write``; ``first``: the move's first write on a view not just read, which counts whether that
        view was out of date."""
        written = self._write(host, version, state)
        if first:
            self._saw(host, stale=not written)
        return written

    def _saw(self, host: str, *, stale: bool) -> None:
        average = self._stale.get(host, 0.0)
        self._stale[host] = average + _STALE_WEIGHT * (float(stale) - average)

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
