"""Redelivery after a timeout: a sitemap worker too slow for its lease is overtaken mid-reading. Its later
writes are refused, it stops quietly, and the sitemap is finished from its checkpoint with exact counts."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from harvester.adapters.local.runner import LocalHarvest
from harvester.fetch import Fetcher, FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, SitemapOrigin, SitemapTask
from harvester.model.records import SitemapStatus, utcnow
from harvester.model.state import Lease
from harvester.settings import EngineSettings

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))


class OvertakenStore:
    """The state store as seen by a slow worker: before its second batch of pages, another worker claims the
    sitemap, as happens when the first one's lease lapses while it is still reading."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.batches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record_pages(
        self, job_id: str, sitemap_url: str, pages: Any, *, checkpoint: int, lease: Lease, **kw: Any
    ) -> Any:
        self.batches += 1
        if self.batches == 2:
            intruder = Lease(token="intruder", until=lease.until + 1)
            assert self._inner.claim_sitemap(job_id, sitemap_url, intruder, now=lease.until + 0.5) is not None
        return self._inner.record_pages(job_id, sitemap_url, pages, checkpoint=checkpoint, lease=lease, **kw)


def test_an_overtaken_sitemap_worker_stops_and_the_counts_stay_exact(site_factory, tmp_path):
    site = site_factory(pages=300, broken=0, sitemaps=1, gzip_last=False)
    urlset = site.sitemap_urls[1]
    request = JobRequest(site=f"{site.base_url}/", sitemaps=(urlset,), fetch_pages=False)
    task = SitemapTask(job_id="j", url=urlset, origin=SitemapOrigin.REQUESTED, depth=1)

    async def scenario() -> None:
        with LocalHarvest.open(tmp_path / "s") as harvest:
            async with Fetcher(POLICY) as fetcher:
                slow = harvest.engine(fetcher, EngineSettings(record_batch=49))  # several batches
                slow.store = OvertakenStore(harvest.store)  # type: ignore[assignment]
                slow.start_job(request, job_id="j")
                assert await slow.process_sitemap(task) is None  # it noticed, and stopped without a fuss

                record = harvest.store.get_sitemap("j", urlset)
                assert record is not None and record.status is SitemapStatus.PROCESSING
                batch = 49
                assert record.pages_recorded == batch  # its first batch stands; the second was refused

                later = harvest.engine(fetcher, EngineSettings())
                later.clock = lambda: utcnow() + timedelta(hours=1)  # the intruder's lease has lapsed too
                done = await later.process_sitemap(task)
                assert done is not None and done.status is SitemapStatus.COMPLETED and done.attempts == 3
                counts = harvest.store.snapshot("j").counts
                assert counts == harvest.store.recount("j")
                assert (counts.urls_total, counts.urls_succeeded, counts.sitemaps_done) == (300, 300, 1)
                assert harvest.store.get_job("j").status.final

    asyncio.run(scenario())
