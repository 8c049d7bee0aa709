"""The handlers' CloudWatch metrics on the AWS path: template.yaml created in moto, a real site on 127.0.0.1,
the real handlers driven as Lambda's poller drives them, and the EMF documents they print added up against
the job's own counters and records (so a metric that drifts from what the job counted fails here)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest

from harvester.adapters.aws import metrics
from harvester.adapters.aws.stack import job_status, submit_job
from harvester.model.messages import JobRequest
from tests.aws.conftest import Deployment
from tests.aws.test_end_to_end import records_of, result_of


def emf_documents(text: str) -> list[dict[str, Any]]:
    """Every EMF document among the printed lines (Powertools prints each as one line of JSON)."""
    documents = []
    for line in text.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            documents.append(json.loads(line))
    return documents


def metric_sums(documents: list[dict[str, Any]]) -> tuple[Counter[tuple[str, str | None]], Counter[str]]:
    """Sum per (metric name, Reason dimension value), and the number of values per metric name."""
    sums: Counter[tuple[str, str | None]] = Counter()
    samples: Counter[str] = Counter()
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        for definition in directive["Metrics"]:
            name = definition["Name"]
            values = document[name] if isinstance(document[name], list) else [document[name]]
            sums[(name, document.get(metrics.REASON_DIMENSION))] += sum(values)
            samples[name] += len(values)
    return sums, samples


def test_page_and_sitemap_metrics_add_up_to_the_jobs_counters(
    deployed_stack: Deployment, site_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, poller = deployed_stack
    site = site_factory(pages=30, broken=3, sitemaps=2)
    forbidden = site.page_urls[4].removeprefix(site.base_url)
    robots = tmp_path / "site-1" / "robots.txt"
    robots.write_text(robots.read_text().replace("Disallow: /private/", f"Disallow: {forbidden}"))
    capsys.readouterr()

    job_id = submit_job(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001), stack.outputs["JobQueueUrl"])
    stats = poller.drain()
    assert stats.failed_invocations == 0, [f.error for f in stats.failures]

    documents = emf_documents(capsys.readouterr().out)
    sums, samples = metric_sums(documents)
    view = job_status(job_id, stack.stack_name)
    result = result_of(stack, job_id)
    assert view["status"] == "completed"
    assert (view["successful_count"], view["failed_count"], view["excluded_count"]) == (29, 3, 1)

    assert sums[(metrics.PAGES_SUCCEEDED, None)] == view["successful_count"]
    assert sums[(metrics.PAGES_FAILED, None)] == view["failed_count"]
    assert sums[(metrics.PAGES_EXCLUDED, None)] == view["excluded_count"]
    assert sums[(metrics.PAGE_FAILURES, "http_4xx")] == 3
    assert sums[(metrics.PAGE_FAILURES, "robots")] == 1
    reasons = {reason for name, reason in sums if name == metrics.PAGE_FAILURES}
    assert reasons == {"http_4xx", "robots"}
    assert sums[(metrics.URLS_LISTED, None)] == view["total_urls"] == result["total_urls"] == 33
    assert sums[(metrics.SITEMAPS_READ, None)] == result["sitemaps_ok"] == 3  # the index and its two urlsets
    assert sums[(metrics.SITEMAPS_FAILED, None)] == 0
    stored = [r for r in records_of(stack, job_id) if r["status"] == "completed"]
    assert sums[(metrics.BYTES_FETCHED, None)] == sum(r["size"] for r in stored) > 0
    # One latency per request answered: every page but the one robots.txt forbids.
    assert samples[metrics.FETCH_LATENCY] == 32
    assert sums[(metrics.FETCH_LATENCY, None)] > 0

    for document in documents:
        directive = document["_aws"]["CloudWatchMetrics"][0]
        assert directive["Namespace"] == "Harvester"
        assert document["service"] == "harvester"
        # job and host are properties, never dimensions (a custom metric each)
        assert document["job_id"] == job_id and document["host"] == "127.0.0.1"
        dimensions = set(directive["Dimensions"][0])
        assert dimensions in ({"service"}, {"service", metrics.REASON_DIMENSION})
        assert {d["Name"] for d in directive["Metrics"]} <= metrics.METRIC_NAMES


def test_the_dashboard_is_created_with_the_stacks_own_queues_and_functions(deployed_stack: Deployment) -> None:
    """moto's CloudFormation creates the dashboard (not the alarms: DeployedStack.skipped lists them, and
    tests/template checks them): its body, as deployed, names the queues and functions the stack created."""
    stack, _ = deployed_stack
    assert stack.resource_types["OperatorDashboard"] == "AWS::CloudWatch::Dashboard"
    cloudwatch = boto3.client("cloudwatch")
    body = json.loads(cloudwatch.get_dashboard(DashboardName=stack.outputs["DashboardName"])["DashboardBody"])
    named = {
        line[3]
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for line in widget["properties"]["metrics"]
        if isinstance(line[0], str) and line[0] in ("AWS/SQS", "AWS/Lambda")
    }
    queue_names = {url.rsplit("/", 1)[1] for url in stack.queue_urls().values()}
    assert queue_names <= named
    assert {f.name for f in stack.functions.values()} <= named
    assert named <= queue_names | {f.name for f in stack.functions.values()}
    (alarms,) = [w["properties"]["alarms"] for w in body["widgets"] if w["type"] == "alarm"]
    assert all(
        arn.startswith(f"arn:aws:cloudwatch:us-east-1:{stack.account_id}:alarm:{stack.stack_name}-") for arn in alarms
    )
