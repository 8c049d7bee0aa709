"""`harvest submit`, `harvest status`, `harvest get --stack`, `harvest export --stack` and `harvest schedule
--stack` against a deployed stack, found through its CloudFormation Outputs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from harvester.adapters.aws.busy import watch
from harvester.adapters.aws.crawl import DynamoCrawlDatabase
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.s3 import S3DocumentStore
from harvester.adapters.aws.scheduled_sites import DynamoScheduledSites
from harvester.adapters.aws.warc_objects import S3WarcStore
from harvester.model.messages import JobRequest
from harvester.model.records import BulkProcessingJob
from harvester.patience import Busy


class StackError(RuntimeError):
    """The stack or its resources cannot be reached; the message names them and why."""


def _session(region: str | None) -> Any:
    return boto3.session.Session(region_name=region) if region else boto3.session.Session()


def stack_outputs(stack: str, *, region: str | None = None, session: Any = None) -> dict[str, str]:
    session = session or _session(region)
    try:
        response = session.client("cloudformation").describe_stacks(StackName=stack)
    except (ClientError, BotoCoreError, Busy) as exc:
        raise StackError(f"stack {stack!r}: {exc}") from None
    outputs = response["Stacks"][0].get("Outputs", [])
    return {o["OutputKey"]: o["OutputValue"] for o in outputs}


def _output(outputs: dict[str, str], name: str, stack: str) -> str:
    if name not in outputs:
        raise StackError(f"stack {stack!r} has no output {name} (is it a Harvester stack?)")
    return outputs[name]


def job_queue_url(stack: str, *, region: str | None = None) -> str:
    return _output(stack_outputs(stack, region=region), "JobQueueUrl", stack)


def submit_job(request: JobRequest, queue_url: str, *, region: str | None = None, session: Any = None) -> str:
    """Sends the job request and returns its job id (generated here when not given, so it can be followed)."""
    job_id = request.job_id or f"job-{uuid.uuid4().hex[:20]}"
    body = request.validated().model_copy(update={"job_id": job_id}).model_dump_json(exclude_none=True)
    session = session or _session(region)
    try:
        session.client("sqs").send_message(QueueUrl=queue_url, MessageBody=body)
    except (ClientError, BotoCoreError) as exc:
        raise StackError(f"queue {queue_url}: {exc}") from None
    return job_id


@dataclass(frozen=True)
class StackStores:
    """A deployed stack's crawl database, WARC files, documents and job records (`harvest get`, `export`)."""

    crawldb: DynamoCrawlDatabase
    warcs: S3WarcStore
    documents: S3DocumentStore
    store: DynamoStateStore


def stack_stores(stack: str, *, region: str | None = None, session: Any = None) -> StackStores:
    session = session or _session(region)
    outputs = stack_outputs(stack, region=region, session=session)
    table, bucket = _output(outputs, "StateTableName", stack), _output(outputs, "DocumentBucketName", stack)
    s3, dynamodb = watch(session.client("s3")), watch(session.client("dynamodb"))
    return StackStores(
        crawldb=DynamoCrawlDatabase(dynamodb, table),
        warcs=S3WarcStore(s3, bucket),
        documents=S3DocumentStore(s3, bucket),
        store=DynamoStateStore(dynamodb, table),
    )


@contextmanager
def reading_stack(stack: str, *, region: str | None = None) -> Iterator[StackStores]:
    """The stack's stores, for reading; an AWS error while they are read is a StackError naming the stack."""
    try:
        yield stack_stores(stack, region=region)
    except (ClientError, BotoCoreError, Busy) as exc:
        raise StackError(f"stack {stack!r}: {exc}") from None


@contextmanager
def stack_scheduled_sites(stack: str, *, region: str | None = None) -> Iterator[DynamoScheduledSites]:
    """The stack's registry of scheduled sites; an AWS error while it is used is a StackError naming the stack."""
    try:
        session = _session(region)
        table = _output(stack_outputs(stack, region=region, session=session), "StateTableName", stack)
        yield DynamoScheduledSites(watch(session.client("dynamodb")), table)
    except (ClientError, BotoCoreError, Busy) as exc:
        raise StackError(f"stack {stack!r}: {exc}") from None


def job_status(job_id: str, stack: str, *, region: str | None = None, session: Any = None) -> dict[str, Any]:
    """The job as BulkProcessingJob JSON, with where its result lands."""
    stores = stack_stores(stack, region=region, session=session)
    store, documents = stores.store, stores.documents
    try:
        snapshot = store.snapshot(job_id)
    except (ClientError, BotoCoreError, Busy) as exc:
        raise StackError(f"table {store.table}: {exc}") from None
    if snapshot is None:
        raise StackError(f"no job {job_id!r} in stack {stack!r}")
    location = documents.location(snapshot.job.result_key) if snapshot.job.result_key else None
    view = BulkProcessingJob.of(
        snapshot.job, snapshot.counts, last_update=snapshot.last_update, result_location=location
    )
    return view.model_dump(mode="json")
