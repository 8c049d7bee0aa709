"""Every S3 request a function makes is one its role in template.yaml allows.

Why: moto does not enforce IAM, so a function whose policy misses a prefix it writes (or reads, lists,
deletes) passes every other test and is refused on AWS. Here each S3 request the handlers make in a crawl and
a re-crawl with WARC output (sitemap copies kept and replayed, WARC objects and their indexes, step
documents, the job's end) is checked against the S3 statements of the calling function's role, as the
translated template gives them: the action (as IAM names it) and the object's or bucket's ARN matched
against each Allow statement's resources, wildcards as IAM reads them.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from botocore.client import BaseClient
from moto import mock_aws

from harvester.adapters.aws.stack import job_status, submit_job
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest, Output
from tests.aws.deployed import DeployedStack
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.aws.stack import TEMPLATE_PATH, deploy_stack

#: The IAM action each S3 operation the engine uses needs (a copy also reads its source: checked apart).
ACTIONS = {
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
    "ListObjectsV2": "s3:ListBucket",
    "CopyObject": "s3:PutObject",
}


@contextmanager
def s3_requests(stack: DeployedStack) -> Iterator[list[tuple[str, str, str]]]:
    """Yields each S3 request the handlers make: (function logical id, IAM action, ARN)."""
    original = BaseClient._make_api_call
    names = {function.name: logical_id for logical_id, function in stack.functions.items()}
    seen: list[tuple[str, str, str]] = []

    def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        function = names.get(os.environ.get("AWS_LAMBDA_FUNCTION_NAME", ""))
        if function is not None and client.meta.service_model.service_name == "s3":
            bucket = f"arn:aws:s3:::{params['Bucket']}"
            if operation == "DeleteObjects":
                keys = [o["Key"] for o in params["Delete"]["Objects"]]
            else:
                keys = [params["Key"]] if "Key" in params else []
            action = ACTIONS.get(operation, f"s3:{operation}")
            seen.extend([(function, action, f"{bucket}/{key}") for key in keys] or [(function, action, bucket)])
            if operation == "CopyObject":
                source = params["CopySource"]
                source = f"{source['Bucket']}/{source['Key']}" if isinstance(source, dict) else source
                seen.append((function, "s3:GetObject", f"arn:aws:s3:::{source.lstrip('/')}"))
        return original(client, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", call):
        yield seen


def allowed(stack: DeployedStack, function: str, action: str, arn: str) -> bool:
    bucket_arn = f"arn:aws:s3:::{stack.outputs['DocumentBucketName']}"
    role = stack.template["Resources"][f"{function}Role"]["Properties"]
    for policy in role.get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if statement["Effect"] != "Allow" or not any(fnmatch.fnmatchcase(action, a) for a in actions):
                continue
            for resource in resources:
                pattern = resource.get("Fn::Sub", "") if isinstance(resource, dict) else resource
                if "Fn::GetAtt" in resource if isinstance(resource, dict) else False:
                    pattern = "${DocumentBucket.Arn}"
                pattern = pattern.replace("${DocumentBucket.Arn}", bucket_arn)
                if fnmatch.fnmatchcase(arn, pattern):
                    return True
    return False


def test_every_s3_request_of_a_crawl_and_a_recrawl_is_allowed_by_its_functions_role() -> None:
    with (
        LiveSite(pages=30, sitemaps=2, gzip_last=True).serving() as site,
        mock_aws(),
        moto_sqs_speedups(),
        moto_dynamodb_speedups(),
    ):
        stack = deploy_stack(TEMPLATE_PATH, {"AllowedNetworks": "127.0.0.0/8"})
        poller = LambdaPoller(stack)
        try:
            with s3_requests(stack) as seen:
                for cycle in range(2):
                    if cycle:
                        site.change("/pages/3.html")
                    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, output=Output.WARC)
                    job_id = submit_job(request, stack.outputs["JobQueueUrl"])
                    stats = poller.drain(max_rounds=2000)
                    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
                    assert job_status(job_id, stack.stack_name)["status"] == "completed"
        finally:
            poller.close()
        assert {action for _, action, _ in seen} >= {"s3:PutObject", "s3:GetObject"}
        refused = sorted({(f, a, arn) for f, a, arn in seen if not allowed(stack, f, a, arn)})
        assert not refused, "\n".join(f"{f}: {a} on {arn}" for f, a, arn in refused[:20])
