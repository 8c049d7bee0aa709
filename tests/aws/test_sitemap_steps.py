"""A sitemap read in steps on AWS: template.yaml's SitemapFunction bounds a reading (``HARVEST_SITEMAP_STEP_URLS``,
here lowered so that a small urlset takes several), each invocation recording its share of the URLs and
sending the sitemap's task again; the first step keeps the document (S3) and the later ones replay it. The job
lists every URL once, its counts exact, the reading one attempt and one download."""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from botocore.client import BaseClient

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest
from harvester.model.records import SitemapStatus
from harvester.pipeline.sitemap_step import step_document
from tests.aws.deployed import DeployedStack

PAGES = 560
STEP = 200
BATCH = 49  # (a listed batch on AWS: page_listing.PageListing.record_batch; a window of one here)


def adapters_of(stack: DeployedStack) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("SitemapFunction").environment)


def lower_steps(stack: DeployedStack) -> None:
    """Every function's step lowered, and the listing's window to one batch (its default is four: a step
    ends after the window that reaches its URLs, and the steps here count in batches) (the template gives
    them one environment: a container the harness plays builds its engine once for all of them)."""
    for function in stack.sqs_functions:
        function.environment.update(HARVEST_SITEMAP_STEP_URLS=str(STEP), HARVEST_RECORD_BATCH=str(BATCH))


@contextmanager
def counted_requests() -> Iterator[list[str]]:
    """Every AWS request made (any thread), by operation name."""
    original = BaseClient._make_api_call
    made: list[str] = []
    lock = threading.Lock()

    def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        with lock:
            made.append(operation)
        return original(client, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", call):
        yield made


def run_counting(poller: Any, made: list[str]) -> list[int]:
    """Polls the job's functions until their queues are empty; the requests each SitemapFunction invocation
    made."""
    per_invocation: list[int] = []
    for _ in range(500):
        moved = 0
        for function in ("JobFunction", "SitemapFunction", "JobEndFunction"):
            before = len(made)
            received = poller.poll_once(function)
            if function == "SitemapFunction" and received:
                per_invocation.append(len(made) - before)
            moved += received
        if not moved and not poller.release_delayed():
            return per_invocation
    raise AssertionError("the job's queues never emptied")


@pytest.fixture
def site() -> Iterator[LiveSite]:
    with LiveSite(pages=PAGES, sitemaps=1, gzip_last=True).serving() as served:
        yield served


def test_a_sitemap_read_in_steps_lists_every_url_once(deployed_stack, site, monkeypatch, caplog):
    """The site rewrites the sitemap once its first step has kept it (an entry gone, one added): the later
    steps read the version the first downloaded, so nothing starts over and no step lists more than its
    share."""
    stack, poller = deployed_stack
    lower_steps(stack)
    urlset = site.sitemap_urls[1]
    first = sorted(site.url(path) for path in site.page_paths())
    kept = step_document.downloaded

    async def kept_then_rewritten(*args: Any, **kwargs: Any) -> Any:
        note = await kept(*args, **kwargs)
        site.unlist(site.page_paths()[0])
        site.add("/pages/added.html")
        return note

    monkeypatch.setattr(step_document, "downloaded", kept_then_rewritten)
    job_id = submit_job(JobRequest(site=site.url("/"), fetch_pages=False), stack.outputs["JobQueueUrl"])
    with counted_requests() as made, caplog.at_level(logging.INFO):
        per_invocation = run_counting(poller, made)
    readings = [hit for hit in site.hits if site.url(hit.path) == urlset]
    steps = -(-STEP // BATCH) * BATCH  # (a step ends after the batch that reaches its URLs)
    paused = [r for r in caplog.records if r.getMessage().startswith("sitemap read in steps")]
    assert len(paused) + 1 == -(-PAGES // steps) == 3 and len(readings) == 1  # (one download, three steps)
    # Each invocation's requests are bounded by its step (a pointer a URL, a batch's few writes), not by the
    # sitemap: the largest is far below one listing the whole urlset (more than one request a URL).
    assert max(per_invocation) < 1.3 * steps < PAGES

    adapters = adapters_of(stack)
    record = adapters.store.get_sitemap(job_id, urlset)
    assert record is not None and record.status is SitemapStatus.COMPLETED
    assert record.attempts == 1 and record.error_message is None and not record.restarted
    assert (record.pages_recorded, record.pages_new) == (PAGES, PAGES)
    job = adapters.store.get_job(job_id)
    assert job is not None and job.status.final and job.result_key is not None
    result = json.loads(adapters.documents.get(job.result_key))
    assert result["total_urls"] == PAGES
    lines = adapters.documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()
    urls = [json.loads(line)["url"] for line in lines]
    assert sorted(urls) == first and len(urls) == PAGES


def test_a_changed_sitemap_compared_with_its_part_is_read_in_steps_too(deployed_stack, site):
    """A re-crawl whose sitemap changed in two entries of three: the reading compares each entry with the
    sitemap's part, lists the changed ones in steps (more than a step's worth of changed elements: compared
    entry by entry), each delivery comparing the entries before its checkpoint again, and adopts the part
    for the others once the last step has read the sitemap whole."""
    stack, poller = deployed_stack
    lower_steps(stack)
    request = JobRequest(site=site.url("/"), fetch_pages=False)
    submit_job(request, stack.outputs["JobQueueUrl"])
    poller.drain()
    changed = [path for n, path in enumerate(site.page_paths()) if n % 3]
    for path in changed:
        site.change(path)
    site.reset_log()
    job_id = submit_job(request, stack.outputs["JobQueueUrl"])
    with counted_requests() as made:
        per_invocation = run_counting(poller, made)
    urlset = site.sitemap_urls[1]
    steps = -(-STEP // BATCH) * BATCH
    assert len([hit for hit in site.hits if site.url(hit.path) == urlset]) == 1  # (one download, two steps)
    assert -(-len(changed) // steps) == 2
    assert max(per_invocation) < 1.3 * steps < len(changed)

    adapters = adapters_of(stack)
    record = adapters.store.get_sitemap(job_id, urlset)
    assert record is not None and record.status is SitemapStatus.COMPLETED and not record.restarted
    assert record.attempts == 1 and record.adopted is not None  # (the unchanged third: adopted in part)
    assert record.pages_new == PAGES
    job = adapters.store.get_job(job_id)
    assert job is not None and job.result_key is not None
    result = json.loads(adapters.documents.get(job.result_key))
    assert result["total_urls"] == PAGES and result["changes"]["listed"] == PAGES
    lines = adapters.documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()
    urls = [json.loads(line)["url"] for line in lines]
    assert sorted(urls) == sorted(site.url(path) for path in site.page_paths()) and len(urls) == PAGES


def test_a_refused_adoption_in_part_then_a_step_counts_no_kept_url_twice(deployed_stack, site, monkeypatch):
    """A comparing reading in steps whose adoption in part is refused once (as when the part's epoch moved
    between its check and the adoption's transaction) starts over; the listing that starts over records
    entries the comparison kept, so it must not stop before it has passed the checkpoint the comparing
    listing stored in the same delivery, and a later delivery must not compare again: an adoption then
    would take those URLs a second time (the DynamoDB store does not check the job's keys)."""
    stack, poller = deployed_stack
    lower_steps(stack)
    request = JobRequest(site=site.url("/"), fetch_pages=False)
    submit_job(request, stack.outputs["JobQueueUrl"])
    poller.drain()
    paths = site.page_paths()
    for n, path in enumerate(paths):  # (two entries in three changed, and the last)
        if n % 3 or n == len(paths) - 1:
            site.change(path)
    original = DynamoStateStore.adopt_part
    refused: list[bool] = []

    def once_refused(self: DynamoStateStore, *args: Any, **kwargs: Any) -> bool:
        if kwargs.get("checkpoint") is not None and not refused:
            refused.append(True)
            return False
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DynamoStateStore, "adopt_part", once_refused)
    job_id = submit_job(request, stack.outputs["JobQueueUrl"])
    with counted_requests() as made:
        run_counting(poller, made)
    assert refused
    adapters = adapters_of(stack)
    job = adapters.store.get_job(job_id)
    assert job is not None and job.result_key is not None
    result = json.loads(adapters.documents.get(job.result_key))
    urls = [json.loads(line)["url"] for line in adapters.documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()]
    assert [url for url, n in Counter(urls).items() if n > 1] == []
    assert result["total_urls"] == len(urls) == PAGES
