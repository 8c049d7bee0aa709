"""The state table's calls as every store makes them: attribute values, a write that only lands on the
version it follows, transactions and single conditional writes tried again when they meet a transaction in
progress, batched and paginated reads.

Below every module of the table's layout (the job's records, the page batches, the crawl database and its
pointers), so that none of them imports another for these.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from harvester.adapters.aws.item_body import stored_body

BATCH_GET = 100
BATCH_WRITE = 25
_UNPROCESSED_RETRIES = 10
#: Tries of a write (or a transaction) that conflicts with a transaction in progress.
CONFLICT_RETRIES = 12


def s(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": value}


def n(value: float) -> dict[str, str]:
    """A number attribute value (a float exactly as Python prints it)."""
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def created(table: str, item: dict[str, Any]) -> dict[str, Any]:
    """A TransactWriteItems ``Put`` that only lands where no item is (a redone write finds its own)."""
    return {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}


def versioned_put(table: str, key: dict[str, Any], body: str, version: int) -> dict[str, Any]:
    """A TransactWriteItems ``Put`` (or put_item arguments) that only lands on the version it follows."""
    put: dict[str, Any] = {
        "TableName": table,
        "Item": {**key, "body": stored_body(body), "version": {"N": str(version)}},
    }
    if version == 1:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        put["ConditionExpression"] = "version = :previous"
        put["ExpressionAttributeValues"] = {":previous": {"N": str(version - 1)}}
    return {"Put": put}


class TransactionFailed(RuntimeError):
    def __init__(self, reasons: list[str]) -> None:
        super().__init__(f"transaction cancelled: {reasons}")
        self.reasons = reasons

    def failed_conditions(self, first: int) -> set[int]:
        """Positions among the first ``first`` items whose condition failed."""
        return {i for i, r in enumerate(self.reasons[:first]) if r == "ConditionalCheckFailed"}


def transact(client: Any, items: list[dict[str, Any]]) -> None:
    """TransactWriteItems, retrying conflicts with other transactions (never condition failures)."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            client.transact_write_items(TransactItems=items)
            return
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons or not any(r == "TransactionConflict" for r in reasons):
                raise TransactionFailed(reasons) from exc
            conflict_pause(attempt)
    raise TransactionFailed(["TransactionConflict"])


def conflict_pause(attempt: int) -> None:
    """The back-off before trying again a write that met a transaction in progress (jittered, doubling)."""
    time.sleep(random.uniform(0, 0.02 * 2**attempt))


def unprocessed_pause(attempt: int) -> None:
    """The back-off before asking again for what a batch request left unprocessed (throttled: jittered,
    doubling)."""
    time.sleep(random.uniform(0, 0.05 * 2**attempt))


def conditional(write: Callable[[], object]) -> bool:
    """Runs a conditional write: True when it landed, False when its condition failed.

    A single write to an item a transaction is changing is refused with TransactionConflictException, which
    botocore does not retry (unlike a transaction's own conflicts, retried by the state store): nothing was
    written, so it is tried again after a short back-off. (Page claims are single writes, and a batch's
    settlement or another worker's listing may hold one of the batch's items.)"""
    attempt = 0
    while True:
        try:
            write()
            return True
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "ConditionalCheckFailedException":
                return False
            attempt += 1
            if code != "TransactionConflictException" or attempt == CONFLICT_RETRIES:
                raise
        conflict_pause(attempt)


def batch_get(
    client: Any, table: str, keys: list[dict[str, Any]], *, consistent: bool = True
) -> Iterator[dict[str, Any]]:
    """The items of ``keys``, read with one BatchGetItem per 100 (and again for any DynamoDB left
    unprocessed, with a back-off), a hundred at a time as asked for, in no particular order; consistently
    unless told (half the read units)."""
    for start in range(0, len(keys), BATCH_GET):
        request: dict[str, Any] = {table: {"Keys": keys[start : start + BATCH_GET], "ConsistentRead": consistent}}
        for attempt in range(_UNPROCESSED_RETRIES):
            response = client.batch_get_item(RequestItems=request)
            yield from response.get("Responses", {}).get(table, [])
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
            unprocessed_pause(attempt)
        else:
            raise RuntimeError(f"DynamoDB kept {len(request[table]['Keys'])} keys unprocessed")


def query(client: Any, table: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item a Query returns, one page after another."""
    for page in client.get_paginator("query").paginate(TableName=table, **kwargs):
        yield from page.get("Items", [])


def batch_delete(client: Any, table: str, keys: list[dict[str, Any]]) -> None:
    """Deletes the items of ``keys`` with one BatchWriteItem per 25 (and again for any DynamoDB left
    unprocessed, with a back-off). Deleting an item that is gone already does nothing."""
    for start in range(0, len(keys), BATCH_WRITE):
        request: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in keys[start : start + BATCH_WRITE]]}
        for attempt in range(_UNPROCESSED_RETRIES):
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
            if not request:
                break
            unprocessed_pause(attempt)
        else:
            raise RuntimeError(f"DynamoDB kept {len(request[table])} deletions unprocessed")
