"""Which URLs a job may declare orphan: those the site stopped listing, and only where it can be sure.

A URL the job did not list is not necessarily gone from the site's sitemaps: a sitemap that lists it may
have failed this time, or may not have been read at all (named sitemaps, sitemap patterns, callbacks, a
``max_depth`` it lies beyond, discovery options that skip robots.txt or the well-known paths or start below
the site's root); the job may be about some pages only (patterns, scope, a selection of entries by their
fields or language, which can leave out a URL the site still lists); another job may have listed it
meanwhile. A URL is often listed by more than one sitemap, and its crawl record names only the first, so no
single sitemap can vouch for its absence. A known URL becomes orphan only when all of this holds:

* the job read the site's whole sitemap tree, every sitemap of it completely: nothing failed, was cut
  short, was left out by the job's options or lay too deep, and no page it lists was left out by the job's
  location rule (``strict_location``); and no sitemap an earlier job read went missing
  for the first time now (a sitemap that vanishes at once is more often a glitch: the next job decides);
* nobody listed it since this job started (another job of the site may be running);
* the job's own scope and page patterns would have kept it (a job about ``/blog/`` says nothing of the rest).
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec import Struct

from harvester.model.crawl import CrawlRecord, CrawlState
from harvester.model.records import FILTERED, TOO_DEEP, JobRecord, SitemapRecord, SitemapStatus
from harvester.url_rules import OUTSIDE
from harvester.urls import UrlFilter, in_scope


class OrphanRule(Struct, frozen=True):
    job: JobRecord
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
        """``read_before``: the sitemaps earlier jobs read completely and not yet found missing before this
        job; one of them missing now (even "absent") leaves the tree uncertain for this job."""
        request = job.request
        whole = not (request.sitemaps or request.sitemap_include or request.sitemap_exclude or callbacks)
        if request.select is not None and request.select.leaves_out:
            whole = False  # (entries or child sitemaps left out by their fields or language)
        if request.discovery is not None and request.discovery.partial(request.site):
            whole = False  # (sitemaps only robots.txt, the known paths or the root lead to were not looked for)
        earlier = set(read_before)
        for sitemap in sitemaps:
            if sitemap.dropped.get(TOO_DEEP) or sitemap.dropped.get(FILTERED):
                whole = False  # children it lists were not read
            if sitemap.dropped.get(OUTSIDE):
                whole = False  # pages it lists were left out by the job's location rule, not by the site
            if sitemap.status is SitemapStatus.COMPLETED and not sitemap.truncated:
                continue
            if sitemap.url in earlier or sitemap.status not in (SitemapStatus.ABSENT, SitemapStatus.DUPLICATE):
                whole = False  # failed, invalid, truncated, unfinished, or newly missing
        return cls(job, whole, UrlFilter.of(request.include, request.exclude))

    def orphan(self, record: CrawlRecord) -> bool:
        job, request = self.job, self.job.request
        if not self.whole_tree or record.state is CrawlState.ORPHAN or record.last_listed_job == job.job_id:
            return False
        if record.last_listed >= job.start_time:
            return False
        if not in_scope(record.url, request.site, request.scope):
            return False
        return self.pages.refusal(record.url) is None
