"""The state store on DynamoDB: one table, one item collection per job, moves made atomic with conditions.

Composed of parts, each owning its items: the job's own items (job_items.py: the job, its counters, its
extensions), its sitemaps and their leases (sitemap_items.py), the listing of its pages (page_listing.py)
and their claims, settlements and readings (page_batches.py), both on the pages' listed batches
(listed_batch.py) and the crawl database's pointers (crawl_pointers.py), which they share with the crawl
database (crawl.py).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from harvester.adapters.aws.batch_reads import folded_batches, job_pages, page_bodies
from harvester.adapters.aws.crawl import settle
from harvester.adapters.aws.crawl_pointers import Pointers
from harvester.adapters.aws.item_body import body_text
from harvester.adapters.aws.job_items import JobItems
from harvester.adapters.aws.page_batches import PageBatches
from harvester.adapters.aws.page_listing import PageListing
from harvester.adapters.aws.sitemap_items import SitemapItems
from harvester.model import accounting
from harvester.model.crawl import SitemapPart
from harvester.model.records import (
    CrawlWrite,
    JobCounts,
    JobRecord,
    JobStatus,
    PageRecord,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    body_of,
    url_key,
)
from harvester.model.state import (
    AdoptedPart,
    Checkpoint,
    EndProgress,
    JobSnapshot,
    Lease,
    ListedBatch,
    OpenPages,
    PageOutcome,
    PageRetry,
    Recorded,
    RecordPage,
    Settled,
    SitemapOutcome,
    SitemapRelease,
)


class DynamoStateStore:
    """The StateStore port on the state table (module docstring)."""

    record_batch = PageListing.record_batch
    listing_window = PageListing.listing_window

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_days: int = 30,
        pointers: Pointers | None = None,
        snapshot_refs: bool = True,
    ) -> None:
        self.client = client
        self.table = table
        self.jobs = JobItems(client, table, retention_days=retention_days)
        self.sitemap_items = SitemapItems(self.jobs)
        #: (shared with the crawl database's, so that a listing's lookup is remembered for its writes)
        self.pointers = pointers or Pointers(client, table)
        self.listing = PageListing(self.jobs, self.sitemap_items, self.pointers)
        self.batches = PageBatches(self.jobs, self.pointers, snapshot_refs=snapshot_refs)

    # jobs -----------------------------------------------------------------------------------------

    def create_job(self, job: JobRecord) -> JobRecord:
        return self.jobs.create_job(job)

    def get_job(self, job_id: str) -> JobRecord | None:
        return self.jobs.get_job(job_id)

    def mark_seeded(self, job_id: str) -> None:
        self.jobs.mark_seeded(job_id)

    def end_job(self, job_id: str, status: JobStatus, *, end_time: datetime, error_message: str | None = None) -> bool:
        return self.jobs.end_job(job_id, status, end_time=end_time, error_message=error_message)

    def set_result(self, job_id: str, result_key: str) -> None:
        self.jobs.set_result(job_id, result_key)

    def claim_end(self, job_id: str, *, until: float, now: float, handed: float | None = None) -> EndProgress | None:
        return self.jobs.claim_end(job_id, until=until, now=now, handed=handed)

    def save_end(self, job_id: str, progress: EndProgress, *, held: float, handed: float) -> bool:
        return self.jobs.save_end(job_id, progress, held=held, handed=handed)

    def active_job_ids(self) -> list[str]:
        return self.jobs.active_job_ids()

    def snapshot(self, job_id: str) -> JobSnapshot | None:
        return self.jobs.snapshot(job_id)

    def counts(self, job_id: str) -> JobCounts:
        return self.jobs.counts(job_id)

    # sitemaps -------------------------------------------------------------------------------------

    def add_sitemaps(self, job_id: str, sitemaps: Sequence[SitemapRecord]) -> list[SitemapRecord]:
        return self.sitemap_items.add_sitemaps(job_id, sitemaps)

    def get_sitemap(self, job_id: str, url: str) -> SitemapRecord | None:
        return self.sitemap_items.get_sitemap(job_id, url)

    def claim_sitemap(self, job_id: str, url: str, lease: Lease, *, now: float) -> SitemapRecord | None:
        return self.sitemap_items.claim_sitemap(job_id, url, lease, now=now)

    def record_pages(
        self,
        job_id: str,
        sitemap_url: str,
        pages: Sequence[PageRecord],
        *,
        checkpoint: int,
        lease: Lease,
        site: str | None = None,
        crawl: Mapping[str, CrawlWrite] | None = None,
        enqueued: Checkpoint | None = None,
        keys: Sequence[int] | None = None,  # (the pointers' conditional writes keep a URL once a job)
        left: Mapping[str, str] | None = None,  # (the epochs a listing moves are its pointers': page_listing.py)
        lanes: Sequence[bool] | None = None,
    ) -> Recorded:
        return self.listing.record_pages(
            job_id,
            sitemap_url,
            pages,
            checkpoint=checkpoint,
            lease=lease,
            site=site,
            crawl=crawl,
            enqueued=enqueued,
            lanes=lanes,
        )

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        self.sitemap_items.mark_enqueued(job_id, sitemap_url, checkpoint, lease)

    def finish_sitemap(
        self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease
    ) -> SitemapRecord | None:
        return self.sitemap_items.finish_sitemap(job_id, sitemap_url, outcome, lease)

    def release_sitemap(self, job_id: str, sitemap_url: str, lease: Lease, release: SitemapRelease) -> bool:
        return self.sitemap_items.release_sitemap(job_id, sitemap_url, lease, release)

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]:
        return self.sitemap_items.sitemaps(job_id, status=status)

    # pages ----------------------------------------------------------------------------------------

    def claim_pages(
        self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float, stored: Mapping[str, str] | None = None
    ) -> list[SitemapURL]:
        return self.batches.claim_pages(job_id, urls, lease, now=now, stored=stored)

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        return self.batches.finish_pages(job_id, outcomes, lease, site=site)

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        return self.batches.retry_pages(job_id, retries, lease)

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
        return job_pages(self.jobs, job_id, status=status)

    def page_bodies(self, job_id: str) -> Iterator[str]:
        return page_bodies(self.jobs, job_id)

    def job_records(self, job_id: str) -> Iterator[str | ListedBatch | AdoptedPart]:
        for page in self.job_record_pages(job_id):
            yield from page.items

    def job_record_pages(self, job_id: str, *, after: str | None = None) -> Iterator[RecordPage]:
        """A batch's records a page (``b<bid>`` after it), then an adopted part a page (``p<n>`` after the n-th)."""
        if after is None or after.startswith("b"):
            for batch in folded_batches(self.jobs, job_id, after=after[1:] if after else None):
                yield RecordPage([batch.body(i, job_id) for i in range(len(batch.records))], f"b{batch.bid}")
            after = "p0"
        adopted = self.adopted(job_id)
        for n in range(int(after[1:]), len(adopted)):
            yield RecordPage([adopted[n]], f"p{n + 1}")

    def adopted(self, job_id: str) -> list[AdoptedPart]:
        """The parts the job adopted, in the order it adopted them."""
        found = []
        for item in self.jobs.partition(job_id, "PART#"):
            stored = orjson.loads(body_text(item))
            part, at = SitemapPart.model_validate(stored["part"]), datetime.fromisoformat(stored["at"])
            left = stored.get("excluded", ())
            if isinstance(left, str):  # (stored apart: adopt_part)
                left = self.pointers.parts.sets.read(item["pk"]["S"], _left_out_prefix(part.sitemap), {"S": left})
            found.append(AdoptedPart(part, at, frozenset(left), partly=bool(stored.get("partly"))))
        return sorted(found, key=lambda a: (a.at, a.part.sitemap))

    def adopt_part(
        self,
        job_id: str,
        sitemap_url: str,
        part: SitemapPart,
        lease: Lease,
        *,
        site: str,
        at: datetime,
        excluded: Sequence[str] = (),
        checkpoint: Checkpoint | None = None,
        listed: Collection[str] = (),
    ) -> bool:
        """The job takes the sitemap's part (see ``StateStore.adopt_part``), in one transaction: the part's
        adoption on its item (conditioned on its being current at its epoch, or in part at the epoch read
        when checking who moved it: crawl_parts.py), the job's record of it, the sitemap's checkpoint and
        the counts. Refused when the sitemap's reading recorded pages already (whole) or the part moved; the
        URLs it leaves out, and their keys on the part's item, are stored apart past a few (value_sets.py),
        so that an adoption in part costs what the sitemap's changed entries do. (A URL of the part the job
        has already through another sitemap moved the part's epoch when it was listed, or is one it leaves
        out.) In part, the records of the URLs it leaves out are first written as they read
        (``crawl.settle``), but for those the reading listed itself (``listed``: the job's records, read as
        stored)."""
        partly = checkpoint is not None
        through: frozenset[str] = frozenset()  # (the adopters the records settled read through)
        sitemap = self.sitemap_items.leased_sitemap(job_id, sitemap_url, lease)
        if sitemap.pages_recorded and not partly:
            return False
        parts = self.pointers.parts
        if partly:
            if not parts.partly_movable(site, job_id, part):
                return False
            unlisted = [url for url in excluded if url not in listed]
            through = (
                settle(self.client, self.table, self.pointers, site, unlisted, job_id) if unlisted else frozenset()
            )
            if through is None:
                return False
            if unlisted and not parts.partly_movable(site, job_id, part):  # (read again: the epoch it moved)
                return False
        stored: dict[str, Any] = {"part": orjson.loads(body_of(part)), "at": at.isoformat()}
        if partly:  # (the URLs it left out: as many as the sitemap's changed entries, stored apart past a few)
            left = parts.sets.value(
                self.jobs.pk(job_id), _left_out_prefix(sitemap_url), set(excluded), expires_at=self.jobs.expires()
            )
            stored.update(excluded=list(excluded) if "SS" in left else left["S"], partly=True)
        items = [
            self.jobs.new_item(job_id, f"PART#{url_key(sitemap_url)}", orjson.dumps(stored).decode(), version=None),
            parts.adoption(
                site, job_id, part, at, self.jobs.job_over, list(excluded) if partly else None, settled_by=through
            ),
        ]
        urls = part.urls - len(excluded)
        taking = sitemap.model_copy(update={"adopted": part})
        moved = checkpoint or Checkpoint(part.urls)
        moved_record = accounting.recorded_sitemap(taking, moved.enqueued, urls, moved)
        counts = JobCounts(urls_total=urls, urls_succeeded=urls)
        failed = self.sitemap_items.commit_listing(
            job_id, sitemap_url, lease, items, [("adopted", part.sitemap), ("part", part.sitemap)], moved_record, counts
        )
        return not failed

    def get_page(self, job_id: str, url: str) -> SitemapURL | None:
        return self.batches.get_page(job_id, url)

    def add_extensions(self, job_id: str, listings: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.jobs.add_extensions(job_id, listings)

    def extensions(self, job_id: str) -> dict[str, dict[str, Any]]:
        return self.jobs.extensions(job_id)

    # recovery -------------------------------------------------------------------------------------

    def release_leases(self, job_id: str, *, pages: bool = True) -> int:
        released = self.sitemap_items.release_sitemap_leases(job_id)
        return released + (self.batches.release_leases(job_id) if pages else 0)

    def open_pages(self, job_id: str, *, after: str | None = None, until: str | None = None) -> Iterator[OpenPages]:
        return self.batches.open_pages(job_id, after=after, until=until)

    def resume_position(self, job_id: str) -> str | None:
        return self.jobs.resume_position(job_id)

    def save_resume(self, job_id: str, after: str | None) -> None:
        self.jobs.save_resume(job_id, after)

    def recount(self, job_id: str) -> JobCounts:
        adopted = sum(item.urls for item in self.adopted(job_id))
        listed = accounting.recount(self.sitemaps(job_id), self.pages(job_id))
        return listed + JobCounts(urls_total=adopted, urls_succeeded=adopted)


def _left_out_prefix(sitemap: str) -> str:
    """Where a job's record of a part it adopted in part stores the URLs it left out apart (value_sets.py)."""
    return f"LEFT#{url_key(sitemap)}#"
