"""A job's own items in the state table: its record, its counters, its extensions; and the writes the
sitemaps and the page batches make beside them (a counter shard, a record's move).

Layout (``pk`` / ``sk``):

* ``JOB#<id>`` / ``JOB``: the job record (with ``layout``, the page layout it keeps: ``pointers``);
* ``COUNT#<id>`` / ``COUNT#<nn>``: the job's counters, spread over shards so that concurrent workers do not
  fight over one item (a transaction touching an item another transaction holds is cancelled), in a
  partition of their own so that reading them never reads the job's records; the counts are the sum of
  the shards, read with TransactGetItems when a completion check must see one instant;
* ``JOB#<id>`` / ``SITEMAP#<url key>``: the sitemap records (sitemap_items.py);
* ``JOB#<id>`` / ``EXT#<url key>#<kind>``: a page's sitemap extensions (the first value of a kind).

Every record is stored as its JSON ``body`` (deflated: item_body.py) plus the attributes conditions need
(``status``, ``lease_token``, ``lease_until``, ``version``). Unfinished jobs and sitemaps carry ``open_pk`` so
that the sparse ``OpenItems`` index lists them. Each counter delta is written in the same TransactWriteItems
as the record change that justifies it. The pages' items are page_batches.py's.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson

from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.state_table import (
    conditional,
    created,
    query,
    transact,
)
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model import accounting
from harvester.model.messages import Unprocessable
from harvester.model.records import (
    JobCounts,
    JobRecord,
    JobStatus,
    body_of,
    url_key,
)
from harvester.model.state import EndProgress, JobSnapshot, Lease
from harvester.urls import origin_of

SHARDS = 16
OPEN_INDEX = "OpenItems"
ACTIVE_JOBS = "JOBS"
#: The page layout a job's item names: the only one this version keeps.
LAYOUT = "pointers"
#: The most items a TransactWriteItems holds.
TRANSACTION_ITEMS = 100
_COUNTER_FIELDS = tuple(JobCounts.__struct_fields__)
#: How long a job known to be running is taken to be so, before it is read again (seconds).
_RUNNING_KNOWN = 60


def _job_pk(job_id: str) -> str:
    return f"JOB#{job_id}"


def _count_pk(job_id: str) -> str:
    return f"COUNT#{job_id}"


def open_pk(job_id: str) -> str:
    return f"OPEN#{job_id}"


def _shard_counts(item: dict[str, Any]) -> JobCounts:
    return JobCounts(**{f: int(item[f]["N"]) for f in _COUNTER_FIELDS if f in item})


def refused_layout(job_id: str, item: dict[str, Any]) -> str | None:
    """Why a job's item cannot be served (written by a version that kept its pages another way), or None."""
    layout = item.get("layout", {}).get("S", "items")
    if layout == LAYOUT:
        return None
    return (
        f"job {job_id} keeps its pages in the {layout!r} state layout of an earlier Harvester, which this "
        f"version does not read: let it end on the version that started it, or crawl the site again as a new job"
    )


class JobItems:
    """The job's own items (module docstring), and the writes its sitemaps and pages share."""

    def __init__(self, client: Any, table: str, *, retention_days: int = 30) -> None:
        self.client = client
        self.table = table
        self.retention_seconds = retention_days * 86400
        self._origins: dict[str, str] = {}
        self._ended: dict[str, tuple[bool, float]] = {}

    # the table ------------------------------------------------------------------------------------

    def key(self, job_id: str, sk: str) -> dict[str, Any]:
        return {"pk": _s(self.pk(job_id)), "sk": _s(sk)}

    def pk(self, job_id: str) -> str:
        """The partition of the job's items."""
        return _job_pk(job_id)

    def _shard_key(self, job_id: str, shard: int) -> dict[str, Any]:
        return {"pk": _s(_count_pk(job_id)), "sk": _s(f"COUNT#{shard:02d}")}

    def expires(self) -> dict[str, str]:
        return _n(int(time.time()) + self.retention_seconds)

    def get(self, job_id: str, sk: str) -> dict[str, Any] | None:
        item = self.client.get_item(TableName=self.table, Key=self.key(job_id, sk), ConsistentRead=True)
        return item.get("Item")

    def transact(self, items: list[dict[str, Any]]) -> None:
        transact(self.client, items)

    def conditional(self, request: dict[str, Any]) -> bool:
        """An ``{"Update": ...}`` request made alone: whether it landed."""
        return conditional(lambda: self.client.update_item(**request["Update"]))

    def query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return query(self.client, self.table, **kwargs)

    def partition(self, job_id: str, prefix: str, **options: Any) -> Iterator[dict[str, Any]]:
        """The job's items whose sort key starts with ``prefix``, in order, read consistently (``options``:
        the query's others, an ``ExclusiveStartKey``)."""
        return self.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(_job_pk(job_id)), ":prefix": _s(prefix)},
            ConsistentRead=True,
            **options,
        )

    def apart_item(self, job_id: str, sk: str, body: str) -> dict[str, Any]:
        """A new item of the job (its ``body``) to be written apart, ahead of the transaction whose item makes
        it count: outside a transaction its write units are half (listed_batch.py: a batch's records)."""
        return {**self.key(job_id, sk), "body": stored_body(body), "expires_at": self.expires()}

    def new_item(self, job_id: str, sk: str, body: str, *, version: int | None) -> dict[str, Any]:
        """A Put of a new item of the job (its ``body``; ``version`` when its writes are versioned)."""
        item = self.apart_item(job_id, sk, body)
        if version is not None:
            item["version"] = _n(version)
        return created(self.table, item)

    def counter_update(self, job_id: str, delta: JobCounts) -> dict[str, Any]:
        """The Update adding ``delta`` to a counter shard of the job (any: see the module docstring)."""
        names = {f"#{f}": f for f in _COUNTER_FIELDS}
        values = {f":{f}": _n(getattr(delta, f)) for f in _COUNTER_FIELDS}
        values[":now"] = _n(time.time())
        values[":exp"] = self.expires()
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

    def record_put(self, job_id: str, sk: str, body: str, status: str, *, open_item: bool) -> dict[str, Any]:
        item = {
            **self.key(job_id, sk),
            "body": stored_body(body),
            "status": _s(status),
            "lease_until": _n(0),
            "version": _n(1),
            "expires_at": self.expires(),
        }
        if open_item:
            item["open_pk"] = _s(open_pk(job_id))
        return created(self.table, item)

    def record_update(
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
        values = {":body": stored_body(body), ":status": _s(status), ":one": _n(1)}
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
        if status in ("pending", "processing"):
            sets.append("open_pk = :open")
            values[":open"] = _s(open_pk(job_id))
        else:
            removes.append("open_pk")
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": {
                "TableName": self.table,
                "Key": self.key(job_id, sk),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": values,
            }
        }

    @staticmethod
    def leased(lease: Lease) -> tuple[str, dict[str, Any]]:
        """The condition (and its values) that a record is processing under ``lease``."""
        return (
            "#status = :processing AND lease_token = :mine",
            {":processing": _s("processing"), ":mine": _s(lease.token)},
        )

    # jobs -----------------------------------------------------------------------------------------

    def create_job(self, job: JobRecord) -> JobRecord:
        item = {
            **self.key(job.job_id, "JOB"),
            "body": stored_body(body_of(job)),
            "status": _s(job.status.value),
            "fingerprint": _s(job.request.fingerprint()),
            "open_pk": _s(ACTIVE_JOBS),
            "version": _n(1),
            "expires_at": self.expires(),
            "layout": _s(LAYOUT),
        }
        new_only = "attribute_not_exists(pk)"  # an id already stored is that job: it is returned as it is
        conditional(lambda: self.client.put_item(TableName=self.table, Item=item, ConditionExpression=new_only))
        stored = self.get_job(job.job_id)
        assert stored is not None
        return stored

    def _job_item(self, job_id: str) -> dict[str, Any] | None:
        """The job's item; Unprocessable for a job of an earlier version's page layout."""
        item = self.get(job_id, "JOB")
        if item is not None and (why := refused_layout(job_id, item)):
            raise Unprocessable(why)
        return item

    def get_job(self, job_id: str) -> JobRecord | None:
        item = self._job_item(job_id)
        return JobRecord.model_validate_json(body_text(item)) if item else None

    def site_of(self, job_id: str, site: str | None = None) -> str:
        """The job's site as the crawl database knows it: as its steps name it (they name it the same), else
        its request's origin (read once per job)."""
        if site is not None:
            self._origins[job_id] = site
            return site
        origin = self._origins.get(job_id)
        if origin is None:
            item = self._job_item(job_id)
            if item is None:
                raise KeyError(f"job {job_id} is gone")
            origin = self._origins[job_id] = origin_of(orjson.loads(body_text(item))["request"]["site"])
        return origin

    def job_over(self, job_id: str) -> bool:
        """Whether the job has ended (or is gone). Known ends are kept; a running job is asked again after
        _RUNNING_KNOWN seconds."""
        over, asked = self._ended.get(job_id, (False, 0.0))
        now = time.monotonic()
        if over or now - asked < _RUNNING_KNOWN:
            return over
        item = self.get(job_id, "JOB")
        over = item is None or JobStatus(item["status"]["S"]).final
        self._ended[job_id] = (over, now)
        return over

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
                Key=self.key(job.job_id, "JOB"),
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

    def claim_end(self, job_id: str, *, until: float, now: float, handed: float | None = None) -> EndProgress | None:
        """``ending_until`` on the job's item (beside its body: the body's writes leave it), set if absent,
        lapsed or ``handed``; the item's ``end_progress`` read back by the same write."""
        condition = "attribute_not_exists(ending_until) OR ending_until < :now"
        values = {":until": _n(until), ":now": _n(now)}
        if handed is not None:
            condition += " OR ending_until = :handed"
            values[":handed"] = _n(handed)
        found: dict[str, Any] = {}
        landed = conditional(
            lambda: found.update(
                self.client.update_item(
                    TableName=self.table,
                    Key=self.key(job_id, "JOB"),
                    UpdateExpression="SET ending_until = :until",
                    ConditionExpression=f"attribute_exists(pk) AND ({condition})",
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                )
            )
        )
        if not landed:
            return None
        stored = found.get("Attributes", {}).get("end_progress")
        return msgspec.json.decode(stored["S"], type=EndProgress) if stored else EndProgress()

    def save_end(self, job_id: str, progress: EndProgress, *, held: float, handed: float) -> bool:
        return conditional(
            lambda: self.client.update_item(
                TableName=self.table,
                Key=self.key(job_id, "JOB"),
                UpdateExpression="SET ending_until = :handed, end_progress = :progress",
                ConditionExpression="ending_until = :held",
                ExpressionAttributeValues={
                    ":handed": _n(handed),
                    ":held": _n(held),
                    ":progress": _s(msgspec.json.encode(progress).decode()),
                },
            )
        )

    def resume_position(self, job_id: str) -> str | None:
        """``resume_at`` on the job's item (beside its body, as ``ending_until``)."""
        item = self.client.get_item(
            TableName=self.table, Key=self.key(job_id, "JOB"), ProjectionExpression="resume_at", ConsistentRead=True
        ).get("Item", {})
        return item["resume_at"]["S"] if "resume_at" in item else None

    def save_resume(self, job_id: str, after: str | None) -> None:
        update = "SET resume_at = :after" if after is not None else "REMOVE resume_at"
        conditional(
            lambda: self.client.update_item(
                TableName=self.table,
                Key=self.key(job_id, "JOB"),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(pk)",
                **({"ExpressionAttributeValues": {":after": _s(after)}} if after is not None else {}),
            )
        )

    def active_job_ids(self) -> list[str]:
        """The ids of the jobs still open, from the open index alone (its query pages: no read of each job),
        by id; a job of an earlier version's page layout is left out (its steps refuse it)."""
        items = self.query(
            IndexName=OPEN_INDEX,
            KeyConditionExpression="open_pk = :jobs",
            ExpressionAttributeValues={":jobs": _s(ACTIVE_JOBS)},
            ProjectionExpression="pk, layout",
        )
        ids = (item["pk"]["S"].removeprefix("JOB#") for item in items if not refused_layout("", item))
        return sorted(ids)

    def snapshot(self, job_id: str) -> JobSnapshot | None:
        keys = [self.key(job_id, "JOB")] + [self._shard_key(job_id, i) for i in range(SHARDS)]
        # (a read cancelled by a transaction in progress is tried again by the client: adapters.aws.busy)
        response = self.client.transact_get_items(
            TransactItems=[{"Get": {"TableName": self.table, "Key": k}} for k in keys]
        )
        items = [r.get("Item") for r in response["Responses"]]
        if not items[0]:
            return None
        if why := refused_layout(job_id, items[0]):
            raise Unprocessable(why)
        job = JobRecord.model_validate_json(body_text(items[0]))
        shards = [shard for shard in items[1:] if shard]
        counts = accounting.total(_shard_counts(shard) for shard in shards)
        updated = max([job.start_time.timestamp()] + [float(s.get("updated_at", {"N": "0"})["N"]) for s in shards])
        return JobSnapshot(job=job, counts=counts, last_update=datetime.fromtimestamp(updated, UTC))

    def counts(self, job_id: str) -> JobCounts:
        items = self.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _s(_count_pk(job_id))},
            ProjectionExpression=", ".join(f"#{f}" for f in _COUNTER_FIELDS),
            ExpressionAttributeNames={f"#{f}": f for f in _COUNTER_FIELDS},
            ConsistentRead=True,
        )
        return accounting.total(_shard_counts(item) for item in items)

    # extensions -----------------------------------------------------------------------------------

    def add_extensions(self, job_id: str, listings: Sequence[tuple[str, dict[str, Any]]]) -> None:
        for url, extensions in listings:
            for kind, value in extensions.items():
                item = {
                    **self.key(job_id, f"EXT#{url_key(url)}#{kind}"),
                    "body": stored_body(json.dumps({"url": url, "kind": kind, "value": value})),
                    "expires_at": self.expires(),
                }
                conditional(  # (the first value of a kind is kept: a later one fails the condition)
                    lambda item=item: self.client.put_item(
                        TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
                    )
                )

    def extensions(self, job_id: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for item in self.partition(job_id, "EXT#"):
            kept = json.loads(body_text(item))
            out.setdefault(kept["url"], {})[kept["kind"]] = kept["value"]
        return out
