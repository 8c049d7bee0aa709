"""Throttled is not failed: the stack from template.yaml in moto, every function run by its own containers
side by side (tests.aws.concurrent), a 300-page site on 127.0.0.1 (three urlsets under an index, the last
gzipped, ten pages answering 404), and our own infrastructure refusing Harvester's requests before they reach
moto (tests.aws.faults): DynamoDB throttling and transaction conflicts on every kind of call, S3's SlowDown,
SQS's throttling, many calls refused more times in a row than botocore's own retries take.

Each run must end exactly as the run without refusals: every URL the site lists in the job's records once,
the counters equal to a recount, no sitemap failed, every page's attempts and every sitemap's what the site
did (one request each), each page fetched at most once more than without refusals, no message to a
dead-letter queue and none left to come back through its visibility timeout.

Time is compressed where the product waits on purpose: the back-offs of a refused request
(HARVEST_BUSY_BACKOFF_*), the delay of work given back (HARVEST_BUSY_GIVE_BACK_SECONDS), the wait before a
job's result whose writer gave up is another step's to write (HARVEST_RESULT_GRACE_SECONDS) and, where a run
needs an invocation to run out of time, that function's Timeout as its containers see it (said per run).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest
from harvester.model.records import JobCounts, JobStatus, SitemapStatus
from tests.aws.concurrent import ContainerRun, moto_over_http, run_side_by_side
from tests.aws.faults import BOTOCORE_ATTEMPTS, Call, Faults, after, at_rate, in_process
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.aws.stack import TEMPLATE_PATH, deploy_stack

#: Containers side by side within time budgets: `make test` runs these beside the others, which it nices.
pytestmark = pytest.mark.time_budget

PAGES = 300
BROKEN = 10
CONTAINERS = {
    "JobFunction": 1,
    "SitemapFunction": 2,
    "PageFunction": 3,
    "PagePriorityFunction": 1,
    "JobEndFunction": 1,
}
#: The product's waits, compressed (see the module's docstring).
COMPRESSED = {
    "HARVEST_BUSY_BACKOFF_BASE": "0.005",
    "HARVEST_BUSY_BACKOFF_MAX": "0.05",
    "HARVEST_BUSY_GIVE_BACK_SECONDS": "1",
    "HARVEST_RESULT_GRACE_SECONDS": "3",
    "HARVEST_END_APART_GRACE_SECONDS": "3",
}
#: (tests.aws.conftest's credentials, for a fixture that outlives one test)
FAKE_AWS = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}
DYNAMODB_CALLS = {"GetItem", "PutItem", "UpdateItem", "Query", "BatchGetItem", "TransactWriteItems"}


@dataclass
class Crawl:
    status: JobStatus
    counts: JobCounts
    recount: JobCounts
    result: dict[str, Any]
    records: list[dict[str, Any]]
    listed: list[str]
    broken: set[str]
    sitemaps: dict[str, tuple[SitemapStatus, int, str | None]]  # url -> (status, attempts, error)
    attempts: dict[str, int]  # page url -> attempts
    hits: Counter[str]  # page url -> requests the site saw
    dead_letters: int
    runs: list[ContainerRun]
    faults: Faults | None

    def refused(self, service: str) -> set[str]:
        assert self.faults is not None
        return {operation for (s, operation), n in self.faults.refused.items() if s == service and n}


def crawl(faults: Faults | None, *, timeouts: dict[str, int] | None = None) -> Crawl:
    site = LiveSite(pages=PAGES, sitemaps=3, gzip_last=True)
    with (
        mock_aws(),
        moto_sqs_speedups(),
        moto_dynamodb_speedups(),
        moto_over_http(faults) as endpoint,
        site.serving(),
    ):
        broken = {site.url(path) for path in site.page_paths()[:: PAGES // BROKEN]}
        for url in broken:
            site.fail(url.removeprefix(site.base), 404)
        deployed = deploy_stack(TEMPLATE_PATH, {"AllowedNetworks": "127.0.0.0/8"})
        stack = deployed.with_functions(COMPRESSED, timeouts)
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.001)
        job_id = submit_job(request, stack.outputs["JobQueueUrl"])
        adapters = AwsAdapters.from_env(stack.function("PageFunction").environment)  # (this process: no faults)
        store = adapters.store

        def done() -> bool:
            job = store.get_job(job_id)
            return job is not None and job.status.final and job.result_key is not None

        runs = run_side_by_side(stack, endpoint, CONTAINERS, until=done, timeout=240)
        sqs = boto3.client("sqs", region_name=stack.region)
        dead = 0
        for name in ("JobDeadLetterQueue", "SitemapDeadLetterQueue", "PageDeadLetterQueue", "JobEndDeadLetterQueue"):
            attributes = sqs.get_queue_attributes(QueueUrl=stack.queue_url(name), AttributeNames=["All"])["Attributes"]
            dead += int(attributes["ApproximateNumberOfMessages"]) + int(
                attributes["ApproximateNumberOfMessagesNotVisible"]
            )
        job = store.get_job(job_id)
        assert job is not None
        result = json.loads(adapters.documents.get(f"jobs/{job_id}/result.json"))
        lines = adapters.documents.get(f"jobs/{job_id}/urls.jsonl").decode().splitlines()
        hits = Counter(site.url(hit.path) for hit in site.hits if hit.page)
        return Crawl(
            status=job.status,
            counts=store.counts(job_id),
            recount=store.recount(job_id),
            result=result,
            records=[json.loads(line) for line in lines if line],
            listed=[site.url(path) for path in site.page_paths()],
            broken=broken,
            sitemaps={s.url: (s.status, s.attempts, s.error_message) for s in store.sitemaps(job_id)},
            attempts={page.url: page.attempts for page in store.pages(job_id)},
            hits=hits,
            dead_letters=dead,
            runs=runs,
            faults=faults,
        )


def assert_exact(crawl: Crawl, baseline: Crawl) -> None:
    """Ends as the run without refusals does."""
    assert crawl.status is JobStatus.COMPLETED
    assert crawl.recount == crawl.counts
    result = crawl.result
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (
        PAGES,
        PAGES - BROKEN,
        BROKEN,
    )
    urls = [record["url"] for record in crawl.records]
    assert sorted(urls) == sorted(crawl.listed)  # every URL the site lists, each once
    failed = {record["url"] for record in crawl.records if record["status"] == "failed"}
    assert failed == crawl.broken
    assert not [s for s in crawl.sitemaps.values() if s[0] in (SitemapStatus.FAILED, SitemapStatus.INVALID)]
    assert {url: n for url, n in crawl.attempts.items() if n != 1} == {}  # what the site did: one request each
    read = {url: a for url, (status, a, _) in crawl.sitemaps.items() if status is SitemapStatus.COMPLETED}
    assert set(read.values()) == {1}, read
    assert set(crawl.hits) == set(crawl.listed)
    again = {url: n for url, n in crawl.hits.items() if n > baseline.hits[url] + 1}
    assert again == {}, again
    assert crawl.dead_letters == 0
    assert sum(run.returned for run in crawl.runs) == 0


@pytest.fixture(scope="module")
def baseline() -> Crawl:
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_AWS.items():
            env.setenv(name, value)
        crawl_ = crawl(None)
    assert crawl_.status is JobStatus.COMPLETED and set(crawl_.hits.values()) == {1}
    return crawl_


def test_without_refusals_the_crawl_is_exact(baseline: Crawl) -> None:
    assert_exact(baseline, baseline)


def test_refusals_throughout_at_a_high_rate_cost_nothing(baseline: Crawl) -> None:
    faults = Faults(at_rate(seed=1))
    throttled = crawl(faults)
    assert_exact(throttled, baseline)
    assert throttled.refused("dynamodb") >= DYNAMODB_CALLS, throttled.faults.refused
    assert throttled.refused("s3") and "SendMessageBatch" in throttled.refused("sqs")
    assert faults.over_botocore(), faults.longest
    assert sum(faults.refused.values()) > 1000, faults.refused


_PROCESSING = re.compile(r'":status":\s*\{"S":\s*"processing"\}')


def _listing(call: Call) -> bool:
    """A sitemap's listing being written (a batch of its pages with its checkpoint)."""
    return call.operation == "TransactWriteItems" and '"BATCH#' in call.text and bool(_PROCESSING.search(call.text))


class StormOnASitemap:
    """From a sitemap's first listing on: ``then``'s refusals, and every write of that sitemap's record refused
    until its reading is given back (the write that sets it pending again)."""

    PENDING = re.compile(r'":status":\s*\{"S":\s*"pending"\}')
    KEY = re.compile(r'"(SITEMAP#[^"]+)"')

    def __init__(self, then: Callable[[Call, int], bool]) -> None:
        self.then = then
        self.key: str | None = None
        self.refused = 0
        self.over = False

    def __call__(self, call: Call, tries: int) -> bool:
        if self.key is None:
            if _listing(call):
                self.key = self.KEY.search(call.text).group(1)  # type: ignore[union-attr]
            return False
        if not self.over and self.key in call.text and call.operation != "GetItem":
            if self.PENDING.search(call.text):
                self.over = True  # (its reading given back: the storm is over)
                return False
            self.refused += 1
            return True
        return self.then(call, tries)


def test_a_sitemap_being_read_when_the_throttling_starts_is_given_back_not_failed(baseline: Crawl) -> None:
    """The storm on the sitemap's record outlasts its reading's patience (SitemapFunction's Timeout as its
    containers see it: 12 s): the reading is given back, with its checkpoint and attempts as they were, and
    read again to the end."""
    storm = StormOnASitemap(at_rate(seed=2))
    faults = Faults(storm)
    throttled = crawl(faults, timeouts={"SitemapFunction": 12})
    assert_exact(throttled, baseline)
    assert storm.over and storm.refused > BOTOCORE_ATTEMPTS, (storm.key, storm.refused)
    assert faults.over_botocore()
    given_back = [url for url, (_, _, error) in throttled.sitemaps.items() if error and "busy" in error]
    assert given_back == [], given_back  # (the error of the given-back reading is gone with its end)


def _job_end(call: Call) -> bool:
    """The job's counters and record read as one (only when the counters say the job is done)."""
    return call.operation == "TransactGetItems"


def test_throttling_at_the_jobs_end_costs_nothing(baseline: Crawl) -> None:
    """From the first look at whether the job is done, every call of Harvester's is refused more times in a
    row than botocore's retries take: the end, the orphan pass, the records, the index and the result."""
    faults = Faults(after(_job_end, at_rate(seed=3, plan=((1.0, BOTOCORE_ATTEMPTS + 1, BOTOCORE_ATTEMPTS + 4),))))
    throttled = crawl(faults)
    assert_exact(throttled, baseline)
    assert faults.over_botocore()
    assert ("s3", "PUT") in faults.refused and ("dynamodb", "TransactGetItems") in faults.refused


def test_a_message_whose_step_stays_busy_comes_back_reported_not_raised(deployed_stack: Any) -> None:
    """A job request whose every DynamoDB call is refused past its invocation's time (JobFunction's Timeout
    as the poller sees it: 4 s): the invocation does not fail, it reports the record for its queue to
    deliver again; nothing is dead-lettered."""
    deployed, _ = deployed_stack
    stack = deployed.with_functions(COMPRESSED, {"JobFunction": 4})
    poller = LambdaPoller(stack)
    submit_job(JobRequest(site="https://example.com/"), stack.outputs["JobQueueUrl"])
    try:
        with in_process(Faults(lambda call, tries: call.service == "dynamodb")) as faults:
            assert poller.poll_once("JobFunction") == 1
    finally:
        poller.close()
    invocation = poller.invocations[-1]
    assert invocation.error is None and invocation.invalid_response is None, invocation.traceback
    assert invocation.returned_ids == invocation.message_ids and faults.refused
    assert poller.queue_depth("JobQueue").in_flight == 1
