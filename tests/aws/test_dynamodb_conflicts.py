"""Transaction conflicts (two workers' transactions on one counter shard) are retried; condition failures
are not. moto never produces a conflict, so botocore's Stubber plays DynamoDB's answers here."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.state_table import CONFLICT_RETRIES, TransactionFailed


def cancelled(*codes: str) -> dict[str, object]:
    return {
        "service_error_code": "TransactionCanceledException",
        "service_message": "Transaction cancelled",
        "http_status_code": 400,
        "response_meta": {},
        "modeled_fields": {"CancellationReasons": [{"Code": c} for c in codes]},
    }


@pytest.fixture
def stubbed():
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield DynamoStateStore(client, "t"), stubber
        stubber.assert_no_pending_responses()


ITEMS = [
    {"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}, "ConditionExpression": "x"}}
]


def test_a_conflict_is_tried_again(stubbed):
    store, stubber = stubbed
    stubber.add_client_error("transact_write_items", **cancelled("None", "TransactionConflict"))
    stubber.add_client_error("transact_write_items", **cancelled("TransactionConflict", "None"))
    stubber.add_response("transact_write_items", {})
    store._transact(ITEMS)


def test_a_failed_condition_is_not_tried_again(stubbed):
    store, stubber = stubbed
    stubber.add_client_error("transact_write_items", **cancelled("ConditionalCheckFailed", "TransactionConflict"))
    with pytest.raises(TransactionFailed) as failure:
        store._transact(ITEMS)
    assert failure.value.failed_conditions(2) == {0}


def test_conflicts_that_never_end_give_up(stubbed, monkeypatch):
    store, stubber = stubbed
    monkeypatch.setattr("harvester.adapters.aws.state_table.time.sleep", lambda _: None)  # (conflict_pause)
    for _ in range(CONFLICT_RETRIES):
        stubber.add_client_error("transact_write_items", **cancelled("TransactionConflict"))
    with pytest.raises(TransactionFailed, match="TransactionConflict"):
        store._transact(ITEMS)
