"""A job's end on the stack from template.yaml (moto): the step that ends the job sends a JobEnd message, and
the job-end function (its own timeout and memory) writes the result once, however often it is delivered; a
lost one is sent again by the scheduler."""

from __future__ import annotations

import json
import os
import time
from typing import Any
from unittest import mock

import boto3

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.crawl import DynamoCrawlDatabase
from harvester.adapters.aws.stack import submit_job
from harvester.model.messages import JobEnd, JobRequest
from harvester.model.records import JobStatus
from tests.aws.deployed import DeployedStack


def adapters_of(stack: DeployedStack) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("JobEndFunction").environment)


def ended_without_its_result(stack: DeployedStack, poller: Any, site: str) -> str:
    """A job run to its end by every function but the job-end one."""
    request = JobRequest(site=site, rate_limit_delay=0.0001)
    job_id = submit_job(request, stack.outputs["JobQueueUrl"])
    for _ in range(200):
        moved = sum(
            poller.poll_once(f) for f in ("JobFunction", "SitemapFunction", "PageFunction", "PagePriorityFunction")
        )
        if not moved:
            break
    return job_id


def end_messages(stack: DeployedStack) -> list[str]:
    url = stack.physical_ids["JobEndQueue"]
    attributes = boto3.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return attributes["Attributes"]["ApproximateNumberOfMessages"]


def test_the_result_is_written_by_the_job_end_function_once(deployed_stack, site_factory):
    stack, poller = deployed_stack
    site = site_factory(pages=30, broken=2)
    job_id = ended_without_its_result(stack, poller, f"{site.base_url}/")
    adapters = adapters_of(stack)
    job = adapters.store.get_job(job_id)
    assert job.status is JobStatus.COMPLETED and job.result_key is None  # (ended: its result is the end's)
    assert end_messages(stack) == "1"

    assert poller.poll_once("JobEndFunction") == 1
    job = adapters.store.get_job(job_id)
    result = json.loads(adapters.documents.get(job.result_key))
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (32, 30, 2)
    written = boto3.client("s3").head_object(Bucket=stack.outputs["DocumentBucketName"], Key=job.result_key)

    adapters.sqs.send_message(  # (delivered again: nothing is written twice)
        QueueUrl=stack.physical_ids["JobEndQueue"], MessageBody=JobEnd(job_id=job_id).model_dump_json()
    )
    assert poller.poll_once("JobEndFunction") == 1
    again = boto3.client("s3").head_object(Bucket=stack.outputs["DocumentBucketName"], Key=job.result_key)
    assert again["ETag"] == written["ETag"] and again["LastModified"] == written["LastModified"]


def test_an_end_still_running_is_not_sent_again(deployed_stack, site_factory):
    stack, poller = deployed_stack
    site = site_factory(pages=8, broken=0)
    job_id = ended_without_its_result(stack, poller, f"{site.base_url}/")
    for _ in range(3):  # (the scheduler's looks while the job-end function may still be writing it)
        assert poller.invoke_schedule("SchedulerFunction")["resumed"] == []
    assert end_messages(stack) == "1"
    assert poller.poll_once("JobEndFunction") == 1
    assert adapters_of(stack).store.get_job(job_id).result_key is not None


def test_a_lost_job_end_is_sent_again_by_the_scheduler(deployed_stack, site_factory):
    stack, poller = deployed_stack
    site = site_factory(pages=12, broken=0)
    job_id = ended_without_its_result(stack, poller, f"{site.base_url}/")
    sqs, url = boto3.client("sqs"), stack.physical_ids["JobEndQueue"]
    (lost,) = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=lost["ReceiptHandle"])  # (the message lost)

    assert poller.invoke_schedule("SchedulerFunction")["resumed"] == []  # (within the grace an end may run)
    with mock.patch.dict(os.environ, {"HARVEST_END_APART_GRACE_SECONDS": "0"}):
        summary = poller.invoke_schedule("SchedulerFunction")
    assert summary["resumed"] == [job_id]
    poller.drain()

    result = json.loads(adapters_of(stack).documents.get(f"jobs/{job_id}/result.json"))
    assert result["successful_processing"] == 12


def test_an_end_delivered_while_another_writes_it_does_nothing_and_a_dead_writers_claim_lapses(
    deployed_stack, site_factory
):
    stack, poller = deployed_stack
    site = site_factory(pages=10, broken=0)
    job_id = ended_without_its_result(stack, poller, f"{site.base_url}/")
    store = adapters_of(stack).store
    assert store.claim_end(job_id, until=time.time() + 1.5, now=time.time())  # (a first delivery writing it)

    assert poller.poll_once("JobEndFunction") == 1  # (a second delivery, at the same time)
    assert store.get_job(job_id).result_key is None

    time.sleep(1.6)  # (the first writer died: its claim lapses, and the end sent again writes the result)
    with mock.patch.dict(os.environ, {"HARVEST_END_APART_GRACE_SECONDS": "0"}):
        assert poller.invoke_schedule("SchedulerFunction")["resumed"] == [job_id]
    poller.drain()
    assert store.get_job(job_id).result_key == f"jobs/{job_id}/result.json"


def test_a_first_crawls_end_reads_no_pointer_for_orphans_and_a_later_ones_does(
    deployed_stack, site_factory, monkeypatch
):
    stack, poller = deployed_stack
    site = site_factory(pages=10, broken=0)
    passes: list[str] = []
    every = DynamoCrawlDatabase.url_pages

    def url_pages(self: DynamoCrawlDatabase, site: str, **options: Any) -> Any:
        passes.append(site)
        return every(self, site, **options)

    monkeypatch.setattr(DynamoCrawlDatabase, "url_pages", url_pages)
    first = ended_without_its_result(stack, poller, f"{site.base_url}/")
    store = adapters_of(stack).store
    assert store.get_job(first).empty_site
    poller.drain()
    assert passes == [] and store.get_job(first).result_key is not None  # (no record can be its orphan)

    second = ended_without_its_result(stack, poller, f"{site.base_url}/")
    poller.drain()
    assert not store.get_job(second).empty_site and passes  # (the site had records: the pass runs)
