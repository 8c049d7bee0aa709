"""Each project check passes on template.yaml and fails on the mistake it exists to catch.

Why: a check that never fails proves nothing. Every test mutates the SAM source the way a real edit
could go wrong, translates it, and expects a message naming the resource at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.template.conftest import TEMPLATE_PATH, Mutation
from tests.tools import check_template, translate

Problems = Callable[[Mutation], list[str]]


def resources(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]


def props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return template["Resources"][logical_id]["Properties"]


def sqs_event(template: dict[str, Any], function_id: str) -> dict[str, Any]:
    events = props(template, function_id)["Events"]
    (event,) = [e for e in events.values() if e["Type"] == "SQS"]
    return event["Properties"]


def only(problems: list[str], *fragments: str) -> None:
    """Exactly one problem, and it mentions every fragment."""
    assert len(problems) == 1, problems
    for fragment in fragments:
        assert fragment in problems[0], problems[0]


def test_template_passes_every_check(translated_template: dict[str, Any]) -> None:
    assert check_template.run_checks(translated_template) == []


def test_cli_passes_on_template(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_template.main([str(TEMPLATE_PATH)]) == 0
    assert "checks passed" in capsys.readouterr().out


def test_cli_fails_with_messages_on_a_bad_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TEMPLATE_PATH.read_text()
    assert text.count("VisibilityTimeout: 720 # 6 x PageFunction") == 1
    bad = tmp_path / "template.yaml"
    bad.write_text(text.replace("VisibilityTimeout: 720 # 6 x PageFunction", "VisibilityTimeout: 600 #"))
    assert check_template.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert "PageQueue: VisibilityTimeout 600 < 6 x PageFunction Timeout 120" in err
    assert "1 problem(s)" in err


def test_cli_accepts_a_translated_template(
    tmp_path: Path, translated_template: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "translated.json"
    path.write_text(json.dumps(translated_template))
    assert check_template.main([str(path)]) == 0


def test_translate_cli_rewrites_code_uris(tmp_path: Path) -> None:
    out = tmp_path / "build" / "template.translated.json"
    assert translate.main([str(TEMPLATE_PATH), str(out)]) == 0
    translated = json.loads(out.read_text())
    code = translated["Resources"]["PageFunction"]["Properties"]["Code"]
    assert code == {"S3Bucket": translate.PLACEHOLDER_BUCKET, "S3Key": "PageFunction.zip"}
    assert "Transform" not in translated
    assert not any(r["Type"].startswith("AWS::Serverless::") for r in translated["Resources"].values())


# ----------------------------------------------------------------------------- one check at a time


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        pytest.param(
            lambda t: props(t, "PageQueue").update(VisibilityTimeout=700),
            ("PageQueue", "VisibilityTimeout 700 < 6 x PageFunction Timeout 120"),
            id="visibility-lowered",
        ),
        pytest.param(
            lambda t: props(t, "SitemapFunction").update(Timeout=400),
            ("SitemapQueue", "SitemapFunction Timeout 400"),
            id="timeout-raised",
        ),
        pytest.param(
            lambda t: t["Globals"]["Function"].update(Timeout=90) or props(t, "JobFunction").pop("Timeout"),
            ("JobQueue", "JobFunction Timeout 90"),
            id="timeout-from-globals",
        ),
    ],
)
def test_visibility_timeout_below_six_times_function_timeout(
    problems_after: Problems, mutate: Mutation, fragments: tuple[str, ...]
) -> None:
    only(problems_after(mutate), "[visibility_timeout]", *fragments)


def test_max_receive_count_below_five(problems_after: Problems) -> None:
    def mutate(t: dict[str, Any]) -> None:
        props(t, "SitemapQueue")["RedrivePolicy"]["maxReceiveCount"] = 3

    only(problems_after(mutate), "[redrive]", "SitemapQueue", "maxReceiveCount 3 < 5")


def test_consumed_queue_without_dead_letter_queue(problems_after: Problems) -> None:
    def mutate(t: dict[str, Any]) -> None:
        props(t, "JobQueue").pop("RedrivePolicy")
        # Also drop the DLQ's alarm, which would otherwise alarm on a queue nothing redrives to.
        resources(t).pop("JobDeadLetterQueueAlarm")

    only(problems_after(mutate), "[redrive]", "JobQueue", "no RedrivePolicy")


@pytest.mark.parametrize("action", ["*", "s3:*", "dynamodb:*", ["sqs:SendMessage", "sqs:*"]])
def test_wildcard_iam_actions(problems_after: Problems, action: Any) -> None:
    def mutate(t: dict[str, Any]) -> None:
        statement = {"Effect": "Allow", "Action": action, "Resource": "*"}
        props(t, "PageFunction")["Policies"].append({"Statement": [statement]})

    only(problems_after(mutate), "[iam_actions]", "PageFunctionRole", "grants action")


def test_not_action_is_flagged(problems_after: Problems) -> None:
    def mutate(t: dict[str, Any]) -> None:
        statement = {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}
        props(t, "JobFunction")["Policies"].append({"Statement": [statement]})

    only(problems_after(mutate), "[iam_actions]", "JobFunctionRole", "NotAction")


def test_wildcard_deny_is_allowed(problems_after: Problems) -> None:
    """The bucket's deny-non-TLS statement uses s3:* on purpose; a Deny never grants."""

    def mutate(t: dict[str, Any]) -> None:
        statement = {"Effect": "Deny", "Action": "*", "Resource": "*"}
        props(t, "PageFunction")["Policies"].append({"Statement": [statement]})

    assert problems_after(mutate) == []


def test_missing_report_batch_item_failures(problems_after: Problems) -> None:
    only(
        problems_after(lambda t: sqs_event(t, "PageFunction").pop("FunctionResponseTypes")),
        "[event_sources]",
        "PageFunctionPages",
        "ReportBatchItemFailures",
    )


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        pytest.param(
            lambda t: sqs_event(t, "JobFunction").pop("ScalingConfig"), "no ScalingConfig", id="no-scaling-config"
        ),
        pytest.param(
            lambda t: sqs_event(t, "JobFunction").update(ScalingConfig={"MaximumConcurrency": 1}),
            "MaximumConcurrency 1 outside [2, 1000]",
            id="literal-1",
        ),
        pytest.param(
            lambda t: sqs_event(t, "JobFunction").update(ScalingConfig={"MaximumConcurrency": 1001}),
            "MaximumConcurrency 1001 outside [2, 1000]",
            id="literal-1001",
        ),
    ],
)
def test_maximum_concurrency_bounds(problems_after: Problems, mutate: Mutation, fragment: str) -> None:
    only(problems_after(mutate), "[event_sources]", "JobFunctionJobs", fragment)


def test_maximum_concurrency_parameter_must_be_bounded(problems_after: Problems) -> None:
    """A parameter default of 20 is not enough: a deploy could pass 1 unless MinValue forbids it."""

    def mutate(t: dict[str, Any]) -> None:
        t["Parameters"]["PageConcurrency"].pop("MinValue")

    problems = problems_after(mutate)  # both lanes of the page functions take it
    assert len(problems) == 2, problems
    for problem, source in zip(
        sorted(problems), ("PageFunctionPages", "PagePriorityFunctionPriorityPages"), strict=True
    ):
        assert "[event_sources]" in problem and source in problem and "parameter allows [-inf, 1000]" in problem


def test_maximum_concurrency_parameter_default_out_of_range(problems_after: Problems) -> None:
    def mutate(t: dict[str, Any]) -> None:
        t["Parameters"]["SitemapConcurrency"]["Default"] = 1

    only(problems_after(mutate), "[event_sources]", "SitemapFunctionSitemaps", "MaximumConcurrency 1 outside")


@pytest.mark.parametrize(
    ("function_id", "queue_id", "mutate"),
    [
        ("SitemapFunction", "SitemapQueue", lambda p: p.pop("RecursiveLoop")),
        ("PageFunction", "PageQueue", lambda p: p.update(RecursiveLoop="Terminate")),
    ],
)
def test_function_sending_to_its_trigger_needs_recursive_loop_allow(
    problems_after: Problems, function_id: str, queue_id: str, mutate: Callable[[dict[str, Any]], Any]
) -> None:
    only(
        problems_after(lambda t: mutate(props(t, function_id))),
        "[recursive_loop]",
        function_id,
        f"own trigger queue {queue_id}",
    )


def test_job_function_may_not_send_to_job_queue_without_recursive_loop(problems_after: Problems) -> None:
    """The check reads the IAM policy: granting a send to the trigger queue is enough to need Allow."""

    def mutate(t: dict[str, Any]) -> None:
        props(t, "JobFunction")["Policies"].append(
            {"SQSSendMessagePolicy": {"QueueName": {"Fn::GetAtt": ["JobQueue", "QueueName"]}}}
        )

    only(problems_after(mutate), "[recursive_loop]", "JobFunction", "JobQueue")


def test_bucket_without_encryption(problems_after: Problems) -> None:
    only(
        problems_after(lambda t: props(t, "DocumentBucket").pop("BucketEncryption")),
        "[buckets]",
        "DocumentBucket",
        "no default encryption",
    )


def test_bucket_with_public_access_allowed(problems_after: Problems) -> None:
    def mutate(t: dict[str, Any]) -> None:
        props(t, "DocumentBucket")["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] = False

    only(problems_after(mutate), "[buckets]", "DocumentBucket", "RestrictPublicBuckets")


def test_queue_without_encryption(problems_after: Problems) -> None:
    only(
        problems_after(lambda t: props(t, "PageDeadLetterQueue").pop("SqsManagedSseEnabled")),
        "[queue_encryption]",
        "PageDeadLetterQueue",
    )


def test_dead_letter_queue_without_alarm(problems_after: Problems) -> None:
    only(
        problems_after(lambda t: resources(t).pop("SitemapDeadLetterQueueAlarm")),
        "[dlq_alarms]",
        "SitemapDeadLetterQueue",
        "SitemapQueue",
    )


def test_dead_letter_queue_alarm_with_a_high_threshold(problems_after: Problems) -> None:
    only(
        problems_after(lambda t: props(t, "PageDeadLetterQueueAlarm").update(Threshold=10)),
        "[dlq_alarms]",
        "PageDeadLetterQueue",
    )


@pytest.mark.parametrize("output", ["JobQueueUrl", "StateTableName", "DocumentBucketName"])
def test_required_outputs(problems_after: Problems, output: str) -> None:
    only(problems_after(lambda t: t["Outputs"].pop(output)), "[outputs]", f"missing {output}")
