"""The reading of one claimed sitemap: fetch it (conditionally), parse it while it downloads or replay its
stored copy, and say what it came to.

``SitemapReading.run`` fetches the sitemap through the host's gate, asking with the validators of its last
complete reading: a 304 replays the document that reading stored, so the job sees the same URLs in the same
order; a later step of a reading in steps replays the document its first step kept (``step_document``). The
parse (``parsing.ReadingParse``) hands the entries to the reading's ``EntryScreen``, the pages it accepts to its
``PageListing``; a resumed reading that finds other entries before its checkpoint than it counted starts over
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
from collections.abc import Awaitable, Callable

from msgspec import Struct

from harvester.crawldb.crawl_state import http_error
from harvester.fetch import FetchError, FetchResponse, is_transient
from harvester.limits import SPOOL_IN_MEMORY
from harvester.model.crawl import SitemapCrawl, SitemapPart, WarcLocation
from harvester.model.messages import Output, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus, StepDocument
from harvester.model.state import Lease, SitemapOutcome
from harvester.pipeline import page_archive
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step import remembered, step_document
from harvester.pipeline.sitemap_step.listing import ListingMoved, StepEnded
from harvester.pipeline.sitemap_step.outcomes import parsed_outcome, redirect_verdict
from harvester.pipeline.sitemap_step.parsing import ReadingParse
from harvester.pipeline.sitemap_step.probes import ABSENT_STATUSES
from harvester.pipeline.sitemap_step.whole import adopted_outcome
from harvester.politeness.turns import waited_turn
from harvester.urls import normalize

log = logging.getLogger(__name__)


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
        self.parsing = ReadingParse(ctx, job, record, lease)
        #: The document the reading's first step kept, to replay (until it proves unreadable).
        self.note = record.step_document
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
                outcome = (
                    adopted_outcome(adopted, self.parsing.screen.dropped) if adopted is not None else await self._read()
                )
            except ListingMoved:
                log.info(
                    "sitemap %s changed since its checkpoint; reading it again from the start",
                    self.record.url,
                    extra={"job_id": self.job.job_id, "url": self.record.url},
                )
                self.parsing.start_over()
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
        screen = self.parsing.screen
        await screen.follow_found()
        outcome.children = screen.children
        outcome.attempts = self.spent
        outcome.restarted = self.parsing.listing.restarted
        outcome.dropped = screen.dropped
        outcome.warnings = screen.warnings(outcome.warnings)
        outcome.invalid_children = screen.invalid_children
        return outcome

    def _final_reason(self, reason: str, transient: bool) -> str:
        return f"{reason} (gave up after {self.spent} attempts)" if transient else reason

    async def _read(self, *, conditional: bool = True) -> SitemapOutcome:
        url = self.record.url
        prior = self.ctx.crawldb.get_sitemap(self.site, url) if conditional and not self.ctx.ephemeral else None
        if (note := self.note) is not None and conditional and not self.ctx.ephemeral:

            async def paused() -> StepDocument:
                return note

            if (noted := await self._read_copy(note, prior, paused=paused)) is not None:
                return noted
            self.note = None
        self.parsing.listing.noted = False  # (a download: what its checkpoints count is not the note's)
        headers = remembered.validators(prior, warc=self.request.output is Output.WARC)
        # The fetcher retries a transient failure at once, within what is left of the sitemap's budget
        # (retry_max requests, whichever delivery sends them); a reading that fails anyway comes back later.
        retries = max(0, self.ctx.settings.retry_max - self.spent - (1 if self.tries else 0))
        entered = False
        async with waited_turn(self.ctx.gate, url, self.request.rate_limit_delay) as host:
            sent = time.monotonic()
            try:
                async with self.ctx.fetcher.open(
                    url, max_bytes=self.parsing.limit, headers=headers, retries=retries
                ) as response:
                    entered = True
                    self.tries += response.attempts
                    self.answered += 1
                    host.observe(url, status=response.status_code, latency=time.monotonic() - sent)
                    outcome = await self._read_response(response, prior, bool(headers))
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
        self, response: FetchResponse, prior: SitemapCrawl | None, conditional: bool
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
        redirected = redirect_verdict(self.ctx, self.job.job_id, self.record, self.parsing.screen.chain, final_url)
        if redirected is not None:
            redirected.http_status = response.status_code
            return redirected

        if not_modified:
            assert prior is not None
            part = self.parsing.whole.adopt(prior)
            if part is None:
                copy = step_document.stored(prior, response, final_url)

                async def paused() -> StepDocument:
                    return await step_document.replayed(self.ctx, self.job, self.record, response, copy, prior)

                if (outcome := await self._read_copy(copy, prior, paused=paused, stored=True)) is None:
                    return None
            else:
                outcome = adopted_outcome(
                    part,
                    self.parsing.screen.dropped,
                    final_url=final_url,
                    http_status=response.status_code,
                    document_key=prior.document_key,
                )
                remembered.refresh(self.ctx, self.site, prior, response.headers)
            await page_archive.store_sitemap_revisit(self.ctx, self.job, self.record, response, prior.warc)
            return outcome
        parser = self.parsing.parser(final_url)
        keep = not self.ctx.ephemeral  # the document and its signature, for the next job
        document = self.parsing.listing.document  # (its digest: the document's signature once whole)
        document.begin()
        digest = document.digest
        broken: str | None = None
        # The body as received, for the job's WARC files (a robots.txt or sitemap read whole, as pages are).
        as_received = page_archive.RawBody() if keep and self.request.output is Output.WARC else None
        response.raw_sink = as_received
        archived_at: WarcLocation | None = None  # (the response record's)
        # A part the job could adopt if these are the bytes it lists: the body is then downloaded whole first.
        candidate = self.parsing.whole.candidate(prior) if keep and prior is not None else None
        if candidate is None and keep:
            self.parsing.listing.diff = self.parsing.diff(prior)
        adopted: SitemapPart | None = None
        try:
            async with self.ctx.reading:
                # Parsed while it downloads, and spooled to be stored (a 304 next time is answered from it).
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as raw:
                    chunks = response.iter_bytes()
                    try:
                        try:
                            async for chunk in chunks:
                                if keep:
                                    raw.write(chunk)
                                    document.update(chunk)
                                if candidate is None and not parser.finished:
                                    await self.parsing.paced(parser, chunk)
                                if parser.finished and prior is None and as_received is None:
                                    # (with an earlier reading, or a body to archive, the rest is downloaded all the
                                    # same: the bytes are recognised by the signature of the whole body, wherever the
                                    # parser stopped, and an archive keeps what was sent)
                                    break
                        except FetchError as exc:
                            # The body broke off: what arrived whole is recorded either way (a retry resumes after
                            # it); on the last reading it is all there is, so it is kept and the sitemap truncated.
                            self.parsing.listing.flush()
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
                                adopted = self.parsing.whole.take(candidate)
                            if adopted is None:
                                self.parsing.listing.diff = self.parsing.diff(prior)
                                if not await self.parsing.changed(parser, raw, prior):
                                    parser = self.parsing.parser(final_url)
                                    await self.parsing.spool(parser, raw)
                        if adopted is None:
                            self.parsing.screen.take(parser.close(complete=response.complete and not parser.finished))
                            if broken is None:
                                self.parsing.listing.reached_checkpoint()
                            self.parsing.listing.flush()
                            report = parser.report
                            clean = broken is None and response.complete and not response.truncated
                            if not self.parsing.adopt_partly(
                                report, clean=clean and not report.error and not report.truncated
                            ):
                                # (the entries kept for the part are listed after all: read again, from the spool)
                                parser = self.parsing.parser(final_url)
                                await self.parsing.spool(parser, raw)
                                self.parsing.screen.take(
                                    parser.close(complete=response.complete and not parser.finished)
                                )
                                self.parsing.listing.flush()
                        unchanged = prior is not None and signature == prior.signature and broken is None
                        document_key = None
                        if keep:
                            document_key = remembered.store_copy(
                                self.ctx, self.job, self.record.url, raw, response.content_type, signature, prior
                            )
                    except StepEnded as step:  # (the later steps read the same bytes: kept now)
                        step.document = await step_document.downloaded(
                            self.ctx,
                            self.job,
                            self.record,
                            response,
                            chunks,
                            raw,
                            document,
                            prior=prior,
                            as_received=as_received,
                            final_url=final_url,
                        )
                        raise
            if as_received is not None and broken is None and response.complete:
                # The same bytes as the stored reading's record: a revisit of it, as for a page.
                stored = prior.warc if prior is not None else None
                archived_at = await page_archive.store_sitemap_body(
                    self.ctx, self.job, self.record, response, as_received, stored
                )
        finally:  # (a body broken off is raised from within: its spool is let go all the same)
            if as_received is not None:
                as_received.close()
        if adopted is not None:
            outcome = adopted_outcome(
                adopted,
                self.parsing.screen.dropped,
                final_url=final_url,
                http_status=response.status_code,
                document_key=document_key,
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
            remembered.settle(
                self.ctx,
                self.site,
                outcome,
                prior,
                response.headers,
                url=self.record.url,
                signature=signature,
                entries=self.parsing.screen.entries,
                warc=archived_at,
            )
        return outcome

    async def _read_copy(
        self,
        copy: StepDocument,
        prior: SitemapCrawl | None,
        *,
        paused: Callable[[], Awaitable[StepDocument]],
        stored: bool = False,
    ) -> SitemapOutcome | None:
        """A stored copy of the document read instead of a download (``ReadingParse.replayed``): the one the
        sitemap's last complete reading stored, for a 304 (``stored``: ``prior``'s), or the one a reading's first
        step kept (``SitemapRecord.step_document``: no request to the site); the reading's end as a download's
        would be, remembered only over the stored reading it was read against (another job may have remembered
        a newer one meanwhile). ``paused``: the document the reading's later steps read, should this step end.
        None when the copy cannot be read (the sitemap is then asked for in full)."""
        checked = prior if stored else None
        self.parsing.listing.diff = self.parsing.diff(prior)
        self.parsing.listing.noted = not stored
        try:
            parser = await self.parsing.replayed(copy.key, copy.final_url, checked, truncated=copy.truncated)
            if parser is None:
                return None
        except StepEnded as step:
            step.document = await paused()
            raise
        outcome = parsed_outcome(
            parser,
            copy.final_url,
            copy.http_status,
            probe=self.is_probe,
            document_key=copy.key,
            not_modified=prior is not None and copy.signature == prior.signature,
            truncated=copy.truncated,
        )
        current = prior.signature if prior is not None else None
        if outcome.status is SitemapStatus.COMPLETED and current not in (copy.signature, copy.read_against):
            log.info(
                "a newer reading of the sitemap was remembered meanwhile; it is kept",
                extra={"url": self.record.url, "read": copy.signature, "remembered": current},
            )
        elif outcome.status is SitemapStatus.COMPLETED:
            remembered.settle(
                self.ctx,
                self.site,
                outcome,
                prior,
                copy.headers(),
                url=self.record.url,
                signature=copy.signature,
                entries=self.parsing.screen.entries,
                warc=copy.warc,
            )
        return outcome
