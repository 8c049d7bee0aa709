"""One contract, two adapters: every test here runs against the local (SQLite, folder) and the AWS
(DynamoDB, SQS, S3 — the resources template.yaml creates, in moto) implementations of the ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.local.runner import LocalHarvest
from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.ports import CrawlDatabase, DocumentStore, Message, StateStore, TaskQueue
from tests.aws.conftest import aws_credentials, deployed_stack, stack_parameters  # noqa: F401 - fixtures

MODELS: dict[str, type[Message]] = {"jobs": JobRequest, "sitemaps": SitemapTask, "pages": PageTask}


@dataclass
class Backend:
    name: str
    store: StateStore
    queue: TaskQueue
    documents: DocumentStore
    #: Takes every message waiting on a queue ("jobs", "sitemaps", "pages"), deleting it.
    take: Callable[[str], list[Message]]
    #: Counts of the queue API calls made so far (aws: SendMessage vs SendMessageBatch).
    calls: dict[str, int]
    crawldb: CrawlDatabase


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    if request.param == "local":
        with LocalHarvest.open(tmp_path / "state") as harvest:

            def take_local(queue: str) -> list[Message]:
                taken = []
                harvest.queue.visibility_timeout = 3600
                while (message := _receive_local(harvest, queue)) is not None:
                    taken.append(MODELS[queue].model_validate_json(message.body))
                    harvest.queue.delete(message)
                return taken

            yield Backend("local", harvest.store, harvest.queue, harvest.documents, take_local, {}, harvest.crawldb)
        return
    stack, _ = request.getfixturevalue("deployed_stack")
    adapters = AwsAdapters.from_env(stack.function("PageFunction").environment)
    calls: dict[str, int] = {}

    def count(event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        calls[operation] = calls.get(operation, 0) + 1

    adapters.sqs.meta.events.register("before-call.sqs.*", count)
    urls = {
        "jobs": stack.queue_url("JobQueue"),
        "sitemaps": stack.queue_url("SitemapQueue"),
        "pages": stack.queue_url("PageQueue"),
    }

    def take_sqs(queue: str) -> list[Message]:
        """The queue's messages; for pages, the priority lane's first (its own functions poll it)."""
        taken = []
        lanes = [stack.queue_url("PagePriorityQueue"), urls[queue]] if queue == "pages" else [urls[queue]]
        for url in lanes:
            while True:
                messages = adapters.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    taken.append(MODELS[queue].model_validate_json(message["Body"]))
                    adapters.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return taken

    yield Backend("aws", adapters.store, adapters.queue, adapters.documents, take_sqs, calls, adapters.crawldb)


def _receive_local(harvest: LocalHarvest, queue: str) -> Any:
    for job_id in harvest.queue.jobs_waiting(queue):
        message = harvest.queue.receive(job_id, queues=(queue,))
        if message is not None:
            return message
    return None
