"""The registry of scheduled sites in the state table.

Layout: a schedule is one item, ``pk`` ``SCHEDULES#<h>`` (``h``: the first hex digit of the SHA-256 of its name,
so that the registry spreads over 16 partitions), ``sk`` its name, ``body`` its JSON. While it is active it
also carries ``due_pk`` (``DUE#<h>``) and ``due_at`` (its next slot, epoch seconds): the keys of the sparse
index ``DueSites``, which a scheduler's look queries for ``due_at <= now``, one query per part: what it
reads grows with the schedules due, not with those registered (a paused schedule is not in the index).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from harvester.adapters.aws.state_table import batch_get, batch_put, conditional, query
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model.scheduled_site import ScheduledSite, replaced

#: The index of the active schedules by due time (template.yaml, StateTable).
DUE_INDEX = "DueSites"
SHARDS = "0123456789abcdef"
#: Times an optimistic pause or resume reads the schedule again after another writer changed it.
_TRIES = 5


def _shard(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[0]


def _key(name: str) -> dict[str, Any]:
    return {"pk": _s(f"SCHEDULES#{_shard(name)}"), "sk": _s(name)}


def _item(schedule: ScheduledSite) -> dict[str, Any]:
    item = {**_key(schedule.name), "body": _s(schedule.stored_json())}
    if schedule.next_due is not None:
        item["due_pk"] = _s(f"DUE#{_shard(schedule.name)}")
        item["due_at"] = _n(schedule.next_due.timestamp())
    return item


class DynamoScheduledSites:
    def __init__(self, client: Any, table: str) -> None:
        self.client, self.table = client, table

    def add(self, schedules: Sequence[ScheduledSite], *, replace: bool = False) -> list[str]:
        """One BatchGetItem per 100 names to find those registered, one BatchWriteItem per 25 to write the
        others (a bulk add of 100,000 sites costs 1,000 + 4,000 requests, not 100,000). Not atomic per name
        against another add of the same name at the same moment: the later write wins."""
        keys = [_key(schedule.name) for schedule in schedules]
        there = {
            item["sk"]["S"]: ScheduledSite.stored(item["body"]["S"])
            for item in batch_get(self.client, self.table, keys, projection="sk, body")
        }
        written = [
            _item(replaced(there[schedule.name], schedule) if schedule.name in there else schedule)
            for schedule in schedules
            if replace or schedule.name not in there
        ]
        batch_put(self.client, self.table, written)
        return [schedule.name for schedule in schedules if schedule.name in there]

    def get(self, name: str) -> ScheduledSite | None:
        item = self.client.get_item(TableName=self.table, Key=_key(name), ConsistentRead=True).get("Item")
        return ScheduledSite.stored(item["body"]["S"]) if item else None

    def all(self) -> Iterator[ScheduledSite]:
        """The 16 parts read side by side a page at a time, merged by name."""
        parts = [self._part(shard) for shard in SHARDS]
        for _, body in heapq.merge(*parts):
            yield ScheduledSite.stored(body)

    def _part(self, shard: str) -> Iterator[tuple[str, str]]:
        items = query(
            self.client,
            self.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _s(f"SCHEDULES#{shard}")},
        )
        return ((item["sk"]["S"], item["body"]["S"]) for item in items)

    def due(self, now: datetime, *, limit: int) -> list[ScheduledSite]:
        found: list[ScheduledSite] = []
        for shard in SHARDS:
            if len(found) >= limit:
                break
            items = query(
                self.client,
                self.table,
                IndexName=DUE_INDEX,
                KeyConditionExpression="due_pk = :p AND due_at <= :now",
                ExpressionAttributeValues={":p": _s(f"DUE#{shard}"), ":now": _n(now.timestamp())},
                Limit=min(1000, limit - len(found)),
            )
            for item in items:
                found.append(ScheduledSite.stored(item["body"]["S"]))
                if len(found) >= limit:
                    break
        return found

    def advance(self, schedule: ScheduledSite, *, job_id: str, next_due: datetime) -> bool:
        if schedule.next_due is None:
            return False
        moved = schedule.model_copy(update={"next_due": next_due, "last_job_id": job_id})
        return conditional(
            lambda: self.client.update_item(
                TableName=self.table,
                Key=_key(schedule.name),
                UpdateExpression="SET body = :b, due_at = :n",
                # (as read, from an index that may lag: not paused, replaced or moved on since)
                ConditionExpression="body = :old AND attribute_exists(due_at)",
                ExpressionAttributeValues={
                    ":b": _s(moved.stored_json()),
                    ":n": _n(next_due.timestamp()),
                    ":old": _s(schedule.stored_json()),
                },
            )
        )

    def pause(self, name: str) -> ScheduledSite | None:
        return self._change(name, lambda schedule: schedule.paused_now())

    def resume(self, name: str, *, now: datetime) -> ScheduledSite | None:
        return self._change(name, lambda schedule: schedule.resumed(now))

    def remove(self, name: str) -> bool:
        response = self.client.delete_item(TableName=self.table, Key=_key(name), ReturnValues="ALL_OLD")
        return "Attributes" in response

    def _change(self, name: str, change: Callable[[ScheduledSite], ScheduledSite]) -> ScheduledSite | None:
        """Reads, changes and writes the schedule back if no other writer (a scheduler's look) wrote it since."""
        for _ in range(_TRIES):
            item = self.client.get_item(TableName=self.table, Key=_key(name), ConsistentRead=True).get("Item")
            if item is None:
                return None
            changed = change(ScheduledSite.stored(item["body"]["S"]))
            written = {**_item(changed)}
            if conditional(
                lambda written=written, old=item["body"]: self.client.put_item(
                    TableName=self.table,
                    Item=written,
                    ConditionExpression="body = :old",
                    ExpressionAttributeValues={":old": old},
                )
            ):
                return changed
        raise RuntimeError(f"schedule {name!r} kept changing while it was being changed; try again")
