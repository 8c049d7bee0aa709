"""The page functions fit in the memory template.yaml gives them, with the largest pages a batch may hold.

Why: Lambda stops an invocation that grows past its function's MemorySize, and the page functions' is set
as low as a batch's work allows (a page function mostly waits for its host's turns, and Lambda bills that
wait by the memory). A batch's pages are fetched side by side; each body is spooled to /tmp past 1 MiB
and each capture is compressed into a buffer of its own before it joins the batch's spooled WARC chunk, so
what a container holds is bounded by the pages in flight, not by the batch. This runs a page container as
Lambda would (its own process, tests/aws/concurrent.py) over a batch of the worst pages for that: bodies
just under the spool's 1 MiB, held whole in memory, and bodies of several MiB that do not compress,
several in flight at once; its peak resident memory must stay within three quarters of the function's
MemorySize (the rest: what Lambda's runtime holds beyond this process's, and pages larger than these).
"""

from __future__ import annotations

import base64
import random

import boto3
import pytest
from moto import mock_aws

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import LiveSite
from harvester.limits import SPOOL_IN_MEMORY, MiB
from harvester.model.messages import JobRequest
from tests.aws.concurrent import moto_over_http, run_side_by_side
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.stack import TEMPLATE_PATH, deploy_stack

pytestmark = pytest.mark.time_budget

#: One page message (PageBatchSize's default: two recorded batches): pages just under the spool's limit, and
#: some that spill.
NEAR_SPOOL, LARGE = 88, 12
LARGE_BYTES = 6 * MiB
CONTAINERS = {
    "JobFunction": 1,
    "SitemapFunction": 1,
    "PageFunction": 1,
    "PagePriorityFunction": 1,
    "JobEndFunction": 1,
}


def _body(n: int, size: int) -> bytes:
    """An HTML page of ``size`` bytes whose text does not compress much (random bytes as base64)."""
    head = f"<!doctype html><html><head><title>page {n}</title></head><body><p>".encode()
    text = base64.b64encode(random.Random(n).randbytes(size * 3 // 4))[: size - len(head) - 20]
    return head + text + b"</p></body></html>\n"


def test_a_page_container_stays_within_three_quarters_of_its_memory_over_a_batch_of_large_pages() -> None:
    site = LiveSite(pages=NEAR_SPOOL + LARGE, sitemaps=1)
    with (
        mock_aws(),
        moto_sqs_speedups(),
        moto_dynamodb_speedups(),
        moto_over_http() as endpoint,
        site.serving(),
    ):
        for n, path in enumerate(site.page_paths()):  # (serving renders the pages: their bodies are set after)
            site.site[path].body = _body(n, LARGE_BYTES if n < LARGE else SPOOL_IN_MEMORY - 4096)
        deployed = deploy_stack(TEMPLATE_PATH, {"AllowedNetworks": "127.0.0.0/8"})
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.001)
        job_id = submit_job(request, deployed.outputs["JobQueueUrl"])
        store = AwsAdapters.from_env(deployed.function("PageFunction").environment).store

        def done() -> bool:
            job = store.get_job(job_id)
            return job is not None and job.status.final and job.result_key is not None

        runs = run_side_by_side(deployed, endpoint, CONTAINERS, until=done, timeout=180)
        counts = store.counts(job_id)
        bucket = deployed.function("PageFunction").environment["HARVEST_DOCUMENT_BUCKET"]
        listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="warc/")
        archived = sum(o["Size"] for o in listed.get("Contents", []))
    assert counts.urls_succeeded == NEAR_SPOOL + LARGE, counts  # (every page fetched: the batch was really held)
    assert archived > (LARGE * LARGE_BYTES + NEAR_SPOOL * SPOOL_IN_MEMORY) // 2  # (the large bodies were served)
    for function in ("PageFunction", "PagePriorityFunction"):
        memory = deployed.function(function).memory_size
        peaks = [r.peak_mib for r in runs if r.function == function]
        if function == "PageFunction":
            assert peaks, "no page batch reached the page function"
            # (what bench/aws_concurrent.py reads of each invocation too: its waits for AWS, within its time)
            assert all(0 < r.aws_wait <= r.duration for r in runs if r.function == function)
        assert max(peaks, default=0.0) <= 0.75 * memory, (function, max(peaks), memory)
