"""Where a job looks for sitemaps: robots.txt, then the well-known paths robots.txt did not declare.

The site itself is the top node of the tree (depth 0); robots.txt, requested sitemaps and known-path
probes are its children (depth 1). Known paths are probed only after robots.txt has been read, because a
path robots.txt already declares must not be fetched twice. The job's ``discovery`` options
(harvester/model/discovery.py) may skip robots.txt (the known paths are then the first sitemaps), skip the
known paths, add paths of the site's own, and start from the site URL's path rather than its root: robots.txt
and the known paths are looked for under the site node, whichever it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from harvester.model.discovery import DiscoveryOptions
from harvester.model.messages import JobRequest, SitemapOrigin, SitemapTask
from harvester.model.records import SitemapRecord
from harvester.urls import normalize, refusal

#: ultimate-sitemap-parser's list, in its order.
KNOWN_PATHS = (
    "sitemap.xml",
    "sitemap.xml.gz",
    "sitemap_index.xml",
    "sitemap-index.xml",
    "sitemap_index.xml.gz",
    "sitemap-index.xml.gz",
    ".sitemap.xml",
    "sitemap",
    "admin/config/search/xmlsitemap",
    "sitemap/sitemap-index.xml",
    "sitemap_news.xml",
    "sitemap-news.xml",
    "sitemap_news.xml.gz",
    "sitemap-news.xml.gz",
)


_DEFAULT = DiscoveryOptions()


def site_node(request: JobRequest) -> str:
    """The URL standing for the site at the top of the tree (the first ancestor of every sitemap): the site's
    root, or the site URL as given when its discovery keeps the path (``JobRequest.site`` is either)."""
    return request.site


def seed_sitemaps(request: JobRequest, *, now: datetime) -> list[SitemapRecord]:
    """The first sitemaps of a job: those requested, or robots.txt (which leads to the rest), or, robots.txt
    skipped, the known paths."""
    top = site_node(request)
    if request.sitemaps:
        urls = dict.fromkeys(normalize(u) for u in request.sitemaps)
        return [
            SitemapRecord(url=u, origin=SitemapOrigin.REQUESTED, depth=1, ancestors=(top,), discovered_at=now)
            for u in urls
        ]
    if not (request.discovery or _DEFAULT).use_robots:
        return known_path_probes(request, (), now=now)
    robots = top + "robots.txt"
    return [SitemapRecord(url=robots, origin=SitemapOrigin.ROBOTS, depth=1, ancestors=(top,), discovered_at=now)]


def known_path_probes(request: JobRequest, declared: Iterable[str], *, now: datetime) -> list[SitemapRecord]:
    """The well-known locations (and the job's extra ones) not already declared in robots.txt, under the site
    node and as its children; none when the job's discovery skips them."""
    options = request.discovery or _DEFAULT
    if not options.use_known_paths:
        return []
    top = site_node(request)
    seen = {normalize(u) for u in declared}
    probes = []
    for path in (*KNOWN_PATHS, *options.extra_known_paths):
        url = top + path
        if refusal(url) is not None:  # (an extra path too long under a long site path)
            continue
        url = normalize(url)
        if url not in seen:
            seen.add(url)
            probes.append(
                SitemapRecord(url=url, origin=SitemapOrigin.KNOWN_PATH, depth=1, ancestors=(top,), discovered_at=now)
            )
    return probes


def task_for(job_id: str, record: SitemapRecord) -> SitemapTask:
    return SitemapTask(
        job_id=job_id,
        url=record.url,
        origin=record.origin,
        depth=max(record.depth, 1),
        ancestors=record.ancestors,
    )
