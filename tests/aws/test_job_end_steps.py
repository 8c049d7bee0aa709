"""A job's end in steps on the stack from template.yaml (moto): its orphan pass and its records pass stop when
the step's time is up (``HARVEST_END_STEP_SECONDS=0``: after every page of the site's URL records, 16 shards
and more, and after every batch of the job's records), store how far they got and hand the claim to the next
JobEnd message, which goes on from there. The result, the records and the change feed are those of an end in
one step, whatever is delivered twice or killed after any write."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.client import BaseClient

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.pointer_items import URL_SHARDS
from harvester.adapters.aws.stack import submit_job
from harvester.archive.results import index_folder
from harvester.demo.live import LiveSite
from harvester.model.crawl import CrawlState
from harvester.model.messages import JobEnd, JobRequest
from harvester.model.records import url_key
from tests.archive.checks import index_rows, stored_index
from tests.aws.deployed import DeployedStack

PAGES = 40
#: Pages no longer listed at the second job: one in the first shard of the site's pointers (the first step
#: marks an orphan: a kill follows its write), the others in the second half of the shards (the steps between
#: mark none: one of them is killed after it sent the next step's message).
UNLISTED = 5
GRACE = 0.3
WRITES = {
    "dynamodb": {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"},
    "s3": {"PutObject", "DeleteObject", "DeleteObjects", "CreateMultipartUpload", "UploadPart", "UploadPartCopy"},
    "sqs": {"SendMessage", "SendMessageBatch"},
}


class Killed(BaseException):
    """The container died: nothing in Harvester, Powertools or the poller catches this."""


def adapters_of(stack: DeployedStack) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("JobEndFunction").environment)


def in_steps(stack: DeployedStack, site: LiveSite) -> None:
    """Every step's time up at its first look; and the first job over long enough, and the note of the site's
    last collection gone, so that the second's end collects whatever share of its URLs it listed one by one
    (a collection that reads the site's batches and pointers: in steps too)."""
    for function in ("JobEndFunction", "SchedulerFunction"):
        stack.function(function).environment.update(
            HARVEST_END_STEP_SECONDS="0",
            HARVEST_END_APART_GRACE_SECONDS=str(GRACE),
            HARVEST_COLLECT_AFTER_SECONDS="0",
        )
    boto3.client("dynamodb").delete_item(TableName=stack.physical_ids["StateTable"], Key=collection_note(site))


def collection_note(site: LiveSite) -> dict[str, Any]:
    """The key of the site's note of its last collection (crawl_collect.py)."""
    return {"pk": {"S": f"CRAWL#{site.url('/').rstrip('/')}"}, "sk": {"S": "COLLECTED"}}


def unlisted(site: LiveSite) -> list[str]:
    """The paths of the pages the second job no longer lists (``UNLISTED``): the first page in the first
    shard, then the first in the second half of the shards."""
    paths = site.page_paths(listed=False)
    first = [p for p in paths if url_key(site.url(p))[0] == URL_SHARDS[0]][:1]
    later = [p for p in paths if url_key(site.url(p))[0] in URL_SHARDS[8:]]
    return first + later[: UNLISTED - 1]


def shaped(site: LiveSite) -> LiveSite:
    """The site with pages added (``/more/<n>.html``) until ``unlisted`` finds all it needs (which shard a page
    falls in depends on its URL, and so on the site's port)."""
    more = 0
    while len(unlisted(site)) < UNLISTED or url_key(site.url(unlisted(site)[0]))[0] != URL_SHARDS[0]:
        site.add(f"/more/{more}.html")
        more += 1
    return site


def second_job_ended(stack: DeployedStack, poller: Any, site: LiveSite) -> str:
    """A first crawl to its end, then, with the ``unlisted`` pages no longer listed, a second job run to its
    end by every function but the job-end one (its JobEnd message waits)."""
    request = JobRequest(site=site.url("/"), fetch_pages=False)
    submit_job(request, stack.outputs["JobQueueUrl"])
    poller.drain()
    for path in unlisted(site):
        site.unlist(path)
    second = submit_job(request, stack.outputs["JobQueueUrl"])
    for _ in range(200):
        if not sum(poller.poll_once(f) for f in ("JobFunction", "SitemapFunction")):
            break
    return second


def ends(poller: Any) -> int:
    """Polls the job-end function until its queue is empty; the messages it handled."""
    handled = 0
    while moved := poller.poll_once("JobEndFunction"):
        handled += moved
    return handled


def check(stack: DeployedStack, site: LiveSite, job_id: str, tmp: Path) -> None:
    """The second job's result and feed: the unlisted pages removed, each once, and the rest as listed."""
    adapters = adapters_of(stack)
    job = adapters.store.get_job(job_id)
    assert job is not None and job.result_key is not None
    result = json.loads(adapters.documents.get(job.result_key))
    gone, pages = sorted(site.url(path) for path in unlisted(site)), len(site.page_paths(listed=False))
    assert len(gone) == UNLISTED and result["changes"]["removed"] == UNLISTED
    assert result["total_urls"] == pages - UNLISTED
    feed = [json.loads(line) for line in adapters.documents.get(f"jobs/{job_id}/changes.jsonl").splitlines()]
    assert sorted(line["url"] for line in feed if line["change"] == "removed") == gone
    records = [json.loads(line)["url"] for line in adapters.documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()]
    assert sorted(records) == sorted(site.url(path) for path in site.page_paths()) and len(records) == pages - UNLISTED
    index = stored_index(adapters.documents, job_id, tmp / job_id)
    assert sorted(records) == sorted(row["url"] for row in index_rows(index))
    crawled = {r.url: r for r in adapters.crawldb.site_urls(site.url("/").rstrip("/"))}
    assert sorted(url for url, r in crawled.items() if r.state is CrawlState.ORPHAN) == gone
    assert {crawled[url].orphaned_job for url in gone} == {job_id}


def end_documents(stack: DeployedStack, job_id: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.outputs["DocumentBucketName"], Prefix=f"steps/{job_id}/")
    return [o["Key"] for o in listed.get("Contents", [])]


@pytest.fixture
def live_site() -> Iterator[LiveSite]:
    with LiveSite(pages=PAGES, sitemaps=2).serving() as site:
        yield shaped(site)


def test_an_end_in_steps_writes_what_an_end_in_one_step_does(deployed_stack, live_site, tmp_path):
    stack, poller = deployed_stack
    job_id = second_job_ended(stack, poller, live_site)
    in_steps(stack, live_site)
    handled = ends(poller)
    record_pages = len(list(adapters_of(stack).store.job_record_pages(job_id)))
    assert record_pages > 1
    # (a step a page of pointers: at least one a shard, then a step a page of the job's records, each stored as
    # a piece that the last step joins; after the result, the collection reads the site's batches and its
    # pointers, a step a shard's page of each)
    assert handled > 16 + record_pages + 15
    check(stack, live_site, job_id, tmp_path)
    assert end_progress(stack, job_id).get("collecting") is None  # (the collection is over, and noted)
    noted = boto3.client("dynamodb").get_item(
        TableName=stack.physical_ids["StateTable"], Key=collection_note(live_site)
    )["Item"]
    job = adapters_of(stack).store.get_job(job_id)
    assert job is not None and job.end_time is not None and float(noted["at"]["N"]) > job.end_time.timestamp()
    # (an index file a step of the records pass: each piece's, then the last step's)
    assert len(list(adapters_of(stack).documents.keys(index_folder(job_id)))) >= record_pages
    assert end_documents(stack, job_id) == []  # (the steps' lines are in the feed, and let go)


def test_an_end_step_delivered_twice_or_sent_again_changes_nothing(deployed_stack, live_site, tmp_path):
    stack, poller = deployed_stack
    job_id = second_job_ended(stack, poller, live_site)
    in_steps(stack, live_site)
    url = stack.physical_ids["JobEndQueue"]
    original = BaseClient._make_api_call
    handed: list[float | None] = []

    def twice(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        result = original(client, operation, params)
        if operation == "SendMessage" and params["QueueUrl"] == url:  # (SQS delivers at least once: here twice)
            handed.append(JobEnd.model_validate_json(params["MessageBody"]).claim)
            original(client, operation, params)
            if len(handed) % 3 == 0:  # (and now and then a resume sends the end again, without a claim)
                original(client, operation, {**params, "MessageBody": JobEnd(job_id=job_id).model_dump_json()})
        return result

    with mock.patch.object(BaseClient, "_make_api_call", twice):
        handled = ends(poller)
    assert len(handed) >= 16 and None not in handed  # (each step handed its claim on: a shard a step)
    assert handled > 2 * len(handed)
    check(stack, live_site, job_id, tmp_path)


@contextmanager
def dies_after(n: int) -> Iterator[list[str]]:
    """Raises Killed right after the ``n``-th write (DynamoDB, S3 or SQS) that landed; yields those writes. A
    write made in another thread (an upload's) kills at the next call of the handler's own thread."""
    original = BaseClient._make_api_call
    landed: list[str] = []
    main = threading.current_thread()

    def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        if len(landed) >= n and threading.current_thread() is main:
            raise Killed(f"after write {n} ({landed[n - 1]})")
        result = original(client, operation, params)
        if operation in WRITES.get(client.meta.service_model.service_name, ()):
            landed.append(operation)
            if len(landed) == n and threading.current_thread() is main:
                raise Killed(f"after write {n} ({operation})")
        return result

    with mock.patch.object(BaseClient, "_make_api_call", call):
        yield landed


def end_progress(stack: DeployedStack, job_id: str) -> dict[str, Any]:
    """The job's end's stored progress ({} when none was stored)."""
    item = boto3.client("dynamodb").get_item(
        TableName=stack.physical_ids["StateTable"], Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}}
    )["Item"]
    return json.loads(item["end_progress"]["S"]) if "end_progress" in item else {}


def pass_over(stack: DeployedStack, job_id: str) -> bool:
    """Whether the job's end has passed over every URL record (its stored progress: the last step is next)."""
    return end_progress(stack, job_id).get("orphans_at") == "~"


def test_an_end_killed_after_any_write_of_any_step_writes_the_same(deployed_stack, live_site, tmp_path):
    stack, poller = deployed_stack
    job_id = second_job_ended(stack, poller, live_site)
    in_steps(stack, live_site)
    store = adapters_of(stack).store
    n, kills, last = 1, [], False
    while store.get_job(job_id).result_key is None:
        assert len(kills) < 1000
        if not last and pass_over(stack, job_id):
            n, last = 1, True  # (the last step, which writes the result, killed after each of its writes in turn)
        try:
            with dies_after(n):
                delivered = poller.poll_once("JobEndFunction")
        except Killed as killed:
            kills.append(str(killed))
            n += 1
            poller.close()  # (the container is gone; its message comes back once its visibility lapses)
            time.sleep(GRACE)  # (and its claim lapses)
            poller.expire_in_flight("JobEndFunction")
            continue
        if delivered:
            n = 1  # (a step went through: the next ones are killed after their first write, their second...)
        elif not poller.expire_in_flight("JobEndFunction"):
            # (a message killed too often is given up on: the scheduler sends the end again)
            time.sleep(GRACE)
            poller.invoke_schedule("SchedulerFunction")
    ends(poller)
    killed_after = {k.partition("(")[2].rstrip(")") for k in kills}
    assert {"UpdateItem", "TransactWriteItems", "PutObject", "SendMessage"} <= killed_after, killed_after
    assert len(kills) > 16
    check(stack, live_site, job_id, tmp_path)  # (every URL's record read as its pointer names it)


def test_a_collection_killed_after_any_write_of_its_steps_goes_on_and_every_record_reads_the_same(
    deployed_stack, live_site, tmp_path
):
    """The collection after the result, in steps of its own: each step killed after its first write, its
    second... its fourth, then let through (a fifth delivery, within the queue's maxReceiveCount). It goes on
    from the state its last step handed on, ends noted, and every URL's record reads as before."""
    stack, poller = deployed_stack
    job_id = second_job_ended(stack, poller, live_site)
    in_steps(stack, live_site)
    while end_progress(stack, job_id).get("collecting") is None:  # (the end's steps, to its result)
        assert poller.poll_once("JobEndFunction")
    n, kills = 1, []
    while len(kills) < 500:
        try:
            with dies_after(n):
                delivered = poller.poll_once("JobEndFunction")
        except Killed as killed:
            kills.append(str(killed))
            n = n + 1 if n < 4 else 10**6
            poller.close()
            time.sleep(GRACE)
            poller.expire_in_flight("JobEndFunction")
            continue
        if delivered:
            n = 1
        elif not poller.expire_in_flight("JobEndFunction"):
            break
    killed_after = {k.partition("(")[2].rstrip(")") for k in kills}
    assert {"UpdateItem", "PutObject", "DeleteObject"} <= killed_after, killed_after
    assert end_progress(stack, job_id).get("collecting") is None
    noted = boto3.client("dynamodb").get_item(
        TableName=stack.physical_ids["StateTable"], Key=collection_note(live_site)
    )["Item"]
    job = adapters_of(stack).store.get_job(job_id)
    assert job is not None and job.end_time is not None and float(noted["at"]["N"]) > job.end_time.timestamp()
    check(stack, live_site, job_id, tmp_path)  # (every URL's record read as its pointer names it)
    assert end_documents(stack, job_id) == []
