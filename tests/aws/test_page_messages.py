"""Page batches on SQS: how the pages of a push are packed into messages, and messages into requests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harvester.adapters.aws.sqs import BATCH_BYTES, MESSAGE_BYTES, SqsTaskQueue, _requests, page_messages
from harvester.model.messages import PAGES_PER_MESSAGE, PageBatchTask, PageTask
from harvester.pipeline.ranking import PRIORITY_LANE
from tests.support import page_tasks_in


def pages(count: int, *, job: str = "job-1", path: str = "p", rank: float = 0.0) -> list[PageTask]:
    return [
        PageTask(job_id=job, url=f"https://example.com/{path}/{n}", sitemap="https://example.com/s.xml", rank=rank)
        for n in range(count)
    ]


def test_a_push_of_pages_is_page_batches_of_the_limit_in_order_and_a_page_alone_is_a_page_task():
    tasks = pages(240)
    bodies = list(page_messages(tasks, PAGES_PER_MESSAGE))
    assert [len(page_tasks_in(b)) for b in bodies] == [100, 100, 40]
    assert [t for b in bodies for t in page_tasks_in(b)] == tasks
    (alone,) = page_messages(tasks[:1], PAGES_PER_MESSAGE)
    assert PageTask.model_validate_json(alone) == tasks[0]


def test_a_page_batch_carries_what_each_page_says_beyond_the_defaults():
    task = PageTask(
        job_id="job-1", url="https://example.com/a", lastmod="2026-11-01T08:00:00Z", priority=0.9, attempt=2
    )
    batch = json.loads(PageBatchTask.of([task, *pages(1)]).model_dump_json())
    assert batch["pages"][0] == {
        "url": "https://example.com/a",
        "lastmod": "2026-11-01T08:00:00Z",
        "priority": 0.9,
        "attempt": 2,
    }
    with pytest.raises(ValueError, match="of one job"):
        PageBatchTask.of([*pages(1), *pages(1, job="job-2")])


def test_a_page_of_a_batch_may_not_name_another_job():
    body = {"kind": "pages", "job_id": "job-1", "pages": [{"url": "https://example.com/a", "job_id": "job-2"}]}
    tasks, invalid = PageBatchTask.model_validate(body).tasks()
    assert tasks == [] and invalid[0][1] == "a page of a batch is a page of the batch's job"


def test_long_urls_make_smaller_batches_within_a_message_and_requests_within_sqs_limits():
    tasks = [PageTask(job_id="job-1", url="https://example.com/" + "x" * 2000 + str(n)) for n in range(120)]
    bodies = list(page_messages(tasks, PAGES_PER_MESSAGE))
    assert all(len(b.encode()) <= MESSAGE_BYTES for b in bodies) and len(bodies) > 120 / PAGES_PER_MESSAGE
    assert [t for b in bodies for t in page_tasks_in(b)] == tasks
    requests = list(_requests([(b, 0) for b in bodies] * 4))
    assert all(len(r) <= 10 and sum(len(b.encode()) for b, _ in r) <= BATCH_BYTES for r in requests)
    assert sum(len(r) for r in requests) == 4 * len(bodies)


class SentBatches:
    """What a SendMessageBatch was asked to send, by queue (the packing, not SQS, is under test here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[dict[str, Any]]]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.sent.append((QueueUrl, Entries))
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def test_pages_are_packed_by_job_and_delay_and_the_priority_lanes_in_batches_of_their_own():
    client = SentBatches()
    queue = SqsTaskQueue(
        client,
        job_queue_url="jobs",
        sitemap_queue_url="sitemaps",
        page_queue_url="pages",
        page_priority_queue_url="lane",
    )
    ahead = pages(105, path="ahead", rank=PRIORITY_LANE + 0.5)
    mine, theirs = pages(30), pages(3, job="job-2", path="q")
    queue.push([*ahead, *mine, *theirs], delay_seconds=[0.0] * 105 + [0.2] * 15 + [61.0] * 15 + [0.0] * 3)
    entries = [(url, e["DelaySeconds"], page_tasks_in(e["MessageBody"])) for url, batch in client.sent for e in batch]
    assert [(url, delay, len(tasks)) for url, delay, tasks in entries] == [
        ("lane", 0, 100),  # (its own batches, of the same size: claimed, settled and archived by the batch)
        ("lane", 0, 5),
        ("pages", 1, 15),  # (SQS's delays are whole seconds, never sooner)
        ("pages", 61, 15),
        ("pages", 0, 3),
    ]
    assert {t.job_id for _, _, tasks in entries[-1:] for t in tasks} == {"job-2"}


def test_a_smaller_page_batch_size_makes_smaller_batches():
    client = SentBatches()
    queue = SqsTaskQueue(
        client, job_queue_url="jobs", sitemap_queue_url="sitemaps", page_queue_url="pages", pages_per_message=10
    )
    queue.push(pages(25))
    assert [len(page_tasks_in(e["MessageBody"])) for _, batch in client.sent for e in batch] == [10, 10, 5]
