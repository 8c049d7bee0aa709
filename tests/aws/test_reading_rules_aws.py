"""The reading rules on the AWS path: a job message with all four (its ``reading`` section), template.yaml in
moto, the real handlers driven as Lambda's SQS poller drives them, the site of tests/cli/test_reading_rules.py
served on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from harvester.adapters.aws import AwsAdapters
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.aws.stack import TEMPLATE_PATH, deploy_stack
from tests.cli.test_reading_rules import WITH_RULES, write_rules_site

LOOPBACK = "127.0.0.0/8"


@pytest.fixture
def stack() -> Iterator[tuple[Any, LambdaPoller]]:
    with mock_aws(), moto_sqs_speedups(), moto_dynamodb_speedups():
        deployed = deploy_stack(TEMPLATE_PATH, {"AllowedNetworks": LOOPBACK})
        poller = LambdaPoller(deployed)
        yield deployed, poller
        poller.close()


def test_a_job_message_with_the_reading_rules_reads_as_a_local_job_does(stack, served_dir, tmp_path):
    deployed, poller = stack
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    write_rules_site(root, base)
    message = {
        "site": f"{base}/",
        "job_id": "reading-rules",
        "fetch_pages": False,
        "rate_limit_delay": 0.0001,
        "reading": {"repair_urls": True, "strict_location": True, "allow_doctype": True, "warn_size": 1024},
    }
    boto3.client("sqs").send_message(QueueUrl=deployed.outputs["JobQueueUrl"], MessageBody=json.dumps(message))
    poller.drain()

    documents = AwsAdapters.from_env(deployed.function("PageFunction").environment).documents
    result = json.loads(documents.get("jobs/reading-rules/result.json"))
    records = [json.loads(line) for line in documents.get("jobs/reading-rules/urls.jsonl").decode().splitlines()]
    assert sorted(r["url"] for r in records) == sorted(f"{base}/{p}" for p in WITH_RULES)
    assert result["entries_dropped"] == {"outside_sitemap_directory": 1}
    assert result["entry_warnings"] == {"url_repaired": 5, "over_warn_size": 1}
