"""A sitemap's part adopted whole: a reading of the very document the part lists (the same signature; nothing
in it moved or due: ``parts.adoptable``) takes the part's URLs into the job in one write instead of listing
its entries (see docs/crawl-database.md, "Sitemap parts")."""

from __future__ import annotations

import logging

from harvester.crawldb import parts
from harvester.model.crawl import SitemapCrawl, SitemapPart
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.model.state import Lease, SitemapOutcome
from harvester.pipeline.context import StepContext

log = logging.getLogger(__name__)


class WholeAdoption:
    """The part one reading of a sitemap may adopt whole (``candidate``), and its adoption (``take``)."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.lease = lease
        #: The sitemap's part and epoch as ``candidate`` read them, until an adoption was tried (a part not
        #: adopted whole may be in part: ``PartialAdoption.diff`` need not read them again).
        self.read: tuple[SitemapPart | None, int] | None = None

    def adopt(self, prior: SitemapCrawl) -> SitemapPart | None:
        """The sitemap's part, when the job could adopt it whole and did; else None, and the stored copy is
        replayed entry by entry."""
        part = self.candidate(prior)
        return self.take(part) if part is not None else None

    def candidate(self, prior: SitemapCrawl) -> SitemapPart | None:
        """The sitemap's part, when the job may adopt it if the sitemap is still the document ``prior`` read."""
        ctx, record = self.ctx, self.record
        if not ctx.sitemap_parts or record.pages_recorded:
            return None
        part, epoch = self.read = ctx.crawldb.sitemap_part(self.job.request.origin, record.url)
        why = parts.adoptable(
            part,
            signature=prior.signature,
            request=self.job.request,
            epoch=epoch,
            now=ctx.clock(),
            started=self.job.start_time,
        )
        if why is not None:
            log.debug("sitemap part not adopted", extra={"url": record.url, "reason": why})
            return None
        return part

    def take(self, part: SitemapPart) -> SitemapPart | None:
        """The part, adopted (None when the store refused it: it moved, or a URL of it is the job's already)."""
        self.read = None  # (an adoption tried: read again for one in part)
        taken = self.ctx.store.adopt_part(
            self.job.job_id, self.record.url, part, self.lease, site=self.job.request.origin, at=self.ctx.clock()
        )
        return part if taken else None


def adopted_outcome(
    part: SitemapPart,
    dropped: dict[str, int],
    *,
    final_url: str | None = None,
    http_status: int = 304,
    document_key: str | None = None,
) -> SitemapOutcome:
    """The outcome of a reading whose part was adopted whole: as the reading that made it ended (its counts
    of dropped entries added to the reading's, ``dropped``)."""
    dropped.update(part.dropped)
    return SitemapOutcome(
        status=SitemapStatus.COMPLETED,
        kind=part.kind,
        final_url=final_url,
        http_status=http_status,
        warnings=dict(part.warnings),
        document_key=document_key,
        not_modified=True,
    )
