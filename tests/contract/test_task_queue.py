"""The task queue contract: every message arrives (at least once) as sent, and fan-out is batched."""

from __future__ import annotations

from harvester.model.messages import JobRequest, PageTask, SitemapOrigin, SitemapTask
from harvester.pipeline.ranking import PRIORITY_LANE


def test_messages_reach_their_queues_intact(backend):
    job = JobRequest(site="https://example.com/", job_id="job-9", include=("*/blog/*",))
    sitemap = SitemapTask(
        job_id="job-9",
        url="https://example.com/sitemap.xml",
        origin=SitemapOrigin.DECLARED,
        depth=2,
        ancestors=("https://example.com/", "https://example.com/robots.txt"),
    )
    pages = [
        PageTask(job_id="job-9", url=f"https://example.com/p/{n}", priority=0.8, changefreq="daily") for n in range(3)
    ]

    backend.queue.send([job, sitemap, *pages])

    assert backend.take("jobs") == [job]
    assert backend.take("sitemaps") == [sitemap]
    assert sorted(backend.take("pages"), key=lambda p: p.url) == pages


def test_fan_out_sends_batches_of_ten(backend):
    pages = [PageTask(job_id="job-9", url=f"https://example.com/p/{n}") for n in range(25)]
    backend.queue.send(pages)
    assert len(backend.take("pages")) == 25
    if backend.name == "aws":
        assert backend.calls.get("SendMessageBatch") == 3
        assert "SendMessage" not in backend.calls


def test_delayed_messages_wait(backend):
    backend.queue.send([PageTask(job_id="job-9", url="https://example.com/later")], delay_seconds=60)
    assert backend.take("pages") == []


def test_sending_nothing_sends_nothing(backend):
    backend.queue.send([])
    assert backend.take("pages") == []
    assert backend.calls.get("SendMessageBatch", 0) + backend.calls.get("SendMessage", 0) == 0


def test_pages_ranked_above_the_priority_lane_come_first(backend):
    """Locally the queue serves pages by rank, highest first; SQS has no order by priority, so pages ranked
    above PRIORITY_LANE go to the priority lane's queue, which functions of its own poll."""
    ranks = [0.5, 1.9, 1.0, 1.6, 0.0, 1.5]
    backend.queue.send([PageTask(job_id="job-9", url=f"https://example.com/r/{r}", rank=r) for r in ranks])
    taken = [p.rank for p in backend.take("pages")]
    assert sorted(taken) == sorted(ranks)
    lane = [r for r in ranks if r > PRIORITY_LANE]
    assert sorted(taken[: len(lane)]) == sorted(lane)
    if backend.name == "local":
        assert taken == sorted(ranks, reverse=True)
