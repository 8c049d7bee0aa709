"""The reading of one claimed sitemap: fetch it (conditionally), parse it while it downloads or replay its
stored copy, and say what it came to.

``SitemapReading.run`` fetches the sitemap through the host's gate, asking with the validators of its last
complete reading: a 304 replays the document that reading stored, so the job sees the same URLs in the same
order. The parsed entries go to the reading's ``EntryScreen`` (``entries``), the pages it accepts to its
``PageListing`` (``listing``); a resumed reading whose checkpoint no longer matches the sitemap starts over
with a fresh screen and listing. A changed body is stored (keyed by its signature) and remembered in the
crawl database with its validators; an unchanged one refreshes what is remembered (``remembered``). In a
job that keeps WARC, the reading is archived (``page_archive.store_sitemap``).

A transient failure (429, 5xx, timeouts, a broken connection) is a ``Retry`` while the sitemap's budget of
``retry_max`` requests lasts; a sitemap that cannot be read ends failed / invalid / absent with its reason.
"""

from __future__ import annotations

import logging
import tempfile
import time
from contextlib import ExitStack

from msgspec import Struct

from harvester.crawldb import parts
from harvester.crawldb.crawl_state import http_error
from harvester.crawldb.part_diff import KeptTwice, PartDiff
from harvester.fetch import FetchError, FetchResponse, is_transient
from harvester.limits import ROBOTS_MAX_BYTES, SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES, SPOOL_IN_MEMORY
from harvester.model.crawl import SitemapCrawl, SitemapPart, WarcLocation
from harvester.model.messages import Output, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.model.state import Lease, SitemapOutcome
from harvester.patience import Busy
from harvester.pipeline import page_archive
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import known_path_probes, site_node
from harvester.pipeline.sitemap_step import remembered
from harvester.pipeline.sitemap_step.entries import EntryScreen
from harvester.pipeline.sitemap_step.listing import ListingMoved, PageListing
from harvester.pipeline.sitemap_step.outcomes import parsed_outcome, redirect_verdict
from harvester.pipeline.sitemap_step.partial import PartialAdoption
from harvester.pipeline.sitemap_step.probes import ABSENT_STATUSES, asked
from harvester.politeness.turns import waited_turn
from harvester.sitemap import ParseReport, SitemapParser
from harvester.sitemap.elements import ElementDiff
from harvester.urls import normalize

log = logging.getLogger(__name__)

PARSE_CHUNK = 64 * 1024
#: Bytes of a sitemap parsed at a time when the pages are handed out as they are read (see _parse_paced).
PACED_PIECE = 4 * 1024


class Retry(Struct, frozen=True):
    """The reading failed for a reason that may pass (the sitemap goes back to pending, delayed)."""

    reason: str
    attempts: int | None = None  # requests sent for the sitemap so far


class SitemapReading:
    """The reading of one claimed sitemap: fetch (conditionally), parse or replay, screen, list."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.lease = lease
        self.request = job.request
        self.site = job.request.origin
        self.listing = PageListing(ctx, job, record, lease)
        self.screen = EntryScreen(ctx, job, record, self.listing.accept)
        self.partial = PartialAdoption(ctx, job, record, lease)
        #: The sitemap's part and epoch as ``_candidate`` read them (a part not adopted whole may be in part).
        self._part_read: tuple[SitemapPart | None, int] | None = None
        self.tries = 0  # requests this delivery sent (the fetcher's own retries included)
        self.answered = 0  # of which the site answered (a response read: its status judged after)

    @property
    def is_robots(self) -> bool:
        return self.record.origin is SitemapOrigin.ROBOTS

    @property
    def is_probe(self) -> bool:
        return self.record.origin is SitemapOrigin.KNOWN_PATH

    @property
    def spent(self) -> int:
        """Requests sent for this sitemap by this job so far: the claim counted this delivery's first one
        before it was made, the fetcher's retries are added as they happen."""
        return self.record.attempts - 1 + max(1, self.tries)

    @property
    def failed_tries(self) -> int:
        """The requests of this delivery the site did not answer (the fetcher tried again, or gave up)."""
        return max(0, self.tries - self.answered)

    @property
    def may_retry(self) -> bool:
        return self.spent < self.ctx.settings.retry_max

    async def run(self) -> SitemapOutcome | Retry:
        try:
            try:
                adopted = self.record.adopted  # (by a delivery that stopped before it finished the sitemap)
                outcome = self._adopted(adopted) if adopted is not None else await self._read()
            except ListingMoved:
                log.info(
                    "sitemap changed since its checkpoint; reading it again from the start",
                    extra={"job_id": self.job.job_id, "url": self.record.url},
                )
                self._start_over()
                outcome = await self._read()
        except FetchError as exc:
            reason = exc.explain(self.record.url)
            if exc.retryable and self.may_retry:
                return Retry(reason, self.spent)
            status = SitemapStatus.ABSENT if self.is_probe else SitemapStatus.FAILED
            outcome = SitemapOutcome(status=status, error_message=self._final_reason(reason, exc.retryable))
        transient = outcome.http_status is not None and is_transient(outcome.http_status)
        if transient and outcome.status is SitemapStatus.FAILED:
            if self.may_retry:
                return Retry(outcome.error_message or f"HTTP {outcome.http_status}", self.spent)
            outcome.error_message = self._final_reason(outcome.error_message or "", True)
        # USP's numbering: robots.txt's children are at level 0, with robots.txt as their only parent.
        parents = {a for a in self.record.ancestors if a != site_node(self.request)} | {self.record.url}
        screen = self.screen
        screen.follow(screen.found, level=self.record.depth - 1, parents=parents, callbacks=self.ctx.callbacks)
        if self.is_robots:
            # robots.txt leads to the well-known paths whatever happened to it (a site may have none). They are
            # the site's own children, not robots.txt's: USP's callbacks choose among the children of robots.txt
            # and of indexes, and USP reads every well-known path whatever they say.
            # Those the site's last job found absent are asked here; the others are tasks of their own (``probes``).
            probes = known_path_probes(self.request, screen.declared, now=self.ctx.clock())
            screen.register(
                await asked(self.ctx, self.job, screen.chosen(probes, level=0, parents=set(), callbacks=None))
            )
        outcome.children = screen.children
        outcome.attempts = self.spent
        outcome.restarted = self.listing.restarted
        outcome.dropped = screen.dropped
        outcome.invalid_children = screen.invalid_children
        return outcome

    def _start_over(self) -> None:
        """Forgets the skipped reading: every entry is judged again, by a fresh screen, and listed by a fresh
        listing that records every URL again and sends every pending page's task again."""
        self.listing = self.listing.afresh()
        self.screen = EntryScreen(self.ctx, self.job, self.record, self.listing.accept)

    def _final_reason(self, reason: str, transient: bool) -> str:
        return f"{reason} (gave up after {self.spent} attempts)" if transient else reason

    async def _read(self, *, conditional: bool = True) -> SitemapOutcome:
        url = self.record.url
        limit = ROBOTS_MAX_BYTES if self.is_robots else SITEMAP_MAX_BYTES
        prior = self.ctx.crawldb.get_sitemap(self.site, url) if conditional and not self.ctx.ephemeral else None
        headers = remembered.validators(prior, warc=self.request.output is Output.WARC)
        # The fetcher retries a transient failure at once, within what is left of the sitemap's budget
        # (retry_max requests, whichever delivery sends them); a reading that fails anyway comes back later.
        retries = max(0, self.ctx.settings.retry_max - self.spent - (1 if self.tries else 0))
        entered = False
        async with waited_turn(self.ctx.gate, url, self.request.rate_limit_delay) as host:
            sent = time.monotonic()
            try:
                async with self.ctx.fetcher.open(url, max_bytes=limit, headers=headers, retries=retries) as response:
                    entered = True
                    self.tries += response.attempts
                    self.answered += 1
                    host.observe(url, status=response.status_code, latency=time.monotonic() - sent)
                    outcome = await self._read_response(response, prior, bool(headers), limit)
            except FetchError as exc:
                if not entered:  # no response: the tries the fetcher made are on the error
                    self.tries += exc.attempts
                    if exc.retryable:
                        host.observe(url, status=None, latency=0.0)
                raise
        if outcome is None:
            # A 304 for a stored copy that cannot be replayed: read again, whole, on a turn of its own (this
            # one given back first: with one request in flight allowed per host, a turn taken inside it would
            # wait for itself).
            return await self._read(conditional=False)
        return outcome

    async def _read_response(
        self, response: FetchResponse, prior: SitemapCrawl | None, conditional: bool, limit: int
    ) -> SitemapOutcome | None:
        """The reading of a response; None when it is a 304 whose stored copy cannot be replayed."""
        final_url = normalize(response.url)
        not_modified = response.status_code == 304 and prior is not None and conditional
        if not (200 <= response.status_code < 300 or not_modified):
            quiet = (self.is_probe or self.is_robots) and response.status_code in ABSENT_STATUSES
            if quiet and prior is not None and prior.absent_since is None:
                self.ctx.crawldb.put_sitemap(self.site, prior.model_copy(update={"absent_since": self.ctx.clock()}))
            return SitemapOutcome(
                status=SitemapStatus.ABSENT if quiet else SitemapStatus.FAILED,
                error_message=http_error(response.status_code),
                http_status=response.status_code,
                final_url=final_url,
            )
        redirected = redirect_verdict(self.ctx, self.job.job_id, self.record, self.screen.chain, final_url)
        if redirected is not None:
            redirected.http_status = response.status_code
            return redirected

        def new_parser() -> SitemapParser:  # (each parse of this body, a first or one again, reads it alike)
            return SitemapParser(final_url, max_entries=SITEMAP_MAX_ENTRIES, max_bytes=limit, robots=self.is_robots)

        parser = new_parser()
        if not_modified:
            assert prior is not None
            part = self._adopt(prior)
            if part is None:
                self.listing.diff = self._diff(prior)
                if not await self._replay(prior, parser):
                    return None
                if not self._adopt_partly(parser.report, clean=True):
                    parser = new_parser()
                    if not await self._replay(prior, parser):
                        return None
            if self.request.output is Output.WARC and prior.warc is not None:
                await page_archive.store_sitemap(self.ctx, self.job, self.record, response, revisits=prior.warc)
            remembered.refresh(self.ctx, self.site, prior, response.headers)
            if part is not None:
                return self._adopted(
                    part, final_url=final_url, http_status=response.status_code, document_key=prior.document_key
                )
            return parsed_outcome(
                parser,
                final_url,
                response.status_code,
                probe=self.is_probe,
                document_key=prior.document_key,
                not_modified=True,
                truncated=prior.truncated,
            )
        keep = not self.ctx.ephemeral  # the document and its signature, for the next job
        document = self.listing.document  # (its digest: the document's signature once whole)
        document.begin()
        digest = document.digest
        broken: str | None = None
        # The body as received, for the job's WARC files (a robots.txt or sitemap read whole, as pages are).
        as_received = page_archive.RawBody() if keep and self.request.output is Output.WARC else None
        response.raw_sink = as_received
        archived_at: WarcLocation | None = None
        # A part the job could adopt if these are the bytes it lists: the body is then downloaded whole first.
        candidate = self._candidate(prior) if keep and prior is not None else None
        if candidate is None and keep:
            self.listing.diff = self._diff(prior)
        adopted: SitemapPart | None = None
        try:
            async with self.ctx.reading:
                # Parsed while it downloads, and spooled to be stored (a 304 next time is answered from it).
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as raw:
                    try:
                        async for chunk in response.iter_bytes():
                            if keep:
                                raw.write(chunk)
                                document.update(chunk)
                            if candidate is None and not parser.finished:
                                await self._parse_paced(parser, chunk)
                            if parser.finished and prior is None and as_received is None:
                                # (with an earlier reading, or a body to archive, the rest is downloaded all the
                                # same: the bytes are recognised by the signature of the whole body, wherever the
                                # parser stopped, and an archive keeps what was sent)
                                break
                    except FetchError as exc:
                        # The body broke off: what arrived whole is recorded either way (a retry resumes after
                        # it); on the last reading it is all there is, so it is kept and the sitemap truncated.
                        self.listing.flush()
                        if exc.retryable and self.may_retry:
                            raise
                        broken = self._final_reason(exc.explain(self.record.url), exc.retryable)
                    signature = digest.hexdigest()
                    if broken is None and keep:
                        document.ended()
                    if candidate is not None:
                        assert prior is not None
                        whole = broken is None and response.complete and not response.truncated
                        if whole and signature == prior.signature:
                            adopted = self._take(candidate)
                        if adopted is None:
                            self.listing.diff = self._diff(prior)
                            if not await self._parse_changed(parser, raw, prior, limit):
                                parser = new_parser()
                                await self._parse_spool(parser, raw)
                    if adopted is None:
                        self.screen.take(parser.close(complete=response.complete and not parser.finished))
                        if broken is None:
                            self.listing.reached_checkpoint()
                        self.listing.flush()
                        report = parser.report
                        clean = broken is None and response.complete and not response.truncated
                        if not self._adopt_partly(report, clean=clean and not report.error and not report.truncated):
                            # (the entries kept for the part are listed after all: read again, from the spool)
                            parser = new_parser()
                            await self._parse_spool(parser, raw)
                            self.screen.take(parser.close(complete=response.complete and not parser.finished))
                            self.listing.flush()
                    unchanged = prior is not None and signature == prior.signature and broken is None
                    document_key = None
                    if keep and prior is not None and unchanged and self.ctx.documents.exists(prior.document_key):
                        document_key = prior.document_key  # (stored already: its key is its signature)
                    elif keep:
                        document_key = remembered.store_copy(
                            self.ctx, self.job, self.record.url, raw, response.content_type, signature
                        )
            if as_received is not None and broken is None and response.complete:
                # The same bytes as the stored reading's record: a revisit of it, as for a page.
                same = page_archive.identical(prior.warc if prior is not None else None, as_received)
                archived_at = await page_archive.store_sitemap(
                    self.ctx, self.job, self.record, response, body=as_received, revisits=same
                )
        finally:  # (a body broken off is raised from within: its spool is let go all the same)
            if as_received is not None:
                as_received.close()
        if adopted is not None:
            outcome = self._adopted(
                adopted, final_url=final_url, http_status=response.status_code, document_key=document_key
            )
        else:
            outcome = parsed_outcome(
                parser,
                final_url,
                response.status_code,
                probe=self.is_probe,
                document_key=document_key,
                not_modified=unchanged,
                broken=broken,
                truncated=response.truncated,
            )
        if outcome.status is SitemapStatus.COMPLETED and broken is None and keep:
            # (a revisit's location is not kept: the record it refers to holds the bytes)
            response_at = archived_at if archived_at is not None and archived_at.record_type == "response" else None
            if prior is not None and unchanged:
                remembered.refresh(self.ctx, self.site, prior, response.headers, warc=response_at)
            else:
                remembered.remember(
                    self.ctx,
                    self.site,
                    outcome,
                    response.headers,
                    url=self.record.url,
                    signature=signature,
                    entries=self.screen.entries,
                    warc=response_at,
                )
        return outcome

    async def _parse_paced(self, parser: SitemapParser, chunk: bytes) -> None:
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

    def _adopted(
        self,
        part: SitemapPart,
        *,
        final_url: str | None = None,
        http_status: int = 304,
        document_key: str | None = None,
    ) -> SitemapOutcome:
        """The outcome of a reading whose part was adopted whole: as the reading that made it ended."""
        self.screen.dropped.update(part.dropped)
        return SitemapOutcome(
            status=SitemapStatus.COMPLETED,
            kind=part.kind,
            final_url=final_url,
            http_status=http_status,
            warnings=dict(part.warnings),
            document_key=document_key,
            not_modified=True,
        )

    def _adopt(self, prior: SitemapCrawl) -> SitemapPart | None:
        """The sitemap's part, when the job could adopt it whole (the same document, nothing in it moved or
        due: ``parts.adoptable``) and did; else None, and the stored copy is replayed entry by entry."""
        part = self._candidate(prior)
        return self._take(part) if part is not None else None

    def _candidate(self, prior: SitemapCrawl) -> SitemapPart | None:
        """The sitemap's part, when the job may adopt it if the sitemap is still the document ``prior`` read."""
        ctx = self.ctx
        if not ctx.sitemap_parts or self.record.pages_recorded:
            return None
        part, epoch = self._part_read = ctx.crawldb.sitemap_part(self.site, self.record.url)
        why = parts.adoptable(
            part,
            signature=prior.signature,
            request=self.request,
            epoch=epoch,
            now=ctx.clock(),
            started=self.job.start_time,
        )
        if why is not None:
            log.debug("sitemap part not adopted", extra={"url": self.record.url, "reason": why})
            return None
        return part

    def _diff(self, prior: SitemapCrawl | None) -> PartDiff | None:
        """The comparison of this reading's entries with the sitemap's part (``PartialAdoption``), for a reading
        from the start, and for a reading resumed after one that compared: it compares too, the entries before
        its checkpoint included (``PageListing.accept``), with the part as stored, its own job's listings not
        counted against it (the adoption checks that no other job's writes moved it). When the part may not be
        adopted in part, or a listing that started over wrote the checkpoint (``restarted``: it may have
        recorded entries the comparison keeps, which an adoption would take a second time), the entries kept
        before the checkpoint are unrecorded: the reading starts over, listing every entry. A reading resumed
        after one that did not compare does not compare."""
        if self.listing.resend or not self.record.pages_recorded:
            return self.partial.diff(prior, self._part_read)
        if not self.record.compared:
            return None
        diff = None if self.record.restarted else self.partial.diff(prior, self._part_read, resumed=True)
        if diff is None:
            self._start_over()
        return diff

    def _adopt_partly(self, report: ParseReport, *, clean: bool) -> bool:
        """Adopts the part the listing compared its entries with (``PartialAdoption``), with this reading's
        counts (``report``); False when the entries kept for it must be listed after all: the reading then
        starts over."""
        diff = self.listing.diff
        if self.partial.adopt(diff, self.listing, self.screen.dropped, report, clean=clean):
            self.listing.diff = None
            return True
        log.info("sitemap part not adopted in part; listing its entries", extra={"url": self.record.url})
        self._start_over()
        return False

    def _take(self, part: SitemapPart) -> SitemapPart | None:
        """The part, adopted (None when the store refused it: it moved, or a URL of it is the job's already)."""
        self._part_read = None  # (an adoption tried: read again for one in part)
        taken = self.ctx.store.adopt_part(
            self.job.job_id, self.record.url, part, self.lease, site=self.site, at=self.ctx.clock()
        )
        return part if taken else None

    async def _parse_spool(self, parser: SitemapParser, raw: tempfile.SpooledTemporaryFile[bytes]) -> None:
        """Parses the body downloaded whole (to be compared with a part's first), as it would have been
        parsed while it downloaded; the spool is left at its end."""
        raw.seek(0)
        while not parser.finished and (chunk := raw.read(PARSE_CHUNK)):
            await self._parse_paced(parser, chunk)
        raw.seek(0, 2)

    async def _parse_changed(
        self, parser: SitemapParser, raw: tempfile.SpooledTemporaryFile[bytes], prior: SitemapCrawl, limit: int
    ) -> bool:
        """Parses only the elements of the body downloaded whole that its stored copy does not hold, when the
        part the listing compares with allows it (``PartialAdoption.elements``): the others are kept for the
        part, counted as entries and as accepted, unparsed. False when the body is to be parsed whole (with
        another parser: this one may have been fed); the reading has started over if it had listed some."""
        found = self.partial.elements(self.listing.diff, prior, raw, limit=limit)
        if found is None:
            return False
        document = ElementDiff.document(found.head, found.added)
        try:
            for start in range(0, len(document), PARSE_CHUNK):
                await self._parse_paced(parser, document[start : start + PARSE_CHUNK])
            self.screen.take(parser.close())
        except KeptTwice as exc:
            log.info(
                "sitemap lists a kept URL twice; reading it whole", extra={"url": self.record.url, "page": str(exc)}
            )
            self._start_over()
            return False
        self.screen.entries += found.kept
        self.listing.accepted += found.kept
        return True

    async def _replay(self, prior: SitemapCrawl, parser: SitemapParser) -> bool:
        """The sitemap did not change (304): the document its last complete reading stored is parsed instead,
        closed as that reading was (a document cut at the size limit was stored as it arrived: its last,
        partial entry is not one), so a job sees the same URLs, in the same order, as if it had been sent
        again. False when that copy is gone or cannot be read whole: the sitemap is then read in full (what
        the copy gave so far is judged again, as after a changed checkpoint)."""
        with ExitStack() as stack:
            try:
                document = stack.enter_context(self.ctx.documents.reader(prior.document_key))
            except Busy:  # (our store, not the copy: the reading is given back)
                raise
            except Exception as exc:  # gone, or unreadable: reading the sitemap in full is always right
                return self._unreadable_copy(prior, repr(exc))
            read = self.listing.document
            read.begin()
            async with self.ctx.reading:
                while not parser.finished:
                    try:
                        chunk = document.read(PARSE_CHUNK)
                    except Busy:
                        raise
                    except Exception as exc:  # (a stream broken off: S3's read timeout, a damaged file)
                        return self._unreadable_copy(prior, repr(exc))
                    if not chunk:
                        break
                    read.update(chunk)
                    await self._parse_paced(parser, chunk)
                read.ended()  # (or the parser's: the bytes past it are not the entries')
                self.screen.take(parser.close(complete=not parser.finished and prior.truncated is None))
                report = parser.report
                if report.error or (report.truncated and not prior.truncated) or self.screen.entries != prior.entries:
                    # Not what the stored reading gave (an error, a cut, another count): a damaged copy, or
                    # one a parser of another version reads otherwise. Read in full, it is stored again.
                    return self._unreadable_copy(prior, report.error or report.truncated or "entries differ")
                self.listing.reached_checkpoint()
                self.listing.flush()
        return True

    def _unreadable_copy(self, prior: SitemapCrawl, error: str) -> bool:
        log.warning(
            "stored copy of an unchanged sitemap unreadable; reading it in full",
            extra={"url": self.record.url, "document": prior.document_key, "error": error},
        )
        if self.screen.entries:  # (some of the copy was taken already)
            self._start_over()
        return False
