"""The orphan pass of a job's end: the site's URLs the job shows are no longer listed become orphan
(``crawldb.orphans``), and each is a ``removed`` line of the job's change feed.

The pass reads the site's URL records a page at a time (``CrawlDatabase.url_pages``) and can stop after any
page when its step's time is up (``pause``): the orphans of the pages read are marked by then, their feed
lines kept (``RemovedLines``), and the position after the page is where the end's next step resumes
(``EndProgress``). So a site of any size is passed over in steps of bounded time.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from typing import IO

from harvester.archive.lines import json_bytes
from harvester.crawldb.changes import removed_line
from harvester.crawldb.crawl_state import orphaned
from harvester.crawldb.orphans import OrphanRule
from harvester.model.crawl import CrawlRecord, CrawlState
from harvester.model.records import JobRecord, SitemapRecord
from harvester.pipeline.context import StepContext

log = logging.getLogger(__name__)

#: Times a write to the crawl database is judged again when other jobs keep changing its record.
STALE_ATTEMPTS = 8
ORPHAN_BATCH = 100


class RemovedLines:
    """The change feed's lines of the URLs found no longer listed, in a spool (a site may drop many)."""

    def __init__(self) -> None:
        self.spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close)
        self.count = 0

    def add(self, record: CrawlRecord) -> None:
        self.spool.write(json_bytes(removed_line(record), newline=True))
        self.count += 1

    def rewound(self) -> IO[bytes]:
        """The spool, read from its start."""
        self.spool.flush()
        self.spool.seek(0)
        return self.spool

    def copy_to(self, out: IO[bytes]) -> None:
        shutil.copyfileobj(self.rewound(), out)

    def close(self) -> None:
        self.spool.close()

    def __enter__(self) -> RemovedLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def mark_orphans(
    ctx: StepContext,
    job: JobRecord,
    sitemaps: list[SitemapRecord],
    removed: Callable[[CrawlRecord], None],
    *,
    listed: Callable[[], int],
    after: str | None = None,
    pause: Callable[[], bool] | None = None,
) -> str | None:
    """Marks orphan the site's URLs this job shows are no longer listed, reporting each to ``removed``,
    with those an earlier run of this same end already marked, from the position ``after`` on. Returns None
    when the pass is over, or the position after the page it stopped at because ``pause`` said so (every
    orphan of the pages read is marked). ``listed``: how many URLs the job listed, each with its record."""
    site = job.request.origin
    if after is None and _nothing_unlisted(ctx, job, listed):
        return None
    # (a pass resumed found the tree whole when it began: judged again without the earlier jobs' sitemaps,
    # which a later job may have changed since, the job's own sitemaps say the same)
    read_before = (
        []
        if after is not None
        else [
            s.url for s in ctx.crawldb.site_sitemaps(site) if s.absent_since is None or s.absent_since >= job.start_time
        ]
    )
    rule = OrphanRule.of(job, sitemaps, read_before=read_before, callbacks=ctx.callbacks is not None)
    if not rule.whole_tree:
        return None  # (no URL can be this job's orphan, nor was one marked by an earlier run of this end: no pass)
    batch: list[CrawlRecord] = []
    for page in ctx.crawldb.url_pages(site, unless_listed_by=job.job_id, after=after):
        for record in page.records:
            if record.state is CrawlState.ORPHAN and record.orphaned_job == job.job_id:
                removed(record)
            elif rule.orphan(record):
                batch.append(orphaned(record, job_id=job.job_id))
                if len(batch) >= ORPHAN_BATCH:
                    _put_orphans(ctx, site, batch, rule, removed)
                    batch = []
        if pause is not None and pause():
            _put_orphans(ctx, site, batch, rule, removed)
            return page.after
    _put_orphans(ctx, site, batch, rule, removed)
    return None


def _nothing_unlisted(ctx: StepContext, job: JobRecord, listed: Callable[[], int]) -> bool:
    """Whether the job listed every URL record of its site, known without reading them."""
    if job.empty_site:
        # No URL record existed at the job's start (read after its start time): every record was listed
        # since, so none was last listed before the job started, which the rule asks of an orphan. (A record
        # another job listed just before and wrote just after that read is left to the next job to judge.)
        return True
    known = ctx.crawldb.count_urls(job.request.origin) if ctx.crawldb.counts_urls else None
    return known is not None and known <= listed()  # (a site whose records are all the job's: a first crawl's case)


def _put_orphans(
    ctx: StepContext, site: str, batch: list[CrawlRecord], rule: OrphanRule, removed: Callable[[CrawlRecord], None]
) -> None:
    for _ in range(STALE_ATTEMPTS):
        if not batch:
            return
        stale = set(ctx.crawldb.put_urls(site, batch))
        for record in batch:
            if record.url not in stale:
                removed(record)
        if not stale:
            return
        # Another job wrote them meanwhile (it may have listed them), or another run of this same end
        # orphaned them: judged again on what was written.
        batch = []
        for record in ctx.crawldb.get_urls(site, list(stale)).values():
            if record.state is CrawlState.ORPHAN and record.orphaned_job == rule.job.job_id:
                removed(record)
            elif rule.orphan(record):
                batch.append(orphaned(record, job_id=rule.job.job_id))
    log.warning("orphans left unmarked: their records kept changing", extra={"urls": len(batch)})
