"""The task queue contract: every message arrives (at least once) as sent, and fan-out is batched."""

from __future__ import annotations

from harvester.model.messages import JobRequest, PageTask, SitemapOrigin, SitemapTask


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
