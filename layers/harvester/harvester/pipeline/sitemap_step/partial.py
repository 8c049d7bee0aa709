"""A sitemap's part adopted in part: the reading's entries compared with the part's lines as they are listed,
those the part holds already kept for it, and the part adopted but for the others once the reading ended
cleanly (see ``crawldb.part_diff`` and docs/crawl-database.md, "Sitemap parts").

A urlset whose part is a verbatim listing of its stored copy is first compared with that copy element by
element (``elements``): the entries whose ``<url>`` element is one of the copy's are kept without being
parsed, and only the others are read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import IO

from harvester.crawldb import parts
from harvester.crawldb.part_diff import PartDiff
from harvester.inflate import inflated
from harvester.limits import ELEMENTS_MAX_BYTES, SITEMAP_MAX_ENTRIES
from harvester.model.crawl import SitemapCrawl, SitemapPart
from harvester.model.messages import SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord
from harvester.model.state import Lease
from harvester.patience import Busy
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step.listing import PageListing
from harvester.sitemap import ParseReport, SitemapKind
from harvester.sitemap.elements import ElementDiff

log = logging.getLogger(__name__)


class PartialAdoption:
    """The part one reading of a sitemap may adopt in part (``diff``), and its adoption (``adopt``)."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.lease = lease
        self.part: SitemapPart | None = None

    def diff(
        self,
        prior: SitemapCrawl | None,
        read: tuple[SitemapPart | None, int] | None = None,
        *,
        resumed: bool = False,
    ) -> PartDiff | None:
        """What compares the reading's entries with the sitemap's part, when the job may adopt the part in
        part (``parts.partly_adoptable``); None when it may not. (``prior``: the sitemap's last complete
        reading, if any; only a page-listing kind has a part. ``read``: the part and epoch as the reading
        read them already, if it did. ``resumed``: a reading resumed after one that compared, whose own
        listings move the sitemap's epoch: the epoch is not checked here; the adoption checks that no other
        job's writes moved it.)"""
        ctx, record, request = self.ctx, self.record, self.job.request
        if not ctx.sitemap_parts or not ctx.crawldb.adopts_partly or record.origin is SitemapOrigin.ROBOTS:
            return None
        if prior is None or prior.kind not in parts.PAGE_KINDS:
            return None
        part, epoch = read if read is not None else ctx.crawldb.sitemap_part(request.origin, record.url)
        why = parts.partly_adoptable(
            part, request=request, epoch=None if resumed else epoch, started=self.job.start_time
        )
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

    def elements(self, diff: PartDiff | None, prior: SitemapCrawl, raw: IO[bytes], *, limit: int) -> ElementDiff | None:
        """The sitemap's new body (``raw``: as received, spooled; left at its end) beside its stored copy,
        element by element, when the part ``diff`` compares with is a verbatim listing of that copy (nothing
        dropped, no warning, none due, its lines made of the copy's elements: ``SitemapPart.verbatim``); the
        body is read only then. The URLs of the elements the body keeps are then kept (``PartDiff.keep``:
        each must have its line in the part), and the other elements (``added``) are the ones to read. None
        when the entries are to be read one by one: also when more elements changed than a step of the reading
        lists (``sitemap_step_urls``), as a reading of the changed elements is not read in steps
        (``PageListing._end_step``) and one entry by entry is."""
        part = self.part
        if diff is None or part is None or not part.verbatim or part.dropped or part.warnings:
            return None
        if part.signature != prior.signature or prior.kind != SitemapKind.URLSET.value or prior.truncated:
            return None
        bound = min(limit, ELEMENTS_MAX_BYTES)
        if not diff.comparable or raw.seek(0, 2) > bound:
            return None
        raw.seek(0)
        body = raw.read()
        raw.seek(0, 2)
        new = inflated(body, limit=bound)
        del body
        if new is None:
            return None
        try:
            stored = self.ctx.documents.get(prior.document_key)
        except Busy:
            raise
        except Exception:  # (gone: read one by one, which stores it again)
            return None
        old = inflated(stored, limit=bound)
        found = ElementDiff.of(old, new) if old is not None else None
        del stored, old, new
        if found is None or found.urls is None or found.kept + len(found.added) > SITEMAP_MAX_ENTRIES:
            return None
        step = self.ctx.settings.sitemap_step_urls
        if step and len(found.added) > step:
            return None
        if not found.urls <= set(diff.urls):
            return None  # (a kept element's URL has no line here: another sitemap listed it first)
        diff.keep(found.urls)
        return found

    def adopt(
        self,
        diff: PartDiff | None,
        listing: PageListing,
        dropped: Mapping[str, int],
        report: ParseReport,
        warnings: Mapping[str, int],
        *,
        clean: bool,
    ) -> bool:
        """Adopts the part ``diff`` compared the listing's entries with, but for those it did not keep (listed
        one by one, or gone); True when done, or when there is nothing to adopt. False when the reading did
        not end cleanly (nothing is adopted) or the store refused: the entries kept must be listed. The part
        is adopted with the reading's counts (``dropped``, ``warnings``, the ``report``'s kind): a delivery
        after the adoption finishes the sitemap with them."""
        if diff is None or not diff.kept:
            return True  # (nothing compared, or every entry listed one by one)
        assert self.part is not None
        if not clean:
            return False
        counted: dict[str, object] = {"dropped": dict(dropped), "warnings": dict(warnings)}
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
            listed=diff.listed,
        )
