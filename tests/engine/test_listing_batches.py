"""How a sitemap reading cuts its pages into recorded batches: full batches while it reads, and its remainder
taken along by its last write rather than recorded alone (each batch costs its fetches a claim, a settlement
and an archive object: on AWS, a batch of one page costs as many requests as a batch of fifty)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest
from harvester.demo.live import LiveSite
from harvester.fetch import Fetcher, FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, PageTask, SitemapOrigin, SitemapTask
from harvester.model.records import SitemapRecord, SitemapStatus
from harvester.patience import Busy
from harvester.settings import EngineSettings

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))
BATCH = 49


class CountingStore:
    """The state store, with the size of each ``record_pages`` call noted."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.sizes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record_pages(self, job_id: str, sitemap_url: str, pages: Any, **kw: Any) -> Any:
        self.sizes.append(len(pages))
        return self._inner.record_pages(job_id, sitemap_url, pages, **kw)


@pytest.mark.parametrize(
    ("pages", "sizes"),
    [
        (30, [30]),
        (BATCH + 1, [BATCH + 1]),  # (not a batch and a page alone)
        (2 * BATCH - 1, [2 * BATCH - 1]),
        (2 * BATCH, [BATCH, BATCH]),
        (2 * BATCH + 2, [BATCH, BATCH + 2]),
        (4 * BATCH + 3, [BATCH, BATCH, BATCH, BATCH + 3]),
    ],
)
def test_a_reading_records_full_batches_and_its_remainder_with_the_last(site_factory, tmp_path, pages, sizes):
    site = site_factory(pages=pages, broken=0, sitemaps=1, gzip_last=False)
    urlset = site.sitemap_urls[1]
    request = JobRequest(site=f"{site.base_url}/", sitemaps=(urlset,), fetch_pages=False)
    task = SitemapTask(job_id="j", url=urlset, origin=SitemapOrigin.REQUESTED, depth=1)

    async def scenario() -> None:
        with LocalHarvest.open(tmp_path / "s") as harvest:
            async with Fetcher(POLICY) as fetcher:
                engine = harvest.engine(fetcher, EngineSettings(record_batch=BATCH))
                counting = CountingStore(harvest.store)
                engine.store = counting  # type: ignore[assignment]
                engine.start_job(request, job_id="j")
                done = await engine.process_sitemap(task)
                assert done is not None and done.status is SitemapStatus.COMPLETED
                assert counting.sizes == sizes
                counts = harvest.store.snapshot("j").counts
                assert counts == harvest.store.recount("j")
                assert counts.urls_total == pages

    asyncio.run(scenario())


class SendingQueue:
    """The task queue, with the page tasks of each push noted."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.pushes: list[list[PageTask]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def push(self, messages: Any, *, delay_seconds: Any = 0) -> None:
        self.pushes.append([m for m in messages if isinstance(m, PageTask)])
        self._inner.push(messages, delay_seconds=delay_seconds)


class FlakyStore(CountingStore):
    """Refuses the ``fail_at``-th ``record_pages`` call once, as a store too busy to answer would."""

    def __init__(self, inner: Any, fail_at: int) -> None:
        super().__init__(inner)
        self.fail_at = fail_at

    def record_pages(self, job_id: str, sitemap_url: str, pages: Any, **kw: Any) -> Any:
        if len(self.sizes) + 1 == self.fail_at:
            self.fail_at = 0
            self.sizes.append(-1)
            raise Busy("state store", "record_pages", "refused by the test")
        return super().record_pages(job_id, sitemap_url, pages, **kw)


def _listed_by_lanes(tmp_path: Any, *, fail_at: int = 0) -> tuple[SendingQueue, list[str], SitemapRecord]:
    """A urlset of 1,000 pages whose priorities run 0.0 to 0.9 (40 % of its new pages take the priority lane)
    read by deliveries of its task until one finishes it: the queue's pushes, the job's page URLs and the
    sitemap's record."""
    with LiveSite(pages=1000, sitemaps=1, priorities=True).serving() as site:
        urlset = site.sitemap_urls[-1]
        request = JobRequest(site=site.url("/"), sitemaps=(urlset,), rate_limit_delay=0.001)
        task = SitemapTask(job_id="j", url=urlset, origin=SitemapOrigin.REQUESTED, depth=1)

        async def scenario() -> tuple[SendingQueue, list[str], SitemapRecord]:
            with LocalHarvest.open(tmp_path / "s", memory_queue=True) as harvest:
                async with Fetcher(POLICY) as fetcher:
                    engine = harvest.engine(fetcher, EngineSettings(record_batch=BATCH))
                    engine.store = FlakyStore(harvest.store, fail_at)  # type: ignore[assignment]
                    queue = SendingQueue(harvest.queue)
                    engine.queue = queue  # type: ignore[assignment]
                    engine.start_job(request, job_id="j")
                    for _ in range(3):
                        done = None
                        with contextlib.suppress(Busy):
                            done = await engine.process_sitemap(task)
                        if done is not None:
                            assert done.status is SitemapStatus.COMPLETED
                            assert harvest.store.snapshot("j").counts == harvest.store.recount("j")
                            return queue, [p.url for p in harvest.store.pages("j")], done
                    raise AssertionError("the sitemap was not finished in three deliveries")

        return asyncio.run(scenario())


def test_a_broken_reading_s_tasks_are_all_sent_by_the_delivery_that_resumes_it(tmp_path):
    """The reading breaks off after a few batches recorded: the delivery that resumes from the sending
    checkpoint sends the tasks of the pages recorded past it (and at most a batch's again, which the page's
    record absorbs); no page's task is lost. (How a store that keeps batches sends them, one page message a
    batch of one lane: tests/aws/test_listing_lanes.py.)"""
    queue, urls, _ = _listed_by_lanes(tmp_path, fail_at=4)
    sent = [t.url for tasks in queue.pushes for t in tasks]
    assert set(sent) == set(urls) and len(urls) == 1000
    assert len(sent) - len(set(sent)) <= 2 * BATCH  # (sent again: at most the batch before the checkpoint's)


def test_two_recorded_batches_of_one_lane_travel_as_one_page_message_whole():
    """The listing sends a window's batches (each of one lane, the priority lane's first) two a push, whole:
    a window whose pages split 78/118 between the lanes, in batches of 39, 39 and 40, 39, 39, is three
    messages, 78, 79 and 39; two batches that would pass a message's pages are not put together, nor two of
    different lanes."""
    from harvester.model.messages import PAGES_PER_MESSAGE
    from harvester.pipeline.ranking import PRIORITY_LANE
    from harvester.pipeline.sitemap_step.listing import paired

    def run(size: int, lane: bool, start: int) -> list[PageTask]:
        rank = PRIORITY_LANE + 1.0 if lane else PRIORITY_LANE
        return [PageTask(job_id="j", url=f"https://h.example/{start + n}", rank=rank) for n in range(size)]

    runs = [run(39, True, 0), run(39, True, 39), run(40, False, 78), run(39, False, 118), run(39, False, 157)]
    messages = paired(runs)
    assert [len(m) for m in messages] == [78, 79, 39]
    assert [t for m in messages for t in m] == [t for r in runs for t in r]
    assert [len(m) for m in paired([run(39, False, 0), run(39, True, 39)])] == [39, 39]  # (two lanes)
    big = PAGES_PER_MESSAGE // 2 + 1
    assert [len(m) for m in paired([run(big, False, 0), run(big, False, big), run(0, False, 0)])] == [big, big]
