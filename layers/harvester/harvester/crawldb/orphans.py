"""Which URLs a job may declare orphan: those the site stopped listing, and only where it can be sure.

A URL the job did not list is not necessarily gone from the site's sitemaps: the sitemap that listed it
may have failed this time, the job may read only some sitemaps (named ones, sitemap patterns, callbacks)
or only some pages (patterns, scope), or another job may have listed it meanwhile. So a known URL
becomes orphan only when all of this holds:

* nobody listed it since this job started (another job of the site may be running);
* the job's own scope and page patterns would have kept it (a job about ``/blog/`` says nothing of the rest);
* the sitemap that last listed it was read completely by this job (it no longer lists the URL), or that
  sitemap is not part of this job at all and the job read the site's whole sitemap tree without a failure
  (the sitemap left the tree).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harvester.model.crawl import CrawlRecord, CrawlState
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.urls import UrlFilter, in_scope


@dataclass(frozen=True)
class OrphanRule:
    job: JobRecord
    read_fully: frozenset[str]
    seen: frozenset[str]
    whole_tree: bool
    pages: UrlFilter

    @classmethod
    def of(
        cls,
        job: JobRecord,
        sitemaps: Iterable[SitemapRecord],
        *,
        read_before: Iterable[str] = (),
        callbacks: bool = False,
    ) -> OrphanRule:
        """``read_before``: the sitemaps an earlier job read completely; one of them not read now (even
        "absent") leaves the tree uncertain, since a sitemap that vanished at once is more often a glitch."""
        request = job.request
        read_fully, seen, whole = set(), set(), True
        earlier = set(read_before)
        for sitemap in sitemaps:
            seen.add(sitemap.url)
            if sitemap.status is SitemapStatus.COMPLETED and not sitemap.truncated:
                read_fully.add(sitemap.url)
            elif sitemap.url in earlier:
                whole = False
            elif sitemap.status is not SitemapStatus.ABSENT and sitemap.status is not SitemapStatus.DUPLICATE:
                whole = False  # failed, invalid, truncated or unfinished: what it lists is not known
        narrowed = bool(request.sitemaps or request.sitemap_include or request.sitemap_exclude or callbacks)
        pages = UrlFilter.of(request.include, request.exclude)
        return cls(job, frozenset(read_fully), frozenset(seen), whole and not narrowed, pages)

    def orphan(self, record: CrawlRecord) -> bool:
        job, request = self.job, self.job.request
        if record.state is CrawlState.ORPHAN or record.last_listed_job == job.job_id:
            return False
        if record.last_listed >= job.start_time:
            return False
        if not in_scope(record.url, request.site, request.scope):
            return False
        if self.pages.refusal(record.url) is not None:
            return False
        if record.sitemap in self.read_fully:
            return True
        return record.sitemap not in self.seen and self.whole_tree
