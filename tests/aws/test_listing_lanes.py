"""A sitemap's pages as the sitemap function sends them: each page message holds two recorded batches of one
lane (one where a window's lane has an odd one out), whole, so that a page function
claims and settles a message's pages in as few batches as they were recorded in (a settlement's fixed writes
once a message, not once for each batch a message holds part of), and a message's pages share one delivery
and archive object."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import boto3

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.page_listing import PageListing
from harvester.adapters.aws.stack import submit_job
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest, PageBatchTask, PageTask
from harvester.pipeline.ranking import PRIORITY_LANE

PAGES = 1000


def drained(queue_url: str) -> list[list[PageTask]]:
    """Every page message the queue holds, as its tasks."""
    sqs = boto3.client("sqs")
    messages: list[list[PageTask]] = []
    while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
        for message in batch:
            body = json.loads(message["Body"])
            if "pages" in body:
                tasks, _ = PageBatchTask.model_validate_json(message["Body"]).tasks()
            else:
                tasks = [PageTask.model_validate_json(message["Body"])]
            messages.append(tasks)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    return messages


def test_each_page_message_holds_two_whole_recorded_batches_of_one_lane(deployed_stack: Any) -> None:
    """A urlset of 1,000 pages whose priorities run 0.0 to 0.9 (about 40 % of its new pages rank for the
    priority lane) listed by the sitemap function, its pages not fetched yet: every page message's pages are
    two recorded batches' (one: a window's odd batch), whole, all of one lane,
    every page sent once, and the batches about as few as the lanes' pages allow (even: 59 pages are 30 and
    29, not 49 and 10)."""
    stack, poller = deployed_stack
    with LiveSite(pages=PAGES, sitemaps=1, priorities=True).serving() as site:
        job_id = submit_job(JobRequest(site=site.url("/"), rate_limit_delay=0.001), stack.outputs["JobQueueUrl"])
        poller.poll_once("JobFunction")
        while poller.poll_once("SitemapFunction"):
            pass
    lanes = {
        True: drained(stack.outputs["PagePriorityQueueUrl"]),
        False: drained(stack.outputs["PageQueueUrl"]),
    }
    urls = [t.url for messages in lanes.values() for tasks in messages for t in tasks]
    assert len(urls) == len(set(urls)) == PAGES
    assert all((t.rank > PRIORITY_LANE) is lane for lane, ms in lanes.items() for tasks in ms for t in tasks)
    assert len([t for tasks in lanes[True] for t in tasks]) > 300

    store = AwsAdapters.from_env(stack.function("SitemapFunction").environment).store
    site_key = store.jobs.site_of(job_id)
    batch_of = {url: p.of_job(job_id).bid for url, p in store.pointers.fetch(site_key, urls).items()}
    assert len(batch_of) == PAGES
    windows = -(-PAGES // PageListing.listing_window)
    for lane, messages in lanes.items():
        for tasks in messages:
            assert len({batch_of[t.url] for t in tasks}) <= 2, (lane, len(tasks))
            # (each task says where its listing stored it: the claim reads that batch, not the page's pointer)
            assert all(t.stored is not None and t.stored.split("/")[0] == batch_of[t.url] for t in tasks)
        # (a batch in one message: no batch's pages in two)
        per_batch = Counter(batch for tasks in messages for batch in {batch_of[t.url] for t in tasks})
        assert max(per_batch.values()) == 1
        # two batches a message, but for each window's odd one out
        assert len(messages) <= (len(per_batch) + windows) / 2, (lane, sorted(len(t) for t in messages))
        pages = sum(len(tasks) for tasks in messages)
        # each window's lane share in batches of PageListing.record_batch at most, as even as can be
        fewest = -(-pages // PageListing.record_batch)
        assert len(per_batch) <= fewest + windows, (lane, sorted(Counter(batch_of.values()).values()))
        assert min(len(tasks) for tasks in messages) >= 10, (lane, sorted(len(t) for t in messages))
