"""One sitemap task: claim the sitemap, fetch it, read it while it downloads, fan out what it lists.

The flow is USP's (fetch, then let the content choose the parser), made safe for a distributed job:

* the sitemap is claimed with a lease, so two deliveries of one task never read it at once;
* page URLs pass URL hygiene (http(s), length, scope, patterns, first declaration only) and are recorded
  in batches, each batch one atomic write that also counts the new URLs and moves the sitemap's checkpoint;
  only then are their page tasks sent, and the checkpoint says how far sending got. A redelivered task
  reads the sitemap again, skips what was sent, re-sends what was recorded but maybe not sent, and records
  the rest — so nothing discovered is lost and nothing is counted twice;
* child sitemaps are registered once per job (recursion and depth checked against the ancestor chain that
  travels with the task) and sent;
* a transient failure (429, 5xx, timeouts, a broken connection) gives the sitemap back with a delayed
  task, up to ``retry_max`` readings, so a flaky server does not cost a whole subtree;
* a sitemap that cannot be read ends as failed / invalid / absent with its reason: it never fails the job.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime
from typing import Any

from msgspec import Struct

from harvester.archive.batch import WarcBatch
from harvester.crawldb.crawl_state import http_error, listed, listing_change
from harvester.crawldb.documents import sitemap_key
from harvester.crawldb.schedule import due
from harvester.fetch import FetchError, FetchResponse, conditional_headers, is_transient
from harvester.keyset import KeySet, bits_of, url_bits
from harvester.limits import ROBOTS_MAX_BYTES, SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES, SPOOL_IN_MEMORY
from harvester.model.crawl import ChangeKind, CrawlRecord, SiteCrawl, SitemapCrawl, WarcLocation
from harvester.model.messages import Output, PageTask, Refetch, SitemapOrigin, SitemapTask
from harvester.model.records import (
    FILTERED,
    TOO_DEEP,
    CrawlRow,
    JobRecord,
    ListedRow,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    url_key,
)
from harvester.model.state import Checkpoint, Lease, SitemapOutcome
from harvester.patience import Busy
from harvester.pipeline import give_back, page_archive
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import known_path_probes, site_node, task_for
from harvester.pipeline.listed_rows import first_listings, listed_fields
from harvester.pipeline.ranking import rank, rank_of
from harvester.pipeline.sitemap_filter import SitemapCallbacks, follow
from harvester.politeness.turns import waited_turn
from harvester.ports import LeaseLost
from harvester.sitemap import ChildSitemap, PageEntry, SitemapParser
from harvester.urls import UrlFilter, host_in_scope, host_of, normalize, refusal, screen

log = logging.getLogger(__name__)

PARSE_CHUNK = 64 * 1024
#: Bytes of a sitemap parsed at a time when the pages are handed out as they are read (see _parse_paced).
PACED_PIECE = 4 * 1024
#: Times a batch is decided again when other jobs keep moving its crawl records (then the task is retried).
STALE_ATTEMPTS = 8
MAX_INVALID_CHILDREN_LISTED = 100
#: Well-known paths that are simply not there are expected; these statuses mean "no sitemap here".
_ABSENT_STATUSES = frozenset({401, 403, 404, 410})


async def process_sitemap(ctx: StepContext, task: SitemapTask) -> SitemapRecord | None:
    job = ctx.job(task.job_id)
    if job is None:
        log.warning("sitemap task for an unknown job dropped", extra={"job_id": task.job_id, "url": task.url})
        return None
    url = normalize(task.url)
    store = ctx.store
    registered = store.get_sitemap(job.job_id, url)
    if registered is None:
        # Only a hand-made task names a sitemap nobody registered: register it so that it is counted.
        registered = SitemapRecord(
            url=url, origin=task.origin, depth=task.depth, ancestors=task.ancestors, discovered_at=ctx.clock()
        )
        store.add_sitemaps(job.job_id, [registered])
    now = ctx.clock().timestamp()
    lease = Lease(token=uuid.uuid4().hex, until=now + ctx.settings.sitemap_lease_seconds)
    try:
        record = store.claim_sitemap(job.job_id, url, lease, now=now)
    except Busy as busy:  # (the claim may have landed: given back by its lease, with the attempts it had)
        give_back.sitemap(ctx, job, registered, lease, busy, attempts=registered.attempts)
        return None
    if record is None:
        log.info("sitemap already done or in progress elsewhere", extra={"job_id": job.job_id, "url": url})
        # (a delivery again of a step whose end of the job met a busy service: the end is looked at again)
        give_back.complete_or_resend(ctx, job.job_id, [task])
        return None
    reading: SitemapReading | None = None
    try:
        if record.attempts > ctx.settings.max_attempts:
            outcome: SitemapOutcome | Retry = SitemapOutcome(
                status=SitemapStatus.FAILED,
                error_message=f"gave up after {record.attempts - 1} attempts to read it",
            )
        else:
            reading = SitemapReading(ctx, job, record, lease)
            outcome = await reading.run()
        if not isinstance(outcome, Retry):
            outcome.finished_at = ctx.clock()
            store.finish_sitemap(job.job_id, url, outcome, lease)
    except LeaseLost:
        # We were too slow: the lease lapsed and another worker took the sitemap over from its checkpoint.
        log.warning("sitemap lease lost to another worker", extra={"job_id": job.job_id, "url": url})
        return None
    except Busy as busy:  # our own infrastructure, not the site: the attempts stay as they were
        failed = reading.failed_tries if reading else 0
        give_back.sitemap(ctx, job, record, lease, busy, attempts=record.attempts - 1 + failed)
        return None
    if isinstance(outcome, Retry):
        delay = min(
            ctx.settings.retry_backoff_seconds * 2 ** (record.attempts - 1),
            ctx.settings.retry_backoff_max_seconds,
        )
        give_back.release(ctx, job, record, lease, outcome.reason, attempts=outcome.attempts, after=delay)
        log.info("sitemap to be read again", extra={"job_id": job.job_id, "url": url, "reason": outcome.reason})
        return _as_stored(ctx, job.job_id, url)
    log.info(
        "sitemap done",
        extra={
            "job_id": job.job_id,
            "url": url,
            "status": outcome.status.value,
            "error": outcome.error_message,
        },
    )
    give_back.complete_or_resend(ctx, job.job_id, [task])
    return _as_stored(ctx, job.job_id, url)


def _as_stored(ctx: StepContext, job_id: str, url: str) -> SitemapRecord | None:
    """The sitemap's record as its step left it (for the metrics), or None when the store is busy: the step's
    work is done, and a read for the figures is no reason to have its message come back."""
    try:
        return ctx.store.get_sitemap(job_id, url)
    except Busy:
        return None


class Retry(Struct, frozen=True):
    """The reading failed for a reason that may pass (the sitemap goes back to pending, delayed)."""

    reason: str
    attempts: int | None = None  # requests sent for the sitemap so far


class _ListingMoved(Exception):
    """A resumed reading found other URLs before its checkpoint than the reading that set it: the sitemap
    changed in between, so skipping by position would skip URLs never recorded."""


class SitemapReading:
    """The reading of one claimed sitemap: fetch (conditionally), parse or replay, record and send in batches."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.lease = lease
        self.request = job.request
        self.site = job.request.origin
        self.schedule = ctx.settings.schedule
        self.filter = UrlFilter.of(self.request.include, self.request.exclude)
        self.site_host = host_of(self.request.site)
        self.sitemap_patterns = UrlFilter.of(self.request.sitemap_include, self.request.sitemap_exclude)
        self.chain = {normalize(a) for a in record.ancestors} | {record.url}
        self.dropped: dict[str, int] = {}
        self.invalid_children: dict[str, str] = {}
        self.seen_pages = KeySet()  # (12 bytes a URL, not a string each)
        self.seen_children: set[str] = set()
        self.page_batch: list[tuple[int, str, PageEntry, int]] = []  # (position, URL, entry, key bits)
        self.batch_size = ctx.record_batch
        self.found: list[SitemapRecord] = []  # valid children, followed (filtered, registered) at the end
        self.accepted = 0  # page entries accepted so far, in document order: the checkpoint's unit
        self.children = 0
        self.declared: list[str] = []  # robots.txt Sitemap: lines, to leave out of the known-path probes
        self.recorded = record.pages_recorded
        self.enqueued = record.pages_enqueued
        self.resend = False  # started over on a changed sitemap: every pending page's task is sent again
        self.digest = hashlib.blake2b(digest_size=16)  # of the accepted URLs so far, for the checkpoint
        self.entries = 0  # entries the reading produced, children included
        self.probes = record.probes_spent  # lastmod probes spent on an untrusted host
        self.tries = 0  # requests this delivery sent (the fetcher's own retries included)
        self.answered = 0  # of which the site answered (a response read: its status judged after)
        self._site: SiteCrawl | None = None

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
                outcome = await self._read()
            except _ListingMoved:
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
        self._follow(self.found, level=self.record.depth - 1, parents=parents, callbacks=self.ctx.callbacks)
        if self.is_robots:
            # robots.txt leads to the well-known paths whatever happened to it (a site may have none). They are
            # the site's own children, not robots.txt's: USP's callbacks choose among the children of robots.txt
            # and of indexes, and USP reads every well-known path whatever they say.
            probes = known_path_probes(self.request, self.declared, now=self.ctx.clock())
            self._follow(probes, level=0, parents=set(), callbacks=None)
        outcome.children = self.children
        outcome.attempts = self.spent
        outcome.dropped = self.dropped
        outcome.invalid_children = self.invalid_children
        return outcome

    def _start_over(self) -> None:
        """Forgets the skipped reading: every entry is judged again. The job's records absorb the URLs recorded
        before (``record_pages`` counts only new ones); their tasks are sent again, since the positions that
        said which were sent no longer mean anything."""
        self.dropped, self.invalid_children, self.found, self.declared = {}, {}, [], []
        self.seen_pages, self.seen_children = KeySet(), set()
        self.accepted = self.children = self.recorded = self.enqueued = self.entries = 0
        self.page_batch = []
        self.digest = hashlib.blake2b(digest_size=16)
        self.resend = True

    def _final_reason(self, reason: str, transient: bool) -> str:
        return f"{reason} (gave up after {self.spent} attempts)" if transient else reason

    async def _read(self, *, conditional: bool = True) -> SitemapOutcome:
        url = self.record.url
        limit = ROBOTS_MAX_BYTES if self.is_robots else SITEMAP_MAX_BYTES
        prior = self.ctx.crawldb.get_sitemap(self.site, url) if conditional and not self.ctx.ephemeral else None
        headers = _validators(prior, warc=self.request.output is Output.WARC)
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
            quiet = (self.is_probe or self.is_robots) and response.status_code in _ABSENT_STATUSES
            if quiet and prior is not None and prior.absent_since is None:
                self.ctx.crawldb.put_sitemap(self.site, prior.model_copy(update={"absent_since": self.ctx.clock()}))
            return SitemapOutcome(
                status=SitemapStatus.ABSENT if quiet else SitemapStatus.FAILED,
                error_message=http_error(response.status_code),
                http_status=response.status_code,
                final_url=final_url,
            )
        redirected = self._redirect_verdict(final_url)
        if redirected is not None:
            redirected.http_status = response.status_code
            return redirected
        parser = SitemapParser(final_url, max_entries=SITEMAP_MAX_ENTRIES, max_bytes=limit, robots=self.is_robots)
        if not_modified:
            assert prior is not None
            if not await self._replay(prior, parser):
                return None
            if self.request.output is Output.WARC and prior.warc is not None:
                await self._archive(response, revisits=prior.warc)
            self._refresh(prior, response.headers)
            return self._outcome(
                parser,
                final_url,
                response.status_code,
                document_key=prior.document_key,
                not_modified=True,
                truncated=prior.truncated,
            )
        keep = not self.ctx.ephemeral  # the document and its signature, for the next job
        digest = hashlib.sha256()
        broken: str | None = None
        # The body as received, for the job's WARC files (a robots.txt or sitemap read whole, as pages are).
        as_received = page_archive.RawBody() if keep and self.request.output is Output.WARC else None
        response.raw_sink = as_received
        archived_at: WarcLocation | None = None
        try:
            async with self.ctx.reading:
                # Parsed while it downloads, and spooled to be stored (a 304 next time is answered from it).
                with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as raw:
                    try:
                        async for chunk in response.iter_bytes():
                            if keep:
                                raw.write(chunk)
                                digest.update(chunk)
                            if not parser.finished:
                                await self._parse_paced(parser, chunk)
                            if parser.finished and prior is None and as_received is None:
                                # (with an earlier reading, or a body to archive, the rest is downloaded all the
                                # same: the bytes are recognised by the signature of the whole body, wherever the
                                # parser stopped, and an archive keeps what was sent)
                                break
                    except FetchError as exc:
                        # The body broke off: what arrived whole is recorded either way (a retry resumes after
                        # it); on the last reading it is all there is, so it is kept and the sitemap truncated.
                        self._flush_pages()
                        if exc.retryable and self.may_retry:
                            raise
                        broken = self._final_reason(exc.explain(self.record.url), exc.retryable)
                    signature = digest.hexdigest()
                    self._take(parser.close(complete=response.complete and not parser.finished))
                    if broken is None:
                        self._reached_checkpoint()
                    self._flush_pages()
                    unchanged = prior is not None and signature == prior.signature and broken is None
                    document_key = None
                    if keep and prior is not None and unchanged and self.ctx.documents.exists(prior.document_key):
                        document_key = prior.document_key  # (stored already: its key is its signature)
                    elif keep:
                        document_key = self._store_raw(raw, response.content_type, signature)
            if as_received is not None and broken is None and response.complete:
                # The same bytes as the stored reading's record: a revisit of it, as for a page.
                same = page_archive.identical(prior.warc if prior is not None else None, as_received)
                archived_at = await self._archive(response, body=as_received, revisits=same)
        finally:  # (a body broken off is raised from within: its spool is let go all the same)
            if as_received is not None:
                as_received.close()
        outcome = self._outcome(
            parser,
            final_url,
            response.status_code,
            document_key=document_key,
            not_modified=unchanged,
            broken=broken,
            truncated=response.truncated,
        )
        if outcome.status is SitemapStatus.COMPLETED and broken is None and keep:
            # (a revisit's location is not kept: the record it refers to holds the bytes)
            response_at = archived_at if archived_at is not None and archived_at.record_type == "response" else None
            if prior is not None and unchanged:
                self._refresh(prior, response.headers, warc=response_at)
            else:
                self._remember(outcome, response.headers, signature, warc=response_at)
        return outcome

    def _outcome(
        self,
        parser: SitemapParser,
        final_url: str,
        http_status: int,
        *,
        document_key: str | None,
        not_modified: bool,
        broken: str | None = None,
        truncated: str | None = None,
    ) -> SitemapOutcome:
        report = parser.report
        status, error = SitemapStatus.COMPLETED, report.error
        if error:
            if broken:  # it broke off before it showed a sitemap: a failed download, not an invalid sitemap
                error, status = broken, SitemapStatus.FAILED
            else:
                status = SitemapStatus.INVALID
            if self.is_probe:
                status = SitemapStatus.ABSENT
        return SitemapOutcome(
            status=status,
            kind=report.kind.value if report.kind else None,
            error_message=error,
            # The fetcher's reason first: a body cut at a size limit is not a dropped connection.
            truncated=broken or truncated or report.truncated,
            final_url=final_url,
            http_status=http_status,
            warnings=dict(report.warnings),
            document_key=document_key,
            not_modified=not_modified,
        )

    def _parse(self, parser: SitemapParser, chunk: bytes) -> None:
        self._take(parser.feed(chunk))

    async def _parse_paced(self, parser: SitemapParser, chunk: bytes) -> None:
        """``_parse`` in pieces, letting ``ctx.pause`` hold the reading back after each: a 64 KiB chunk of a
        gzipped sitemap inflates to megabytes and thousands of entries, and a reader holds them all until
        they are recorded."""
        pause = self.ctx.pause
        for start in range(0, len(chunk), PACED_PIECE):
            self._parse(parser, chunk[start : start + PACED_PIECE])
            if pause is not None:
                await pause()
            if parser.finished:
                return

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
                    await self._parse_paced(parser, chunk)
                self._take(parser.close(complete=not parser.finished and prior.truncated is None))
                report = parser.report
                if report.error or (report.truncated and not prior.truncated) or self.entries != prior.entries:
                    # Not what the stored reading gave (an error, a cut, another count): a damaged copy, or
                    # one a parser of another version reads otherwise. Read in full, it is stored again.
                    return self._unreadable_copy(prior, report.error or report.truncated or "entries differ")
                self._reached_checkpoint()
                self._flush_pages()
        return True

    def _unreadable_copy(self, prior: SitemapCrawl, error: str) -> bool:
        log.warning(
            "stored copy of an unchanged sitemap unreadable; reading it in full",
            extra={"url": self.record.url, "document": prior.document_key, "error": error},
        )
        if self.entries:  # (some of the copy was taken already)
            self._start_over()
        return False

    def _refresh(self, prior: SitemapCrawl, headers: Mapping[str, str], *, warc: WarcLocation | None = None) -> None:
        """An unchanged sitemap under new validators (a redeploy, another server) or back after a miss: the
        next job asks with these validators, and the orphan rule counts it present. ``warc``: its bytes
        archived as a response now, where the stored reading has none (it was kept as loose files)."""
        etag = headers.get("etag") or prior.etag
        last_modified = headers.get("last-modified") or prior.http_last_modified
        update: dict[str, Any] = {}
        if (etag, last_modified) != (prior.etag, prior.http_last_modified) or prior.absent_since is not None:
            update = {"etag": etag, "http_last_modified": last_modified, "absent_since": None}
        if warc is not None:
            update["warc"] = warc
        if update:
            update["fetched_at"] = self.ctx.clock()
            self.ctx.crawldb.put_sitemap(self.site, prior.model_copy(update=update))

    def _remember(
        self, outcome: SitemapOutcome, headers: Mapping[str, str], signature: str, *, warc: WarcLocation | None
    ) -> None:
        """Keeps what the next job needs to read this sitemap conditionally and replay it if unchanged."""
        assert outcome.document_key is not None and outcome.http_status is not None
        self.ctx.crawldb.put_sitemap(
            self.site,
            SitemapCrawl(
                url=self.record.url,
                fetched_at=self.ctx.clock(),
                http_status=outcome.http_status,
                final_url=outcome.final_url,
                etag=headers.get("etag"),
                http_last_modified=headers.get("last-modified"),
                signature=signature,
                document_key=outcome.document_key,
                kind=outcome.kind,
                truncated=outcome.truncated,
                warnings=outcome.warnings,
                entries=self.entries,
                warc=warc,
            ),
        )

    def _redirect_verdict(self, final_url: str) -> SitemapOutcome | None:
        """Recursion through a redirect, or a redirect to a sitemap this job already reads."""
        if final_url == self.record.url:
            return None
        if final_url in self.chain:
            return SitemapOutcome(
                status=SitemapStatus.INVALID,
                error_message=f"recursion: redirects to its ancestor {final_url}",
                final_url=final_url,
            )
        known = self.ctx.store.get_sitemap(self.job.job_id, final_url)
        if known is None:
            return None
        if self.is_probe and known.origin is SitemapOrigin.DECLARED:
            reason = f"recursion: known path redirects to {final_url}, declared in robots.txt"
            return SitemapOutcome(status=SitemapStatus.INVALID, error_message=reason, final_url=final_url)
        return SitemapOutcome(
            status=SitemapStatus.DUPLICATE,
            error_message=f"redirects to {final_url}, already part of this job",
            final_url=final_url,
        )

    # entries --------------------------------------------------------------------------------------

    def _take(self, entries: Sequence[PageEntry | ChildSitemap]) -> None:
        """A parsed piece's entries: page URLs pass hygiene, scope, patterns and the first-declaration rule,
        and are batched for recording. One loop on local names: it runs for every URL a site lists."""
        self.entries += len(entries)
        site_host, scope, patterns = self.site_host, self.request.scope, self.filter
        first = self.seen_pages.add
        digest = self.digest.update
        drop = self._drop
        durable = self.ctx.counter is None  # (a throwaway run needs no URL key: its store keeps only bits)
        from_bytes = int.from_bytes
        for entry in entries:
            if isinstance(entry, ChildSitemap):
                self._take_child(entry)
                continue
            screened = screen(entry.url)
            if isinstance(screened, str):
                drop(screened)
                continue
            url, host = screened
            if host != site_host and not host_in_scope(host, site_host, scope):
                drop("out_of_scope")
                continue
            if patterns:
                reason = patterns.refusal(url)
                if reason is not None:
                    drop(reason)
                    continue
            if durable:
                key = url_key(url)
                bits = bits_of(key)
                raw = key.encode() + b"\n"
            else:
                raw = url_bits(url)
                bits = from_bytes(raw)
            if not first(bits):
                drop("duplicate_in_sitemap")
                continue
            index = self.accepted
            self.accepted = index + 1
            digest(raw)  # (the checkpoint's: a retried reading in the same run compares the same form)
            if index < self.enqueued:
                if index == self.enqueued - 1:
                    self._reached_checkpoint()
                continue  # recorded and sent before a restart
            batch = self.page_batch
            batch.append((index, url, entry, bits))
            if len(batch) >= self.batch_size:
                self._flush_pages()

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _take_child(self, entry: ChildSitemap) -> None:
        reason = refusal(entry.url)
        if reason is not None:
            self._drop(f"sitemap_{reason}")
            return
        url = normalize(entry.url)
        if url in self.seen_children:
            self._drop("duplicate_in_sitemap")
            return
        self.seen_children.add(url)
        if self.is_robots:
            self.declared.append(url)
        if url in self.chain:
            reason = "lists itself" if url == self.record.url else "is an ancestor of the sitemap listing it"
            self._invalid_child(url, f"recursion: {reason}")
            return
        depth = self.record.depth + 1
        if depth > self.request.max_depth:
            self._invalid_child(url, f"deeper than max_depth {self.request.max_depth}", drop=TOO_DEEP)
            return
        origin = SitemapOrigin.DECLARED if self.is_robots else SitemapOrigin.INDEX
        child = SitemapRecord(
            url=url,
            origin=origin,
            depth=depth,
            ancestors=(*self.record.ancestors, self.record.url),
            parent=self.record.url,
            discovered_at=self.ctx.clock(),
        )
        self.found.append(child)

    def _invalid_child(self, url: str, reason: str, *, drop: str = "invalid_sitemap") -> None:
        self._drop(drop)
        if len(self.invalid_children) < MAX_INVALID_CHILDREN_LISTED:
            self.invalid_children[url] = reason

    # batches --------------------------------------------------------------------------------------

    def _follow(
        self, children: list[SitemapRecord], *, level: int, parents: set[str], callbacks: SitemapCallbacks | None
    ) -> None:
        """Applies the job's sitemap patterns and ``callbacks`` to the children, all of them at once (as USP's
        list callback wants), then registers the ones followed and sends their tasks."""
        kept, refused = follow(
            [c.url for c in children],
            level=level,
            parents=parents,
            patterns=self.sitemap_patterns,
            callbacks=callbacks,
        )
        for _ in refused:
            self._drop(FILTERED)
        followed = set(kept)
        chosen = [c for c in children if c.url in followed]
        self.children += sum(1 for c in chosen if c.origin is not SitemapOrigin.KNOWN_PATH)
        step = self.ctx.record_batch
        for start in range(0, len(chosen), step):
            self._register(chosen[start : start + step])

    def _register(self, batch: list[SitemapRecord]) -> None:
        stored = self.ctx.store.add_sitemaps(self.job.job_id, batch)
        mine = {c.url for c in batch}
        # Ours to send: every child still pending that this sitemap registered, now or before a restart
        # (robots.txt also registers the known-path probes, which hang under the site node).
        to_send = [
            task_for(self.job.job_id, s)
            for s in stored
            if s.url in mine and s.status is SitemapStatus.PENDING and self._registered_by_us(s)
        ]
        self.ctx.queue.push(to_send)

    def _registered_by_us(self, sitemap: SitemapRecord) -> bool:
        if sitemap.parent == self.record.url:
            return True
        return self.is_robots and sitemap.origin is SitemapOrigin.KNOWN_PATH

    def _flush_pages(self) -> None:
        if not self.page_batch:
            return
        batch, self.page_batch = self.page_batch, []
        job_id = self.job.job_id
        # Recorded before a restart, maybe not sent: sent again (a final record absorbs its task). Recorded
        # again too: the job's records keep the ones recorded before, and if the sitemap changed meanwhile,
        # the entries at those positions now may be others.
        again = {url for index, url, _, _ in batch if index < self.recorded or self.resend}
        tasks = [self._task(url, entry) for _, url, entry, _ in batch if url in again]
        checkpoint = batch[-1][0] + 1
        sends = self.request.fetch_pages
        # With nothing to send, the write that records the batch also moves the sending checkpoint.
        fresh = [(url, entry) for _, url, entry, _ in batch]
        new = self._record(fresh, [bits for *_, bits in batch], checkpoint, enqueue=not sends)
        self._keep_extensions(fresh, new, again)
        self.recorded = max(self.recorded, checkpoint)
        if sends:
            now, settings = self.ctx.clock(), self.ctx.settings
            tasks += [
                page.task(job_id, rank=rank_of(page, now, settings))
                for page in new
                if isinstance(page, SitemapURL) and page.status is UrlStatus.PENDING and page.url not in again
            ]
            self.ctx.queue.push(tasks)
            self.ctx.store.mark_enqueued(job_id, self.record.url, self._checkpoint(checkpoint), self.lease)
        self.enqueued = checkpoint

    def _keep_extensions(
        self, fresh: list[tuple[str, PageEntry]], new: list[SitemapURL | ListedRow], again: set[str]
    ) -> None:
        """The extensions of URLs another sitemap of the job listed first (a news sitemap after an RSS feed
        of the same stories): the first listing made the record; what this one adds is kept beside it."""
        if self.ctx.counter is not None:  # (a throwaway run keeps no records)
            return
        listed = {page.url for page in new} | again
        later = [(url, ext) for url, entry in fresh if url not in listed and (ext := entry.extensions())]
        if later:
            self.ctx.store.add_extensions(self.job.job_id, later)

    def _checkpoint(self, enqueued: int) -> Checkpoint:
        return Checkpoint(enqueued=enqueued, digest=self.digest.hexdigest(), probes=self.probes)

    def _reached_checkpoint(self) -> None:
        """At the checkpoint of a resumed reading (or at the end of a document shorter than it): the URLs
        skipped must be the ones the checkpoint counted."""
        expected = self.record.checkpoint_digest
        if self.resend or not self.enqueued or expected is None:
            return
        if self.accepted < self.enqueued or (self.accepted == self.enqueued and self.digest.hexdigest() != expected):
            raise _ListingMoved(self.record.url)

    def _record(
        self, fresh: list[tuple[str, PageEntry]], keys: list[int], checkpoint: int, *, enqueue: bool
    ) -> list[SitemapURL | ListedRow]:
        """Records a batch (``keys``: their URL keys' bits, worked out already) with the crawl records it
        moves; when another job of the site moved one of them meanwhile, the batch is decided again on what
        that job wrote.

        The crawl record of a URL handed to a fetch is not written here but by the fetch's settlement, the
        listing and the fetch in one write (the job record carries it as ``known``): written at the listing
        as well, it would cost a fetched page a second transactional write of it on DynamoDB."""
        counter = self.ctx.counter
        if counter is not None:  # a throwaway run: its consumer makes what it hands out of the new ones
            new = counter.count_pages(
                self.job.job_id,
                self.record.url,
                keys,
                checkpoint=checkpoint,
                lease=self.lease,
                enqueued=self._checkpoint(checkpoint) if enqueue else None,
            )
            if self.ctx.listed is not None:  # (a batch's positions are consecutive: it ends at the checkpoint)
                self.ctx.listed(self.record.url, checkpoint - len(fresh), fresh)
            if new and self.ctx.found is not None:
                self.ctx.found(self.record.url, [fresh[i] for i in new])
            return []  # (nothing to send: a throwaway run fetches no page)
        new: list[SitemapURL | ListedRow] = []
        probes = self.probes
        first_crawl = self.ctx.first_crawl(self.job)
        for attempt in range(STALE_ATTEMPTS):
            self.probes = probes
            lookup = attempt > 0 or not first_crawl
            priors = self.ctx.crawldb.get_urls(self.site, [url for url, _ in fresh]) if lookup else {}
            now = self.ctx.clock()  # (one time for a batch: it is one write)
            decided = self._decide(fresh, priors, now)
            recorded = self.ctx.store.record_pages(
                self.job.job_id,
                self.record.url,
                [page for page, _ in decided],
                checkpoint=checkpoint,
                lease=self.lease,
                site=self.site,
                crawl={page.url: crawl for page, crawl in decided if crawl is not None},
                enqueued=self._checkpoint(checkpoint) if enqueue else None,
                keys=keys,
            )
            new += recorded.new
            if not recorded.stale:
                return new
            log.info("crawl records moved meanwhile; deciding again", extra={"urls": len(recorded.stale)})
        raise RuntimeError(f"crawl records listed by {self.record.url} kept changing under job {self.job.job_id}")

    def _decide(
        self, fresh: list[tuple[str, PageEntry]], priors: Mapping[str, CrawlRecord], now: datetime
    ) -> list[tuple[SitemapURL | ListedRow, CrawlRecord | CrawlRow | None]]:
        """Each URL's job record and the crawl record this listing writes (None for a URL to fetch: its
        settlement writes it); those of a URL new to the site in a job that fetches nothing written straight
        as JSON (``listed_rows``)."""
        if self.request.fetch_pages:
            return [self._page(url, entry, priors.get(url), now) for url, entry in fresh]
        firsts = iter(
            first_listings(
                [(url, entry) for url, entry in fresh if url not in priors],
                sitemap=self.record.url,
                job_id=self.job.job_id,
                now=now,
                schedule=self.schedule,
            )
        )
        decided: list[tuple[SitemapURL | ListedRow, CrawlRecord | CrawlRow | None]] = []
        for url, entry in fresh:
            prior = priors.get(url)
            rows = next(firsts) if prior is None else None
            decided.append(rows if rows is not None else self._page(url, entry, prior, now))
        return decided

    def _page(
        self, url: str, entry: PageEntry, prior: CrawlRecord | None, now: datetime
    ) -> tuple[SitemapURL, CrawlRecord | None]:
        """The job's record of a listed URL (to be fetched: pending, with the reason; or not due), and the
        URL's crawl record as this listing leaves it: to be written now, or (None) with the fetch's outcome,
        the job record carrying it as ``known``."""
        known = listed(
            prior,
            url=url,
            lastmod=entry.lastmod,
            changefreq=entry.changefreq,
            priority=entry.priority,
            sitemap=self.record.url,
            job_id=self.job.job_id,
            now=now,
            schedule=self.schedule,
        )
        change = listing_change(prior)
        base = self._listed_fields(url, entry, now)
        if not self.request.fetch_pages:
            return _unfetched(base, known, now, "listed", change or ChangeKind.LISTED), known
        decision = due(
            known,
            new=prior is None,
            lastmod=entry.lastmod,
            now=now,
            refetch_all=self.request.refetch is Refetch.ALL,
            trusted=prior is None or self._trusted(url),
            may_probe=self.probes < self.ctx.settings.lastmod_probes,
        )
        if decision.reason is None:
            return _unfetched(base, known, now, "not_due", change or ChangeKind.NOT_DUE), known
        self.probes += decision.probe
        # The page worker fetches on this snapshot (its validators, its signature) and writes it, moved by
        # the fetch, as version ``known.version``: conditioned on the version this listing read.
        base.update(known=known, fetch_reason=decision.reason, change=change)
        return SitemapURL(**base), None

    def _listed_fields(self, url: str, entry: PageEntry, now: datetime) -> dict[str, Any]:
        return listed_fields(url, entry, self.record.url, now)

    def _trusted(self, url: str) -> bool:
        if self._site is None:
            self._site = self.ctx.crawldb.get_site(self.site) or SiteCrawl(site=self.site)
        return self._site.trust(host_of(url)).trusted

    def _task(self, url: str, entry: PageEntry) -> PageTask:
        """A task sent again after a restart (whether the URL is new to the site is not known here)."""
        order = rank(entry.priority, new=False, lastmod=entry.lastmod, now=self.ctx.clock(), settings=self.ctx.settings)
        return PageTask(
            job_id=self.job.job_id,
            url=url,
            sitemap=self.record.url,
            lastmod=entry.lastmod,
            changefreq=entry.changefreq,
            priority=entry.priority,
            rank=order,
        )

    async def _archive(
        self,
        response: FetchResponse,
        *,
        body: page_archive.RawBody | None = None,
        revisits: WarcLocation | None = None,
    ) -> WarcLocation | None:
        """The reading's capture (a response with ``body``, or a revisit of the record ``revisits``: a 304 or
        the same bytes again), after the redirects that led to it, stored in the job's WARC files as a batch
        of its own (a sitemap is read once per job: one object, or one append, per sitemap). Where its main
        record was stored."""
        kind = "robots.txt" if self.is_robots else "sitemap"
        metadata = {"job_id": self.job.job_id, "kind": kind, "url": self.record.url, "depth": self.record.depth}
        batch = WarcBatch()
        try:
            page_archive.add_answer(
                batch,
                self.record.url,
                response,
                fetched_at=self.ctx.clock(),
                metadata=metadata,
                job_id=self.job.job_id,
                body=body,
                revisits=revisits,
            )
            return (await page_archive.store(self.ctx, self.job, batch)).get(self.record.url)
        finally:
            batch.close()

    def _store_raw(self, raw: tempfile.SpooledTemporaryFile[bytes], content_type: str | None, signature: str) -> str:
        raw.seek(0)
        key = sitemap_key(self.site, self.record.url, signature)
        self.ctx.documents.put(
            key,
            raw,
            content_type=content_type,
            metadata={"url": self.record.url, "job-id": self.job.job_id},
        )
        return key


def _validators(prior: SitemapCrawl | None, *, warc: bool) -> dict[str, str]:
    """The conditional headers of a sitemap read before (its stored copy answers a 304). For a job that
    keeps WARC, only of a reading a WARC record holds, which a 304 is archived as a revisit of: one no WARC
    record holds (read by a job that kept files) is asked for whole once. (A reading cut at the size limit is never
    archived: it stays conditional.)"""
    if prior is None or (warc and prior.warc is None and not prior.truncated):
        return {}
    return conditional_headers(prior.etag, prior.http_last_modified)


def _unfetched(base: dict[str, Any], known: CrawlRecord, now: datetime, reason: str, change: ChangeKind) -> SitemapURL:
    """A URL this job lists but does not fetch: final at once, showing what the crawl database knows of it
    (copied: nothing will fetch it, so it carries no snapshot to fetch on)."""
    base.update(
        status=UrlStatus.COMPLETED,
        finished_at=now,
        fetch_reason=reason,
        change=change,
        crawl_state=known.state,
        next_fetch_time=known.next_fetch_time,
    )
    if known.last_fetch_time is not None or known.signature is not None:  # (a URL never fetched has none of these)
        base.update(
            http_status=known.http_status,
            content_type=known.content_type,
            size=known.size,
            signature=known.signature,
            etag=known.etag,
            http_last_modified=known.http_last_modified,
            document_key=known.document_key,
            fetch_time=known.last_fetch_time,
        )
    return SitemapURL(**base)
