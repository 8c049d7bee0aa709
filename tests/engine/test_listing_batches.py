"""How a sitemap reading cuts its pages into recorded batches: full batches while it reads, and its remainder
taken along by its last write rather than recorded alone (each batch costs its fetches a claim, a settlement
and an archive object: on AWS, a batch of one page costs as many requests as a batch of fifty)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest
from harvester.fetch import Fetcher, FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, SitemapOrigin, SitemapTask
from harvester.model.records import SitemapStatus
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
