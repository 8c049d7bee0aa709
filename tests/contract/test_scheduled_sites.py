"""The registry of scheduled sites keeps the same promises on both backends: by name, due by time while
active, moved on once by whichever look gets there first, and a tick starts exactly what is due."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from harvester.model.messages import JobRequest
from harvester.model.records import utcnow
from harvester.model.scheduled_site import ScheduledSite
from harvester.pipeline.scheduler import start_due
from harvester.ports import ScheduledSites
from tests.contract.conftest import Backend

NOW = utcnow()


def schedule(name: str, *, due: bool = True, every: timedelta = timedelta(hours=1)) -> ScheduledSite:
    request = JobRequest(site=f"https://{name}.example/")
    return ScheduledSite.new(request, every, now=NOW, name=name, at_once=due)


@pytest.fixture
def registry(backend: Backend) -> ScheduledSites:
    assert backend.scheduled_sites is not None
    return backend.scheduled_sites


def test_schedules_by_name_added_once_unless_replaced(registry):
    assert registry.add([schedule("b"), schedule("a", due=False)]) == []
    assert registry.add([schedule("a", every=timedelta(days=1)), schedule("c")]) == ["a"]
    assert registry.get("a").every == timedelta(hours=1)  # (left as it was)
    assert registry.add([schedule("a", every=timedelta(days=1))], replace=True) == ["a"]
    assert registry.get("a").every == timedelta(days=1)
    assert [s.name for s in registry.all()] == ["a", "b", "c"]
    assert registry.get("nope") is None
    assert registry.remove("b") and not registry.remove("b")
    assert [s.name for s in registry.all()] == ["a", "c"]


def test_every_schedule_is_listed_past_a_page(registry):
    names = [f"site-{i:04d}" for i in range(1203)]
    registry.add([schedule(name, due=False) for name in names])
    assert [s.name for s in registry.all()] == names


def test_only_active_schedules_whose_time_came_are_due(registry):
    registry.add([schedule("due"), schedule("later", due=False), schedule("paused")])
    assert registry.pause("paused").paused
    assert [s.name for s in registry.due(NOW, limit=10)] == ["due"]
    assert registry.due(NOW - timedelta(seconds=1), limit=10) == []
    assert len(registry.due(NOW + timedelta(hours=2), limit=10)) == 2  # (later's slot came)
    assert len(registry.due(NOW + timedelta(hours=2), limit=1)) == 1
    resumed = registry.resume("paused", now=NOW)
    assert not resumed.paused and resumed.next_due > NOW
    assert registry.pause("nope") is None and registry.resume("nope", now=NOW) is None


def test_a_due_schedule_is_moved_on_once(registry):
    registry.add([schedule("a"), schedule("b"), schedule("c")])
    a, b, c = sorted(registry.due(NOW, limit=10), key=lambda s: s.name)
    slot = a.slot_after(NOW)
    assert registry.advance(a, job_id="a-1", next_due=slot)
    assert not registry.advance(a, job_id="a-1", next_due=slot)  # (another look moved it already)
    assert registry.get("a").last_job_id == "a-1" and registry.get("a").next_due == slot
    registry.pause("b")
    assert not registry.advance(b, job_id="b-1", next_due=slot)  # (paused since it was read)
    assert registry.get("b").paused and registry.get("b").last_job_id is None
    registry.remove("c")
    assert not registry.advance(c, job_id="c-1", next_due=slot)
    assert registry.get("c") is None
    assert registry.due(NOW, limit=10) == []


def test_a_schedule_replaced_or_paused_after_a_look_read_it_is_not_moved_on_by_that_look(registry):
    registry.add([schedule("a"), schedule("b")])
    a, b = sorted(registry.due(NOW, limit=10), key=lambda s: s.name)
    other = schedule("a", every=timedelta(days=1)).model_copy(update={"request": JobRequest(site="https://x.example/")})
    assert registry.add([other], replace=True) == ["a"]
    assert not registry.advance(a, job_id=a.job_id(), next_due=a.slot_after(NOW))  # (the look read the old one)
    assert registry.get("a").request.site == "https://x.example/" and registry.get("a").next_due == NOW
    registry.pause("b")
    assert registry.add([schedule("b", every=timedelta(days=1))], replace=True) == ["b"]
    kept = registry.get("b")
    assert kept.paused and kept.next_due is None and kept.every == timedelta(days=1)  # (replaced, still paused)
    assert not registry.advance(b, job_id=b.job_id(), next_due=b.slot_after(NOW))


def test_a_tick_starts_exactly_the_due_sites_once_a_slot(backend, registry):
    registry.add([schedule(f"due-{i}") for i in range(25)] + [schedule(f"later-{i}", due=False) for i in range(40)])
    ctx = SimpleNamespace(queue=backend.queue)
    first = start_due(ctx, registry, now=NOW, limit=20)
    rest = start_due(ctx, registry, now=NOW, limit=20)
    again = start_due(ctx, registry, now=NOW, limit=20)

    assert (len(first.started), first.more_due, len(rest.started), rest.more_due) == (20, True, 5, False)
    assert again.started == []
    sent = backend.take("jobs")
    assert sorted(m.job_id for m in sent) == sorted(first.started + rest.started)
    expected = {schedule(f"due-{i}").job_id() for i in range(25)}  # (each its due time's id)
    assert set(first.started + rest.started) == expected
    assert {m.site for m in sent} == {f"https://due-{i}.example/" for i in range(25)}
    assert all(registry.get(f"due-{i}").next_due > NOW for i in range(25))
