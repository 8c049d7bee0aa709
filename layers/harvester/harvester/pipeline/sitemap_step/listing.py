"""The listing of a sitemap's pages: the URLs its entries screen accepts, recorded in batches and sent.

``PageListing.accept`` takes each accepted URL in document order: it counts its position (the checkpoint's
unit) and digests it. A resumed reading skips the URLs its checkpoint says were sent, and at the checkpoint
checks that they were the same ones (else ``ListingMoved``: the sitemap changed in between). The rest are
held in windows (``StateStore.listing_window``), each recorded by ``record_pages``, which records the URLs
new to the job with the crawl records their listing moves and moves the sitemap's checkpoint (a store that
keeps pages in batches writes them a lane at a time, a batch a transaction, and moves the checkpoint past the
whole window with the first, so that a delivery stopped between two records and sends the window again);
only then are their page tasks sent, two batches of one lane a page message, and a second
write moves the sending checkpoint. A listing made afresh (a reading that starts over) records every URL
again and sends every pending page's task again.

Each URL's job record is decided here: to be fetched (with its reason), not due, or listed only by a job
that fetches nothing (final at once, ``_unfetched``; a URL new to the site then written straight as JSON by
``listed_rows``). A throwaway run records nothing: its counter counts the URLs and hands them out.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from datetime import datetime

from harvester.crawldb.crawl_state import listed, listing_change
from harvester.crawldb.part_diff import PartDiff
from harvester.crawldb.schedule import due, lastmod_advanced
from harvester.model.crawl import ChangeKind, CrawlRecord, SiteCrawl
from harvester.model.messages import PAGES_PER_MESSAGE, PageTask, Refetch
from harvester.model.records import (
    CrawlRow,
    JobRecord,
    ListedRow,
    SitemapRecord,
    SitemapURL,
    StepDocument,
    UrlStatus,
)
from harvester.model.state import Checkpoint, Lease
from harvester.pipeline.context import StepContext
from harvester.pipeline.listed_rows import first_listings, listed_fields, unfetched
from harvester.pipeline.ranking import PRIORITY_LANE, rank, rank_of
from harvester.pipeline.sitemap_step.prefix import DocumentPrefix
from harvester.sitemap import PageEntry
from harvester.urls import host_of

log = logging.getLogger(__name__)

#: Times a batch is decided again when other jobs keep moving its crawl records (then the task is retried).
STALE_ATTEMPTS = 8


class ListingMoved(Exception):
    """A resumed reading found other URLs before its checkpoint than the reading that set it: the sitemap
    changed in between, so skipping by position would skip URLs never recorded."""


class StepEnded(Exception):
    """This delivery's step of the reading is spent (``sitemap_step_urls`` URLs recorded in it, or
    ``sitemap_step_seconds``): the reading goes on from its checkpoint, just written, in a delivery of its
    own. ``document``: the one the later steps read, once the reading has kept it (``StepDocument``)."""

    def __init__(self, url: str, checkpoint: int, listed: int) -> None:
        super().__init__(f"{url}: {listed} URLs listed in this step; goes on from entry {checkpoint}")
        self.checkpoint = checkpoint
        self.listed = listed
        self.document: StepDocument | None = None


class PageListing:
    """The pages one reading of a claimed sitemap lists: batched, recorded, sent, and the checkpoint moved."""

    def __init__(
        self, ctx: StepContext, job: JobRecord, record: SitemapRecord, lease: Lease, *, resend: bool = False
    ) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.lease = lease
        self.request = job.request
        self.site = job.request.origin
        self.schedule = ctx.settings.schedule
        self.page_batch: list[tuple[int, str, PageEntry, int]] = []  # (position, URL, entry, key bits)
        self.window = ctx.listing_window
        self.accepted = 0  # page entries accepted so far, in document order: the checkpoint's unit
        # With ``resend`` (a reading started over on a changed sitemap), the positions recorded and sent
        # before mean nothing: every URL is recorded again and every pending page's task is sent again.
        self.resend = resend
        #: Pages were recorded before this listing started over (``SitemapRecord.restarted``).
        self.started_over = record.restarted or (resend and record.pages_recorded > 0)
        #: The bytes read of the document, against those the checkpoint's entries were read from (a resumed
        #: reading: ``DocumentPrefix``), fed by the reading.
        # (the prefix is checkpointed with the pages' sending: pages recorded past it, their tasks unsent,
        # were read from bytes it does not cover)
        resumed = record.pages_recorded > 0 and not resend
        prefix = (record.prefix_bytes, record.prefix_digest) if record.prefix_digest is not None else None
        unknown = prefix is None or record.pages_recorded > record.pages_enqueued
        self.document = DocumentPrefix(prefix if resumed else None, unknown=resumed and unknown)
        self.recorded = 0 if resend else record.pages_recorded
        self.enqueued = 0 if resend else record.pages_enqueued
        self.digest = hashlib.blake2b(digest_size=16)  # of the accepted URLs so far, for the checkpoint
        #: The digest as it was at the end of the batch held first (its position past it, and the copy): the
        #: checkpoint of that batch's write, made while a batch more is read behind it.
        self._cut: tuple[int, hashlib.blake2b] | None = None
        self.probes = record.probes_spent  # lastmod probes spent on an untrusted host
        self.held = record.lastmods_held  # URLs not due whose lastmod advanced (no probe left)
        self._site: SiteCrawl | None = None
        #: With the sitemap's part to adopt in part: the entries whose lines it holds are kept for it, not
        #: listed (``PartDiff``).
        self.diff: PartDiff | None = None
        #: When this delivery's reading began, and the URLs it recorded since (its step: ``StepEnded``).
        self.began = time.monotonic()
        self.stepped = 0
        #: The checkpoint a listing that starts over must pass before it may pause: the one stored when the
        #: sitemap was claimed, or one this delivery's listings wrote since.
        self.floor = record.pages_enqueued
        #: The listing's entries come from the document the reading's first step kept (``Checkpoint.noted``).
        self.noted = False
        #: The rank of each page to fetch the last write recorded, by URL (its task's, and its lane's).
        self._ranks: dict[str, float] = {}

    @property
    def restarted(self) -> bool:
        """The reading started over after pages were recorded, or was resumed on other bytes than those its
        checkpoint's entries were read from (``SitemapRecord.restarted``)."""
        return self.started_over or self.document.differs

    def afresh(self) -> PageListing:
        """The listing of a reading that starts over from the first entry: the job's records absorb the URLs
        recorded before (``record_pages`` counts only new ones), their tasks are sent again. The lastmod
        probes spent stay spent, and the site's crawl record looked up stays known."""
        fresh = PageListing(self.ctx, self.job, self.record, self.lease, resend=True)
        fresh.probes, fresh.held, fresh._site, fresh.document = self.probes, self.held, self._site, self.document
        fresh.began, fresh.stepped = self.began, self.stepped
        fresh.floor = max(self.floor, self.enqueued)
        fresh.noted = self.noted
        return fresh

    def accept(self, url: str, entry: PageEntry, bits: int, raw: bytes) -> None:
        """A URL the screen accepted (``bits``: its key's bits; ``raw``: the form the checkpoint digests):
        skipped if recorded and sent before a restart, else held, a window recorded once a window more is held
        behind it (so that the reading's last write takes its remainder along, rather than a few pages alone:
        each batch written costs its fetches a claim, a settlement and an archive object).

        A reading that compares with the sitemap's part compares every entry, those it skips too (so that a
        resumed reading knows the entries kept before its checkpoint, unrecorded, as the reading that set it
        did), and its checkpoint digests each decision with the URL: a resumed reading that decides otherwise
        on an entry before the checkpoint (it changed meanwhile) starts over (``ListingMoved``)."""
        index = self.accepted
        self.accepted = index + 1
        kept = self.diff is not None and self.diff.keeps(url, entry)
        self.digest.update(raw)  # (the checkpoint's: a retried reading in the same run compares the same form)
        if self.diff is not None:
            self.digest.update(b"k" if kept else b"l")
        if index < self.enqueued:
            if index == self.enqueued - 1:
                self.reached_checkpoint()
            return  # recorded and sent before a restart
        if kept:
            return  # (the job's through the part, once adopted)
        batch = self.page_batch
        batch.append((index, url, entry, bits))
        if len(batch) == self.window:
            self._cut = (index + 1, self.digest.copy())
        elif len(batch) >= 2 * self.window:
            self.flush(self.window)
            self._cut = (index + 1, self.digest.copy())  # (the batch held now ends here)
            self._end_step()

    def _end_step(self) -> None:
        """Ends this delivery's step when it is spent (``StepEnded``), right after a batch was recorded and
        sent: the checkpoint that write moved is where the next delivery goes on (the batch held behind it is
        read again there). Not for a reading that compares the elements of a changed body with its stored
        copy's (``PartDiff.by_elements``: it parses the changed ones only, at most a step of them, which a
        resumed reading, reading entry by entry, would not find where the checkpoint says); nor for a reading
        that started over and has not got past the checkpoint stored before (``floor``: the stored one stays
        where it was until then, and a delivery resumed there would start over again, for ever if the sitemap
        kept changing); nor for a throwaway run, which has no deliveries."""
        settings = self.ctx.settings
        by_elements = self.diff is not None and self.diff.by_elements
        if by_elements or self.ctx.ephemeral:
            return
        urls, seconds = settings.sitemap_step_urls, settings.sitemap_step_seconds
        spent = (urls and self.stepped >= urls) or (seconds and time.monotonic() - self.began >= seconds)
        if spent and self.enqueued > self.floor:
            raise StepEnded(self.record.url, self.enqueued, self.stepped)

    def flush(self, count: int | None = None) -> None:
        """Records the pages held (the first ``count``, or all: fewer than two windows), then sends the tasks
        of those to fetch, a page message a batch recorded, and moves the sending checkpoint."""
        if not self.page_batch:
            return
        if count is None:
            batch, self.page_batch = self.page_batch, []
        else:
            batch, self.page_batch = self.page_batch[:count], self.page_batch[count:]
        job_id = self.job.job_id
        # Recorded before a restart, maybe not sent: sent again (a final record absorbs its task). Recorded
        # again too: the job's records keep the ones recorded before, and if the sitemap changed meanwhile,
        # the entries at those positions now may be others.
        again = {url for index, url, _, _ in batch if index < self.recorded or self.resend}
        tasks = [self._task(url, entry) for _, url, entry, _ in batch if url in again]
        checkpoint = batch[-1][0] + 1
        if count is None and self.diff is not None and not self.diff.by_elements:
            # (the entries past the last one held were kept for the part: the checkpoint passes them, where the
            # digest, theirs included, stands, so that a delivery resumed after this write resumes the comparison)
            checkpoint = self.accepted
        sends = self.request.fetch_pages
        # With nothing to send, the write that records the batch also moves the sending checkpoint.
        fresh = [(url, entry) for _, url, entry, _ in batch]
        new, batches, stored = self._record(fresh, [bits for *_, bits in batch], checkpoint, enqueue=not sends)
        self.stepped += len(batch)
        self._keep_extensions(fresh, new, again)
        self.recorded = max(self.recorded, checkpoint)
        if not sends:
            self.enqueued = checkpoint
            return
        # Each batch's tasks sent whole, two batches a page message where they fit one (``paired``; a store
        # that keeps no batches: one run), so that a page function claims and settles a message's pages in
        # the fewest batches.
        runs: list[list[PageTask]] = []
        start = 0
        for size in batches or [len(new)]:
            runs.append(
                [
                    page.task(job_id, rank=self._ranks[page.url], stored=stored.get(page.url))
                    for page in new[start : start + size]
                    if isinstance(page, SitemapURL) and page.status is UrlStatus.PENDING and page.url not in again
                ]
            )
            start += size
        for run in [tasks, *paired(runs)]:
            if run:
                self.ctx.queue.push(run)
        self._ranks.clear()
        if checkpoint > self.enqueued:
            self.ctx.store.mark_enqueued(self.job.job_id, self.record.url, self._checkpoint(checkpoint), self.lease)
            self.enqueued = checkpoint

    def reached_checkpoint(self) -> None:
        """At the checkpoint of a resumed reading (or at the end of a document shorter than it): the URLs
        skipped must be the ones the checkpoint counted."""
        expected = self.record.checkpoint_digest
        if self.resend or not self.enqueued or expected is None:
            return
        if self.accepted < self.enqueued or (self.accepted == self.enqueued and self.digest.hexdigest() != expected):
            raise ListingMoved(self.record.url)

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

    def whole_checkpoint(self) -> Checkpoint:
        """The checkpoint past every entry accepted (those kept for a part included)."""
        return self._checkpoint(self.accepted)

    def _checkpoint(self, enqueued: int) -> Checkpoint:
        cut = self._cut
        digest = cut[1] if cut is not None and cut[0] == enqueued else self.digest
        prefix = self.document.checkpoint()
        return Checkpoint(
            enqueued=enqueued,
            digest=digest.hexdigest(),
            probes=self.probes,
            held=self.held,
            compared=self.diff is not None,
            restarted=self.restarted,
            prefix_bytes=prefix[0],
            prefix_digest=prefix[1],
            noted=self.noted,
        )

    def _record(
        self, fresh: list[tuple[str, PageEntry]], keys: list[int], checkpoint: int, *, enqueue: bool
    ) -> tuple[list[SitemapURL | ListedRow], list[int], dict[str, str]]:
        """Records a window's pages (``keys``: their URL keys' bits, worked out already) with the crawl records
        it moves, those to fetch a lane at a time (``_ranks``); when another job of the site moved one of them
        meanwhile, the pages are decided again on what that job wrote. The pages new to the job, and how many
        of them each batch written holds (``Recorded.batches``).

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
            return [], [], {}  # (nothing to send: a throwaway run fetches no page)
        new: list[SitemapURL | ListedRow] = []
        batches: list[int] = []
        stored: dict[str, str] = {}
        probes, held = self.probes, self.held
        first_crawl = self.ctx.first_crawl(self.job)
        for attempt in range(STALE_ATTEMPTS):
            self.probes, self.held = probes, held
            lookup = attempt > 0 or not first_crawl
            priors = self.ctx.crawldb.get_urls(self.site, [url for url, _ in fresh]) if lookup else {}
            now = self.ctx.clock()  # (one time for a batch: it is one write)
            decided = self._decide(fresh, priors, now)
            lanes = self._lanes([page for page, _ in decided], now)
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
                left={url: p.sitemap for url, p in priors.items() if p.sitemap} if lookup else None,
                lanes=lanes,
            )
            new += recorded.new
            batches += recorded.batches
            stored |= recorded.stored
            if not recorded.stale:
                return new, batches, stored
            if not lookup:
                self.ctx.raced(self.job)
            log.info("crawl records moved meanwhile; deciding again", extra={"urls": len(recorded.stale)})
        raise RuntimeError(f"crawl records listed by {self.record.url} kept changing under job {self.job.job_id}")

    def _lanes(self, pages: list[SitemapURL | ListedRow], now: datetime) -> list[bool] | None:
        """Each page's lane (True: ranked above ``PRIORITY_LANE``), its rank kept for its task; None when the
        job fetches no page."""
        if not self.request.fetch_pages:
            return None
        settings = self.ctx.settings
        lanes: list[bool] = []
        for page in pages:
            order = 0.0
            if isinstance(page, SitemapURL) and page.status is UrlStatus.PENDING:
                order = self._ranks[page.url] = rank_of(page, now, settings)
            lanes.append(order > PRIORITY_LANE)
        return lanes

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
            lastmod=entry.last_modified,
            changefreq=entry.change_frequency,
            priority=entry.priority,
            sitemap=self.record.url,
            job_id=self.job.job_id,
            now=now,
            schedule=self.schedule,
        )
        change = listing_change(prior)
        base = listed_fields(url, entry, self.record.url, now)
        if not self.request.fetch_pages:
            self.held += lastmod_advanced(known, entry.last_modified)  # (a job fetching pages would fetch it)
            return unfetched(base, known, now, "listed", change or ChangeKind.LISTED), known
        decision = due(
            known,
            new=prior is None,
            lastmod=entry.last_modified,
            now=now,
            refetch_all=self.request.refetch is Refetch.ALL,
            trusted=prior is None or self._trusted(url),
            may_probe=self.probes < self.ctx.settings.lastmod_probes,
        )
        if decision.reason is None:
            self.held += lastmod_advanced(known, entry.last_modified)
            return unfetched(base, known, now, "not_due", change or ChangeKind.NOT_DUE), known
        self.probes += decision.probe
        # The page step fetches on this snapshot (its validators, its signature) and writes it, moved by
        # the fetch, as version ``known.version``: conditioned on the version this listing read.
        base.update(known=known, fetch_reason=decision.reason, change=change)
        return SitemapURL(**base), None

    def _trusted(self, url: str) -> bool:
        if self._site is None:
            self._site = self.ctx.crawldb.get_site(self.site) or SiteCrawl(site=self.site)
        return self._site.trust(host_of(url)).trusted

    def _task(self, url: str, entry: PageEntry) -> PageTask:
        """A task sent again after a restart (whether the URL is new to the site is not known here)."""
        order = rank(
            entry.priority, new=False, lastmod=entry.last_modified, now=self.ctx.clock(), settings=self.ctx.settings
        )
        return PageTask(
            job_id=self.job.job_id,
            url=url,
            sitemap=self.record.url,
            lastmod=entry.last_modified,
            changefreq=entry.change_frequency,
            priority=entry.priority,
            rank=order,
        )


def paired(runs: list[list[PageTask]]) -> list[list[PageTask]]:
    """Each run (a batch's tasks, all of one lane) with the next when both are of one lane and fit a page
    message together (``PAGES_PER_MESSAGE``): one message, one delivery and one archive object for two
    batches, the priority lane's too (its messages are delivered one an invocation, and the gate books a
    batch's turns a span at a time, whole: a message's batches are fetched and settled together)."""
    pairs: list[list[PageTask]] = []
    waiting: list[PageTask] = []
    for run in runs:
        if not run:
            continue
        if waiting and _lane(waiting) is _lane(run) and len(waiting) + len(run) <= PAGES_PER_MESSAGE:
            pairs.append(waiting + run)
            waiting = []
            continue
        if waiting:
            pairs.append(waiting)
        waiting = run
    if waiting:
        pairs.append(waiting)
    return pairs


def _lane(run: list[PageTask]) -> bool:
    return run[0].rank > PRIORITY_LANE
