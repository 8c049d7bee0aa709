"""Re-crawling on AWS: the same three crawls through template.yaml created in moto, the real handlers driven as
Lambda's SQS poller drives them, the crawl database in DynamoDB and the documents in S3."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import boto3
import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import LiveSite
from harvester.model.crawl import CrawlState
from harvester.model.messages import JobRequest
from tests.recrawl import scenario
from tests.support import stored_content, stored_versions


def adapters_of(stack: Any) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def crawl(site: LiveSite, stack: Any, poller: Any, **options: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    site.reset_log()
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, **options)
    job_id = submit_job(request, stack.outputs["JobQueueUrl"])
    stats = poller.drain(max_rounds=3000)
    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
    documents = adapters_of(stack).documents
    result = json.loads(documents.get(f"jobs/{job_id}/result.json"))
    feed = documents.get(f"jobs/{job_id}/changes.jsonl").decode()
    return result, [json.loads(line) for line in feed.splitlines()]


def stored_pages(stack: Any, site: LiveSite) -> set[str]:
    return stored_versions(adapters_of(stack).documents, site.base)


def crawl_batches(stack: Any, site: str) -> tuple[Counter[str], set[str]]:
    """The site's crawl batch items by job, and the batches (``job/bid``) its pointers read records from (not
    those a record written whole names)."""
    items = boto3.client("dynamodb").scan(
        TableName=stack.outputs["StateTableName"],
        FilterExpression="begins_with(pk, :crawl)",
        ExpressionAttributeValues={":crawl": {"S": f"CRAWL#{site}#"}},
    )["Items"]
    batches = Counter(i["sk"]["S"].split("#")[1] for i in items if i["sk"]["S"].startswith("CB#"))
    named = {i[name]["S"] for i in items if "w" not in i for name in ("cur", "prev") if name in i}
    return batches, named


@pytest.mark.parametrize(
    "stack_parameters", [{"SnapshotRefs": 0}, {}], indirect=True, ids=["snapshots-whole", "snapshot-refs"]
)
def test_three_crawls_on_aws_fetch_only_what_is_due_and_report_exactly_what_changed(deployed_stack, live_site):
    stack, poller = deployed_stack
    site = scenario.build(live_site())
    for function in stack.functions.values():  # (as if each job had ended a quarter of an hour before the next)
        function.environment["HARVEST_COLLECT_AFTER_SECONDS"] = "0"

    first, _ = crawl(site, stack, poller)
    scenario.check_crawl_1(site, first)
    # Once, as the sitemap tree's root: the page containers take that reading (its stored copy) for their rules.
    assert [h.path for h in site.hits].count("/robots.txt") == 1
    after_first = stored_pages(stack, site)
    assert len(after_first) == 40
    assert (
        first["changes_location"] == f"s3://{stack.outputs['DocumentBucketName']}/jobs/{first['job_id']}/changes.jsonl"
    )

    second, feed = crawl(site, stack, poller)
    scenario.check_crawl_2(site, second)
    assert feed == [] and stored_pages(stack, site) == after_first
    # Both urlsets (of 20 URLs, over the stack's HARVEST_SITEMAP_PART_MIN_URLS) were adopted whole: the second
    # job listed no URL one by one, and the pointers still name the first job's batches.
    batches_second, _ = crawl_batches(stack, site.base)
    assert batches_second[first["job_id"]] > 0 and batches_second[second["job_id"]] == 0
    adopted = adapters_of(stack).store.adopted(second["job_id"])
    assert sorted(a.part.urls for a in adopted) == [20, 20]

    mutation = scenario.Mutation()
    mutation.apply(site)
    third, feed = crawl(site, stack, poller)
    scenario.check_crawl_3(site, mutation, third, feed)
    assert len(stored_pages(stack, site) - after_first) == len(mutation.changed) + len(mutation.added)

    # The third job listed both changed urlsets URL by URL: its pointers name its batches, and the first
    # job's as the ones their records came from (``prev``: the second job adopted, it wrote none), which
    # the next listing lets go; every batch left of a job over is one a pointer names. (The records all
    # read as they should: below.)
    batches, named = crawl_batches(stack, site.base)
    assert batches[first["job_id"]] > 0 and batches[second["job_id"]] == 0
    ended = {first["job_id"], second["job_id"]}
    assert all(ref in named for ref in _batch_refs(stack, site.base) if ref.split("/")[0] in ended)

    # The crawl database is DynamoDB items of their own, which no TTL ever takes.
    crawldb = adapters_of(stack).crawldb
    records = {r.url: r for r in crawldb.site_urls(site.base)}
    assert len(records) == 42
    assert records[site.url("/pages/10.html")].state is CrawlState.ORPHAN
    assert records[site.url("/pages/20.html")].state is CrawlState.GONE
    assert records[site.url("/pages/1.html")].changes == 1
    items = boto3.client("dynamodb").scan(
        TableName=stack.outputs["StateTableName"],
        FilterExpression="begins_with(pk, :crawl)",
        ExpressionAttributeValues={":crawl": {"S": "CRAWL#"}},
    )["Items"]
    assert items and not any("expires_at" in item for item in items)
    job_items = boto3.client("dynamodb").scan(
        TableName=stack.outputs["StateTableName"],
        FilterExpression="begins_with(pk, :job)",
        ExpressionAttributeValues={":job": {"S": "JOB#"}},
    )["Items"]
    assert job_items and all("expires_at" in item for item in job_items)

    fourth, _ = crawl(site, stack, poller)
    scenario.check_crawl_4(site, mutation, fourth)


def _batch_refs(stack: Any, site: str) -> set[str]:
    """The site's listed crawl batches (``job/bid``)."""
    items = boto3.client("dynamodb").scan(
        TableName=stack.outputs["StateTableName"],
        FilterExpression="begins_with(pk, :crawl) AND begins_with(sk, :cb)",
        ExpressionAttributeValues={":crawl": {"S": f"CRAWL#{site}#"}, ":cb": {"S": "CB#"}},
    )["Items"]
    return {"/".join(i["sk"]["S"].split("#")[1:3]) for i in items}


def test_a_job_id_reused_for_another_site_goes_to_the_dead_letter_queue_with_the_reason(deployed_stack, live_site):
    stack, poller = deployed_stack
    one, other = live_site(pages=2), live_site(pages=2)
    submit_job(JobRequest(site=one.url("/"), job_id="weekly", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
    poller.drain()
    submit_job(JobRequest(site=other.url("/"), job_id="weekly", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])

    stats = poller.drain()

    assert stats.failed_invocations == 0 and stats.returned == 0  # refused, not retried
    dead = boto3.client("sqs").receive_message(
        QueueUrl=stack.queue_url("JobDeadLetterQueue"), MessageAttributeNames=["All"]
    )["Messages"]
    (reason,) = [m["MessageAttributes"]["HarvestError"]["StringValue"] for m in dead]
    assert reason.startswith(f"job id 'weekly' is already the job of site {one.url('/')}, not {other.url('/')}")
    assert other.hits == []
    assert adapters_of(stack).store.get_job("weekly").site == one.url("/")


def test_two_jobs_of_one_site_at_once_leave_the_crawl_database_exact(deployed_stack, live_site):
    stack, poller = deployed_stack
    site = scenario.build(live_site())
    crawl(site, stack, poller)
    for path in site.page_paths()[:5]:
        site.change(path)
    before = stored_pages(stack, site)
    site.reset_log()
    # A recurring job and a manual one, sent together: their sitemaps and pages interleave in the queues.
    queue = stack.outputs["JobQueueUrl"]
    jobs = [submit_job(JobRequest(site=site.url("/"), rate_limit_delay=0.0001), queue) for _ in range(2)]
    stats = poller.drain(max_rounds=3000)

    assert stats.failed_invocations == 0
    documents = adapters_of(stack).documents
    results = [json.loads(documents.get(f"jobs/{job}/result.json")) for job in jobs]
    assert all(r["status"] == "completed" and r["total_urls"] == 40 for r in results)
    records = {r.url: r for r in adapters_of(stack).crawldb.site_urls(site.base)}
    for path in site.page_paths()[:5]:
        record = records[site.url(path)]
        assert record.changes == 1, path  # one change, however many jobs saw it
        assert stored_content(documents, adapters_of(stack).warcs, record) == site.site[path].body
    assert len(stored_pages(stack, site) - before) == 5  # each new version stored (and counted) once
    # Each changed page was asked at most once per job; between them the jobs saw each change once.
    asked = [h.path for h in site.page_hits()]
    assert all(asked.count(p) <= 2 for p in site.page_paths()[:5]) and len(asked) <= 10
    assert sum(r["changes"]["changed"] for r in results) >= 5
    assert {r.last_listed_job for r in records.values()} <= set(jobs)
