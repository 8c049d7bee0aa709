"""One contract, two adapters: every test here runs against the local (SQLite, folder) and the AWS
(DynamoDB, SQS, S3 — the resources template.yaml creates, in moto) implementations of the ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.local.runner import LocalHarvest
from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.ports import CrawlDatabase, DocumentStore, Message, ScheduledSites, StateStore, TaskQueue, WarcStore
from tests.aws.conftest import _stacks, aws_credentials, deployed_stack, stack_parameters  # noqa: F401 - fixtures
from tests.support import page_tasks_in

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
    warcs: WarcStore
    #: Messages taken so far, by queue (aws: a page batch is one message for many pages).
    carried: dict[str, int] = field(default_factory=dict)
    scheduled_sites: ScheduledSites | None = None


def messages_in(queue: str, body: str) -> list[Message]:
    """What one message of ``queue`` holds: one message, or a page batch's pages (all valid here)."""
    if queue == "pages":
        return page_tasks_in(body)
    return [MODELS[queue].model_validate_json(body)]


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    """The local store and the AWS one."""
    yield from _backend(request, request.param, tmp_path)


@pytest.fixture(params=["local", "memory", "aws"])
def queues(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    """The backends, and a local run's memory queue (`harvest crawl --memory`, throwaway runs)."""
    yield from _backend(request, request.param, tmp_path)


def _backend(request: pytest.FixtureRequest, name: str, tmp_path: Any) -> Iterator[Backend]:
    if name in ("local", "memory"):
        with LocalHarvest.open(tmp_path / "state", memory_queue=name == "memory") as harvest:
            queue = harvest.queue

            def take_local(wanted: str) -> list[Message]:
                """Pops everything, keeps the messages of ``wanted`` and hands the others back."""
                popped = list(iter(queue.pop, None))
                taken = []
                for message in popped:
                    if message.queue == wanted:
                        taken.append(MODELS[wanted].model_validate_json(message.body))
                        queue.ack(message)
                    else:
                        queue.release(message, delay_seconds=0, reason="not taken")
                return taken

            yield Backend(
                name,
                harvest.store,
                queue,
                harvest.documents,
                take_local,
                {},
                harvest.crawldb,
                harvest.warcs,
                scheduled_sites=harvest.scheduled_sites,
            )
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
                    taken += messages_in(queue, message["Body"])
                    carried[queue] = carried.get(queue, 0) + 1
                    adapters.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return taken

    carried: dict[str, int] = {}
    yield Backend(
        "aws",
        adapters.store,
        adapters.queue,
        adapters.documents,
        take_sqs,
        calls,
        adapters.crawldb,
        adapters.warcs,
        carried,
        scheduled_sites=adapters.scheduled_sites,
    )
