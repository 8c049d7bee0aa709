"""Exact accounting on AWS under faults: a container dies right after any one of the DynamoDB writes a job
makes to its pages (pointers, a listing's transaction, a claim, a settlement...), its message comes back when
its visibility lapses, and the job must still end with every URL counted once, and the crawl database with
every URL's fetched record.

Why: a listing is written in two steps (the pointers, then the batch) and a batch's pages share items;
tests/engine/test_faults.py does this for the local backend only."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from unittest import mock

import pytest
from botocore.client import BaseClient

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest
from harvester.model.records import JobStatus
from tests.aws.conftest import TEST_PARAMETERS, fake_credentials, moto_kept, stack_as_deployed
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller

PAGES = 4
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


class Killed(BaseException):
    """The container died: nothing in Harvester, Powertools or the poller catches this."""


def _of_batches(params: dict[str, Any]) -> bool:
    """A write of the pages' items (a pointer, a batch's records, states or outcomes, a crawl batch)."""
    text = json.dumps(params, default=str)
    return any(kind in text for kind in ('"BATCH#', '"URL#', '"CB#'))


@contextmanager
def dies_after(n: int | None) -> Iterator[list[str]]:
    """Raises Killed right after the ``n``-th write of the pages' items that landed (None: never); yields
    those writes. (The job's other writes, its sitemaps' among them: tests/engine/test_faults.py kills after
    each of them on the local backend.)"""
    original = BaseClient._make_api_call
    landed: list[str] = []

    def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        result = original(client, operation, params)
        if client.meta.service_model.service_name == "dynamodb" and operation in WRITES and _of_batches(params):
            landed.append(operation)
            if len(landed) == n:
                raise Killed(f"after write {n} ({operation})")
        return result

    with mock.patch.object(BaseClient, "_make_api_call", call):
        yield landed


@contextmanager
def dies_before_warc_index(n: int | None) -> Iterator[list[str]]:
    """Raises Killed when the ``n``-th WARC object's CDXJ index is about to be PUT, its object stored already
    (None: never); yields the indexes' keys."""
    original = BaseClient._make_api_call
    asked: list[str] = []

    def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        if operation == "PutObject" and str(params.get("Key", "")).endswith(".warc.gz.cdxj"):
            asked.append(params["Key"])
            if len(asked) == n:
                raise Killed(f"before the index of WARC object {n}")
        return original(client, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", call):
        yield asked


def adapters_of(stack: Any) -> AwsAdapters:
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


def run(
    stack_anew: Callable[[], Any], n: int | None, dying: Any = dies_after
) -> tuple[dict[str, Any], list[str], bool]:
    """A crawl of a 4-page site, on the stack as a new deployment has it (``stack_anew``), whose container dies
    after the ``n``-th write (``dying``: of which kind): the job's result, the writes made, and whether a
    container died."""
    with moto_sqs_speedups(), moto_dynamodb_speedups(), LiveSite(pages=PAGES, sitemaps=1).serving() as site:
        stack = stack_anew()
        poller = LambdaPoller(stack)
        died = False
        try:
            job_id = submit_job(JobRequest(site=site.url("/"), rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
            with dying(n) as landed:
                for _ in range(20):
                    try:
                        poller.drain(max_rounds=3000)
                        break
                    except Killed:
                        died = True
                        # The container is gone: its handler modules, engine and caches with it; its message
                        # stays in flight until its visibility lapses (the next drain expires it), and by then
                        # its leases have lapsed too.
                        poller.close()
                        with dies_after(None):
                            adapters_of(stack).store.release_leases(job_id)
            adapters = adapters_of(stack)
            store = adapters.store
            job = store.get_job(job_id)
            counts, recount = store.counts(job_id), store.recount(job_id)
            result = json.loads(adapters.documents.get(f"jobs/{job_id}/result.json"))
            outcome = {
                "status": job.status if job else None,
                "counts": counts,
                "recount": recount,
                "result": result,
                "crawled": {r.url: r.http_status for r in adapters.crawldb.site_urls(site.url("/").rstrip("/"))},
                "named": {
                    r.warc.filename for r in adapters.crawldb.site_urls(site.url("/").rstrip("/")) if r.warc is not None
                },
                "pages": [site.url(path) for path in site.page_paths()],
                "warc": [
                    item["Key"]
                    for item in adapters.warcs.client.list_objects_v2(
                        Bucket=adapters.warcs.bucket, Prefix=f"warc/{job_id}/"
                    ).get("Contents", [])
                ],
            }
        finally:
            poller.close()
    return outcome, landed, died


@contextmanager
def watched(_: None) -> Iterator[tuple[list[str], list[str]]]:
    """Both the writes of the pages' items and the WARC indexes asked for, with no container dying."""
    with dies_after(None) as landed, dies_before_warc_index(None) as asked:
        yield landed, asked


class Uninterrupted(NamedTuple):
    outcome: dict[str, Any]
    #: The writes of the pages' items, in order (``dies_after``).
    writes: list[str]
    #: The WARC objects' indexes, in the order they were put (``dies_before_warc_index``).
    indexes: list[str]
    died: bool


@pytest.fixture(scope="module")
def uninterrupted(_stacks: Any) -> Uninterrupted:
    """The crawl no container dies in: what each test kills after each write of in turn."""
    with pytest.MonkeyPatch.context() as monkeypatch, moto_kept():
        fake_credentials(monkeypatch)  # (a module's fixture is made before the tests' own ``aws_credentials``)
        outcome, (writes, indexes), died = run(lambda: stack_as_deployed(_stacks, TEST_PARAMETERS), None, watched)
    return Uninterrupted(outcome, writes, indexes, died)


def test_an_uninterrupted_crawl_is_the_baseline(uninterrupted: Uninterrupted) -> None:
    outcome, landed, _, died = uninterrupted
    assert not died
    assert outcome["status"] is JobStatus.COMPLETED
    assert (outcome["counts"].urls_total, outcome["counts"].urls_succeeded) == (PAGES, PAGES)
    assert outcome["recount"] == outcome["counts"]
    # (the pointers; then the listing, a claim, a settlement)
    assert landed.count("UpdateItem") >= PAGES
    assert len(landed) >= PAGES + 3
    assert outcome["crawled"] == dict.fromkeys(outcome["pages"], 200)


def test_a_container_killed_after_any_write_leaves_the_job_exact(
    uninterrupted: Uninterrupted, stacks_as_deployed: Callable[[], Any]
) -> None:
    writes = uninterrupted.writes
    for n in range(1, len(writes) + 1):
        outcome, _, died = run(stacks_as_deployed, n)
        assert died, n
        counts = outcome["counts"]
        assert outcome["status"] is JobStatus.COMPLETED, (n, writes[n - 1])
        assert (counts.urls_total, counts.urls_succeeded, counts.urls_failed) == (PAGES, PAGES, 0), (n, writes[n - 1])
        assert outcome["recount"] == counts, (n, writes[n - 1])
        assert outcome["result"]["total_urls"] == PAGES, (n, writes[n - 1])
        assert outcome["crawled"] == dict.fromkeys(outcome["pages"], 200), (n, writes[n - 1])


def test_a_container_killed_between_any_warc_object_and_its_index_leaves_no_object_unindexed(
    uninterrupted: Uninterrupted, stacks_as_deployed: Callable[[], Any]
) -> None:
    """Killed before each index's PUT in turn (the WARC objects of the sitemaps and of the page batch): the
    job ends exact, and its end deletes the object the dead writer left without its index (no URL record
    names it: its pages were fetched again into an object of their own), so every object is findable by its
    index and every page's record names an indexed one."""
    indexes = uninterrupted.indexes
    assert len(indexes) >= 2  # (a sitemap's object, the page batch's)
    for n in range(1, len(indexes) + 1):
        outcome, asked, died = run(stacks_as_deployed, n, dying=dies_before_warc_index)
        assert died and len(asked) >= n, n
        assert outcome["status"] is JobStatus.COMPLETED and outcome["recount"] == outcome["counts"], n
        assert outcome["crawled"] == dict.fromkeys(outcome["pages"], 200), n
        warcs = {key for key in outcome["warc"] if key.endswith(".warc.gz")}
        assert asked[n - 1].removesuffix(".cdxj") not in warcs, n  # (the dead writer's object: deleted)
        assert {key for key in warcs if key + ".cdxj" not in outcome["warc"]} == set(), n
        assert outcome["named"] and outcome["named"] <= warcs, n
