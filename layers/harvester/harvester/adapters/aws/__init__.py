"""The AWS adapters (SQS, DynamoDB, S3) and how the Lambda handlers build them from their environment.

The only part of Harvester that imports boto3; the engine reaches AWS through these adapters alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from botocore.config import Config
from msgspec import Struct

from harvester.adapters.aws.busy import watch
from harvester.adapters.aws.crawl import DynamoCrawlDatabase
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.host_gate import DynamoHostGate
from harvester.adapters.aws.s3 import S3DocumentStore
from harvester.adapters.aws.scheduled_sites import DynamoScheduledSites
from harvester.adapters.aws.sqs import SqsTaskQueue
from harvester.adapters.aws.warc_objects import S3WarcStore
from harvester.model.messages import PAGES_PER_MESSAGE, JobEnd

# Standard retry mode tries a request that was not answered (a 5xx, no answer within the connect or read
# timeout: botocore's default read timeout, 60 s, is a page function's whole invocation) again; what a busy
# service refuses is waited out within the step's patience instead (adapters.aws.busy); the adaptive
# client-side rate limiter is not worth it here. Every request names Harvester (``app/harvester`` in its
# User-Agent, as CloudTrail shows it).
BOTO_CONFIG = Config(
    retries={"max_attempts": 8, "mode": "standard"},
    max_pool_connections=50,
    user_agent_appid="harvester",
    connect_timeout=5,
    read_timeout=20,
)


class MissingSetting(RuntimeError):
    """A handler's environment lacks a variable the template sets; the message names it."""


class AwsResources(Struct, frozen=True):
    job_queue_url: str
    sitemap_queue_url: str
    page_queue_url: str
    job_dlq_url: str | None
    sitemap_dlq_url: str | None
    page_dlq_url: str | None
    state_table: str
    document_bucket: str
    retention_days: int = 30
    #: The page tasks' priority lane (None: a stack without one, every page task to page_queue_url).
    page_priority_queue_url: str | None = None
    #: Where a job's end is sent to be written apart (the job-end function's queue; None: a stack without
    #: one, the step that ends a job writes its result).
    job_end_queue_url: str | None = None
    job_end_dlq_url: str | None = None
    #: Pages a page message carries at most (``PageBatchSize``): what a page function takes at once.
    page_batch_size: int = PAGES_PER_MESSAGE
    #: Settled records whose snapshot is their listed record's stored as that (``HARVEST_SNAPSHOT_REFS``, on
    #: unless "0": PageBatches.snapshot_refs).
    snapshot_refs: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> AwsResources:
        def need(name: str) -> str:
            value = environ.get(name)
            if not value:
                raise MissingSetting(f"environment variable {name} is not set (template.yaml sets it)")
            return value

        return cls(
            job_queue_url=need("HARVEST_JOB_QUEUE_URL"),
            sitemap_queue_url=need("HARVEST_SITEMAP_QUEUE_URL"),
            page_queue_url=need("HARVEST_PAGE_QUEUE_URL"),
            job_dlq_url=environ.get("HARVEST_JOB_DLQ_URL"),
            sitemap_dlq_url=environ.get("HARVEST_SITEMAP_DLQ_URL"),
            page_dlq_url=environ.get("HARVEST_PAGE_DLQ_URL"),
            state_table=need("HARVEST_STATE_TABLE"),
            document_bucket=need("HARVEST_DOCUMENT_BUCKET"),
            retention_days=int(environ.get("HARVEST_RETENTION_DAYS") or 30),
            page_priority_queue_url=environ.get("HARVEST_PAGE_PRIORITY_QUEUE_URL") or None,
            job_end_queue_url=environ.get("HARVEST_JOB_END_QUEUE_URL") or None,
            job_end_dlq_url=environ.get("HARVEST_JOB_END_DLQ_URL") or None,
            page_batch_size=int(environ.get("HARVEST_PAGE_BATCH_SIZE") or PAGES_PER_MESSAGE),
            snapshot_refs=environ.get("HARVEST_SNAPSHOT_REFS", "1") != "0",
        )


class AwsAdapters(Struct):
    resources: AwsResources
    sqs: Any
    store: DynamoStateStore
    queue: SqsTaskQueue
    documents: S3DocumentStore
    warcs: S3WarcStore
    crawldb: DynamoCrawlDatabase
    gate: DynamoHostGate
    scheduled_sites: DynamoScheduledSites

    def end_apart(self) -> Callable[[JobEnd], None] | None:
        """What sends a job's end to the job-end function's queue (None: a stack without one)."""
        url = self.resources.job_end_queue_url
        if url is None:
            return None

        def send(end: JobEnd) -> None:
            # (without a claim, as a function of the version before reads it: a deployment's old containers)
            self.sqs.send_message(QueueUrl=url, MessageBody=end.model_dump_json(exclude_none=True))

        return send

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, session: Any = None) -> AwsAdapters:
        resources = AwsResources.from_env(environ)
        session = session or boto3.session.Session()
        sqs = watch(session.client("sqs", config=BOTO_CONFIG))
        s3 = watch(session.client("s3", config=BOTO_CONFIG))
        dynamodb = watch(session.client("dynamodb", config=BOTO_CONFIG))
        crawldb = DynamoCrawlDatabase(dynamodb, resources.state_table)
        return cls(
            resources=resources,
            sqs=sqs,
            store=DynamoStateStore(
                dynamodb,
                resources.state_table,
                retention_days=resources.retention_days,
                pointers=crawldb.pointers,  # (a listing's lookup is remembered for its writes)
                snapshot_refs=resources.snapshot_refs,
            ),
            queue=SqsTaskQueue(
                sqs,
                job_queue_url=resources.job_queue_url,
                sitemap_queue_url=resources.sitemap_queue_url,
                page_queue_url=resources.page_queue_url,
                page_priority_queue_url=resources.page_priority_queue_url,
                pages_per_message=resources.page_batch_size,
            ),
            documents=S3DocumentStore(s3, resources.document_bucket),
            warcs=S3WarcStore(s3, resources.document_bucket),
            crawldb=crawldb,
            gate=DynamoHostGate(dynamodb, resources.state_table),
            scheduled_sites=DynamoScheduledSites(dynamodb, resources.state_table),
        )
