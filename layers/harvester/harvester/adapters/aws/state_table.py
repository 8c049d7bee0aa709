"""The state table's calls as every store makes them: attribute values, a write that only lands on the
version it follows, transactions and single conditional writes, batched and paginated reads (what DynamoDB
leaves unprocessed asked again within the step's patience).

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
from harvester.patience import PATIENCE

BATCH_GET = 100
BATCH_WRITE = 25


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
    """TransactWriteItems; TransactionFailed with the reasons when its conditions cancelled it. (A transaction
    cancelled for throttling or a conflict with another transaction is tried again, then raised as Busy, by
    the client: adapters.aws.busy.)"""
    try:
        client.transact_write_items(TransactItems=items)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "TransactionCanceledException":
            raise
        raise TransactionFailed([r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]) from exc


def conflict_pause(attempt: int) -> None:
    """The pause before reading again an item whose version moved under an optimistic write (jittered,
    doubling), so that writers racing for one item do not race again in step."""
    time.sleep(random.uniform(0, 0.02 * 2**attempt))


def conditional(write: Callable[[], object]) -> bool:
    """Runs a conditional write: True when it landed, False when its condition failed. (A write refused
    because a transaction holds its item, TransactionConflictException, is tried again by the client.)"""
    try:
        write()
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise
    return True


def batch_get(
    client: Any, table: str, keys: list[dict[str, Any]], *, consistent: bool = True, projection: str | None = None
) -> Iterator[dict[str, Any]]:
    """The items of ``keys``, read with one BatchGetItem per 100 (and again for any DynamoDB left
    unprocessed, with a back-off), a hundred at a time as asked for, in no particular order; consistently
    unless told (half the read units); only the attributes ``projection`` names, if given."""
    for start in range(0, len(keys), BATCH_GET):
        request: dict[str, Any] = {table: {"Keys": keys[start : start + BATCH_GET], "ConsistentRead": consistent}}
        if projection is not None:
            request[table]["ProjectionExpression"] = projection
        tries = 0
        while request:
            response = client.batch_get_item(RequestItems=request)
            yield from response.get("Responses", {}).get(table, [])
            request = response.get("UnprocessedKeys") or {}
            if request:
                tries += 1
                unanswered = len(request[table]["Keys"])
                PATIENCE.pause(tries, "dynamodb", "BatchGetItem", f"{unanswered} keys left unprocessed (throttled)")


def query(client: Any, table: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item a Query returns, one page after another."""
    for page in client.get_paginator("query").paginate(TableName=table, **kwargs):
        yield from page.get("Items", [])


def batch_delete(client: Any, table: str, keys: list[dict[str, Any]]) -> None:
    """Deletes the items of ``keys`` with one BatchWriteItem per 25 (and again for any DynamoDB left
    unprocessed, with a back-off). Deleting an item that is gone already does nothing."""
    _batch_write(client, table, [{"DeleteRequest": {"Key": k}} for k in keys], "deletions")


def batch_put(client: Any, table: str, items: list[dict[str, Any]]) -> None:
    """Writes ``items`` (unconditionally) with one BatchWriteItem per 25, as ``batch_delete`` deletes."""
    _batch_write(client, table, [{"PutRequest": {"Item": item}} for item in items], "writes")


def _batch_write(client: Any, table: str, requests: list[dict[str, Any]], what: str) -> None:
    for start in range(0, len(requests), BATCH_WRITE):
        request: dict[str, Any] = {table: requests[start : start + BATCH_WRITE]}
        tries = 0
        while request:
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
            if request:
                tries += 1
                unanswered = len(request[table])
                PATIENCE.pause(tries, "dynamodb", "BatchWriteItem", f"{unanswered} {what} left unprocessed (throttled)")
