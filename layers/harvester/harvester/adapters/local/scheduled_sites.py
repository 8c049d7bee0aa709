"""The registry of scheduled sites in a state directory's SQLite file (``schedules``: a schedule's JSON by name,
and its due time while it is active, indexed: ``harvest schedule run`` reads only what is due)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

from harvester.adapters.local.database import Transaction
from harvester.model.scheduled_site import ScheduledSite, replaced

#: Schedules read a page at a time when every one is listed.
PAGE = 500


def _due_at(schedule: ScheduledSite) -> float | None:
    return None if schedule.next_due is None else schedule.next_due.timestamp()


class SqliteScheduledSites:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def add(self, schedules: Sequence[ScheduledSite], *, replace: bool = False) -> list[str]:
        there: list[str] = []
        with Transaction(self.conn) as db:
            for schedule in schedules:
                row = db.execute("SELECT body FROM schedules WHERE name = ?", (schedule.name,)).fetchone()
                if row is not None:
                    there.append(schedule.name)
                    if not replace:
                        continue
                    schedule = replaced(ScheduledSite.stored(row[0]), schedule)
                db.execute(
                    "INSERT OR REPLACE INTO schedules (name, body, due_at) VALUES (?, ?, ?)",
                    (schedule.name, schedule.stored_json(), _due_at(schedule)),
                )
        return there

    def get(self, name: str) -> ScheduledSite | None:
        row = self.conn.execute("SELECT body FROM schedules WHERE name = ?", (name,)).fetchone()
        return ScheduledSite.stored(row[0]) if row else None

    def all(self) -> Iterator[ScheduledSite]:
        after = ""
        while True:
            rows = self.conn.execute(
                "SELECT name, body FROM schedules WHERE name > ? ORDER BY name LIMIT ?", (after, PAGE)
            ).fetchall()
            yield from (ScheduledSite.stored(body) for _, body in rows)
            if len(rows) < PAGE:
                return
            after = rows[-1][0]

    def due(self, now: datetime, *, limit: int) -> list[ScheduledSite]:
        rows = self.conn.execute(
            "SELECT body FROM schedules WHERE due_at IS NOT NULL AND due_at <= ? ORDER BY due_at LIMIT ?",
            (now.timestamp(), limit),
        )
        return [ScheduledSite.stored(body) for (body,) in rows]

    def advance(self, schedule: ScheduledSite, *, job_id: str, next_due: datetime) -> bool:
        if schedule.next_due is None:
            return False
        moved = schedule.model_copy(update={"next_due": next_due, "last_job_id": job_id})
        with Transaction(self.conn) as db:
            cursor = db.execute(  # (as read: not paused, replaced or moved on since)
                "UPDATE schedules SET body = ?, due_at = ? WHERE name = ? AND body = ?",
                (moved.stored_json(), _due_at(moved), schedule.name, schedule.stored_json()),
            )
        return cursor.rowcount == 1

    def pause(self, name: str) -> ScheduledSite | None:
        return self._change(name, lambda schedule: schedule.paused_now())

    def resume(self, name: str, *, now: datetime) -> ScheduledSite | None:
        return self._change(name, lambda schedule: schedule.resumed(now))

    def remove(self, name: str) -> bool:
        with Transaction(self.conn) as db:
            return db.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount == 1

    def _change(self, name: str, change: Callable[[ScheduledSite], ScheduledSite]) -> ScheduledSite | None:
        with Transaction(self.conn) as db:
            row = db.execute("SELECT body FROM schedules WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            changed = change(ScheduledSite.stored(row[0]))
            db.execute(
                "UPDATE schedules SET body = ?, due_at = ? WHERE name = ?",
                (changed.stored_json(), _due_at(changed), name),
            )
        return changed
