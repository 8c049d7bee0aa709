"""The moto harness itself: the deployed stack, Lambda's SQS poller, the schedule, the moto speedups.

Why: the end-to-end tests trust this harness to behave like Lambda and SQS - a poller that deleted
failed messages, or built a differently shaped event, would make the handlers' retry logic look right
when it is not. Throwaway handlers written here record what they receive and fail chosen messages.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsModel
from moto import mock_aws
from moto.sqs import models as sqs_models

from tests.aws.conftest import Deployment
from tests.aws.deployed import DeployedStack
from tests.aws.moto_speedups import (
    changed_moto_code,
    moto_sqs_speedups,
    speedups_apply,
)
from tests.aws.poller import DrainError, LambdaPoller, _batch_item_failures

# `sam local generate-event sqs receive-message` (SAM CLI 1.170.0): Lambda's SQS event shape.
SAM_SQS_EVENT = {
    "Records": [
        {
            "messageId": "19dd0b57-b21e-4ac1-bd88-01bbb068cb78",
            "receiptHandle": "MessageReceiptHandle",
            "body": "Hello from SQS!",
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1523232000000",
                "SenderId": "123456789012",
                "ApproximateFirstReceiveTimestamp": "1523232000001",
            },
            "messageAttributes": {},
            "md5OfBody": "7b270e59b47ff90a553787216d55d91d",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:MyQueue",
            "awsRegion": "us-east-1",
        }
    ]
}
# `sam local generate-event cloudwatch scheduled-event` (SAM CLI 1.170.0). Real deliveries also carry
# "version": "0", which Powertools' EventBridgeModel requires.
SAM_SCHEDULED_EVENT = {
    "id": "cdc73f9d-aea9-11e3-9d5a-835b769c0d9c",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "1970-01-01T00:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/ExampleRule"],
    "detail": {},
}

RECORDING_APP = textwrap.dedent(
    '''
    """A throwaway handler: records events, context and environment; fails bodies starting "fail"."""
    import os

    COLD_START_TABLE = os.environ["HARVEST_STATE_TABLE"]
    CALLS = []

    def handler(event, context):
        CALLS.append(
            {
                "event": event,
                "context": {
                    "function_name": context.function_name,
                    "memory_limit_in_mb": context.memory_limit_in_mb,
                    "invoked_function_arn": context.invoked_function_arn,
                    "aws_request_id": context.aws_request_id,
                    "remaining": context.get_remaining_time_in_millis(),
                },
                "environ": dict(os.environ),
            }
        )
        if "Records" not in event:
            return {"scheduled": True}
        failed = [r["messageId"] for r in event["Records"] if r["body"].startswith("fail")]
        return {"batchItemFailures": [{"itemIdentifier": i} for i in failed]}
    '''
)


class Recorder:
    """An in-test handler: records each event and answers with what ``respond`` returns."""

    def __init__(self, respond: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.respond = respond or (lambda event: {"batchItemFailures": []})

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        self.events.append(event)
        return self.respond(event)

    def bodies(self) -> list[str]:
        return [r["body"] for e in self.events for r in e["Records"]]


def batched(stack: DeployedStack, function: str = "PageFunction", size: int = 50, window: int = 1) -> DeployedStack:
    """The stack with ``function`` taking up to ``size`` messages at once (its SQS event source's BatchSize):
    the template's page functions take one message (a page batch), but the poller plays Lambda's batches of
    any size, partial failures included, and these tests check it on batches of many."""
    deployed = stack.functions[function]
    (source,) = deployed.event_sources
    source = dataclasses.replace(source, batch_size=size, maximum_batching_window=window)
    functions = stack.functions | {function: dataclasses.replace(deployed, event_sources=(source,))}
    return dataclasses.replace(stack, functions=functions)


def fail_bodies(*bodies: str) -> Callable[[dict[str, Any]], Any]:
    def respond(event: dict[str, Any]) -> Any:
        ids = [r["messageId"] for r in event["Records"] if r["body"] in bodies]
        return {"batchItemFailures": [{"itemIdentifier": i} for i in ids]}

    return respond


def send(stack: DeployedStack, queue_id: str, *bodies: str, **kwargs: Any) -> list[str]:
    sqs = boto3.client("sqs")
    return [sqs.send_message(QueueUrl=stack.queue_url(queue_id), MessageBody=b, **kwargs)["MessageId"] for b in bodies]


def depth(poller: LambdaPoller, queue_id: str) -> tuple[int, int, int]:
    d = poller.queue_depth(queue_id)
    return d.visible, d.in_flight, d.delayed


@pytest.fixture
def recording_dirs(tmp_path: Path) -> dict[str, Path]:
    """A code directory with RECORDING_APP for each function."""
    dirs = {}
    for function_id in ("JobFunction", "SitemapFunction", "PageFunction", "SchedulerFunction"):
        directory = tmp_path / function_id
        directory.mkdir()
        (directory / "app.py").write_text(RECORDING_APP)
        dirs[function_id] = directory
    return dirs


def recorded_calls(poller: LambdaPoller, function_id: str) -> list[dict[str, Any]]:
    handler = poller.handler(function_id)
    return sys.modules[handler.__module__].CALLS


# ------------------------------------------------------------------------------------------ the stack


def test_stack_has_the_resources_and_outputs(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    expected = {
        "JobQueue": "AWS::SQS::Queue",
        "SitemapQueue": "AWS::SQS::Queue",
        "PageQueue": "AWS::SQS::Queue",
        "JobDeadLetterQueue": "AWS::SQS::Queue",
        "SitemapDeadLetterQueue": "AWS::SQS::Queue",
        "PageDeadLetterQueue": "AWS::SQS::Queue",
        "JobEndQueue": "AWS::SQS::Queue",
        "JobEndDeadLetterQueue": "AWS::SQS::Queue",
        "StateTable": "AWS::DynamoDB::Table",
        "DocumentBucket": "AWS::S3::Bucket",
        "JobFunction": "AWS::Lambda::Function",
        "JobEndFunction": "AWS::Lambda::Function",
        "SitemapFunction": "AWS::Lambda::Function",
        "PageFunction": "AWS::Lambda::Function",
        "SchedulerFunction": "AWS::Lambda::Function",
        "SchedulerFunctionTick": "AWS::Events::Rule",
    }
    assert {k: stack.resource_types.get(k) for k in expected} == expected
    assert any(
        k.startswith("HarvesterLayer") for k, t in stack.resource_types.items() if t == "AWS::Lambda::LayerVersion"
    )
    # moto's CloudFormation has no model for these: they are in the template, not in moto.
    assert set(stack.skipped) <= {
        "DocumentBucketPolicy",
        "JobDeadLetterQueueAlarm",
        "JobEndDeadLetterQueueAlarm",
        "SitemapDeadLetterQueueAlarm",
        "PageDeadLetterQueueAlarm",
        "PagesStalledAlarm",
        "PageFailureRateAlarm",
    }
    outputs = stack.outputs
    assert outputs["JobQueueUrl"] == stack.physical_ids["JobQueue"]
    assert outputs["SitemapQueueUrl"] == stack.physical_ids["SitemapQueue"]
    assert outputs["PageQueueUrl"] == stack.physical_ids["PageQueue"]
    for queue in ("Job", "Sitemap", "Page"):
        assert outputs[f"{queue}DeadLetterQueueUrl"] == stack.physical_ids[f"{queue}DeadLetterQueue"]
    assert outputs["StateTableName"] == stack.physical_ids["StateTable"]
    assert outputs["DocumentBucketName"] == stack.physical_ids["DocumentBucket"]
    for function_id, function in stack.functions.items():
        assert outputs[f"{function_id}Name"] == function.name

    dynamodb = boto3.client("dynamodb")
    table = dynamodb.describe_table(TableName=outputs["StateTableName"])["Table"]
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["OpenItems", "DueSites"]
    sqs = boto3.client("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=outputs["PageQueueUrl"], AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "720"
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == 5


def test_functions_as_deployed(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    repo = Path(__file__).resolve().parents[2]
    shapes = {
        f.logical_id: (f.handler, f.runtime, f.timeout, f.memory_size, f.code_dir) for f in stack.functions.values()
    }
    assert shapes == {
        "JobFunction": ("app.handler", "python3.11", 60, 512, repo / "functions/job"),
        "JobEndFunction": ("app.handler", "python3.11", 900, 2048, repo / "functions/job_end"),
        "SitemapFunction": ("app.handler", "python3.11", 300, 1024, repo / "functions/sitemap"),
        "PageFunction": ("app.handler", "python3.11", 120, 256, repo / "functions/page"),
        "PagePriorityFunction": ("app.handler", "python3.11", 120, 256, repo / "functions/page"),
        "SchedulerFunction": ("app.handler", "python3.11", 300, 512, repo / "functions/scheduler"),
    }


def test_event_sources_survived_translation(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    sources = {
        f.logical_id: (
            s.queue_logical_id,
            s.batch_size,
            s.maximum_batching_window,
            s.maximum_concurrency,
            s.function_response_types,
        )
        for f in stack.functions.values()
        for s in f.event_sources
    }
    assert sources == {
        "JobFunction": ("JobQueue", 1, None, 2, ("ReportBatchItemFailures",)),
        "JobEndFunction": ("JobEndQueue", 1, None, 5, ("ReportBatchItemFailures",)),
        "SitemapFunction": ("SitemapQueue", 1, None, 5, ("ReportBatchItemFailures",)),
        "PageFunction": ("PageQueue", 1, None, 20, ("ReportBatchItemFailures",)),
        "PagePriorityFunction": ("PagePriorityQueue", 1, None, 20, ("ReportBatchItemFailures",)),
    }
    assert stack.function("SchedulerFunction").event_sources == ()
    (rule,) = stack.function("SchedulerFunction").schedule_rules
    assert (rule.schedule_expression, rule.state) == ("rate(5 minutes)", "ENABLED")


@pytest.mark.parametrize(
    "stack_parameters",
    [
        {
            "PageConcurrency": 7,
            "SitemapConcurrency": 3,
            "ScheduleExpression": "rate(1 hour)",
            "RetentionDays": 9,
            "HostMaxInFlight": 3,
        }
    ],
    indirect=True,
)
def test_parameters_reach_the_deployed_resources(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    assert stack.function("PageFunction").sqs_event_source.maximum_concurrency == 7  # type: ignore[union-attr]
    assert stack.function("SitemapFunction").sqs_event_source.maximum_concurrency == 3  # type: ignore[union-attr]
    assert stack.function("SchedulerFunction").schedule_rules[0].schedule_expression == "rate(1 hour)"
    assert stack.function("JobFunction").environment["HARVEST_RETENTION_DAYS"] == "9"
    assert stack.function("PageFunction").environment["HARVEST_HOST_MAX_IN_FLIGHT"] == "3"


def test_environment_is_the_deployed_one(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    outputs = stack.outputs
    expected = {
        "POWERTOOLS_SERVICE_NAME": "harvester",
        "POWERTOOLS_METRICS_NAMESPACE": "Harvester",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "HARVEST_JOB_QUEUE_URL": outputs["JobQueueUrl"],
        "HARVEST_SITEMAP_QUEUE_URL": outputs["SitemapQueueUrl"],
        "HARVEST_PAGE_QUEUE_URL": outputs["PageQueueUrl"],
        "HARVEST_PAGE_PRIORITY_QUEUE_URL": outputs["PagePriorityQueueUrl"],
        "HARVEST_JOB_DLQ_URL": outputs["JobDeadLetterQueueUrl"],
        "HARVEST_SITEMAP_DLQ_URL": outputs["SitemapDeadLetterQueueUrl"],
        "HARVEST_PAGE_DLQ_URL": outputs["PageDeadLetterQueueUrl"],
        "HARVEST_JOB_END_QUEUE_URL": stack.physical_ids["JobEndQueue"],
        "HARVEST_JOB_END_DLQ_URL": stack.physical_ids["JobEndDeadLetterQueue"],
        "HARVEST_STATE_TABLE": outputs["StateTableName"],
        "HARVEST_DOCUMENT_BUCKET": outputs["DocumentBucketName"],
        "HARVEST_ALLOW_NETWORKS": "127.0.0.0/8",
        "HARVEST_USER_AGENT": "Harvester/0.1 (+https://github.com/harvester-crawler/harvester)",
        "HARVEST_RETENTION_DAYS": "30",
        "HARVEST_HOST_MAX_IN_FLIGHT": "8",
        "HARVEST_PAGE_BATCH_SIZE": "100",
        "HARVEST_SNAPSHOT_REFS": "1",
        "HARVEST_SITEMAP_PART_MIN_URLS": "10",
        "HARVEST_SITEMAP_STEP_URLS": "10000",
        "HARVEST_SITEMAP_STEP_SECONDS": "150",
        "HARVEST_CLAIM_LEAD_SECONDS": "0.1",
    }
    for function in stack.functions.values():
        assert function.environment == expected, function.logical_id


def test_handler_runs_in_the_function_environment(deployed_stack: Deployment, recording_dirs: dict[str, Path]) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(stack, code_dirs=recording_dirs)
    before = dict(os.environ)
    send(stack, "SitemapQueue", "one")
    assert poller.poll_once("SitemapFunction") == 1
    assert dict(os.environ) == before, "the function's environment leaked out of the invocation"
    module = sys.modules[poller.handler("SitemapFunction").__module__]
    assert stack.outputs["StateTableName"] == module.COLD_START_TABLE  # env applied at import too
    (call,) = module.CALLS
    function = stack.function("SitemapFunction")
    for key, value in function.environment.items():
        assert call["environ"][key] == value
    assert call["environ"]["AWS_LAMBDA_FUNCTION_NAME"] == function.name
    assert call["environ"]["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "1024"
    assert call["environ"]["LAMBDA_TASK_ROOT"] == str(poller.code_dir("SitemapFunction"))  # (as Lambda sets it)
    poller.close()


# ------------------------------------------------------------------------------------ the SQS event


def test_event_shape_matches_lambda(deployed_stack: Deployment, recording_dirs: dict[str, Path]) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(stack, code_dirs=recording_dirs)
    attributes = {
        "job": {"DataType": "String", "StringValue": "job-1"},
        "attempt": {"DataType": "Number", "StringValue": "2"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    (message_id,) = send(stack, "PageQueue", '{"url": "https://example.com/"}', MessageAttributes=attributes)
    started = time.time() * 1000
    assert poller.poll_once("PageFunction") == 1
    (call,) = recorded_calls(poller, "PageFunction")
    (record,) = call["event"]["Records"]
    (reference,) = SAM_SQS_EVENT["Records"]

    assert list(call["event"]) == ["Records"]
    assert set(record) == set(reference)
    assert set(record["attributes"]) == set(reference["attributes"])
    assert all(isinstance(v, str) for v in record["attributes"].values())
    assert record["messageId"] == message_id
    assert record["body"] == '{"url": "https://example.com/"}'
    assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == stack.function("PageFunction").sqs_event_source.queue_arn  # type: ignore[union-attr]
    assert record["eventSourceARN"].startswith("arn:aws:sqs:us-east-1:")
    assert record["awsRegion"] == "us-east-1"
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert abs(int(record["attributes"]["SentTimestamp"]) - started) < 5000
    assert record["messageAttributes"] == {
        "job": {"stringValue": "job-1", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
        "attempt": {"stringValue": "2", "stringListValues": [], "binaryListValues": [], "dataType": "Number"},
        "blob": {
            "binaryValue": base64.b64encode(b"\x00\xff").decode(),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "Binary",
        },
    }
    # The reference event, and ours, both parse with Powertools' model of Lambda's SQS event.
    SqsModel.model_validate(SAM_SQS_EVENT)
    parsed = SqsModel.model_validate(call["event"])
    assert parsed.Records[0].messageAttributes["blob"].binaryValue == base64.b64encode(b"\x00\xff").decode()

    function = stack.function("PageFunction")
    context = call["context"]
    assert context["function_name"] == function.name
    assert context["invoked_function_arn"] == function.arn
    assert context["memory_limit_in_mb"] == "256"  # a str, as awslambdaric reads it from the environment
    assert 120_000 - 5_000 < context["remaining"] <= 120_000
    poller.close()


def test_batch_size_and_attributes_of_a_full_batch(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    recorder = Recorder()
    poller = LambdaPoller(batched(stack), handlers={"PageFunction": recorder, "SitemapFunction": recorder})
    send(stack, "PageQueue", *[f"p{i}" for i in range(60)])
    send(stack, "SitemapQueue", "s1", "s2")
    assert [poller.poll_once("PageFunction") for _ in range(3)] == [50, 10, 0]  # (10 per ReceiveMessage)
    assert [poller.poll_once("SitemapFunction") for _ in range(3)] == [1, 1, 0]
    assert sorted(recorder.bodies()) == sorted([f"p{i}" for i in range(60)] + ["s1", "s2"])
    assert depth(poller, "PageQueue") == (0, 0, 0)


# ------------------------------------------------------------------------------- failures and retries


def test_partial_failures_stay_and_come_back(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    recorder = Recorder(fail_bodies("b"))
    poller = LambdaPoller(batched(stack), handlers={"PageFunction": recorder})
    ids = dict(zip(["a", "b", "c"], send(stack, "PageQueue", "a", "b", "c"), strict=True))

    assert poller.poll_once("PageFunction") == 3
    assert depth(poller, "PageQueue") == (0, 1, 0)  # a and c deleted, b in flight
    assert poller.poll_once("PageFunction") == 0  # b stays invisible until its visibility timeout
    invocation = poller.invocations[-1]
    assert (set(invocation.deleted_ids), invocation.returned_ids) == ({ids["a"], ids["c"]}, (ids["b"],))

    assert poller.expire_in_flight() == 1
    assert poller.poll_once("PageFunction") == 1
    (record,) = recorder.events[-1]["Records"]
    assert (record["messageId"], record["body"]) == (ids["b"], "b")
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    first = recorder.events[0]["Records"][1]
    assert (
        record["attributes"]["ApproximateFirstReceiveTimestamp"]
        == first["attributes"]["ApproximateFirstReceiveTimestamp"]
    )


def test_raising_handler_returns_the_whole_batch(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack

    def explode(event: dict[str, Any]) -> Any:
        raise RuntimeError("boom")

    poller = LambdaPoller(batched(stack), handlers={"PageFunction": Recorder(explode)})
    send(stack, "PageQueue", "a", "b", "c")
    assert poller.poll_once("PageFunction") == 3
    assert depth(poller, "PageQueue") == (0, 3, 0)
    (failure,) = poller.stats.failures
    assert isinstance(failure.error, RuntimeError)
    assert "boom" in (failure.traceback or "")
    assert poller.expire_in_flight() == 3

    poller = LambdaPoller(batched(stack), handlers={"PageFunction": Recorder()})
    assert poller.poll_once("PageFunction") == 3
    assert depth(poller, "PageQueue") == (0, 0, 0)


def test_raise_errors_propagates_after_leaving_the_batch(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack

    def explode(event: dict[str, Any]) -> Any:
        raise ValueError("bad record")

    poller = LambdaPoller(stack, handlers={"JobFunction": Recorder(explode)}, raise_errors=True)
    send(stack, "JobQueue", "job")
    with pytest.raises(ValueError, match="bad record"):
        poller.poll_once("JobFunction")
    assert depth(poller, "JobQueue") == (0, 1, 0)


@pytest.mark.parametrize(
    "response",
    [
        {"batchItemFailures": [{"itemIdentifier": "not-in-the-batch"}]},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"id": "wrong-key"}]},
        "not an object",
    ],
)
def test_invalid_partial_response_fails_the_whole_batch(deployed_stack: Deployment, response: Any) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(batched(stack), handlers={"PageFunction": Recorder(lambda event: response)})
    send(stack, "PageQueue", "a", "b")
    assert poller.poll_once("PageFunction") == 2
    assert depth(poller, "PageQueue") == (0, 2, 0)
    assert poller.invocations[-1].invalid_response


@pytest.mark.parametrize("response", [None, {}, {"batchItemFailures": None}, {"batchItemFailures": []}])
def test_empty_responses_are_success(response: Any) -> None:
    assert _batch_item_failures(response, {"m1", "m2"}) == (set(), None)


def test_unserializable_response_fails_the_batch(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(
        batched(stack), handlers={"PageFunction": Recorder(lambda event: {"batchItemFailures": [object()]})}
    )
    send(stack, "PageQueue", "a")
    poller.poll_once("PageFunction")
    assert isinstance(poller.invocations[-1].error, TypeError)
    assert depth(poller, "PageQueue") == (0, 1, 0)


def test_overrunning_the_timeout_returns_the_batch(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    # A function whose Timeout has already passed when the handler returns.
    timed_out = stack.with_functions({}, {"PageFunction": 0})
    poller = LambdaPoller(batched(timed_out), handlers={"PageFunction": Recorder(lambda event: time.sleep(0.01))})
    send(stack, "PageQueue", "slow")
    poller.poll_once("PageFunction")
    assert poller.invocations[-1].timed_out
    assert depth(poller, "PageQueue") == (0, 1, 0)


def test_after_five_receives_a_message_lands_in_the_dlq(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    recorder = Recorder(fail_bodies("poison"))
    poller = LambdaPoller(batched(stack), handlers={"PageFunction": recorder})
    (poison_id,) = send(stack, "PageQueue", "poison")
    send(stack, "PageQueue", "fine")

    stats = poller.drain()
    counts = [
        r["attributes"]["ApproximateReceiveCount"]
        for e in recorder.events
        for r in e["Records"]
        if r["body"] == "poison"
    ]
    assert counts == ["1", "2", "3", "4", "5"]
    assert (stats.records, stats.deleted, stats.returned, stats.visibility_expiries) == (6, 1, 5, 5)
    assert depth(poller, "PageQueue") == (0, 0, 0)
    dlq = boto3.client("sqs").receive_message(
        QueueUrl=stack.outputs["PageDeadLetterQueueUrl"], AttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    assert [(m["MessageId"], m["Body"]) for m in dlq] == [(poison_id, "poison")]


# ------------------------------------------------------------------------------------------- drain


def test_drain_runs_a_fan_out_pipeline(deployed_stack: Deployment) -> None:
    """job -> 4 sitemaps -> 50 pages each, a page retried once with a delay and one failing once."""
    stack, _ = deployed_stack
    sqs = boto3.client("sqs")
    pages: list[str] = []
    attempts: dict[str, int] = {}

    def send_batches(queue_url: str, bodies: list[str], delay: int = 0) -> None:
        for start in range(0, len(bodies), 10):
            entries = [
                {"Id": str(i), "MessageBody": body, "DelaySeconds": delay}
                for i, body in enumerate(bodies[start : start + 10])
            ]
            sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)

    def job(event: dict[str, Any]) -> Any:
        for record in event["Records"]:
            send_batches(os.environ["HARVEST_SITEMAP_QUEUE_URL"], [f"{record['body']}/sitemap{i}" for i in range(4)])
        return {"batchItemFailures": []}

    def sitemap(event: dict[str, Any]) -> Any:
        for record in event["Records"]:
            send_batches(os.environ["HARVEST_PAGE_QUEUE_URL"], [f"{record['body']}/page{i}" for i in range(50)])
        return {"batchItemFailures": []}

    def page(event: dict[str, Any]) -> Any:
        failures = []
        for record in event["Records"]:
            body = record["body"]
            attempts[body] = attempts.get(body, 0) + 1
            if body.endswith("sitemap0/page7") and attempts[body] == 1:
                send_batches(os.environ["HARVEST_PAGE_QUEUE_URL"], [body + "/retry"], delay=300)
            elif body.endswith("sitemap1/page3") and attempts[body] == 1:
                failures.append({"itemIdentifier": record["messageId"]})
            else:
                pages.append(body)
        return {"batchItemFailures": failures}

    poller = LambdaPoller(
        stack,
        handlers={
            "JobFunction": Recorder(job),
            "SitemapFunction": Recorder(sitemap),
            "PageFunction": Recorder(page),
        },
    )
    send(stack, "JobQueue", "job1")
    stats = poller.drain()
    assert len(pages) == 200
    assert "job1/sitemap0/page7/retry" in pages
    assert "job1/sitemap1/page3" in pages
    assert stats.per_function["JobFunction"].records == 1
    assert stats.per_function["SitemapFunction"].records == 4
    assert stats.per_function["PageFunction"].records == 202
    assert (stats.visibility_expiries, stats.delays_released) == (1, 1)
    assert all(d.total == 0 for d in poller.depths().values())


def test_drain_reports_a_stall(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(batched(stack), handlers={"PageFunction": Recorder()})
    # A message someone else holds in flight: the poller cannot expire it.
    send(stack, "PageQueue", "held")
    boto3.client("sqs").receive_message(QueueUrl=stack.outputs["PageQueueUrl"])
    with pytest.raises(DrainError, match="stalled"):
        poller.drain()


def test_drain_with_expiry_disabled_reports_in_flight_work(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(batched(stack), handlers={"PageFunction": Recorder(fail_bodies("x"))})
    send(stack, "PageQueue", "x")
    with pytest.raises(DrainError, match="in_flight=1"):
        poller.drain(expire_in_flight=False)


NEEDS_SPEEDUPS = pytest.mark.skipif(
    not speedups_apply(), reason=f"moto changed {changed_moto_code()}: SQS speedups not applied"
)


@NEEDS_SPEEDUPS
def test_drain_of_two_thousand_messages_is_quick(deployed_stack: Deployment) -> None:
    stack, _ = deployed_stack
    sqs = boto3.client("sqs")
    started = time.monotonic()
    for start in range(0, 2000, 10):
        sqs.send_message_batch(
            QueueUrl=stack.outputs["PageQueueUrl"],
            Entries=[{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)],
        )
    recorder = Recorder()
    stats = LambdaPoller(batched(stack), handlers={"PageFunction": recorder}).drain()
    assert stats.records == stats.deleted == 2000
    assert len(set(recorder.bodies())) == 2000
    # ~4 s with the speedups on this kind of machine; ~190 s without them.
    assert time.monotonic() - started < 60


# ----------------------------------------------------------------------------------------- schedule


def test_invoke_schedule_delivers_an_eventbridge_scheduled_event(
    deployed_stack: Deployment, recording_dirs: dict[str, Path]
) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(stack, code_dirs=recording_dirs)
    assert poller.invoke_schedule("SchedulerFunction") == {"scheduled": True}
    (call,) = recorded_calls(poller, "SchedulerFunction")
    event = call["event"]
    (rule,) = stack.function("SchedulerFunction").schedule_rules
    assert set(event) == set(SAM_SCHEDULED_EVENT) | {"version"}
    assert (event["detail-type"], event["source"], event["detail"]) == ("Scheduled Event", "aws.events", {})
    assert event["resources"] == [rule.arn]
    assert rule.arn.startswith("arn:aws:events:us-east-1:")
    assert (event["account"], event["region"]) == (stack.account_id, "us-east-1")
    EventBridgeModel.model_validate(event)
    assert call["environ"]["HARVEST_STATE_TABLE"] == stack.outputs["StateTableName"]
    with pytest.raises(ValueError, match="no schedule rule"):
        poller.invoke_schedule("PageFunction")


def test_missing_handler_code_is_a_set_up_error(deployed_stack: Deployment, tmp_path: Path) -> None:
    stack, _ = deployed_stack
    poller = LambdaPoller(stack, code_dirs={"PageFunction": tmp_path})
    assert poller.poll_once("PageFunction") == 0  # nothing to deliver: the code is not needed yet
    send(stack, "PageQueue", "a")
    with pytest.raises(FileNotFoundError, match=r"app\.py"):
        poller.poll_once("PageFunction")


# ------------------------------------------------------------------------------------ moto speedups


def _queue(url: str) -> Any:
    return sqs_models.sqs_backends["123456789012"]["us-east-1"].queues[url.rsplit("/", 1)[-1]]


@pytest.mark.parametrize("patched", [False, True], ids=["moto", "speedups"])
def test_retention_period_still_enforced(patched: bool) -> None:
    """Same outcome with and without the receive patch: a message past retention is not delivered.

    (moto's receive stops at an expired message - the first receive returns nothing - and the next one
    delivers the message behind it; the patch must keep exactly that.)
    """
    from tests.aws.moto_speedups import _is_message_valid_based_on_retention_period

    if patched and not speedups_apply():
        pytest.skip("SQS speedups not applied on this moto")
    with mock_aws(), moto_sqs_speedups(send=False) if patched else nullcontext():
        assert (
            sqs_models.SQSBackend.is_message_valid_based_on_retention_period
            is _is_message_valid_based_on_retention_period
        ) is patched
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="retention", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="old")
        sqs.send_message(QueueUrl=url, MessageBody="new")
        old = next(m for m in _queue(url)._messages if m.body == "old")
        old.sent_timestamp -= 61_000
        bodies = [
            [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]
            for _ in range(3)
        ]
        assert bodies == [[], ["new"], []]


@NEEDS_SPEEDUPS
def test_retention_boundary_matches_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compare the two implementations message by message around the boundary, on a frozen clock."""
    from tests.aws.moto_speedups import _is_message_valid_based_on_retention_period

    now = 1_800_000_000.0
    monkeypatch.setattr(sqs_models, "unix_time", lambda: now)
    with mock_aws():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="boundary", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
        sqs.send_message(QueueUrl=url, MessageBody="m")
        message = _queue(url)._messages[-1]
        outcomes = []
        for age_ms in (0, 59_000, 59_999, 60_000, 60_001, 3_600_000):
            message.sent_timestamp = int(now * 1000) - age_ms
            ours = _is_message_valid_based_on_retention_period(backend, "boundary", message)
            assert ours == sqs_models.SQSBackend.is_message_valid_based_on_retention_period(
                backend, "boundary", message
            )
            outcomes.append(ours)
        assert outcomes == [True, True, True, False, False, False]


@NEEDS_SPEEDUPS
def test_send_no_longer_counts_messages_and_attributes_stay_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[str] = []
    original = sqs_models.Queue.approximate_number_of_messages

    def spy(self: Any) -> int:
        counted.append(self.name)
        return original.fget(self)  # type: ignore[misc]

    monkeypatch.setattr(sqs_models.Queue, "approximate_number_of_messages", property(spy))
    with mock_aws(), moto_sqs_speedups():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="standard")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="a")
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "b"}, {"Id": "2", "MessageBody": "c"}])
        assert counted == []
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["ApproximateNumberOfMessages"] == "3"
        assert {"ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} <= set(attributes)
    with mock_aws():  # unpatched moto counts on every send: the spy works
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="standard")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="a")
        assert counted


@pytest.mark.parametrize("patched", [False, True], ids=["moto", "speedups"])
def test_fifo_content_based_deduplication_unchanged(patched: bool) -> None:
    if patched and not speedups_apply():
        pytest.skip("SQS speedups not applied on this moto")
    with mock_aws(), moto_sqs_speedups() if patched else nullcontext():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(
            QueueName="dedup.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        )["QueueUrl"]
        plain = sqs.create_queue(QueueName="plain.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for _ in range(3):
            sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
        sqs.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="g")
        sqs.send_message(QueueUrl=plain, MessageBody="same", MessageGroupId="g", MessageDeduplicationId="d1")
        sqs.send_message(QueueUrl=plain, MessageBody="same", MessageGroupId="g", MessageDeduplicationId="d1")
        sqs.send_message(QueueUrl=plain, MessageBody="same", MessageGroupId="g", MessageDeduplicationId="d2")
        count = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        assert count["Attributes"]["ApproximateNumberOfMessages"] == "2"
        count = sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=["ApproximateNumberOfMessages"])
        assert count["Attributes"]["ApproximateNumberOfMessages"] == "2"


@NEEDS_SPEEDUPS
def test_one_clock_reading_per_call_sees_what_moto_sees_message_by_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """The visible, delayed and in-flight readings, with moto's per-message properties and with the patch's
    one reading of the clock, on a frozen clock around each message's boundaries."""
    from tests.aws.moto_speedups import _delayed_now, _not_visible_now, _visible_now

    with mock_aws():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="clock")["QueueUrl"]
        for body in "abcdef":
            sqs.send_message(QueueUrl=url, MessageBody=body)
        queue = _queue(url)
        base = 1_800_000_000_000.0
        for i, message in enumerate(queue._messages):  # in flight until, delayed until: around `base`
            message.visible_at = base + (i - 3) * 1.0
            message.delayed_until = base + (2 - i) * 1.0
        seen = []
        for now in (base - 5, base - 1, base, base + 1, base + 5):
            monkeypatch.setattr(sqs_models, "unix_time_millis", lambda now=now: now)
            moto = (
                [m.body for m in sqs_models.Queue.messages.fget(queue)],
                sqs_models.Queue.approximate_number_of_messages_delayed.fget(queue),
                sqs_models.Queue.approximate_number_of_messages_not_visible.fget(queue),
            )
            ours = ([m.body for m in _visible_now(queue)], _delayed_now(queue), _not_visible_now(queue))
            assert ours == moto, now
            seen.append(ours)
        assert len({str(s) for s in seen}) > 2  # (the boundaries were crossed)


def test_speedups_apply_to_the_installed_moto() -> None:
    """The patches are written for moto 5.2.5's code; on other code they step aside (see CHECKED_SOURCES)."""
    if not speedups_apply():
        pytest.skip(f"moto changed {changed_moto_code()}: speedups not applied (re-check them)")
    assert changed_moto_code() == []


@NEEDS_SPEEDUPS
def test_speedups_are_undone_on_exit() -> None:
    originals = (
        sqs_models.SQSBackend.is_message_valid_based_on_retention_period,
        sqs_models.SQSBackend.send_message,
        sqs_models.Queue.__dict__["attributes"],
    )
    with moto_sqs_speedups():
        assert sqs_models.SQSBackend.send_message is not originals[1]
    assert (
        sqs_models.SQSBackend.is_message_valid_based_on_retention_period,
        sqs_models.SQSBackend.send_message,
        sqs_models.Queue.__dict__["attributes"],
    ) == originals


def test_every_session_of_a_test_process_reads_botocore_data_through_one_loader():
    """The suite's sessions share one data loader (tests/shared_loader.py): a model is read once a process,
    the clients of every session work, and boto3 adding its data folder to each session's loader leaves one
    copy of it on the search path."""
    import botocore.session

    sessions = [boto3.session.Session(region_name="us-east-1") for _ in range(3)]
    loaders = {id(s._session.get_component("data_loader")) for s in sessions}
    assert len(loaders) == 1
    loader = sessions[0]._session.get_component("data_loader")
    assert len(loader.search_paths) == len(set(loader.search_paths))
    assert botocore.session.get_session().get_component("data_loader") is loader
    with mock_aws():
        for n, session in enumerate(sessions):
            session.client("sqs").create_queue(QueueName=f"q{n}")
        assert len(sessions[0].client("sqs").list_queues()["QueueUrls"]) == 3


def test_the_wait_for_aws_counts_the_time_any_request_is_in_flight_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/aws_concurrent.py prices Lambda compute less the time a handler waited for AWS's answers: with
    requests overlapping (a listing's pointer writes go 16 at a time), the wait is the union of their
    times, not their sum, and a request still in flight counts up to now."""
    from tests.aws import poller as poller_module

    clock = [100.0]
    monkeypatch.setattr(poller_module.time, "monotonic", lambda: clock[0])
    wait = poller_module.AwsWait()
    wait._enter()  # a request from 100
    clock[0] = 101.0
    wait._enter()  # another from 101, overlapping
    clock[0] = 102.0
    wait._leave()
    clock[0] = 103.0
    wait._leave()  # none in flight from 103: 3 s so far
    clock[0] = 110.0
    assert wait.seconds() == 3.0
    wait._enter()
    clock[0] = 110.5
    assert wait.seconds() == 3.5  # (in flight: counted up to now)


def test_the_wait_for_aws_at_awss_answer_times_scales_the_requests_as_they_overlapped() -> None:
    """bench/aws_concurrent.py models compute with AWS's answer times: the requests' times here and on AWS
    (AWS_ANSWER_SECONDS) are summed by botocore operation, through the same hook as the wait, so an
    invocation's wait can be scaled by their ratio. Two DynamoDB requests and one S3 request, through real
    botocore clients against moto."""
    import boto3
    from botocore.endpoint import Endpoint
    from moto import mock_aws

    from tests.aws import poller as poller_module

    wait = poller_module.AwsWait()
    original = Endpoint.make_request
    try:
        with mock_aws():
            wait.install()
            dynamodb = boto3.client("dynamodb", region_name="us-east-1")
            dynamodb.list_tables()
            dynamodb.list_tables()
            boto3.client("s3", region_name="us-east-1").list_buckets()
    finally:
        Endpoint.make_request = original  # type: ignore[method-assign]
    took, modelled = wait.answers()
    answers = poller_module.AWS_ANSWER_SECONDS
    assert modelled == pytest.approx(2 * answers["dynamodb"] + answers["s3"])
    assert 0 < took <= wait.seconds() + 1e-9  # (no overlap here: the sum is the union)
