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

import logging
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harvester.crawl_state import http_error
from harvester.discovery import known_path_probes, site_node, task_for
from harvester.fetch import FetchError, is_transient
from harvester.limits import ROBOTS_MAX_BYTES, SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES
from harvester.messages import SitemapOrigin, SitemapTask
from harvester.ports import Lease, LeaseLost, SitemapOutcome
from harvester.records import (
    JobRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    url_key,
)
from harvester.sitemap import ChildSitemap, PageEntry, SitemapParser
from harvester.sitemap_filter import follow
from harvester.urls import UrlFilter, in_scope, normalize, refusal

if TYPE_CHECKING:
    from harvester.engine import Engine

log = logging.getLogger(__name__)

SPOOL_IN_MEMORY = 1024 * 1024
MAX_INVALID_CHILDREN_LISTED = 100
#: Well-known paths that are simply not there are expected; these statuses mean "no sitemap here".
_ABSENT_STATUSES = frozenset({401, 403, 404, 410})


async def process_sitemap(engine: Engine, task: SitemapTask) -> SitemapRecord | None:
    job = engine.job(task.job_id)
    if job is None:
        log.warning("sitemap task for an unknown job dropped", extra={"job_id": task.job_id, "url": task.url})
        return None
    url = normalize(task.url)
    store = engine.store
    if store.get_sitemap(job.job_id, url) is None:
        # Only a hand-made task names a sitemap nobody registered: register it so that it is counted.
        store.add_sitemaps(
            job.job_id,
            [
                SitemapRecord(
                    url=url,
                    origin=task.origin,
                    depth=task.depth,
                    ancestors=task.ancestors,
                    discovered_at=engine.clock(),
                )
            ],
        )
    now = engine.clock().timestamp()
    lease = Lease(token=uuid.uuid4().hex, until=now + engine.settings.sitemap_lease_seconds)
    record = store.claim_sitemap(job.job_id, url, lease, now=now)
    if record is None:
        log.info("sitemap already done or in progress elsewhere", extra={"job_id": job.job_id, "url": url})
        return None
    if record.attempts > engine.settings.max_attempts:
        outcome: SitemapOutcome | Retry = SitemapOutcome(
            status=SitemapStatus.FAILED,
            error_message=f"gave up after {record.attempts - 1} attempts to read it",
        )
    else:
        try:
            outcome = await SitemapReading(engine, job, record, lease).run()
        except LeaseLost:
            # We were too slow: the lease lapsed and another worker took the sitemap over from its checkpoint.
            log.warning("sitemap lease lost to another worker", extra={"job_id": job.job_id, "url": url})
            return None
    if isinstance(outcome, Retry):
        delay = min(
            engine.settings.retry_backoff_seconds * 2 ** (record.attempts - 1),
            engine.settings.retry_backoff_max_seconds,
        )
        if store.release_sitemap(job.job_id, url, lease, error_message=outcome.reason):
            engine.queue.send([task_for(job.job_id, record)], delay_seconds=int(delay))
        log.info("sitemap to be read again", extra={"job_id": job.job_id, "url": url, "reason": outcome.reason})
        return store.get_sitemap(job.job_id, url)
    outcome.finished_at = engine.clock()
    store.finish_sitemap(job.job_id, url, outcome, lease)
    log.info(
        "sitemap done",
        extra={
            "job_id": job.job_id,
            "url": url,
            "status": outcome.status.value,
            "error": outcome.error_message,
        },
    )
    engine.maybe_complete(job.job_id)
    return store.get_sitemap(job.job_id, url)


@dataclass(frozen=True, slots=True)
class Retry:
    """The reading failed for a reason that may pass (the sitemap goes back to pending, delayed)."""

    reason: str


class SitemapReading:
    """The reading of one claimed sitemap: fetch, parse as it streams, record and send in batches."""

    def __init__(self, engine: Engine, job: JobRecord, record: SitemapRecord, lease: Lease) -> None:
        self.engine = engine
        self.job = job
        self.record = record
        self.lease = lease
        self.request = job.request
        self.filter = UrlFilter.of(self.request.include, self.request.exclude)
        self.sitemap_patterns = UrlFilter.of(self.request.sitemap_include, self.request.sitemap_exclude)
        self.chain = {normalize(a) for a in record.ancestors} | {record.url}
        self.dropped: dict[str, int] = {}
        self.invalid_children: dict[str, str] = {}
        self.seen_pages: set[str] = set()
        self.seen_children: set[str] = set()
        self.page_batch: list[tuple[int, SitemapURL, PageEntry]] = []
        self.found: list[SitemapRecord] = []  # valid children, followed (filtered, registered) at the end
        self.accepted = 0  # page entries accepted so far, in document order: the checkpoint's unit
        self.children = 0
        self.declared: list[str] = []  # robots.txt Sitemap: lines, to leave out of the known-path probes
        self.recorded = record.pages_recorded
        self.enqueued = record.pages_enqueued

    @property
    def is_robots(self) -> bool:
        return self.record.origin is SitemapOrigin.ROBOTS

    @property
    def is_probe(self) -> bool:
        return self.record.origin is SitemapOrigin.KNOWN_PATH

    @property
    def may_retry(self) -> bool:
        return self.record.attempts < self.engine.settings.retry_max

    async def run(self) -> SitemapOutcome | Retry:
        try:
            outcome = await self._read()
        except FetchError as exc:
            reason = exc.explain(self.record.url)
            if exc.retryable and self.may_retry:
                return Retry(reason)
            status = SitemapStatus.ABSENT if self.is_probe else SitemapStatus.FAILED
            outcome = SitemapOutcome(status=status, error_message=self._final_reason(reason, exc.retryable))
        transient = outcome.http_status is not None and is_transient(outcome.http_status)
        if transient and outcome.status is SitemapStatus.FAILED:
            if self.may_retry:
                return Retry(outcome.error_message or f"HTTP {outcome.http_status}")
            outcome.error_message = self._final_reason(outcome.error_message or "", True)
        # USP's numbering: robots.txt's children are at level 0, with robots.txt as their only parent.
        parents = {a for a in self.record.ancestors if a != site_node(self.request)} | {self.record.url}
        self._follow(self.found, level=self.record.depth - 1, parents=parents)
        if self.is_robots:
            # robots.txt leads to the well-known paths whatever happened to it (a site may have none).
            probes = known_path_probes(self.request, self.declared, now=self.engine.clock())
            self._follow(probes, level=0, parents=set())
        outcome.children = self.children
        outcome.dropped = self.dropped
        outcome.invalid_children = self.invalid_children
        return outcome

    def _final_reason(self, reason: str, transient: bool) -> str:
        return f"{reason} (gave up after {self.record.attempts} attempts)" if transient else reason

    async def _read(self) -> SitemapOutcome:
        url = self.record.url
        limit = ROBOTS_MAX_BYTES if self.is_robots else SITEMAP_MAX_BYTES
        async with self.engine.fetcher.open(url, max_bytes=limit) as response:
            final_url = normalize(response.url)
            if not 200 <= response.status_code < 300:
                quiet = (self.is_probe or self.is_robots) and response.status_code in _ABSENT_STATUSES
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
            broken: str | None = None
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as raw:
                try:
                    async for chunk in response.iter_bytes():
                        raw.write(chunk)
                        self._take(parser.feed(chunk))
                        if parser.finished:
                            break
                except FetchError as exc:
                    # The body broke off: what arrived whole is recorded either way (a retry resumes after
                    # it); on the last reading it is all there is, so it is kept and the sitemap truncated.
                    self._flush_pages()
                    if exc.retryable and self.may_retry:
                        raise
                    broken = self._final_reason(exc.explain(self.record.url), exc.retryable)
                self._take(parser.close(complete=response.complete and not parser.finished))
                self._flush_pages()
                document_key = self._store_raw(raw, response.content_type)
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
            truncated=broken or response.truncated or report.truncated,
            final_url=final_url,
            http_status=response.status_code,
            warnings=dict(report.warnings),
            document_key=document_key,
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
        known = self.engine.store.get_sitemap(self.job.job_id, final_url)
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

    def _take(self, entries: list[PageEntry | ChildSitemap]) -> None:
        for entry in entries:
            if isinstance(entry, PageEntry):
                self._take_page(entry)
            else:
                self._take_child(entry)

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _take_page(self, entry: PageEntry) -> None:
        reason = refusal(entry.url)
        if reason is not None:
            self._drop(reason)
            return
        url = normalize(entry.url)
        if not in_scope(url, self.request.site, self.request.scope):
            self._drop("out_of_scope")
            return
        reason = self.filter.refusal(url)
        if reason is not None:
            self._drop(reason)
            return
        key = url_key(url)
        if key in self.seen_pages:
            self._drop("duplicate_in_sitemap")
            return
        self.seen_pages.add(key)
        index = self.accepted
        self.accepted += 1
        if index < self.enqueued:
            return  # recorded and sent before a restart
        page = SitemapURL(
            url=url,
            last_modified=entry.lastmod,
            change_frequency=entry.changefreq,
            priority=entry.priority,
            sitemap=self.record.url,
            extensions=entry.extensions(),
            discovered_at=self.engine.clock(),
        )
        self.page_batch.append((index, page, entry))
        if len(self.page_batch) >= self.engine.settings.record_batch:
            self._flush_pages()

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
            self._invalid_child(url, f"deeper than max_depth {self.request.max_depth}")
            return
        origin = SitemapOrigin.DECLARED if self.is_robots else SitemapOrigin.INDEX
        child = SitemapRecord(
            url=url,
            origin=origin,
            depth=depth,
            ancestors=(*self.record.ancestors, self.record.url),
            parent=self.record.url,
            discovered_at=self.engine.clock(),
        )
        self.found.append(child)

    def _invalid_child(self, url: str, reason: str) -> None:
        self._drop("invalid_sitemap")
        if len(self.invalid_children) < MAX_INVALID_CHILDREN_LISTED:
            self.invalid_children[url] = reason

    # batches --------------------------------------------------------------------------------------

    def _follow(self, children: list[SitemapRecord], *, level: int, parents: set[str]) -> None:
        """Applies the job's sitemap patterns and the callbacks to the children, all of them at once (as
        USP's list callback wants), then registers the ones followed and sends their tasks."""
        kept, refused = follow(
            [c.url for c in children],
            level=level,
            parents=parents,
            patterns=self.sitemap_patterns,
            callbacks=self.engine.callbacks,
        )
        for _ in refused:
            self._drop("sitemap_filtered")
        followed = set(kept)
        chosen = [c for c in children if c.url in followed]
        self.children += sum(1 for c in chosen if c.origin is not SitemapOrigin.KNOWN_PATH)
        step = self.engine.settings.record_batch
        for start in range(0, len(chosen), step):
            self._register(chosen[start : start + step])

    def _register(self, batch: list[SitemapRecord]) -> None:
        stored = self.engine.store.add_sitemaps(self.job.job_id, batch)
        mine = {c.url for c in batch}
        # Ours to send: every child still pending that this sitemap registered, now or before a restart
        # (robots.txt also registers the known-path probes, which hang under the site node).
        to_send = [
            task_for(self.job.job_id, s)
            for s in stored
            if s.url in mine and s.status is SitemapStatus.PENDING and self._registered_by_us(s)
        ]
        self.engine.queue.send(to_send)

    def _registered_by_us(self, sitemap: SitemapRecord) -> bool:
        if sitemap.parent == self.record.url:
            return True
        return self.is_robots and sitemap.origin is SitemapOrigin.KNOWN_PATH

    def _flush_pages(self) -> None:
        if not self.page_batch:
            return
        batch, self.page_batch = self.page_batch, []
        job_id = self.job.job_id
        fetch = self.request.fetch_pages
        resend = [page for index, page, _ in batch if index < self.recorded]
        fresh = [page for index, page, _ in batch if index >= self.recorded]
        checkpoint = batch[-1][0] + 1
        new: list[SitemapURL] = []
        if fresh:
            if not fetch:
                now = self.engine.clock()
                fresh = [p.model_copy(update={"status": UrlStatus.COMPLETED, "finished_at": now}) for p in fresh]
            new = self.engine.store.record_pages(
                job_id, self.record.url, fresh, checkpoint=checkpoint, lease=self.lease
            )
            self.recorded = checkpoint
        if fetch:
            self.engine.queue.send([p.task(job_id) for p in (*resend, *new)])
        self.engine.store.mark_enqueued(job_id, self.record.url, checkpoint, self.lease)
        self.enqueued = checkpoint

    def _store_raw(self, raw: tempfile.SpooledTemporaryFile[bytes], content_type: str | None) -> str:
        raw.seek(0)
        key = f"jobs/{self.job.job_id}/sitemaps/{self.record.key}"
        self.engine.documents.put(
            key,
            raw,
            content_type=content_type,
            metadata={"url": self.record.url, "job-id": self.job.job_id},
        )
        return key
