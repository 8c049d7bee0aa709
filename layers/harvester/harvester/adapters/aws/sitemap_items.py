"""A job's sitemap records in the state table, their leases, and the writes a listing makes with them.

``JOB#<id>`` / ``SITEMAP#<url key>`` (job_items.py's layout): the record's JSON ``body`` (deflated) with
``status``, ``lease_token``, ``lease_until`` and ``version``; an open sitemap carries ``open_pk``, so that
the sparse ``OpenItems`` index lists exactly the open ones. A claim is a conditional write on the version
read; every other move is conditioned on the lease, and its counter delta rides in the same transaction. A
listing's transaction (page_listing.py) moves the sitemap's checkpoint with the pages it writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from botocore.exceptions import ClientError

from harvester.adapters.aws.item_body import body_text
from harvester.adapters.aws.job_items import OPEN_INDEX, TRANSACTION_ITEMS, JobItems, open_pk
from harvester.adapters.aws.state_table import TransactionFailed, batch_get, conditional
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model import accounting
from harvester.model.records import JobCounts, PageRecord, SitemapRecord, SitemapStatus, body_of, url_key
from harvester.model.state import Checkpoint, Lease, SitemapOutcome, SitemapRelease
from harvester.ports import LeaseLost


class SitemapItems:
    """A job's sitemap records (module docstring)."""

    def __init__(self, jobs: JobItems) -> None:
        self.jobs = jobs
        self.client = jobs.client
        self.table = jobs.table

    def add_sitemaps(self, job_id: str, sitemaps: Sequence[SitemapRecord]) -> list[SitemapRecord]:
        unique = accounting.first_per_url(sitemaps)
        created = self._create_records(
            job_id,
            [(f"SITEMAP#{s.key}", body_of(s), s.status.value, not s.status.final) for s in unique],
            [accounting.new_sitemap(s) for s in unique],
        )
        stored = []
        for sitemap, new in zip(unique, created, strict=True):
            if new:
                stored.append(sitemap)
            else:
                existing = self.get_sitemap(job_id, sitemap.url)
                assert existing is not None
                stored.append(existing)
        return stored

    def _create_records(
        self, job_id: str, records: list[tuple[str, str, str, bool]], deltas: list[JobCounts]
    ) -> list[bool]:
        """Puts each record that does not exist yet, counting it; returns which were created.

        One transaction per chunk: records whose condition fails (they exist) are taken out and the chunk
        is tried again, so the counters move by exactly the records created.
        """
        created = [False] * len(records)
        room = TRANSACTION_ITEMS - 1
        for start in range(0, len(records), room):
            chunk = list(range(start, min(start + room, len(records))))
            while chunk:
                items = [self.jobs.record_put(job_id, *records[i][:3], open_item=records[i][3]) for i in chunk]
                items.append(self.jobs.counter_update(job_id, accounting.total(deltas[i] for i in chunk)))
                try:
                    self.jobs.transact(items)
                except TransactionFailed as exc:
                    existing = {chunk[i] for i in exc.failed_conditions(len(chunk))}
                    if not existing:
                        raise
                    chunk = [i for i in chunk if i not in existing]
                    continue
                for i in chunk:
                    created[i] = True
                break
        return created

    def get_sitemap(self, job_id: str, url: str) -> SitemapRecord | None:
        item = self.jobs.get(job_id, f"SITEMAP#{url_key(url)}")
        return SitemapRecord.model_validate_json(body_text(item)) if item else None

    def claim_sitemap(self, job_id: str, url: str, lease: Lease, *, now: float) -> SitemapRecord | None:
        """pending (or processing under a lapsed lease) -> processing under ``lease``, one attempt more.

        Optimistic: the move is conditional on the version read, so of two claimants only one wins.
        """
        sk = f"SITEMAP#{url_key(url)}"
        item = self.jobs.get(job_id, sk)
        if item is None or not accounting.claimable(item["status"]["S"], float(item["lease_until"]["N"]), now):
            return None
        record = accounting.claimed(SitemapRecord.model_validate_json(body_text(item)))
        update = self.jobs.record_update(
            job_id,
            sk,
            body_of(record),
            record.status.value,
            lease=lease,
            condition="version = :seen",
            condition_values={":seen": item["version"]},
        )
        return record if self._claimed(update, lease) else None

    def _claimed(self, request: dict[str, Any], lease: Lease) -> bool:
        """Whether a claim's conditional write landed: it did, or its condition failed on itself (an answer
        lost to a timeout, the write sent again by botocore), which the item the refusal returns, held by
        ``lease``, tells."""
        try:
            self.client.update_item(**request["Update"], ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return exc.response.get("Item", {}).get("lease_token", {}).get("S") == lease.token
        return True

    def leased_sitemap(self, job_id: str, url: str, lease: Lease) -> SitemapRecord:
        """The sitemap's record, read consistently; LeaseLost unless it is processing under ``lease``."""
        item = self.jobs.get(job_id, f"SITEMAP#{url_key(url)}")
        if item is None or item["status"]["S"] != "processing" or item.get("lease_token", {}).get("S") != lease.token:
            raise LeaseLost.of_sitemap(job_id, url)
        return SitemapRecord.model_validate_json(body_text(item))

    def _sitemap_update(self, job_id: str, record: SitemapRecord, lease: Lease, *, keep_lease: bool) -> dict[str, Any]:
        condition, values = self.jobs.leased(lease)
        values[":processing"] = _s("processing")
        return self.jobs.record_update(
            job_id,
            f"SITEMAP#{record.key}",
            body_of(record),
            record.status.value,
            lease=lease if keep_lease else None,
            condition=condition,
            condition_values=values,
        )

    def commit_listing(
        self,
        job_id: str,
        sitemap_url: str,
        lease: Lease,
        items: list[dict[str, Any]],
        roles: list[tuple[str, str]],
        moved: SitemapRecord,
        pages: Sequence[PageRecord] | JobCounts,
    ) -> list[tuple[str, str]]:
        """Writes a listed chunk's ``items`` (each with its role and URL) in one transaction with the sitemap's
        checkpoint (``moved``) and the count of ``pages`` (or the counts given); returns the roles whose
        condition failed (nothing was written then), empty when written. Raises LeaseLost when the sitemap's
        lease is not ours."""
        counts = pages if isinstance(pages, JobCounts) else accounting.new_pages(pages)
        items = [
            *items,
            self._sitemap_update(job_id, moved, lease, keep_lease=True),
            self.jobs.counter_update(job_id, counts),
        ]
        roles = [*roles, ("sitemap", sitemap_url)]
        try:
            self.jobs.transact(items)
        except TransactionFailed as exc:
            failed = [roles[i] for i in exc.failed_conditions(len(roles))]
            if any(role == "sitemap" for role, _ in failed):
                raise LeaseLost.of_sitemap(job_id, sitemap_url) from exc
            if not failed:
                raise
            return failed
        return []

    def with_lease(self, job_id: str, sitemap_key: str, lease: Lease, update: dict[str, Any]) -> bool:
        """A takeover's ``update``, in one transaction with a check that our sitemap (by its record's key) is
        still ours: a reading whose lease lapsed meanwhile must not take back what the one holding it now
        listed. False when either condition failed."""
        condition, values = self.jobs.leased(lease)
        try:
            self.jobs.transact(
                [
                    {"Update": update},
                    {
                        "ConditionCheck": {
                            "TableName": self.table,
                            "Key": self.jobs.key(job_id, f"SITEMAP#{sitemap_key}"),
                            "ConditionExpression": condition,
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": values,
                        }
                    },
                ]
            )
        except TransactionFailed as exc:
            if exc.failed_conditions(2):
                return False
            raise
        return True

    def final_sitemaps(self, job_id: str, keys: set[str]) -> set[str]:
        """Which of the sitemaps (by record key) are final: their readings will commit nothing more."""
        items = batch_get(self.client, self.table, [self.jobs.key(job_id, f"SITEMAP#{key}") for key in keys])
        return {i["sk"]["S"].removeprefix("SITEMAP#") for i in items if SitemapStatus(i["status"]["S"]).final}

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        sitemap = self.leased_sitemap(job_id, sitemap_url, lease)
        if not self.jobs.conditional(
            self._sitemap_update(job_id, accounting.enqueued_sitemap(sitemap, checkpoint), lease, keep_lease=True)
        ):
            raise LeaseLost.of_sitemap(job_id, sitemap_url)

    def finish_sitemap(
        self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease
    ) -> SitemapRecord | None:
        try:
            sitemap = self.leased_sitemap(job_id, sitemap_url, lease)
        except LeaseLost:
            return None
        finished = accounting.finished_sitemap(sitemap, outcome)
        try:
            self.jobs.transact(
                [
                    self._sitemap_update(job_id, finished, lease, keep_lease=False),
                    self.jobs.counter_update(job_id, accounting.sitemap_done(outcome)),
                ]
            )
        except TransactionFailed as exc:
            if exc.reasons and exc.reasons[0] == "ConditionalCheckFailed":
                return None
            raise
        return finished

    def release_sitemap(self, job_id: str, sitemap_url: str, lease: Lease, release: SitemapRelease) -> bool:
        try:
            sitemap = self.leased_sitemap(job_id, sitemap_url, lease)
        except LeaseLost:
            return False
        released = accounting.released_sitemap(sitemap, release)
        try:
            self.jobs.transact(
                [
                    self._sitemap_update(job_id, released, lease, keep_lease=False),
                    self.jobs.counter_update(job_id, JobCounts()),  # activity, for the stall detection
                ]
            )
        except TransactionFailed as exc:
            if exc.failed_conditions(1):
                return False
            raise
        return True

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]:
        for item in self._sitemap_items(job_id, status.value if status else None):
            yield SitemapRecord.model_validate_json(body_text(item))

    def _sitemap_items(self, job_id: str, status: str | None) -> Iterator[dict[str, Any]]:
        if status not in ("pending", "processing"):
            items = self.jobs.partition(job_id, "SITEMAP#")
            yield from (i for i in items if status is None or i["status"]["S"] == status)
            return
        # Open sitemaps are exactly what the sparse index holds: no need to read the finished ones.
        yield from self.jobs.query(
            IndexName=OPEN_INDEX,
            KeyConditionExpression="open_pk = :pk AND begins_with(sk, :prefix)",
            FilterExpression="#status = :status",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":pk": _s(open_pk(job_id)), ":prefix": _s("SITEMAP#"), ":status": _s(status)},
        )

    def release_sitemap_leases(self, job_id: str) -> int:
        """Lets the leases of the job's processing sitemaps lapse now (a resume); how many."""
        released = 0
        for item in self._sitemap_items(job_id, "processing"):
            released += conditional(
                lambda item=item: self.client.update_item(
                    TableName=self.table,
                    Key={"pk": item["pk"], "sk": item["sk"]},
                    UpdateExpression="SET lease_until = :zero",
                    ConditionExpression="#status = :processing",
                    ExpressionAttributeNames={"#status": "status"},
                    ExpressionAttributeValues={":zero": _n(0), ":processing": _s("processing")},
                )
            )
        return released
