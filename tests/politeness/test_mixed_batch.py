"""One batch holding the pages of two jobs (on AWS, a page function's batch comes from one queue that every
job's pages share): each job's pages take their turns at their own host side by side, so a fast site's pages
do not wait behind a slow host's pages that take their turns through their grant's slots."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harvester.adapters.local.runner import LocalHarvest
from harvester.fetch import Fetcher, FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, PageTask, SitemapTask
from harvester.settings import EngineSettings
from tests.corpus.server import HTML, Route, RouteServer, serving
from tests.politeness.support import site

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)


async def _listed_then_fetched(state: Path, slow: RouteServer, fast: RouteServer) -> None:
    """Both jobs' sitemaps read, then all their pages in one batch, the slow site's first."""
    settings = EngineSettings(host_max_in_flight=2)
    with LocalHarvest.open(state) as harvest:
        async with Fetcher(POLICY) as fetcher:
            engine = harvest.engine(fetcher, settings)
            for n, server in enumerate((slow, fast)):
                engine.start_job(JobRequest(site=f"{server.base}/", rate_limit_delay=0.001), job_id=f"job-{n}")
            pages: list[PageTask] = []
            while (message := harvest.queue.pop()) is not None:
                if message.queue == "sitemaps":
                    await engine.process_sitemap(SitemapTask.model_validate_json(message.body))
                else:
                    pages.append(PageTask.model_validate_json(message.body))
                harvest.queue.ack(message)
            pages.sort(key=lambda task: task.job_id)  # (job-0, the slow site, first)
            for server in (slow, fast):
                server.reset_log()
            batch = await engine.process_pages(pages)
            assert len(batch.completed) == len(pages) == 12, (batch.completed, batch.deferred)


def test_a_batchs_jobs_take_their_turns_side_by_side(tmp_path):
    with serving("127.0.0.2") as slow, serving("127.0.0.1") as fast:
        # Six 0.5 s answers through two slots: 1.5 s, within the gate's 2 s horizon, so the batch keeps them.
        site(slow, 6, page=Route("<html>slow</html>", content_type=HTML, delay=0.5))
        site(fast, 6)
        asyncio.run(_listed_then_fetched(tmp_path, slow, fast))
    slow_starts = [h.at for h in slow.hits if h.path.startswith("/p/")]
    fast_starts = [h.at for h in fast.hits if h.path.startswith("/p/")]
    assert len(slow_starts) == len(fast_starts) == 6
    # One job after the other, the fast site's first request came after the slow site's last (> 1 s in).
    assert fast_starts[-1] < slow_starts[-1], (fast_starts, slow_starts)
