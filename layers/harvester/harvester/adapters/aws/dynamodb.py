"""The state store on DynamoDB: one table, one item collection per job, moves made atomic with conditions.

Layout (``pk`` / ``sk``):

* ``JOB#<id>`` / ``JOB``: the job record;
* ``COUNT#<id>`` / ``COUNT#<nn>``: the job's counters, spread over shards so that concurrent workers do not
  fight over one item (a transaction touching an item another transaction holds is cancelled), in a
  partition of their own so that reading them never reads the job's records; the counts are the sum of
  the shards, read with TransactGetItems when a completion check must see one instant;
* ``JOB#<id>`` / ``SITEMAP#<url key>`` and ``URL#<url key>``: the sitemap and page records.

Every record is stored as its JSON ``body`` (deflated: item_body.py) plus the attributes conditions need
(``status``, ``lease_token``, ``lease_until``, ``version``). Unfinished jobs and sitemaps carry ``open_pk`` so
that the sparse ``OpenItems`` index lists them. Pages do not: an index entry is written when a page is listed,
again at each of its moves (the index projects whole items) and once more when it leaves, 3 of the 14 write
units a fetched page cost; what the index saved was a resume's reading of the job's finished pages, which a
query of the job's partition does at 0.5 read units per 4 KB (about 1 cent and 15 seconds per million pages,
for a job that stalled). Each counter delta is written in the same TransactWriteItems as the record change
that justifies it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from harvester.adapters.aws.crawl import url_put
from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.page_body import pack, unpack
from harvester.adapters.aws.state_table import (
    TransactionFailed,
    batch_get,
    conditional,
    created,
    query,
    transact,
)
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model import accounting
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
from harvester.ports import (
    Checkpoint,
    JobSnapshot,
    Lease,
    LeaseLost,
    ListedBatch,
    PageOutcome,
    PageRetry,
    Recorded,
    Settled,
    SitemapOutcome,
)

Claimed = TypeVar("Claimed", SitemapRecord, SitemapURL)

SHARDS = 16
OPEN_INDEX = "OpenItems"
ACTIVE_JOBS = "JOBS"
_COUNTER_FIELDS = tuple(JobCounts.__struct_fields__)
_TRANSACTION_ITEMS = 100


def _job_pk(job_id: str) -> str:
    return f"JOB#{job_id}"


def _count_pk(job_id: str) -> str:
    return f"COUNT#{job_id}"


def _open_pk(job_id: str) -> str:
    return f"OPEN#{job_id}"


def _stored(job_id: str, sk: str, body: str) -> str:
    """A record's body as stored: a page's job record without what its crawl-record snapshot repeats
    (adapters/aws/page_body.py), so that it stays within the 1 KB a write unit pays for."""
    return pack(body, job_id) if sk.startswith("URL#") else body


def _shard_counts(item: dict[str, Any]) -> JobCounts:
    return JobCounts(**{f: int(item[f]["N"]) for f in _COUNTER_FIELDS if f in item})


class DynamoStateStore:
    #: A transaction holds 100 items; each page is two (its job record and its crawl record), plus the
    #: sitemap's checkpoint and a counter shard.
    record_batch = 49

    def __init__(self, client: Any, table: str, *, retention_days: int = 30) -> None:
        self.client = client
        self.table = table
        self.retention_seconds = retention_days * 86400

    # low level ------------------------------------------------------------------------------------

    def _key(self, job_id: str, sk: str) -> dict[str, Any]:
        return {"pk": _s(_job_pk(job_id)), "sk": _s(sk)}

    def _shard_key(self, job_id: str, shard: int) -> dict[str, Any]:
        return {"pk": _s(_count_pk(job_id)), "sk": _s(f"COUNT#{shard:02d}")}

    def _expires(self) -> dict[str, str]:
        return _n(int(time.time()) + self.retention_seconds)

    def _get(self, job_id: str, sk: str) -> dict[str, Any] | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(job_id, sk), ConsistentRead=True)
        return item.get("Item")

    def _transact(self, items: list[dict[str, Any]]) -> None:
        transact(self.client, items)

    def _counter_update(self, job_id: str, delta: JobCounts) -> dict[str, Any]:
        names = {f"#{f}": f for f in _COUNTER_FIELDS}
        values = {f":{f}": _n(getattr(delta, f)) for f in _COUNTER_FIELDS}
        values[":now"] = _n(time.time())
        values[":exp"] = self._expires()
        adds = ", ".join(f"#{f} :{f}" for f in _COUNTER_FIELDS)
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._shard_key(job_id, random.randrange(SHARDS)),
                "UpdateExpression": f"ADD {adds} SET updated_at = :now, expires_at = :exp",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _record_put(self, job_id: str, sk: str, body: str, status: str, *, open_item: bool) -> dict[str, Any]:
        item = {
            **self._key(job_id, sk),
            "body": stored_body(_stored(job_id, sk, body)),
            "status": _s(status),
            "lease_until": _n(0),
            "version": _n(1),
            "expires_at": self._expires(),
        }
        if open_item:
            item["open_pk"] = _s(_open_pk(job_id))
        return created(self.table, item)

    def _record_update(
        self,
        job_id: str,
        sk: str,
        body: str,
        status: str,
        *,
        lease: Lease | None,
        condition: str,
        condition_values: dict[str, Any],
    ) -> dict[str, Any]:
        """Rewrites a record's body and status; a final status leaves the open index, a lease is set or cleared."""
        values = {":body": stored_body(_stored(job_id, sk, body)), ":status": _s(status), ":one": _n(1)}
        values |= condition_values
        sets = ["body = :body", "#status = :status", "version = version + :one"]
        removes = []
        if lease is not None:
            sets += ["lease_token = :token", "lease_until = :until"]
            values |= {":token": _s(lease.token), ":until": _n(lease.until)}
        else:
            sets.append("lease_until = :zero")
            values[":zero"] = _n(0)
            removes.append("lease_token")
        if status in ("pending", "processing") and not sk.startswith("URL#"):
            sets.append("open_pk = :open")
            values[":open"] = _s(_open_pk(job_id))
        else:  # (a page written before pages left the index leaves it at its next move)
            removes.append("open_pk")
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(job_id, sk),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": values,
            }
        }

    def _leased(self, lease: Lease) -> tuple[str, dict[str, Any]]:
        return (
            "#status = :processing AND lease_token = :mine",
            {":processing": _s("processing"), ":mine": _s(lease.token)},
        )

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return query(self.client, self.table, **kwargs)

    # jobs -----------------------------------------------------------------------------------------

    def create_job(self, job: JobRecord) -> JobRecord:
        item = {
            **self._key(job.job_id, "JOB"),
            "body": stored_body(body_of(job)),
            "status": _s(job.status.value),
            "fingerprint": _s(job.request.fingerprint()),
            "open_pk": _s(ACTIVE_JOBS),
            "version": _n(1),
            "expires_at": self._expires(),
            **self._job_attributes(),
        }
        new_only = "attribute_not_exists(pk)"  # an id already stored is that job: it is returned as it is
        conditional(lambda: self.client.put_item(TableName=self.table, Item=item, ConditionExpression=new_only))
        stored = self.get_job(job.job_id)
        assert stored is not None
        return stored

    def _job_attributes(self) -> dict[str, Any]:
        """What a new job's item carries beyond its record (a subclass's layout)."""
        return {}

    def get_job(self, job_id: str) -> JobRecord | None:
        item = self._get(job_id, "JOB")
        return JobRecord.model_validate_json(body_text(item)) if item else None

    def _move_job(self, job: JobRecord, *, expected: JobStatus | None, still_open: bool) -> bool:
        condition = "attribute_exists(pk)"
        values: dict[str, Any] = {":body": stored_body(body_of(job)), ":status": _s(job.status.value)}
        if expected is not None:
            condition = "#status = :expected"
            values[":expected"] = _s(expected.value)
        update = "SET body = :body, #status = :status"
        if still_open:
            update += ", open_pk = :jobs"
            values[":jobs"] = _s(ACTIVE_JOBS)
        else:
            update += " REMOVE open_pk"
        return conditional(
            lambda: self.client.update_item(
                TableName=self.table,
                Key=self._key(job.job_id, "JOB"),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
        )

    def mark_seeded(self, job_id: str) -> None:
        job = self.get_job(job_id)
        if job is not None and job.status is JobStatus.PENDING:
            moved = job.model_copy(update={"status": JobStatus.IN_PROGRESS, "seeded": True})
            self._move_job(moved, expected=JobStatus.PENDING, still_open=True)

    def end_job(self, job_id: str, status: JobStatus, *, end_time: datetime, error_message: str | None = None) -> bool:
        job = self.get_job(job_id)
        if job is None or job.status is not JobStatus.IN_PROGRESS:
            return False
        ended = job.model_copy(update={"status": status, "end_time": end_time, "error_message": error_message})
        # Still listed as active until its result is written, so that a resume can write it.
        return self._move_job(ended, expected=JobStatus.IN_PROGRESS, still_open=True)

    def set_result(self, job_id: str, result_key: str) -> None:
        job = self.get_job(job_id)
        if job is not None:
            self._move_job(job.model_copy(update={"result_key": result_key}), expected=job.status, still_open=False)

    def active_jobs(self) -> list[JobRecord]:
        items = self._query(
            IndexName=OPEN_INDEX,
            KeyConditionExpression="open_pk = :jobs",
            ExpressionAttributeValues={":jobs": _s(ACTIVE_JOBS)},
        )
        jobs = [self.get_job(item["pk"]["S"].removeprefix("JOB#")) for item in items]
        return [j for j in jobs if j is not None]

    def snapshot(self, job_id: str) -> JobSnapshot | None:
        keys = [self._key(job_id, "JOB")] + [self._shard_key(job_id, i) for i in range(SHARDS)]
        # (a read cancelled by a transaction in progress is tried again by the client: adapters.aws.busy)
        response = self.client.transact_get_items(
            TransactItems=[{"Get": {"TableName": self.table, "Key": k}} for k in keys]
        )
        items = [r.get("Item") for r in response["Responses"]]
        if not items[0]:
            return None
        job = JobRecord.model_validate_json(body_text(items[0]))
        shards = [shard for shard in items[1:] if shard]
        counts = accounting.total(_shard_counts(shard) for shard in shards)
        updated = max([job.start_time.timestamp()] + [float(s.get("updated_at", {"N": "0"})["N"]) for s in shards])
        return JobSnapshot(job=job, counts=counts, last_update=datetime.fromtimestamp(updated, UTC))

    def counts(self, job_id: str) -> JobCounts:
        items = self._query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _s(_count_pk(job_id))},
            ProjectionExpression=", ".join(f"#{f}" for f in _COUNTER_FIELDS),
            ExpressionAttributeNames={f"#{f}": f for f in _COUNTER_FIELDS},
            ConsistentRead=True,
        )
        return accounting.total(_shard_counts(item) for item in items)

    # sitemaps -------------------------------------------------------------------------------------

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
        room = _TRANSACTION_ITEMS - 1
        for start in range(0, len(records), room):
            chunk = list(range(start, min(start + room, len(records))))
            while chunk:
                items = [self._record_put(job_id, *records[i][:3], open_item=records[i][3]) for i in chunk]
                items.append(self._counter_update(job_id, accounting.total(deltas[i] for i in chunk)))
                try:
                    self._transact(items)
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
        item = self._get(job_id, f"SITEMAP#{url_key(url)}")
        return SitemapRecord.model_validate_json(body_text(item)) if item else None

    def _claim(self, job_id: str, sk: str, model: type[Claimed], lease: Lease, now: float) -> Claimed | None:
        """pending (or processing under a lapsed lease) -> processing under ``lease``, one attempt more.

        Optimistic: the move is conditional on the version read, so of two claimants only one wins.
        """
        item = self._get(job_id, sk)
        move = self._claim_move(job_id, item, model, lease, now) if item is not None else None
        return move[0] if move is not None and self._claimed(move[1], lease) else None

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

    def _claim_move(
        self, job_id: str, item: dict[str, Any], model: type[Claimed], lease: Lease, now: float
    ) -> tuple[Claimed, dict[str, Any]] | None:
        """The claimed record of a stored item and its write, conditional on the version read; None when the
        item is not claimable (final, or processing under a lease still running)."""
        if not accounting.claimable(item["status"]["S"], float(item["lease_until"]["N"]), now):
            return None
        sk = item["sk"]["S"]
        body = body_text(item)
        record = accounting.claimed(model.model_validate_json(unpack(body, job_id) if sk.startswith("URL#") else body))
        update = self._record_update(
            job_id,
            sk,
            body_of(record),
            record.status.value,
            lease=lease,
            condition="version = :seen",
            condition_values={":seen": item["version"]},
        )
        return record, update

    def _conditional(self, request: dict[str, Any]) -> bool:
        return conditional(lambda: self.client.update_item(**request["Update"]))

    def claim_sitemap(self, job_id: str, url: str, lease: Lease, *, now: float) -> SitemapRecord | None:
        return self._claim(job_id, f"SITEMAP#{url_key(url)}", SitemapRecord, lease, now)

    def _leased_sitemap(self, job_id: str, url: str, lease: Lease) -> SitemapRecord:
        item = self._get(job_id, f"SITEMAP#{url_key(url)}")
        if item is None or item["status"]["S"] != "processing" or item.get("lease_token", {}).get("S") != lease.token:
            raise LeaseLost(f"sitemap {url} of job {job_id} is no longer leased to this worker")
        return SitemapRecord.model_validate_json(body_text(item))

    def _sitemap_update(self, job_id: str, record: SitemapRecord, lease: Lease, *, keep_lease: bool) -> dict[str, Any]:
        condition, values = self._leased(lease)
        values[":processing"] = _s("processing")
        return self._record_update(
            job_id,
            f"SITEMAP#{record.key}",
            body_of(record),
            record.status.value,
            lease=lease if keep_lease else None,
            condition=condition,
            condition_values=values,
        )

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
        keys: Sequence[int] | None = None,  # (conditional writes de-duplicate here, on the full key)
    ) -> Recorded:
        writes = crawl if site is not None and crawl else {}
        unique = accounting.first_per_url(pages)
        recorded = Recorded()
        # Each page is its job record and, with a site, its crawl record; the sitemap's checkpoint and a
        # counter shard ride along.
        room = (_TRANSACTION_ITEMS - 2) // (2 if writes else 1)
        chunks = [unique[i : i + room] for i in range(0, len(unique), room)] or [[]]
        for n, chunk in enumerate(chunks):
            sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
            # The checkpoint moves with the last chunk only: until then, a crash must record the batch again.
            target = checkpoint if n == len(chunks) - 1 else sitemap.pages_recorded
            while True:
                last = n == len(chunks) - 1
                moved = accounting.recorded_sitemap(sitemap, target, len(chunk), enqueued if last else None)
                items: list[dict[str, Any]] = []
                roles: list[tuple[str, str]] = []
                for p in chunk:
                    items.append(self._record_put(job_id, f"URL#{p.key}", body_of(p), p.status.value, open_item=False))
                    roles.append(("page", p.url))
                    if p.url in writes:
                        items.append(url_put(self.table, str(site), writes[p.url]))
                        roles.append(("crawl", p.url))
                failed = self._commit_listing(job_id, sitemap_url, lease, items, roles, moved, chunk)
                stale = [url for role, url in failed if role == "crawl"]
                if stale:
                    recorded.stale = stale
                    return recorded
                if failed:  # (pages the job has already: the chunk without them)
                    existing = {url for role, url in failed if role == "page"}
                    chunk = [p for p in chunk if p.url not in existing]
                    continue
                recorded.new.extend(chunk)
                break
        return recorded

    def _commit_listing(
        self,
        job_id: str,
        sitemap_url: str,
        lease: Lease,
        items: list[dict[str, Any]],
        roles: list[tuple[str, str]],
        moved: SitemapRecord,
        pages: Sequence[PageRecord],
    ) -> list[tuple[str, str]]:
        """Writes a listed chunk's ``items`` (each with its role and URL) in one transaction with the sitemap's
        checkpoint (``moved``) and the count of ``pages``; returns the roles whose condition failed (nothing
        was written then), empty when written. Raises LeaseLost when the sitemap is no longer ours."""
        items = [
            *items,
            self._sitemap_update(job_id, moved, lease, keep_lease=True),
            self._counter_update(job_id, accounting.new_pages(pages)),
        ]
        roles = [*roles, ("sitemap", sitemap_url)]
        try:
            self._transact(items)
        except TransactionFailed as exc:
            failed = [roles[i] for i in exc.failed_conditions(len(roles))]
            if any(role == "sitemap" for role, _ in failed):
                lost = f"sitemap {sitemap_url} of job {job_id} is no longer leased to this worker"
                raise LeaseLost(lost) from exc
            if not failed:
                raise
            return failed
        return []

    def mark_enqueued(self, job_id: str, sitemap_url: str, checkpoint: Checkpoint, lease: Lease) -> None:
        sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
        if not self._conditional(
            self._sitemap_update(job_id, accounting.enqueued_sitemap(sitemap, checkpoint), lease, keep_lease=True)
        ):
            raise LeaseLost(f"sitemap {sitemap_url} of job {job_id} is no longer leased to this worker")

    def finish_sitemap(self, job_id: str, sitemap_url: str, outcome: SitemapOutcome, lease: Lease) -> bool:
        try:
            sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
        except LeaseLost:
            return False
        finished = accounting.finished_sitemap(sitemap, outcome)
        try:
            self._transact(
                [
                    self._sitemap_update(job_id, finished, lease, keep_lease=False),
                    self._counter_update(job_id, accounting.sitemap_done(outcome)),
                ]
            )
        except TransactionFailed as exc:
            if exc.reasons and exc.reasons[0] == "ConditionalCheckFailed":
                return False
            raise
        return True

    def release_sitemap(
        self, job_id: str, sitemap_url: str, lease: Lease, *, error_message: str, attempts: int | None = None
    ) -> bool:
        try:
            sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
        except LeaseLost:
            return False
        released = accounting.released_sitemap(sitemap, error_message, attempts)
        try:
            self._transact(
                [
                    self._sitemap_update(job_id, released, lease, keep_lease=False),
                    self._counter_update(job_id, JobCounts()),  # activity, for the stall detection
                ]
            )
        except TransactionFailed as exc:
            if exc.failed_conditions(1):
                return False
            raise
        return True

    def sitemaps(self, job_id: str, *, status: SitemapStatus | None = None) -> Iterator[SitemapRecord]:
        for item in self._records(job_id, "SITEMAP#", status.value if status else None):
            yield SitemapRecord.model_validate_json(body_text(item))

    def _records(self, job_id: str, prefix: str, status: str | None) -> Iterator[dict[str, Any]]:
        values: dict[str, Any] = {":prefix": _s(prefix)}
        extra: dict[str, Any] = {}
        if status is not None:
            extra = {
                "FilterExpression": "#status = :status",
                "ExpressionAttributeNames": {"#status": "status"},
            }
            values[":status"] = _s(status)
        if status in ("pending", "processing") and prefix != "URL#":
            # Open sitemaps are exactly what the sparse index holds: no need to read the finished ones.
            values[":pk"] = _s(_open_pk(job_id))
            yield from self._query(
                IndexName=OPEN_INDEX,
                KeyConditionExpression="open_pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues=values,
                **extra,
            )
            return
        values[":pk"] = _s(_job_pk(job_id))
        yield from self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues=values,
            ConsistentRead=True,
            **extra,
        )

    # pages ----------------------------------------------------------------------------------------

    def claim_pages(self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float) -> list[SitemapURL]:
        """A batch's pages read with one BatchGetItem per 100 URLs, then claimed each with a conditional
        UpdateItem on the version read, so that of two claimants only one wins a URL.

        Not one TransactWriteItems for the batch, as before: a claim needs no other write to be atomic with
        it, and a transaction bills each write twice, so the transaction saved requests (one a page, well
        within the 2.5 a fetched page may make) at the price of one write unit a page, a tenth of what a
        fetched page cost in DynamoDB writes (bench/aws_cost.py). A crash between two claims leaves the
        first claimed under a lease that lapses, as a crash after the transaction did.
        """
        by_sk = {f"URL#{url_key(url)}": url for url in dict.fromkeys(urls)}
        claimed: dict[str, SitemapURL] = {}
        sks = list(by_sk)
        for item in batch_get(self.client, self.table, [self._key(job_id, sk) for sk in sks]):
            move = self._claim_move(job_id, item, SitemapURL, lease, now)
            if move is not None and self._claimed(move[1], lease):
                claimed[item["sk"]["S"]] = move[0]
        return [claimed[sk] for sk in sks if sk in claimed]

    def _page_update(self, job_id: str, page: SitemapURL, lease: Lease) -> dict[str, Any]:
        condition, values = self._leased(lease)
        return self._record_update(
            job_id,
            f"URL#{page.key}",
            body_of(page),
            page.status.value,
            lease=None,
            condition=condition,
            condition_values=values,
        )

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        # One outcome per URL: a transaction may not hold two operations on one item.
        first: dict[str, PageOutcome] = {}
        for outcome in outcomes:
            if outcome.record.status.final:
                first.setdefault(outcome.record.url, outcome)
        pending = list(first.values())
        settled = Settled()
        room = (_TRANSACTION_ITEMS - 1) // (2 if site is not None else 1)
        while pending:
            chunk, pending = pending[:room], pending[room:]
            while chunk:
                items: list[dict[str, Any]] = []
                roles: list[tuple[str, str]] = []
                for outcome in chunk:
                    items.append(self._page_update(job_id, outcome.record, lease))
                    roles.append(("page", outcome.record.url))
                    if site is not None and outcome.crawl is not None:
                        items.append(url_put(self.table, site, outcome.crawl))
                        roles.append(("crawl", outcome.record.url))
                done = accounting.total(accounting.page_done(o.record) for o in chunk)
                items.append(self._counter_update(job_id, done))
                try:
                    self._transact(items)
                except TransactionFailed as exc:
                    failed = [roles[i] for i in exc.failed_conditions(len(roles))]
                    if not failed:
                        raise
                    settled.stale.extend(url for role, url in failed if role == "crawl")
                    dropped = {url for _, url in failed}
                    chunk = [o for o in chunk if o.record.url not in dropped]
                    continue
                settled.applied.extend(o.record.url for o in chunk)
                break
        return settled

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        """The pages read with one BatchGetItem and moved back to pending with one TransactWriteItems per 99
        (and the counters' mark of activity), where each was a GetItem and a transaction of its own: a batch
        whose pages waited for their host's turn sent back each one that way. A page no longer leased to us
        is left out and the others moved again."""
        by_sk = {f"URL#{url_key(r.url)}": r for r in reversed(retries)}  # (the first retry of a URL)
        moves: dict[str, dict[str, Any]] = {}
        for item in batch_get(self.client, self.table, [self._key(job_id, sk) for sk in by_sk]):
            retry = by_sk[item["sk"]["S"]]
            page = SitemapURL.model_validate_json(unpack(body_text(item), job_id))
            moves[retry.url] = self._page_update(job_id, accounting.retried_page(page, retry), lease)
        applied: set[str] = set()
        pending = list(moves.items())
        room = _TRANSACTION_ITEMS - 1
        for start in range(0, len(pending), room):
            chunk = pending[start : start + room]
            while chunk:
                try:
                    self._transact([update for _, update in chunk] + [self._counter_update(job_id, JobCounts())])
                except TransactionFailed as exc:
                    lost = exc.failed_conditions(len(chunk))
                    if not lost:
                        raise
                    chunk = [move for i, move in enumerate(chunk) if i not in lost]
                    continue
                applied.update(url for url, _ in chunk)
                break
        return [url for url in dict.fromkeys(r.url for r in retries) if url in applied]

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
        for item in self._records(job_id, "URL#", status.value if status else None):
            yield SitemapURL.model_validate_json(unpack(body_text(item), job_id))

    def page_bodies(self, job_id: str) -> Iterator[str]:
        for item in self._records(job_id, "URL#", None):
            yield unpack(body_text(item), job_id)

    def job_records(self, job_id: str) -> Iterator[str | ListedBatch]:
        return self.page_bodies(job_id)  # (an item per URL: DynamoDB writes them 25 a request anyway)

    def get_page(self, job_id: str, url: str) -> SitemapURL | None:
        item = self._get(job_id, f"URL#{url_key(url)}")
        return SitemapURL.model_validate_json(unpack(body_text(item), job_id)) if item else None

    def add_extensions(self, job_id: str, listings: Sequence[tuple[str, dict[str, Any]]]) -> None:
        for url, extensions in listings:
            for kind, value in extensions.items():
                item = {
                    **self._key(job_id, f"EXT#{url_key(url)}#{kind}"),
                    "body": stored_body(json.dumps({"url": url, "kind": kind, "value": value})),
                    "expires_at": self._expires(),
                }
                conditional(  # (the first value of a kind is kept: a later one fails the condition)
                    lambda item=item: self.client.put_item(
                        TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
                    )
                )

    def extensions(self, job_id: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for item in self._records(job_id, "EXT#", None):
            kept = json.loads(body_text(item))
            out.setdefault(kept["url"], {})[kept["kind"]] = kept["value"]
        return out

    # recovery -------------------------------------------------------------------------------------

    def release_leases(self, job_id: str) -> int:
        released = 0
        items = [i for prefix in ("SITEMAP#", "URL#") for i in self._records(job_id, prefix, "processing")]
        for item in items:
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

    def recount(self, job_id: str) -> JobCounts:
        return accounting.recount(self.sitemaps(job_id), self.pages(job_id))
