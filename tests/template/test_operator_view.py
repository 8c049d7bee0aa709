"""The operator's view in template.yaml: the dashboard and the alarms beyond the dead-letter queues name only
metrics the handlers really write (harvester.adapters.aws.metrics), in the namespace and with the service
dimension the functions' environment gives Powertools, and the dashboard shows every queue and alarm.

Why: a dashboard or an alarm on a misspelt metric name (or on a dimension the metric does not have) is
silently empty in CloudWatch: nothing but a test tells it apart from a quiet crawl.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from harvester.adapters.aws import metrics

OPERATOR_ALARMS = ("PagesStalledAlarm", "PageFailureRateAlarm")
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


def props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return template["Resources"][logical_id]["Properties"]


def powertools(template: dict[str, Any]) -> tuple[str, str]:
    """The namespace and service every function's Powertools writes metrics with."""
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function":
            variables = resource["Properties"]["Environment"]["Variables"]
            return variables["POWERTOOLS_METRICS_NAMESPACE"], variables["POWERTOOLS_SERVICE_NAME"]
    raise AssertionError("no function in the template")


def dashboard(template: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The dashboard's body, parsed with each ``${...}`` of its Fn::Sub left as its own name, and those names."""
    body = props(template, "OperatorDashboard")["DashboardBody"]["Fn::Sub"]
    assert isinstance(body, str)
    return json.loads(_PLACEHOLDER.sub(lambda m: f"<{m.group(1)}>", body)), set(_PLACEHOLDER.findall(body))


def dashboard_metrics(body: dict[str, Any]) -> list[list[Any]]:
    """Every metric line of the dashboard's metric widgets (``[namespace, name, dim, value, ..., {options}]``)."""
    lines = []
    for widget in body["widgets"]:
        if widget["type"] == "metric":
            lines.extend(line for line in widget["properties"]["metrics"] if isinstance(line[0], str))
    return lines


def test_dashboard_names_only_metrics_the_handlers_write_and_shows_each_of_them(
    translated_template: dict[str, Any],
) -> None:
    namespace, service = powertools(translated_template)
    body, _ = dashboard(translated_template)
    ours = [line for line in dashboard_metrics(body) if line[0] == namespace]
    named = {line[1] for line in ours}
    assert named <= metrics.METRIC_NAMES
    for line in ours:
        assert line[2:4] == ["service", service], line
    # PageFailures (by Reason) is shown through a SEARCH over its reasons, every other metric by name.
    searches = [
        line[0]["expression"]
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for line in widget["properties"]["metrics"]
        if isinstance(line[0], dict)
    ]
    schema = f"{{{namespace},{metrics.REASON_DIMENSION},service}}"
    assert searches == [f"SEARCH('{schema} MetricName=\"{metrics.PAGE_FAILURES}\"', 'Sum', 300)"]
    assert named | {metrics.PAGE_FAILURES} == metrics.METRIC_NAMES


def test_dashboard_shows_every_queue_dead_letter_queue_function_and_alarm(translated_template: dict[str, Any]) -> None:
    resources = translated_template["Resources"]
    body, placeholders = dashboard(translated_template)
    queues = {lid for lid, r in resources.items() if r["Type"] == "AWS::SQS::Queue"}
    functions = {lid for lid, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    assert {f"{q}.QueueName" for q in queues} <= placeholders
    assert functions <= placeholders
    for name in placeholders:  # every substitution resolves to a resource of the stack or a pseudo-parameter
        assert name.startswith("AWS::") or name.split(".")[0] in resources, name
    depth = [line[3] for line in dashboard_metrics(body) if line[1] == "ApproximateNumberOfMessagesVisible"]
    assert sorted(depth) == sorted(f"<{q}.QueueName>" for q in queues)  # each queue once: the lanes and the DLQs
    (alarm_widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    alarms = {
        lid: props(translated_template, lid) for lid, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"
    }
    assert len(alarms) == 6
    shown = {arn.rsplit(":alarm:", 1)[1] for arn in alarm_widget["properties"]["alarms"]}
    assert shown == {
        alarm["AlarmName"]["Fn::Sub"].replace("${AWS::StackName}", "<AWS::StackName>") for alarm in alarms.values()
    }


@pytest.mark.parametrize("alarm_id", OPERATOR_ALARMS)
def test_operator_alarms_read_the_handlers_metrics(translated_template: dict[str, Any], alarm_id: str) -> None:
    namespace, service = powertools(translated_template)
    alarm = props(translated_template, alarm_id)
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    returned = [q for q in queries.values() if q.get("ReturnData")]
    assert len(returned) == 1 and "Expression" in returned[0]
    expression = returned[0]["Expression"]
    text = expression if isinstance(expression, str) else expression["Fn::Sub"]
    for query_id, query in queries.items():
        if "MetricStat" not in query:
            continue
        assert re.search(rf"\b{query_id}\b", text), f"{query_id} is not used by {text}"
        metric = query["MetricStat"]["Metric"]
        if metric["Namespace"] == namespace:
            assert metric["MetricName"] in metrics.METRIC_NAMES
            assert metric["Dimensions"] == [{"Name": "service", "Value": service}]
        else:
            assert metric["Namespace"] == "AWS/SQS"
            assert metric["Dimensions"][0]["Value"]["Fn::GetAtt"][0] in ("PageQueue", "PagePriorityQueue")
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}


def test_alarm_thresholds_are_parameters(translated_template: dict[str, Any]) -> None:
    stalled = props(translated_template, "PagesStalledAlarm")
    assert stalled["EvaluationPeriods"] == stalled["DatapointsToAlarm"] == {"Ref": "StalledPeriods"}
    settled = {q["MetricStat"]["Metric"]["MetricName"] for q in stalled["Metrics"] if "MetricStat" in q}
    assert {metrics.PAGES_SUCCEEDED, metrics.PAGES_FAILED, metrics.PAGES_EXCLUDED} <= settled
    rate = props(translated_template, "PageFailureRateAlarm")
    assert rate["Threshold"] == {"Ref": "FailureRatePercent"}
    (expression,) = [q["Expression"] for q in rate["Metrics"] if "Expression" in q]
    assert "${FailureRateMinPages}" in expression["Fn::Sub"]
