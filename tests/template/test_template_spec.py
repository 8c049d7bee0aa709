"""template.yaml defines what the handlers and the CLI rely on, checked on its translation.

Why here and not only in the moto tests: moto drops several properties (TTL, point-in-time recovery,
public access block, alarms, layers), so the translated template is the only place to see them.
"""

from __future__ import annotations

from typing import Any

import pytest

from harvester.adapters.aws.scheduled_sites import DUE_INDEX
from harvester.archive.results import removed_key
from tests.tools.check_template import Template, queues_sent_to

FUNCTIONS = {
    # logical id: (code dir, timeout, memory, queue, batch size); a page function takes one message, a page
    # batch of up to PageBatchSize pages (HARVEST_PAGE_BATCH_SIZE, packed by the sender)
    "JobFunction": ("functions/job/", 60, 512, "JobQueue", 1),
    "JobEndFunction": ("functions/job_end/", 900, 2048, "JobEndQueue", 1),
    "SitemapFunction": ("functions/sitemap/", 300, 1024, "SitemapQueue", 1),
    "PageFunction": ("functions/page/", 120, {"Ref": "PageMemorySize"}, "PageQueue", 1),
    "PagePriorityFunction": ("functions/page/", 120, {"Ref": "PageMemorySize"}, "PagePriorityQueue", 1),
    "SchedulerFunction": ("functions/scheduler/", 300, 512, None, None),
}
#: Queues whose dead-letter queue is another's: the priority lane's dead pages are the page queue's.
DEAD_LETTERS = {"PagePriorityQueue": "PageDeadLetterQueue"}
GLOBAL_ENV = {
    "HARVEST_JOB_QUEUE_URL": {"Ref": "JobQueue"},
    "HARVEST_SITEMAP_QUEUE_URL": {"Ref": "SitemapQueue"},
    "HARVEST_PAGE_QUEUE_URL": {"Ref": "PageQueue"},
    "HARVEST_PAGE_PRIORITY_QUEUE_URL": {"Ref": "PagePriorityQueue"},
    "HARVEST_JOB_DLQ_URL": {"Ref": "JobDeadLetterQueue"},
    "HARVEST_SITEMAP_DLQ_URL": {"Ref": "SitemapDeadLetterQueue"},
    "HARVEST_PAGE_DLQ_URL": {"Ref": "PageDeadLetterQueue"},
    "HARVEST_JOB_END_QUEUE_URL": {"Ref": "JobEndQueue"},
    "HARVEST_JOB_END_DLQ_URL": {"Ref": "JobEndDeadLetterQueue"},
    "HARVEST_STATE_TABLE": {"Ref": "StateTable"},
    "HARVEST_DOCUMENT_BUCKET": {"Ref": "DocumentBucket"},
    "HARVEST_ALLOW_NETWORKS": {"Ref": "AllowedNetworks"},
    "HARVEST_USER_AGENT": {"Ref": "UserAgent"},
    "HARVEST_RETENTION_DAYS": {"Ref": "RetentionDays"},
    "HARVEST_HOST_MAX_IN_FLIGHT": {"Ref": "HostMaxInFlight"},
    "HARVEST_PAGE_BATCH_SIZE": {"Ref": "PageBatchSize"},
    "HARVEST_SNAPSHOT_REFS": {"Ref": "SnapshotRefs"},
    "POWERTOOLS_SERVICE_NAME": "harvester",
    "POWERTOOLS_METRICS_NAMESPACE": "Harvester",
    "POWERTOOLS_LOG_LEVEL": "INFO",
}


def layer_id(translated: dict[str, Any]) -> str:
    """SAM renames the layer with a content hash (HarvesterLayer<hash>)."""
    (logical_id,) = [k for k, r in translated["Resources"].items() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert logical_id.startswith("HarvesterLayer")
    return logical_id


def props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return template["Resources"][logical_id]["Properties"]


def test_parameters(source_template: dict[str, Any]) -> None:
    parameters = source_template["Parameters"]
    defaults = {name: parameter.get("Default") for name, parameter in parameters.items()}
    assert defaults == {
        "AllowedNetworks": "",
        "ScheduleExpression": "rate(5 minutes)",
        "UserAgent": "Harvester/0.1 (+https://github.com/harvester-crawler/harvester)",
        "PageConcurrency": 20,
        "PageBatchSize": 100,
        "PageMemorySize": 256,
        "SnapshotRefs": "1",
        "HostMaxInFlight": 8,
        "SitemapConcurrency": 5,
        "RetentionDays": 30,
        "AlarmTopicArn": "",
        "FailureRatePercent": 20,
        "FailureRateMinPages": 50,
        "StalledPeriods": 3,
    }


@pytest.mark.parametrize("function_id", FUNCTIONS)
def test_functions(translated_template: dict[str, Any], source_template: dict[str, Any], function_id: str) -> None:
    code_dir, timeout, memory, _, _ = FUNCTIONS[function_id]
    function = props(translated_template, function_id)
    assert props(source_template, function_id)["CodeUri"] == code_dir
    assert function["Handler"] == "app.handler"
    assert function["Runtime"] == "python3.11"
    assert function["Architectures"] == ["arm64"]
    assert (function["Timeout"], function["MemorySize"]) == (timeout, memory)
    assert function["Layers"] == [{"Ref": layer_id(translated_template)}]
    environment = function["Environment"]["Variables"]
    assert {k: environment[k] for k in GLOBAL_ENV} == GLOBAL_ENV
    # A page message spools its pages, their captures and its WARC object to /tmp (~4 GB at worst for 100).
    # The job's end spools its records, their index and the parts it makes to /tmp.
    storage = 4096 if function_id.startswith("Page") else 10240 if function_id == "JobEndFunction" else None
    assert function.get("EphemeralStorage", {}).get("Size") == storage
    assert not any("RECURRING" in name for name in environment)  # (the scheduled sites are in the state table)


def test_layer(source_template: dict[str, Any]) -> None:
    layer = source_template["Resources"]["HarvesterLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Properties"]["ContentUri"] == "layers/harvester"
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.11"]
    assert layer["Metadata"] == {"BuildMethod": "makefile"}  # (layers/harvester/Makefile: tests/aws/test_layer.py)


@pytest.mark.parametrize("function_id", [f for f, spec in FUNCTIONS.items() if spec[3]])
def test_sqs_event_sources(translated_template: dict[str, Any], function_id: str) -> None:
    _, timeout, _, queue_id, batch_size = FUNCTIONS[function_id]
    (mapping,) = [
        r["Properties"]
        for r in translated_template["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping" and r["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mapping["BatchSize"] == batch_size
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    queue = props(translated_template, queue_id)
    assert queue["VisibilityTimeout"] == 6 * timeout
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 5
    assert queue["SqsManagedSseEnabled"] is True
    dlq_id = DEAD_LETTERS.get(queue_id, queue_id.replace("Queue", "DeadLetterQueue"))
    dlq = props(translated_template, dlq_id)
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_page_and_sitemap_concurrency_come_from_parameters(translated_template: dict[str, Any]) -> None:
    page = props(translated_template, "PageFunctionPages")
    sitemap = props(translated_template, "SitemapFunctionSitemaps")
    assert page["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "PageConcurrency"}}
    lane = props(translated_template, "PagePriorityFunctionPriorityPages")
    for mapping in (page, lane):  # (one message: nothing to wait for)
        assert "MaximumBatchingWindowInSeconds" not in mapping
    assert sitemap["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "SitemapConcurrency"}}


def test_recursive_loop(translated_template: dict[str, Any]) -> None:
    loops = {f: props(translated_template, f).get("RecursiveLoop") for f in FUNCTIONS}
    assert loops == {
        "JobFunction": None,
        "JobEndFunction": "Allow",
        "SitemapFunction": "Allow",
        "PageFunction": "Allow",
        "PagePriorityFunction": "Allow",
        "SchedulerFunction": None,
    }


def test_scheduler_rule(translated_template: dict[str, Any]) -> None:
    rule = props(translated_template, "SchedulerFunctionTick")
    assert rule["ScheduleExpression"] == {"Ref": "ScheduleExpression"}
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": ["SchedulerFunction", "Arn"]}


def test_state_table(translated_template: dict[str, Any]) -> None:
    table = props(translated_template, "StateTable")
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    (index, due) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "OpenItems"
    assert index["KeySchema"] == [
        {"AttributeName": "open_pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert index["Projection"] == {"ProjectionType": "ALL"}
    # The scheduled sites by due time (adapters/aws/scheduled_sites.py): its name and keys are what the code queries.
    assert due["IndexName"] == DUE_INDEX
    assert due["KeySchema"] == [
        {"AttributeName": "due_pk", "KeyType": "HASH"},
        {"AttributeName": "due_at", "KeyType": "RANGE"},
    ]
    assert due["Projection"] == {"ProjectionType": "ALL"}
    types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    assert types == {"pk": "S", "sk": "S", "open_pk": "S", "due_pk": "S", "due_at": "N"}
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["SSESpecification"] == {"SSEEnabled": True}


def test_document_bucket(translated_template: dict[str, Any]) -> None:
    bucket = props(translated_template, "DocumentBucket")
    assert bucket["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert bucket["LifecycleConfiguration"]["Rules"][0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    # (what a step of a job's end keeps for the next one: harvester.archive.results.removed_key)
    steps = bucket["LifecycleConfiguration"]["Rules"][1]
    assert (steps["Prefix"], steps["ExpirationInDays"]) == (removed_key("job", 0, 1.0).partition("/")[0] + "/", 7)
    policy = props(translated_template, "DocumentBucketPolicy")["PolicyDocument"]["Statement"][0]
    assert policy["Effect"] == "Deny"
    assert policy["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_alarms_notify_the_topic_only_when_given(translated_template: dict[str, Any]) -> None:
    assert translated_template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]
    }
    for queue in ("Job", "JobEnd", "Sitemap", "Page"):
        alarm = props(translated_template, f"{queue}DeadLetterQueueAlarm")
        assert alarm["AlarmActions"] == {
            "Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
        }
        assert alarm["Dimensions"] == [
            {"Name": "QueueName", "Value": {"Fn::GetAtt": [f"{queue}DeadLetterQueue", "QueueName"]}}
        ]


def test_least_privilege_sends(translated_template: dict[str, Any]) -> None:
    """Each function may send exactly to the queues the design says, and no more."""
    expected = {
        "JobFunction": {"SitemapQueue", "JobDeadLetterQueue", "JobEndQueue"},
        "JobEndFunction": {"JobEndQueue", "JobEndDeadLetterQueue"},
        "SitemapFunction": {"SitemapQueue", "PageQueue", "PagePriorityQueue", "SitemapDeadLetterQueue", "JobEndQueue"},
        "PageFunction": {"PageQueue", "PagePriorityQueue", "PageDeadLetterQueue", "JobEndQueue"},
        "PagePriorityFunction": {"PageQueue", "PagePriorityQueue", "PageDeadLetterQueue", "JobEndQueue"},
        "SchedulerFunction": {"JobQueue", "SitemapQueue", "PageQueue", "PagePriorityQueue", "JobEndQueue"},
    }
    template = Template(translated_template)
    assert {f: queues_sent_to(template, f) for f in expected} == expected


def test_outputs(translated_template: dict[str, Any]) -> None:
    assert set(translated_template["Outputs"]) == {
        "JobQueueUrl",
        "SitemapQueueUrl",
        "PageQueueUrl",
        "PagePriorityQueueUrl",
        "JobDeadLetterQueueUrl",
        "SitemapDeadLetterQueueUrl",
        "PageDeadLetterQueueUrl",
        "StateTableName",
        "DocumentBucketName",
        "JobFunctionName",
        "JobEndFunctionName",
        "SitemapFunctionName",
        "PageFunctionName",
        "PagePriorityFunctionName",
        "SchedulerFunctionName",
        "DashboardName",
    }
