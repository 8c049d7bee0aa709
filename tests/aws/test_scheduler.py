"""The registry of scheduled sites on the stack from template.yaml (moto): `harvest schedule --stack` writes it,
the scheduler function, invoked as its EventBridge rule invokes it, starts what is due."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import boto3

from harvester.adapters.aws import AwsAdapters
from harvester.cli import main
from harvester.model.messages import JobRequest
from harvester.model.records import utcnow
from harvester.model.scheduled_site import ScheduledSite
from harvester.pipeline.scheduler import start_due
from tests.aws.deployed import DeployedStack


def adapters_of(stack: DeployedStack) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("SchedulerFunction").environment)


def job_ids(stack: DeployedStack) -> set[str]:
    items = boto3.client("dynamodb").scan(
        TableName=stack.outputs["StateTableName"],
        FilterExpression="sk = :job",
        ExpressionAttributeValues={":job": {"S": "JOB"}},
    )["Items"]
    return {item["pk"]["S"].removeprefix("JOB#") for item in items}


def result_of(stack: DeployedStack, job_id: str) -> dict[str, Any]:
    return json.loads(adapters_of(stack).documents.get(f"jobs/{job_id}/result.json"))


def test_a_site_scheduled_from_the_command_line_gets_one_job_a_slot(deployed_stack, site_factory, capsys):
    stack, poller = deployed_stack
    site = site_factory(pages=12, broken=0)
    flags = ["--stack", stack.stack_name]
    assert (
        main(["schedule", "add", f"{site.base_url}/", "--every", "1d", "--now", "--rate-limit-delay", "0.0001", *flags])
        == 0
    )
    name = capsys.readouterr().out.split(":")[0].removeprefix("schedule ")

    first = poller.invoke_schedule("SchedulerFunction")
    again = poller.invoke_schedule("SchedulerFunction")
    poller.drain()
    later = poller.invoke_schedule("SchedulerFunction")

    (job_id,) = first["started"]
    assert job_id.startswith(f"{name}-") and again["started"] == [] and later["started"] == []
    assert job_ids(stack) == {job_id}
    assert result_of(stack, job_id)["successful_processing"] == 12
    capsys.readouterr()
    assert main(["schedule", "show", name, *flags]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["last_job_id"] == job_id and shown["every"] == "1d"
    schedule = adapters_of(stack).scheduled_sites.get(name)
    assert schedule is not None and schedule.next_due is not None
    assert utcnow() < schedule.next_due <= utcnow() + timedelta(days=1)


def test_a_schedule_read_by_two_ticks_at_once_starts_one_job(deployed_stack, site_factory):
    """Two ticks that both read the schedule as due (an EventBridge event delivered twice) send its job twice,
    under the slot's id: one job runs, and one of the two moves the schedule on."""
    stack, poller = deployed_stack
    site = site_factory(pages=5, broken=0)
    adapters = adapters_of(stack)
    now = utcnow()
    request = JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)
    adapters.scheduled_sites.add([ScheduledSite.new(request, timedelta(hours=6), now=now, at_once=True)])
    (due,) = adapters.scheduled_sites.due(now, limit=10)

    class Stale:
        """The registry as a tick that read before the other's advance sees it."""

        def due(self, now: Any, *, limit: int) -> list[ScheduledSite]:
            return [due]

        def advance(self, schedule: ScheduledSite, **kwargs: Any) -> bool:
            return adapters.scheduled_sites.advance(schedule, **kwargs)

    ctx = SimpleNamespace(queue=adapters.queue)
    one, two = start_due(ctx, Stale(), now=now), start_due(ctx, Stale(), now=now)  # type: ignore[arg-type]
    poller.drain()

    assert one.started == two.started and job_ids(stack) == set(one.started)
    assert result_of(stack, one.started[0])["successful_processing"] == 5
    assert adapters.scheduled_sites.due(now, limit=10) == []


def test_a_ticks_requests_follow_the_sites_due_not_the_sites_registered(deployed_stack):
    stack, _ = deployed_stack
    adapters = adapters_of(stack)
    calls: dict[str, int] = {}

    def count(event_name: str, **_: Any) -> None:
        calls[event_name] = calls.get(event_name, 0) + 1

    for client in (adapters.scheduled_sites.client, adapters.sqs):
        client.meta.events.register("before-call.*.*", count)
    now = utcnow()
    request = JobRequest(site="https://example.com/", fetch_pages=False)
    ctx = SimpleNamespace(queue=adapters.queue)

    def tick_with(registered: int, due: int) -> dict[str, int]:
        later = [
            ScheduledSite.new(request, timedelta(days=1), now=now, name=f"later-{registered}-{i}")
            for i in range(registered)
        ]
        soon = [
            ScheduledSite.new(request, timedelta(days=1), now=now, name=f"due-{registered}-{i}", at_once=True)
            for i in range(due)
        ]
        adapters.scheduled_sites.add(later + soon)
        calls.clear()
        report = start_due(ctx, adapters.scheduled_sites, now=now)  # type: ignore[arg-type]
        assert sorted(report.started) == sorted(s.job_id() for s in soon)
        return dict(calls)

    small = tick_with(100, 20)
    large = tick_with(2000, 20)
    assert small == large, (small, large)
    assert sum(large.values()) <= 16 + 2 + 20  # a query per index part, two sends of ten, an advance per site


def test_paused_and_removed_schedules_start_nothing_and_running_jobs_are_still_looked_after(deployed_stack, capsys):
    stack, poller = deployed_stack
    flags = ["--stack", stack.stack_name]
    for site in ("https://a.example/", "https://b.example/"):
        assert main(["schedule", "add", site, "--every", "1h", "--now", "--no-pages", *flags]) == 0
    assert main(["schedule", "pause", "a.example", *flags]) == 0
    assert main(["schedule", "remove", "b.example", *flags]) == 0
    assert "paused" in capsys.readouterr().out

    assert poller.invoke_schedule("SchedulerFunction")["started"] == []
    assert main(["schedule", "resume", "a.example", *flags]) == 0
    assert "next job at" in capsys.readouterr().out
    assert poller.invoke_schedule("SchedulerFunction")["started"] == []  # (due at its next slot, not now)
    assert main(["schedule", "list", *flags]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("{")]  # (not the logs)
    assert line.startswith("a.example  every 1h  next ")
    assert main(["schedule", "list", "--stack", "not-there"]) == 2
    assert "stack 'not-there'" in capsys.readouterr().err


def test_a_site_replaced_with_other_options_and_due_now_gets_a_job_of_its_own(deployed_stack, site_factory, capsys):
    stack, poller = deployed_stack
    site = site_factory(pages=6, broken=0)
    flags = ["--stack", stack.stack_name, "--rate-limit-delay", "0.0001"]
    add = ["schedule", "add", f"{site.base_url}/", "--every", "1d", "--now", "--name", "s", *flags]
    assert main(add) == 0
    (first,) = poller.invoke_schedule("SchedulerFunction")["started"]
    poller.drain()
    assert main([*add, "--replace", "--no-pages"]) == 0
    (second,) = poller.invoke_schedule("SchedulerFunction")["started"]
    poller.drain()

    assert second != first and job_ids(stack) == {first, second}
    assert adapters_of(stack).store.get_job(second).request.fetch_pages is False
    assert result_of(stack, second)["total_urls"] == 6
