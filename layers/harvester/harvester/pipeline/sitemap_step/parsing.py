"""The parsing side of one sitemap reading: a document's bytes (as they download, from the spool, or from a
stored copy) parsed into the reading's ``EntryScreen``, the pages it accepts into its ``PageListing``, compared
with the sitemap's part and adopted in part where the job may (``PartialAdoption``), and started over with a
fresh screen and listing when the listing moved (``ReadingParse.start_over``).

``SitemapReading`` (reading.py) fetches, chooses what to parse and says what the reading came to; this holds
what the parse has taken so far.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import ExitStack

from harvester.crawldb.part_diff import KeptTwice, PartDiff
from harvester.limits import ROBOTS_MAX_BYTES, SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES
from harvester.model.crawl import SitemapCrawl
from harvester.model.messages import SitemapOrigin
from harvester.model.reading import rules_of
from harvester.model.records import JobRecord, SitemapRecord
from harvester.model.state import Lease
from harvester.patience import Busy
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step.entries import EntryScreen
from harvester.pipeline.sitemap_step.listing import PageListing
from harvester.pipeline.sitemap_step.partial import PartialAdoption
from harvester.pipeline.sitemap_step.whole import WholeAdoption
from harvester.sitemap import ParseReport, SitemapParser
from harvester.sitemap.elements import ElementDiff

log = logging.getLogger(__name__)

PARSE_CHUNK = 64 * 1024
#: Bytes of a sitemap parsed at a time when the pages are handed out as they are read (see paced).
PACED_PIECE = 4 * 1024


class ReadingParse:
    """What one reading's parse has taken (``screen``, ``listing``) and how it goes on."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.listing = PageListing(ctx, job, record, lease)
        self.screen = EntryScreen(ctx, job, record, self.listing.accept)
        self.whole = WholeAdoption(ctx, job, record, lease)
        self.partial = PartialAdoption(ctx, job, record, lease)
        self.robots = record.origin is SitemapOrigin.ROBOTS
        self.rules = rules_of(job.request.reading)
        self.final_url: str | None = None  # where the document is read from, once a parser reads it

    @property
    def limit(self) -> int:
        """The most bytes of the document read."""
        return ROBOTS_MAX_BYTES if self.robots else SITEMAP_MAX_BYTES

    def parser(self, final_url: str) -> SitemapParser:
        """A parser of the document (each parse of a body, a first or one again, reads it alike), with the
        job's reading rules (robots.txt has a size limit of its own: no size warning)."""
        self.final_url = final_url
        self.screen.read_at(final_url)
        rules = self.rules
        return SitemapParser(
            final_url,
            max_entries=SITEMAP_MAX_ENTRIES,
            max_bytes=self.limit,
            robots=self.robots,
            allow_doctype=rules.allow_doctype,
            warn_bytes=0 if self.robots else rules.warn_size,
            schemeless=rules.repair_urls,
        )

    def start_over(self) -> None:
        """Forgets the skipped reading: every entry is judged again, by a fresh screen, and listed by a fresh
        listing that records every URL again and sends every pending page's task again."""
        self.listing = self.listing.afresh()
        self.screen = EntryScreen(self.ctx, self.job, self.record, self.listing.accept)
        if self.final_url is not None:
            self.screen.read_at(self.final_url)

    async def paced(self, parser: SitemapParser, chunk: bytes) -> None:
        """Parses the chunk in pieces, each piece's entries screened, letting ``ctx.pause`` hold the reading
        back after each: a 64 KiB chunk of a gzipped sitemap inflates to megabytes and thousands of entries,
        and a reader holds them all until they are recorded."""
        pause = self.ctx.pause
        for start in range(0, len(chunk), PACED_PIECE):
            self.screen.take(parser.feed(chunk[start : start + PACED_PIECE]))
            if pause is not None:
                await pause()
            if parser.finished:
                return

    def diff(self, prior: SitemapCrawl | None) -> PartDiff | None:
        """The comparison of this reading's entries with the sitemap's part (``PartialAdoption``), for a reading
        from the start, and for a reading resumed after one that compared: it compares too, the entries before
        its checkpoint included (``PageListing.accept``), with the part as stored, its own job's listings not
        counted against it (the adoption checks that no other job's writes moved it). When the part may not be
        adopted in part, or a listing that started over wrote the checkpoint (``restarted``: it may have
        recorded entries the comparison keeps, which an adoption would take a second time), the entries kept
        before the checkpoint are unrecorded: the reading starts over, listing every entry. A reading resumed
        after one that did not compare does not compare."""
        if self.listing.resend or not self.record.pages_recorded:
            return self.partial.diff(prior, self.whole.read)
        if not self.record.compared:
            return None
        diff = None if self.record.restarted else self.partial.diff(prior, self.whole.read, resumed=True)
        if diff is None:
            self.start_over()
        return diff

    def adopt_partly(self, report: ParseReport, *, clean: bool) -> bool:
        """Adopts the part the listing compared its entries with (``PartialAdoption``), with this reading's
        counts (``report``); False when the entries kept for it must be listed after all: the reading then
        starts over."""
        diff = self.listing.diff
        warnings = self.screen.warnings(report.warnings)
        if self.partial.adopt(diff, self.listing, self.screen.dropped, report, warnings, clean=clean):
            self.listing.diff = None
            return True
        log.info("sitemap part not adopted in part; listing its entries", extra={"url": self.record.url})
        self.start_over()
        return False

    async def spool(self, parser: SitemapParser, raw: tempfile.SpooledTemporaryFile[bytes]) -> None:
        """Parses the body downloaded whole (to be compared with a part's first), as it would have been
        parsed while it downloaded; the spool is left at its end."""
        raw.seek(0)
        while not parser.finished and (chunk := raw.read(PARSE_CHUNK)):
            await self.paced(parser, chunk)
        raw.seek(0, 2)

    async def changed(
        self, parser: SitemapParser, raw: tempfile.SpooledTemporaryFile[bytes], prior: SitemapCrawl
    ) -> bool:
        """Parses only the elements of the body downloaded whole that its stored copy does not hold, when the
        part the listing compares with allows it (``PartialAdoption.elements``): the others are kept for the
        part, counted as entries and as accepted, unparsed. False when the body is to be parsed whole (with
        another parser: this one may have been fed); the reading has started over if it had listed some."""
        found = self.partial.elements(self.listing.diff, prior, raw, limit=self.limit)
        if found is None:
            return False
        document = ElementDiff.document(found.head, found.added)
        try:
            for start in range(0, len(document), PARSE_CHUNK):
                await self.paced(parser, document[start : start + PARSE_CHUNK])
            self.screen.take(parser.close())
        except KeptTwice as exc:
            log.info(
                "sitemap lists a kept URL twice; reading it whole", extra={"url": self.record.url, "page": str(exc)}
            )
            self.start_over()
            return False
        self.screen.entries += found.kept
        self.listing.accepted += found.kept
        return True

    async def replayed(
        self, key: str, final_url: str, prior: SitemapCrawl | None = None, *, truncated: str | None = None
    ) -> SitemapParser | None:
        """A stored copy replayed (``_replay``) and the part it was compared with adopted in part, or, when it
        may not be, replayed again, every entry listed: the parser that read it last; None when the copy
        cannot be read."""
        parser = self.parser(final_url)
        if not await self._replay(key, parser, prior, truncated):
            return None
        report = parser.report
        if self.adopt_partly(report, clean=prior is not None or not (report.error or report.truncated)):
            return parser
        parser = self.parser(final_url)
        return parser if await self._replay(key, parser, prior, truncated) else None

    async def _replay(
        self, key: str, parser: SitemapParser, prior: SitemapCrawl | None, truncated: str | None = None
    ) -> bool:
        """A stored copy of the document (``key``) parsed instead of a download: the one the last complete
        reading stored (``prior``: the sitemap did not change, 304), closed as that reading was (a document
        cut at the size limit was stored as it arrived: its last, partial entry is not one), so a job sees the
        same URLs, in the same order, as if it had been sent again; or the one a reading's first step kept
        (``StepDocument``; ``truncated``: it was cut at the size limit). False when that copy is gone or cannot
        be read whole: the sitemap is then read in full (what the copy gave so far is judged again, as after a
        changed checkpoint)."""
        if prior is not None:
            truncated = prior.truncated
        with ExitStack() as stack:
            try:
                document = stack.enter_context(self.ctx.documents.reader(key))
            except Busy:  # (our store, not the copy: the reading is given back)
                raise
            except Exception as exc:  # gone, or unreadable: reading the sitemap in full is always right
                return self._unreadable_copy(key, repr(exc))
            read = self.listing.document
            read.begin()
            async with self.ctx.reading:
                while not parser.finished:
                    try:
                        chunk = document.read(PARSE_CHUNK)
                    except Busy:
                        raise
                    except Exception as exc:  # (a stream broken off: S3's read timeout, a damaged file)
                        return self._unreadable_copy(key, repr(exc))
                    if not chunk:
                        break
                    read.update(chunk)
                    await self.paced(parser, chunk)
                read.ended()  # (or the parser's: the bytes past it are not the entries')
                self.screen.take(parser.close(complete=not parser.finished and truncated is None))
                report = parser.report
                if prior is not None and (
                    report.error or (report.truncated and not truncated) or self.screen.entries != prior.entries
                ):
                    # Not what the stored reading gave (an error, a cut, another count): a damaged copy, or
                    # one a parser of another version reads otherwise. Read in full, it is stored again.
                    return self._unreadable_copy(key, report.error or report.truncated or "entries differ")
                self.listing.reached_checkpoint()
                self.listing.flush()
        return True

    def _unreadable_copy(self, key: str, error: str) -> bool:
        log.warning(
            "stored copy of the sitemap unreadable; reading it in full",
            extra={"url": self.record.url, "document": key, "error": error},
        )
        if self.screen.entries:  # (some of the copy was taken already)
            self.start_over()
        return False
