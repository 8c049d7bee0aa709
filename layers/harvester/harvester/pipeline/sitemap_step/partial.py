"""A sitemap's part adopted in part: the reading's entries compared with the part's lines as they are listed,
those the part holds already kept for it, and the part adopted but for the others once the reading ended
cleanly (see ``crawldb.part_diff`` and docs/crawl-database.md, "Sitemap parts").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from harvester.crawldb import parts
from harvester.crawldb.part_diff import PartDiff
from harvester.model.crawl import SitemapCrawl, SitemapPart
from harvester.model.messages import SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord
from harvester.model.state import Lease
from harvester.patience import Busy
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step.listing import PageListing
from harvester.sitemap import ParseReport

log = logging.getLogger(__name__)


class PartialAdoption:
    """The part one reading of a sitemap may adopt in part (``diff``), and its adoption (``adopt``)."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.lease = lease
        self.part: SitemapPart | None = None

    def diff(self, prior: SitemapCrawl | None, read: tuple[SitemapPart | None, int] | None = None) -> PartDiff | None:
        """What compares the reading's entries with the sitemap's part, when the job may adopt the part in
        part (``parts.partly_adoptable``); None when it may not. (``prior``: the sitemap's last complete
        reading, if any; only a page-listing kind has a part. ``read``: the part and epoch as the reading
        read them already, if it did.)"""
        ctx, record, request = self.ctx, self.record, self.job.request
        if not ctx.sitemap_parts or not ctx.crawldb.adopts_partly or record.origin is SitemapOrigin.ROBOTS:
            return None
        if prior is None or prior.kind not in parts.PAGE_KINDS:
            return None
        part, epoch = read if read is not None else ctx.crawldb.sitemap_part(request.origin, record.url)
        why = parts.partly_adoptable(part, request=request, epoch=epoch)
        if why is not None or part is None:
            log.debug("sitemap part not adopted in part", extra={"url": record.url, "reason": why})
            return None
        try:
            lines = ctx.documents.get(part.lines)
        except Busy:
            raise
        except Exception as exc:  # (gone: the sitemap is listed whole, which makes a part again)
            log.warning("sitemap part unreadable", extra={"url": record.url, "error": repr(exc)})
            return None
        # Due by when the job found the sitemap (a reading that starts over compares as the first did).
        found = record.discovered_at or self.job.start_time
        self.part = part
        return PartDiff(lines, sitemap=record.url, due_by=found if request.fetch_pages else None)

    def adopt(
        self,
        diff: PartDiff | None,
        listing: PageListing,
        dropped: Mapping[str, int],
        report: ParseReport,
        *,
        clean: bool,
    ) -> bool:
        """Adopts the part ``diff`` compared the listing's entries with, but for those it did not keep (listed
        one by one, or gone); True when done, or when there is nothing to adopt. False when the reading did
        not end cleanly (nothing is adopted) or the store refused: the entries kept must be listed. The part
        is adopted with the reading's counts (``dropped``, the ``report``'s kind and warnings): a delivery
        after the adoption finishes the sitemap with them."""
        if diff is None or not diff.kept:
            return True  # (nothing compared, or every entry listed one by one)
        assert self.part is not None
        if not clean:
            return False
        counted: dict[str, object] = {"dropped": dict(dropped), "warnings": dict(report.warnings)}
        if report.kind is not None:
            counted["kind"] = report.kind.value
        return self.ctx.store.adopt_part(
            self.job.job_id,
            self.record.url,
            self.part.model_copy(update=counted),
            self.lease,
            site=self.job.request.origin,
            at=self.ctx.clock(),
            excluded=diff.excluded(),
            checkpoint=listing.whole_checkpoint(),
        )
