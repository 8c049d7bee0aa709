"""The AWS path end to end: template.yaml created in moto, a job pushed to JobQueueUrl, the real handlers
driven as Lambda's SQS poller drives them, a real site served on 127.0.0.1."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import boto3
import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.crawl import DynamoCrawlDatabase
from harvester.adapters.aws.stack import job_status, submit_job
from harvester.engine import Engine
from harvester.model.messages import JobRequest, PageBatchTask, PageTask
from harvester.model.records import JobStatus, UrlStatus
from harvester.pipeline.context import StepContext
from harvester.urls import origin_of
from tests.aws.deployed import DeployedStack
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.support import page_tasks_in, stored_content, stored_versions

LOOPBACK = "127.0.0.0/8"


@pytest.fixture
def aws(stacks_as_deployed: Callable[..., DeployedStack]) -> Iterator[Any]:
    """The stack, as deployed, on demand (some tests need a site URL in its parameters), and its poller; the
    module's tests share one deployment, emptied between them (conftest.stack_as_deployed)."""
    with moto_sqs_speedups(), moto_dynamodb_speedups():
        pollers: list[LambdaPoller] = []

        def deploy(**parameters: str) -> tuple[DeployedStack, LambdaPoller]:
            stack = stacks_as_deployed(AllowedNetworks=LOOPBACK, **parameters)
            poller = LambdaPoller(stack)
            pollers.append(poller)
            return stack, poller

        yield deploy
        for poller in pollers:
            poller.close()


def adapters_of(stack: DeployedStack) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def documents(stack: DeployedStack, prefix: str) -> list[str]:
    return list(adapters_of(stack).documents.keys(prefix))


def result_of(stack: DeployedStack, job_id: str) -> dict[str, Any]:
    return json.loads(adapters_of(stack).documents.get(f"jobs/{job_id}/result.json"))


def records_of(stack: DeployedStack, job_id: str) -> list[dict[str, Any]]:
    body = adapters_of(stack).documents.get(f"jobs/{job_id}/urls.jsonl").decode()
    return [json.loads(line) for line in body.splitlines()]


@pytest.mark.slow
def test_a_2000_page_site_is_ingested_through_sqs_lambda_dynamodb_and_s3(aws, site_factory):
    site = site_factory(pages=2000, broken=0, sitemaps=4, gzip_last=True)
    stack, poller = aws()
    request = JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)

    job_id = submit_job(request, stack.outputs["JobQueueUrl"])
    stats = poller.drain(max_rounds=5000)

    assert stats.failed_invocations == 0, [f.error for f in stats.failures]
    view = job_status(job_id, stack.stack_name)
    assert view["status"] == "completed"
    assert (view["total_urls"], view["successful_count"], view["failed_count"]) == (2000, 2000, 0)
    assert view["discovery_complete"] and view["progress_percentage"] == 100.0
    assert view["result_location"] == f"s3://{stack.outputs['DocumentBucketName']}/jobs/{job_id}/result.json"
    adapters = adapters_of(stack)
    assert len(stored_versions(adapters.documents, request.origin)) == 2000
    result = result_of(stack, job_id)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (2000, 2000, 0)
    records = records_of(stack, job_id)
    assert sorted(r["url"] for r in records) == sorted(site.page_urls)
    # Each page batch is one WARC object (not one object per page), and a record reads back alone by a ranged
    # GET of its offset and length.
    objects = set(adapters.warcs.files(job_id))
    assert {r["warc"]["filename"] for r in records} <= objects and len(objects) < 2000 / 4
    for record in records[::97]:
        assert "Demo page" in stored_content(adapters.documents, adapters.warcs, record).decode()
    store = adapters_of(stack).store
    snapshot = store.snapshot(job_id)
    assert snapshot is not None and snapshot.counts == store.recount(job_id)
    # The table is the one the template made, and the job's items expire (TTL) after the retention period.
    table = stack.outputs["StateTableName"]
    item = boto3.client("dynamodb").get_item(TableName=table, Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}})
    assert int(item["Item"]["expires_at"]["N"]) > 0
    # Every page was requested once. The site's high priorities took their lane; the pages of both lanes
    # travel in page messages of up to 100 (two recorded batches): a function took a message two batches,
    # not a message a page (more than 2,000 / 100 messages only because a lane's last batches of a sitemap
    # do not fill one, and pages past the host's turns were sent back to wait for them, never requested).
    assert {r["attempts"] for r in records} == {1}
    lane = stats.per_function["PagePriorityFunction"].records
    bulk = stats.per_function["PageFunction"].records
    assert lane > 0 and bulk > 0 and 2000 / 100 <= lane + bulk < 2000 / 4, (lane, bulk)


def test_broken_links_fail_with_their_error_and_the_job_completes(aws, site_factory):
    site = site_factory(pages=40, broken=4)
    stack, poller = aws()
    job_id = submit_job(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
    poller.drain()
    result = result_of(stack, job_id)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (44, 40, 4)
    failed = {e["url"]: e["error"] for e in result["error_details"] if e["kind"] == "page"}
    assert failed == dict.fromkeys(site.broken_urls, "HTTP 404 Not Found")
    assert len(stored_versions(adapters_of(stack).documents, origin_of(site.base_url))) == 40


def test_a_sites_first_crawl_looks_up_none_of_its_urls_and_its_re_crawl_looks_them_up(aws, site_factory):
    """DynamoDB tells a site with no URL record from one with some (it cannot count them cheaply): the first
    crawl decides every listed URL without reading the crawl database, the next one reads what it knows.
    Each listing of the first crawl is made as by a container that has not listed for the job before (one
    of the sitemap function's containers side by side): the records the job's other urlsets wrote meanwhile
    do not make it look up its URLs."""
    site = site_factory(pages=30, broken=0)
    stack, poller = aws()
    request = JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)
    spy = mock.patch.object(DynamoCrawlDatabase, "get_urls", autospec=True, side_effect=DynamoCrawlDatabase.get_urls)
    first_crawl = StepContext.first_crawl

    def new_container(ctx: StepContext, job: Any) -> bool:
        ctx._first_crawls.clear()
        return first_crawl(ctx, job)

    with spy as lookups:
        first = submit_job(request, stack.outputs["JobQueueUrl"])
        with mock.patch.object(StepContext, "first_crawl", new_container):
            poller.drain()
        assert lookups.call_count == 0
        assert len({r["sitemap"] for r in records_of(stack, first)}) >= 2  # (listings after the first one)
        again = submit_job(request, stack.outputs["JobQueueUrl"])
        poller.drain()
        looked_up = {url for call in lookups.call_args_list for url in call.args[2]}
    assert looked_up == set(site.page_urls)
    for job_id in (first, again):
        result = result_of(stack, job_id)
        assert (result["total_urls"], result["successful_processing"]) == (30, 30)
    assert {r["url"] for r in records_of(stack, first)} == set(site.page_urls)
    # Each job's end wrote its report page beside its result, with the site's crawls so far.
    bucket, key = stack.outputs["DocumentBucketName"], f"jobs/{again}/report.html"
    assert boto3.client("s3").head_object(Bucket=bucket, Key=key)["ContentType"] == "text/html; charset=utf-8"
    page = adapters_of(stack).documents.get(key).decode()
    shown = dict(re.findall(r'data-figure="([^"]+)" data-value="(\d+)"', page))
    result = result_of(stack, again)
    assert {name: int(shown[name]) for name in ("total_urls", "successful_processing", "failed_processing")} == {
        "total_urls": 30,
        "successful_processing": 30,
        "failed_processing": 0,
    }
    assert int(shown["fetches.fetched"]) == result["fetches"]["fetched"]
    assert {k: int(v) for k, v in shown.items() if k.startswith("changes.")} == {
        f"changes.{kind}": n for kind, n in result["changes"].items()
    }
    assert re.findall(r'<tr data-job="([^"]+)"', page) == [first, again]


def test_a_container_builds_its_engine_once_and_closes_its_connections_when_it_goes(aws, site_factory, caplog):
    """In Lambda, Powertools runs a batch on the thread's event loop, kept across invocations, and the page
    handler runs on the same one: a container's engine (its fetcher, its keep-alive connections, its robots.txt
    cache) is built once, whichever handlers it runs, and its connections are closed when it goes, never left
    for the garbage collector to find open ("Unclosed client session")."""
    site = site_factory(pages=15, broken=0)
    stack, poller = aws()
    built: list[Engine] = []
    init = Engine.__init__

    def recording(self: Engine, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        init(self, *args, **kwargs)

    with mock.patch.object(Engine, "__init__", recording), caplog.at_level(logging.ERROR, logger="asyncio"):
        job_id = submit_job(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
        poller.drain()
        poller.close()
        gc.collect()
    assert result_of(stack, job_id)["successful_processing"] == 15
    invoked = {i.function_logical_id for i in poller.invocations}
    assert {"JobFunction", "SitemapFunction", "PageFunction"} <= invoked and len(poller.invocations) > 3
    assert len(built) == 1
    assert [r.message for r in caplog.records if "Unclosed" in r.message] == []


def test_a_job_id_sent_twice_is_one_job_and_a_redelivered_request_too(aws, site_factory):
    site = site_factory(pages=15, broken=0)
    stack, poller = aws()
    request = JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001, job_id="same-job")
    submit_job(request, stack.outputs["JobQueueUrl"])
    submit_job(request, stack.outputs["JobQueueUrl"])
    # A request without an id, delivered twice by SQS (the same message id): one job, named after the message.
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=stack.outputs["JobQueueUrl"], MessageBody=json.dumps({"site": f"{site.base_url}/"}))
    (message,) = sqs.receive_message(QueueUrl=stack.outputs["JobQueueUrl"], AttributeNames=["All"])["Messages"]
    event = {"Records": [_record(message, stack), _record(message, stack)]}
    poller.invoke("JobFunction", event)
    sqs.delete_message(QueueUrl=stack.outputs["JobQueueUrl"], ReceiptHandle=message["ReceiptHandle"])
    poller.drain()

    store = adapters_of(stack).store
    jobs = {j for j in _all_job_ids(stack)}
    assert len(jobs) == 2 and "same-job" in jobs
    for job_id in jobs:
        snapshot = store.snapshot(job_id)
        assert snapshot is not None and snapshot.job.status is JobStatus.COMPLETED
        assert snapshot.counts.urls_total == snapshot.counts.urls_succeeded == 15


def test_pages_travel_in_page_batches_and_an_invalid_page_of_one_is_dead_lettered_alone(aws, site_factory):
    """A sitemap's pages are sent as page batch messages (one message for many pages); a page of a batch that
    can never be valid goes to the dead-letter queue alone, with the reason, and the batch's other pages are
    fetched."""
    site = site_factory(pages=6, broken=0)
    stack, poller = aws()
    sqs = boto3.client("sqs")
    job_id = submit_job(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
    while poller.poll_once("JobFunction") + poller.poll_once("SitemapFunction"):
        pass  # (discovery only: the pages stay queued)
    tasks: list[PageTask] = []
    messages = 0
    for queue in ("PageQueue", "PagePriorityQueue"):
        url = stack.queue_url(queue)
        while taken := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            for message in taken:
                messages += 1
                tasks += page_tasks_in(message["Body"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sorted(t.url for t in tasks) == sorted(site.page_urls)
    assert messages < len(tasks)  # (page batches; the priority lane's pages are a batch of their own)

    batch = json.loads(PageBatchTask.of(tasks).model_dump_json())
    batch["pages"].insert(2, {"url": "ftp://nope/", "priority": 0.5})
    sqs.send_message(QueueUrl=stack.queue_url("PageQueue"), MessageBody=json.dumps(batch))
    stats = poller.drain()

    assert stats.failed_invocations == 0 and stats.returned == 0
    result = result_of(stack, job_id)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (6, 6, 0)
    (dead,) = sqs.receive_message(
        QueueUrl=stack.queue_url("PageDeadLetterQueue"), MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    assert json.loads(dead["Body"]) == {"kind": "page", "job_id": job_id, "url": "ftp://nope/", "priority": 0.5}
    reason = dead["MessageAttributes"]["HarvestError"]["StringValue"]
    assert reason.startswith("invalid PageTask: ") and "url" in reason


def test_bad_messages_go_to_their_dead_letter_queue_at_once_and_the_batch_goes_on(aws, site_factory):
    site = site_factory(pages=10, broken=0)
    stack, poller = aws()
    sqs = boto3.client("sqs")
    for queue in ("JobQueue", "SitemapQueue", "PageQueue"):
        sqs.send_message(QueueUrl=stack.queue_url(queue), MessageBody="{not json")
        sqs.send_message(QueueUrl=stack.queue_url(queue), MessageBody=json.dumps({"site": "ftp://nope"}))
    job_id = submit_job(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])

    stats = poller.drain()

    assert stats.failed_invocations == 0 and stats.returned == 0  # nothing was retried
    assert result_of(stack, job_id)["successful_processing"] == 10
    for queue, model in (("JobQueue", "JobRequest"), ("SitemapQueue", "SitemapTask"), ("PageQueue", "PageTask")):
        dead = sqs.receive_message(
            QueueUrl=stack.queue_url(queue.replace("Queue", "DeadLetterQueue")),
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
        )["Messages"]
        reasons = sorted(m["MessageAttributes"]["HarvestError"]["StringValue"] for m in dead)
        assert len(reasons) == 2, queue
        assert all(r.startswith(f"invalid {model}: ") for r in reasons)
        assert {m["Body"] for m in dead} == {"{not json", json.dumps({"site": "ftp://nope"})}


def test_lost_messages_are_resent_by_the_scheduler_and_the_counts_stay_exact(aws, site_factory):
    site = site_factory(pages=60, broken=2)
    stack, poller = aws()
    job_id = submit_job(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
    # Run discovery only, then lose every page task (as if a worker died before sending, or SQS lost them).
    for _ in range(40):
        poller.poll_once("JobFunction")
        poller.poll_once("SitemapFunction")
    boto3.client("sqs").purge_queue(QueueUrl=stack.queue_url("PageQueue"))
    poller.drain()
    assert adapters_of(stack).store.get_job(job_id).status is JobStatus.IN_PROGRESS  # stuck without its tasks

    with mock.patch.dict(os.environ, {"HARVEST_STALL_AFTER_SECONDS": "0"}):
        summary = poller.invoke_schedule("SchedulerFunction")
        poller.drain()

    assert summary["resumed"] == [job_id]
    result = result_of(stack, job_id)
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (62, 60, 2)
    store = adapters_of(stack).store
    assert store.snapshot(job_id).counts == store.recount(job_id)
    assert all(p.status.final for p in store.pages(job_id))
    assert not list(store.pages(job_id, status=UrlStatus.PENDING))


def _record(message: dict[str, Any], stack: DeployedStack) -> dict[str, Any]:
    from tests.aws.poller import lambda_sqs_record

    arn = boto3.client("sqs").get_queue_attributes(QueueUrl=stack.outputs["JobQueueUrl"], AttributeNames=["QueueArn"])
    return lambda_sqs_record(message, arn["Attributes"]["QueueArn"], stack.region)


def _all_job_ids(stack: DeployedStack) -> set[str]:
    client = boto3.client("dynamodb")
    items = client.scan(
        TableName=stack.outputs["StateTableName"],
        FilterExpression="sk = :job",
        ExpressionAttributeValues={":job": {"S": "JOB"}},
    )["Items"]
    return {i["pk"]["S"].removeprefix("JOB#") for i in items}
