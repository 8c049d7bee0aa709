"""The DynamoDB speedups change nothing moto answers: a differential test, patched vs unpatched."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import boto3
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.parsing.expressions import UpdateExpressionParser

from tests.aws.moto_dynamodb_speedups import _WELL_FORMED, _copy_node, moto_dynamodb_speedups, speedup_applies

TABLE = "t"


def item(pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **{k: {"N": str(v)} for k, v in attrs.items()}}


def put(pk: str, sk: str, *, new: bool = True, **attrs: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"TableName": TABLE, "Item": item(pk, sk, **attrs)}
    if new:
        op["ConditionExpression"] = "attribute_not_exists(pk)"
    return {"Put": op}


def add(pk: str, sk: str, n: int, *, at_most: int | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "TableName": TABLE,
        "Key": {"pk": {"S": pk}, "sk": {"S": sk}},
        "UpdateExpression": "ADD n :n",
        "ExpressionAttributeValues": {":n": {"N": str(n)}},
    }
    if at_most is not None:
        op["ConditionExpression"] = "attribute_not_exists(n) OR n <= :max"
        op["ExpressionAttributeValues"][":max"] = {"N": str(at_most)}
    return {"Update": op}


SCENARIO = [
    [put("a", "1", n=1), put("a", "2", n=2), add("a", "c", 5)],  # applies
    [put("a", "3", n=3), put("a", "1", n=9), add("a", "c", 5)],  # "1" exists: all rolled back
    [add("a", "c", 1), add("a", "2", 1), add("a", "c", 1)],  # two ops on one item: refused, rolled back
    [add("a", "2", 10), add("a", "c", 1, at_most=4)],  # c is 5 > 4: rolled back
    [put("a", "3", n=3), {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": "a"}, "sk": {"S": "2"}}}}],
    [
        put("a", "4", n=4),
        {
            "Delete": {
                "TableName": TABLE,
                "Key": {"pk": {"S": "a"}, "sk": {"S": "3"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
    ],
]


def _values(**values: str) -> dict[str, Any]:
    return {f":{k}": {"N" if k == "n" else "S": v} for k, v in values.items()}


QUERIES: list[dict[str, Any]] = [
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": _values(p="a")},
    {"KeyConditionExpression": "pk = :p AND begins_with(sk, :s)", "ExpressionAttributeValues": _values(p="q", s="1")},
    {
        "KeyConditionExpression": "pk = :p AND sk BETWEEN :x AND :y",
        "ScanIndexForward": False,
        "ExpressionAttributeValues": _values(p="q", x="10", y="30"),
    },
    {
        "KeyConditionExpression": "pk = :p",
        "FilterExpression": "n > :n",
        "Limit": 7,
        "ExpressionAttributeValues": _values(p="q", n="20"),
    },
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": _values(p="missing")},
    {"IndexName": "byn", "KeyConditionExpression": "g = :g", "ExpressionAttributeValues": _values(g="x")},
]


def run(patched: bool) -> list[Any]:
    observed: list[Any] = []
    with mock_aws(), moto_dynamodb_speedups() if patched else nullcontext():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
                {"AttributeName": "g", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "byn",
                    "KeySchema": [
                        {"AttributeName": "g", "KeyType": "HASH"},
                        {"AttributeName": "sk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for pk in ("q", "r", "a0"):
            for n in range(40):
                attrs = {"pk": {"S": pk}, "sk": {"S": str(n)}, "n": {"N": str(n)}}
                if n % 3 == 0:
                    attrs["g"] = {"S": "x"}
                client.put_item(TableName=TABLE, Item=attrs)
        for transaction in SCENARIO:
            try:
                client.transact_write_items(TransactItems=transaction)
                observed.append("ok")
            except ClientError as exc:
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                observed.append((exc.response["Error"]["Code"], reasons))
            items = client.query(
                TableName=TABLE, KeyConditionExpression="pk = :a", ExpressionAttributeValues={":a": {"S": "a"}}
            )["Items"]
            observed.append(sorted((i["sk"]["S"], i.get("n", {}).get("N")) for i in items))
        for query in QUERIES:
            pages = []
            kwargs: dict[str, Any] = {"TableName": TABLE, **query}
            while True:
                response = client.query(**kwargs)
                pages.append((response["Items"], response.get("Count"), response.get("ScannedCount")))
                if "LastEvaluatedKey" not in response:
                    break
                kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
            observed.append(pages)
        observed += [_without_metadata(response) for response in item_operations(client)]
        observed += update_operations(client)
    return observed


def _without_metadata(response: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in response.items() if k != "ResponseMetadata"}


def item_operations(client: Any) -> list[dict[str, Any]]:
    """Every item operation the engine uses, whole responses: binary, nested and numeric values,
    projections of top-level names (and a nested path, which moto's own code projects), returned values,
    consumed capacity, a failed condition."""
    rich = {
        "pk": {"S": "b"},
        "sk": {"S": "1"},
        "body": {"B": b"\x00\xffzstd"},
        "m": {"M": {"x": {"N": "1.50"}, "l": {"L": [{"S": "a"}, {"NULL": True}, {"BOOL": False}]}}},
        "n": {"N": "7"},
    }
    key = {"pk": {"S": "b"}, "sk": {"S": "1"}}
    names = {"#b": "body", "#n": "n"}
    capacity: dict[str, Any] = {"ReturnConsumedCapacity": "TOTAL"}
    responses = [
        client.put_item(TableName=TABLE, Item=rich, ReturnValues="ALL_OLD", **capacity),
        client.put_item(TableName=TABLE, Item=rich, ReturnValues="ALL_OLD"),
        client.get_item(TableName=TABLE, Key=key, **capacity),
        client.get_item(TableName=TABLE, Key=key, ProjectionExpression="#b, #n", ExpressionAttributeNames=names),
        client.get_item(TableName=TABLE, Key=key, ProjectionExpression="m.x, sk"),
        client.get_item(TableName=TABLE, Key={"pk": {"S": "b"}, "sk": {"S": "none"}}),
        client.batch_get_item(
            RequestItems={TABLE: {"Keys": [key, {"pk": {"S": "q"}, "sk": {"S": "3"}}], "ProjectionExpression": "pk, n"}}
        ),
        client.update_item(
            TableName=TABLE,
            Key=key,
            UpdateExpression="ADD #n :one SET m.x = :x",
            ExpressionAttributeNames={"#n": "n"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":x": {"N": "2"}},
            ReturnValues="ALL_NEW",
            **capacity,
        ),
        client.update_item(
            TableName=TABLE,
            Key=key,
            UpdateExpression="REMOVE m",
            ReturnValues="UPDATED_OLD",
        ),
        client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ProjectionExpression="sk, #b",
            ExpressionAttributeNames={"#b": "body"},
            ExpressionAttributeValues={":p": {"S": "b"}},
            **capacity,
        ),
        client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            Select="COUNT",
            ExpressionAttributeValues={":p": {"S": "q"}},
        ),
        client.scan(TableName=TABLE, Limit=5),
        client.batch_write_item(
            RequestItems={TABLE: [{"DeleteRequest": {"Key": {"pk": {"S": "r"}, "sk": {"S": "1"}}}}]}
        ),
        client.delete_item(TableName=TABLE, Key=key, ReturnValues="ALL_OLD"),
    ]
    try:
        client.put_item(
            TableName=TABLE,
            Item=item("q", "1"),
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as exc:
        responses.append({"error": exc.response["Error"], "item": exc.response.get("Item")})
    return responses


#: The update expressions the engine's kinds use (functions, arithmetic, names, nested paths, REMOVE), each
#: run more than once with other values, and the ways an update is refused.
COUNTER = (
    "SET a = if_not_exists(a, :zero), m = if_not_exists(m, :m), l = list_append(if_not_exists(l, :empty), :l)"
    " ADD c :one"
)
MAP = {"M": {"x": {"N": "1"}, "y": {"N": "2"}}}
UPDATES: list[tuple[str, dict[str, Any], dict[str, str] | None, str | None]] = [
    (
        COUNTER,
        {":zero": {"N": "0"}, ":m": MAP, ":empty": {"L": []}, ":l": {"L": [{"S": "x"}]}, ":one": {"N": "1"}},
        None,
        None,
    ),
    (
        COUNTER,
        {":zero": {"N": "5"}, ":m": MAP, ":empty": {"L": []}, ":l": {"L": [{"S": "y"}]}, ":one": {"N": "2"}},
        None,
        None,
    ),
    ("SET a = a + :d, #t = :t REMOVE m.x", {":d": {"N": "3"}, ":t": {"S": "t"}}, {"#t": "tag"}, None),
    ("SET a = a + :d, #t = :t REMOVE m.x", {":d": {"N": "-1"}, ":t": {"S": "u"}}, {"#t": "tag"}, None),
    ("SET a = :v", {":v": {"N": "9"}, ":least": {"N": "5"}}, None, "a >= :least"),  # the condition fails
    ("SET pk = :v", {":v": {"S": "k"}}, None, None),  # a key attribute
    ("SET = :v", {":v": {"S": "k"}}, None, None),  # not an expression
    ("SET a = :missing", {":v": {"S": "k"}}, None, None),  # a value not given
    ("SET a = a + :s", {":s": {"S": "k"}}, None, None),  # a string added to a number
    ("SET a = :v, a = :v", {":v": {"N": "1"}}, None, None),  # a path twice
    # Checks whose outcome depends on the attribute names as well as the text: accepted, then refused.
    ("SET #a = :v, #b = :v", {":v": {"N": "1"}}, {"#a": "x", "#b": "y"}, None),
    ("SET #a = :v, #b = :v", {":v": {"N": "1"}}, {"#a": "x", "#b": "x"}, None),  # a path twice, by its names
    ("SET #a = :v", {":v": {"N": "1"}}, {"#a": "x"}, None),
    ("SET #a = :v", {":v": {"N": "1"}}, {"#a": "pk"}, None),  # a key attribute, by its name
    ("ADD a :v ADD b :v", {":v": {"N": "1"}}, None, None),  # a clause twice
]
#: How unpatched moto answers UPDATES: the error's code, None for an update applied.
REFUSED = [None] * 4 + ["ConditionalCheckFailedException"] + ["ValidationException"] * 5
REFUSED += [None, "ValidationException", None, "ValidationException", "ValidationException"]


def update_operations(client: Any) -> list[Any]:
    observed: list[Any] = []
    for sk in ("u1", "u2"):
        for expression, values, names, condition in UPDATES:
            kwargs: dict[str, Any] = {
                "TableName": TABLE,
                "Key": {"pk": {"S": "u"}, "sk": {"S": sk}},
                "UpdateExpression": expression,
                "ExpressionAttributeValues": values,
                "ReturnValues": "ALL_NEW",
            }
            if names:
                kwargs["ExpressionAttributeNames"] = names
            if condition:
                kwargs["ConditionExpression"] = condition
            try:
                observed.append(_without_metadata(client.update_item(**kwargs)))
            except ClientError as exc:
                observed.append(exc.response["Error"])
        update = {k: v for k, v in kwargs.items() if k != "ReturnValues"} | {"UpdateExpression": COUNTER}
        update["ExpressionAttributeValues"] = UPDATES[0][1]
        client.transact_write_items(TransactItems=[{"Update": update}])
        observed.append(client.get_item(TableName=TABLE, Key=update["Key"])["Item"])
    # An update the table above accepts, on a table whose key it names.
    client.create_table(
        TableName="keyed-x",
        KeySchema=[{"AttributeName": "x", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "x", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        client.update_item(
            TableName="keyed-x",
            Key={"x": {"S": "k"}},
            UpdateExpression="SET #a = :v",
            ExpressionAttributeNames={"#a": "x"},
            ExpressionAttributeValues={":v": {"N": "1"}},
        )
        observed.append("updated")
    except ClientError as exc:
        observed.append(exc.response["Error"])
    return observed


def test_patched_moto_answers_exactly_as_moto():
    unpatched = run(patched=False)
    assert unpatched[1] == [("1", "1"), ("2", "2"), ("c", "5")]  # the scenario exercises what it means to
    # The queries exercise what they mean to: prefixes, ranges backwards, filters across pages, an index.
    sizes = [
        [len(page[0]) for page in query] for query in unpatched[len(SCENARIO) * 2 : len(SCENARIO) * 2 + len(QUERIES)]
    ]
    assert sizes == [[3], [11], [23], [0, 0, 7, 6, 6, 0], [0], [42]]
    updates = unpatched[-2 * (len(UPDATES) + 1) - 1 : -1]
    operations = unpatched[len(SCENARIO) * 2 + len(QUERIES) : -len(updates) - 1]
    assert operations[2]["Item"]["body"] == {"B": b"\x00\xffzstd"} and "ConsumedCapacity" in operations[2]
    assert set(operations[3]["Item"]) == {"body", "n"} and operations[4]["Item"] == {
        "m": {"M": {"x": {"N": "1.50"}}},
        "sk": {"S": "1"},
    }
    assert operations[-1]["error"]["Code"] == "ConditionalCheckFailedException"
    assert unpatched[2][0] == "TransactionCanceledException"
    assert updates[1]["Attributes"]["c"] == {"N": "3"} and len(updates[1]["Attributes"]["l"]["L"]) == 2
    assert updates[3]["Attributes"]["a"] == {"N": "2"} and updates[3]["Attributes"]["tag"] == {"S": "u"}
    for sk in range(2):  # (two items, each new at its first update)
        refusals = [u.get("Code") for u in updates[sk * (len(UPDATES) + 1) :][: len(UPDATES)]]
        assert refusals == REFUSED, updates
    assert "part of the key" in unpatched[-1]["Message"]
    _WELL_FORMED.clear()
    assert run(patched=True) == unpatched
    assert _WELL_FORMED  # (the checks were skipped where they had passed)
    for expression, *_ in UPDATES[:5]:  # (the parsed trees are copied node by node, not by deepcopy)
        assert _copy_node(UpdateExpressionParser.make(expression), None, set()) is not None
    # (With a moto whose code differs from the checked one the patch is inert and this still holds.)
    assert speedup_applies(), "moto changed: the speedup no longer applies, the AWS tests will be slow"
