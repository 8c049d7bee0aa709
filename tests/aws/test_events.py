"""The sample events of events/ are real: their bodies validate, and the deployed handlers take them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.model.base import ValidationError
from harvester.model.messages import JobEnd, JobRequest, PageBatchTask, PageTask, SitemapTask
from harvester.model.records import JobStatus

EVENTS = Path(__file__).resolve().parents[2] / "events"
MODELS = {
    "job_request.json": JobRequest,
    "sitemap_task.json": SitemapTask,
    "page_tasks.json": PageTask,
    "page_batch.json": PageBatchTask,
    "job_end.json": JobEnd,
}


def load(name: str, *, site: str | None = None) -> dict[str, Any]:
    text = (EVENTS / name).read_text()
    if site:
        # Nothing in a test may reach the internet: the sample site becomes the one served on 127.0.0.1.
        text = text.replace("https://example.com", site)
    return json.loads(text)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sample_bodies_are_valid_messages(name):
    for record in load(name)["Records"]:
        message = MODELS[name].model_validate_json(record["body"])
        if isinstance(message, PageBatchTask):
            tasks, invalid = message.tasks()
            assert len(tasks) == len(message.pages) > 1 and invalid == []


def test_the_invalid_sample_is_invalid():
    for record in load("invalid_messages.json")["Records"]:
        with pytest.raises(ValidationError):
            JobRequest.model_validate_json(record["body"])


def test_the_handlers_take_the_sample_events(deployed_stack, site_factory):
    stack, poller = deployed_stack
    site = site_factory(pages=30, broken=0)
    adapters = AwsAdapters.from_env(stack.function("PageFunction").environment)

    started = poller.invoke("JobFunction", load("job_request.json", site=site.base_url))
    assert started == {"batchItemFailures": []}
    job = adapters.store.get_job("example-blog")
    assert job is not None and job.request.include == ("*/blog/*",)

    # The sample sitemap task and page tasks, delivered by hand on top of the job's own messages.
    assert poller.invoke("SitemapFunction", load("sitemap_task.json", site=site.base_url)) == {"batchItemFailures": []}
    assert poller.invoke("PageFunction", load("page_tasks.json", site=site.base_url)) == {"batchItemFailures": []}
    assert poller.invoke("PageFunction", load("page_batch.json", site=site.base_url)) == {"batchItemFailures": []}
    # The priority lane's function is the same code, fed the same events.
    lane = poller.invoke("PagePriorityFunction", load("page_tasks.json", site=site.base_url))
    assert lane == {"batchItemFailures": []}
    stats = poller.drain()
    assert stats.failed_invocations == 0

    # The sitemaps were read, and every page was left out by the request's include pattern (none is a blog).
    snapshot = adapters.store.snapshot("example-blog")
    assert snapshot is not None and snapshot.job.status is JobStatus.COMPLETED
    assert snapshot.counts.urls_total == 0 and snapshot.counts.sitemaps_ok == 5
    dropped = sum(s.dropped.get("not_included", 0) for s in adapters.store.sitemaps("example-blog"))
    assert dropped == 30
    # Its end, written by the job-end function (drained above); the sample end event finds it written.
    result_key = snapshot.job.result_key
    assert result_key == "jobs/example-blog/result.json"
    assert poller.invoke("JobEndFunction", load("job_end.json")) == {"batchItemFailures": []}
    assert adapters.store.get_job("example-blog").result_key == result_key


def test_the_invalid_sample_goes_to_the_dead_letter_queue(deployed_stack):
    stack, poller = deployed_stack
    assert poller.invoke("JobFunction", load("invalid_messages.json")) == {"batchItemFailures": []}
    dead = boto3.client("sqs").receive_message(QueueUrl=stack.queue_url("JobDeadLetterQueue"), MaxNumberOfMessages=10)
    assert len(dead.get("Messages", [])) == 2


def test_the_schedule_event_runs_the_scheduler(deployed_stack):
    _, poller = deployed_stack
    summary = poller.invoke("SchedulerFunction", load("schedule.json"))
    assert summary == {"started": [], "more_due": False, "resumed": [], "not_looked_at": 0, "errors": []}
