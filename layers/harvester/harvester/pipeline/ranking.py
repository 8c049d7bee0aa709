"""The order page tasks are served in: a rank, highest first (FIFO within a rank).

Why these three terms: a sitemap's ``priority`` is the site's own word on what matters (0 to 1, 0.5 when it
says nothing); a URL the crawl database has never fetched is worth more than a re-fetch of a known one,
whose content is stored already (+1, so every new URL comes before every re-fetch); and a page whose
``lastmod`` is recent may be boosted (``lastmod_boost``, off by default), falling off linearly over
``lastmod_boost_window`` seconds, for news-like sites where the freshest pages are the point.
"""

from __future__ import annotations

from datetime import datetime

from harvester.model.records import SitemapURL
from harvester.settings import EngineSettings

#: Why a job fetches a URL it has never fetched before (see crawldb.schedule).
NEW_REASONS = frozenset({"new"})
#: Ranks above this (a new URL of the default priority 0.5) take the priority lane where the queue has one
#: (SQS: PagePriorityQueue); the local queue orders by rank itself.
PRIORITY_LANE = 1.5


def rank(priority: float, *, new: bool, lastmod: datetime | None, now: datetime, settings: EngineSettings) -> float:
    score = priority + (1.0 if new else 0.0)
    boost, window = settings.lastmod_boost, settings.lastmod_boost_window
    if boost > 0 and window > 0 and lastmod is not None:
        age = max(0.0, (now - lastmod).total_seconds())
        if age < window:
            score += boost * (1.0 - age / window)
    return round(score, 6)


def rank_of(page: SitemapURL, now: datetime, settings: EngineSettings) -> float:
    new = page.fetch_reason in NEW_REASONS or (page.fetch_reason is None and page.known is None)
    return rank(page.priority, new=new, lastmod=page.last_modified, now=now, settings=settings)
