"""How records move and what each move counts, shared by every state store.

The stores differ in how they make a move atomic (a SQLite transaction, a DynamoDB transaction with
conditions); what the move *is* — the new record, and the counter deltas that must be written with it —
is decided here once, so both adapters count exactly the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from harvester.model.records import (
    JobCounts,
    ListedRow,
    PageRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
)
from harvester.model.state import Checkpoint, PageRetry, SitemapOutcome, SitemapRelease

ROBOTS_KIND = "robots"
R = TypeVar("R", SitemapRecord, SitemapURL, ListedRow)


def first_per_url(records: Iterable[R]) -> list[R]:
    """One record per URL, the first given: the first declaration counts, and a DynamoDB transaction may not
    touch one item twice."""
    seen: dict[str, R] = {}
    for record in records:
        seen.setdefault(record.url, record)
    return list(seen.values())


def claimable(status: str, lease_until: float, now: float) -> bool:
    """Pending, or processing under a lease that has lapsed (its worker died or timed out)."""
    return status == "pending" or (status == "processing" and lease_until <= now)


# sitemaps ------------------------------------------------------------------------------------------


def new_sitemap(record: SitemapRecord) -> JobCounts:
    return JobCounts(sitemaps_total=1, sitemaps_done=1 if record.status.final else 0)


def claimed(record: R) -> R:
    """A claimed sitemap or page: in progress, one attempt more. A claim is taken just before a fetch, so
    the attempt is counted before it is made (a worker that dies fetching has made it); a delivery that
    ends without a request takes it back."""
    status = type(record.status)("processing")  # SitemapStatus or UrlStatus: model_copy does not validate
    return record.model_copy(update={"status": status, "attempts": record.attempts + 1})


def finished_sitemap(record: SitemapRecord, outcome: SitemapOutcome) -> SitemapRecord:
    return record.model_copy(
        update={
            "status": outcome.status,
            "kind": outcome.kind,
            "error_message": outcome.error_message,
            "truncated": outcome.truncated,
            "final_url": outcome.final_url,
            "http_status": outcome.http_status,
            "children": outcome.children,
            "dropped": outcome.dropped,
            "invalid_children": outcome.invalid_children,
            "warnings": outcome.warnings,
            "document_key": outcome.document_key or record.document_key,
            "not_modified": outcome.not_modified,
            "finished_at": outcome.finished_at,
            "attempts": record.attempts if outcome.attempts is None else outcome.attempts,
            "restarted": record.restarted or outcome.restarted,
            "step_document": None,  # (read: the reading is over)
        }
    )


def released_sitemap(record: SitemapRecord, release: SitemapRelease) -> SitemapRecord:
    """The sitemap back to pending, as ``release`` says."""
    update: dict[str, object] = {"status": SitemapStatus.PENDING, "error_message": release.error_message}
    if release.attempts is not None:
        update["attempts"] = release.attempts
    if release.document is not None:
        update["step_document"] = release.document
    return record.model_copy(update=update)


def sitemap_done(outcome: SitemapOutcome) -> JobCounts:
    ok = outcome.status is SitemapStatus.COMPLETED and outcome.kind != ROBOTS_KIND
    return JobCounts(sitemaps_done=1, sitemaps_ok=1 if ok else 0)


def recorded_sitemap(
    record: SitemapRecord, checkpoint: int, new_pages: int, enqueued: Checkpoint | None = None
) -> SitemapRecord:
    """The sitemap after a batch is recorded; with ``enqueued`` (nothing to send), also sent."""
    moved = record.model_copy(
        update={
            "pages_recorded": max(record.pages_recorded, checkpoint),
            "pages_new": record.pages_new + new_pages,
        }
    )
    return moved if enqueued is None else enqueued_sitemap(moved, enqueued)


def enqueued_sitemap(record: SitemapRecord, checkpoint: Checkpoint) -> SitemapRecord:
    enqueued = min(checkpoint.enqueued, record.pages_recorded)
    restarted = record.restarted or checkpoint.restarted  # (for good: the job's records hold both readings')
    if enqueued < record.pages_enqueued:  # (a reading that started over has not caught up with the checkpoint)
        return record if restarted == record.restarted else record.model_copy(update={"restarted": restarted})
    return record.model_copy(
        update={
            "pages_enqueued": enqueued,
            "checkpoint_digest": checkpoint.digest,
            "probes_spent": checkpoint.probes,
            "lastmods_held": checkpoint.held,
            "compared": checkpoint.compared,
            "restarted": restarted,
            "prefix_bytes": checkpoint.prefix_bytes,
            "prefix_digest": checkpoint.prefix_digest,
            "step_document": record.step_document if checkpoint.noted else None,
        }
    )


# pages ---------------------------------------------------------------------------------------------


def new_page(page: SitemapURL) -> JobCounts:
    return JobCounts(urls_total=1) + page_done(page)


def new_pages(pages: Iterable[PageRecord]) -> JobCounts:
    """:func:`new_page` summed over a batch, counted in one pass (it runs on every listed URL)."""
    total = succeeded = failed = excluded = 0
    for page in pages:
        total += 1
        status = page.status
        if status is UrlStatus.COMPLETED:
            succeeded += 1
        elif status is UrlStatus.FAILED:
            failed += 1
        elif status is UrlStatus.EXCLUDED:
            excluded += 1
    return JobCounts(urls_total=total, urls_succeeded=succeeded, urls_failed=failed, urls_excluded=excluded)


def page_done(page: SitemapURL) -> JobCounts:
    if page.status is UrlStatus.COMPLETED:
        return JobCounts(urls_succeeded=1)
    if page.status is UrlStatus.FAILED:
        return JobCounts(urls_failed=1)
    if page.status is UrlStatus.EXCLUDED:
        return JobCounts(urls_excluded=1)
    return JobCounts()


def retried_page(page: SitemapURL, retry: PageRetry) -> SitemapURL:
    return page.model_copy(
        update={
            "status": UrlStatus.PENDING,
            "retries": page.retries if retry.retries is None else retry.retries,
            "attempts": page.attempts - 1 if retry.untried and page.attempts else page.attempts,
            "error_message": retry.error_message,
            "next_fetch_time": retry.not_before,
        }
    )


def total(deltas: Iterable[JobCounts]) -> JobCounts:
    out = JobCounts()
    for delta in deltas:
        out = out + delta
    return out


def recount(sitemaps: Iterable[SitemapRecord], pages: Iterable[SitemapURL]) -> JobCounts:
    """The counters as the records say they must be (the invariant every store keeps)."""
    out = JobCounts()
    for sitemap in sitemaps:
        out = out + JobCounts(sitemaps_total=1)
        if sitemap.status.final:
            ok = sitemap.status is SitemapStatus.COMPLETED and sitemap.kind != ROBOTS_KIND
            out = out + JobCounts(sitemaps_done=1, sitemaps_ok=1 if ok else 0)
    for page in pages:
        out = out + new_page(page)
    return out
