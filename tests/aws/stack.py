"""Deploy template.yaml into moto the way `sam package` + `sam deploy` would, and describe the result.

Why: the handlers must be tested against the resources the template really creates - resolved queue
URLs, table and bucket names in each function's environment, the event source mappings' batch sizes
and response types - not against hand-built fixtures that drift from the template. So the test
translates the template with samtranslator, uploads a zip per function and layer to a moto bucket (as
`sam package` would), creates the stack with moto's CloudFormation, and reads everything back through
the AWS APIs.

moto limitations, as of moto 5.2.5 (see ``DeployedStack.skipped`` for the resource side):

* Not created at all (moto's CloudFormation has no model for them; ``create_stack`` skips them with a
  warning): ``AWS::CloudWatch::Alarm``, ``AWS::S3::BucketPolicy``. Their definitions are still in
  ``DeployedStack.template`` (the translated template).
* Created without some properties: the table has no TTL (``DescribeTimeToLive`` says DISABLED) and no
  point-in-time recovery; the bucket has no public access block, ownership controls or lifecycle rule
  (its default encryption is set); functions have no layers (``Layers`` is empty - the harvester package
  is importable in tests because it is installed in the virtualenv).
* Number parameters passed to ``create_stack`` reach resources as numbers, so an env var like
  ``HARVEST_RETENTION_DAYS`` comes back from GetFunctionConfiguration as ``30``, not ``"30"``; real Lambda
  only has strings, so ``DeployedFunction.environment`` holds ``str`` values.
* moto *does* react to an SQS event source mapping, wrongly for these tests: every SendMessage to a
  mapped queue makes moto receive a batch (incrementing ApproximateReceiveCount) and try to run the
  function in Docker; without Docker the batch is made visible again. ``deploy_stack`` unhooks the
  mappings from moto's queues (the mappings stay listed by the Lambda API) so that only
  ``tests.aws.poller.LambdaPoller`` consumes messages, as Lambda's poller would.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import uuid
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import yaml
from botocore.exceptions import ClientError
from moto.cloudformation import models as cloudformation_models
from moto.core import DEFAULT_ACCOUNT_ID

from tests.aws.deployed import DeployedFunction, DeployedStack, EventSource, ScheduleRule
from tests.tools.translate import DEFAULT_REGION, load_template, local_code_dirs, package_local_uris, translate

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
ARTIFACT_BUCKET = "harvester-sam-artifacts"
_ZIP_EXCLUDED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_ZIP_EXCLUDED_SUFFIXES = (".pyc", ".egg-info")


def _zip_directory(directory: Path, prefix: str = "") -> bytes:
    """A deterministic zip of a directory (sorted, fixed timestamps), without caches and build debris."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if directory.is_dir():
            for path in sorted(directory.rglob("*")):
                relative = path.relative_to(directory)
                if any(part in _ZIP_EXCLUDED_DIRS or part.endswith(_ZIP_EXCLUDED_SUFFIXES) for part in relative.parts):
                    continue
                if path.is_file():
                    info = zipfile.ZipInfo(f"{prefix}{relative.as_posix()}", date_time=(1980, 1, 1, 0, 0, 0))
                    info.external_attr = 0o644 << 16
                    archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def _as_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _wait_for_stack(cloudformation: Any, stack_name: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        if status == "CREATE_COMPLETE":
            return stack
        if not status.endswith("_IN_PROGRESS") or time.monotonic() > deadline:
            events = cloudformation.describe_stack_events(StackName=stack_name)["StackEvents"]
            reasons = [
                f"{e['LogicalResourceId']}: {e['ResourceStatus']} {e.get('ResourceStatusReason', '')}" for e in events
            ]
            raise RuntimeError(f"stack {stack_name} ended {status}:\n" + "\n".join(reasons))
        time.sleep(0.05)


def _unhook_moto_event_source_mappings(region: str, account_id: str) -> None:
    """Stop moto from invoking functions itself on SendMessage (see the module docstring)."""
    from moto.sqs.models import sqs_backends

    for queue in sqs_backends[account_id][region].queues.values():
        queue.lambda_event_source_mappings.clear()


_yaml_load = yaml.load


def _json_first(stream: Any, Loader: Any = None) -> Any:
    """moto reads a template body with pure-Python YAML first (about 0.15 s for this one): the body sent here
    is JSON, which reads the same."""
    try:
        return json.loads(stream)
    except ValueError:
        return _yaml_load(stream, Loader=Loader)


def deploy_stack(
    template_path: str | Path = TEMPLATE_PATH,
    parameters: Mapping[str, Any] | None = None,
    *,
    stack_name: str = "harvester-test",
    region: str = DEFAULT_REGION,
) -> DeployedStack:
    """Translate, package, create and describe the stack. Call inside an active ``moto.mock_aws()``.

    ``parameters`` are CloudFormation parameter values (any value is passed as its ``str``). Functions'
    ``code_dir`` is their local CodeUri resolved against the template's directory.
    """
    template_path = Path(template_path).resolve()
    base_dir = template_path.parent
    parameter_values = {key: str(value) for key, value in (parameters or {}).items()}
    session = boto3.Session(region_name=region)
    s3 = session.client("s3")
    cloudformation = session.client("cloudformation")
    lambda_client = session.client("lambda")
    events = session.client("events")
    sqs = session.client("sqs")

    source = load_template(template_path)
    code_dirs = local_code_dirs(source, base_dir)
    try:
        s3.create_bucket(Bucket=ARTIFACT_BUCKET)
    except ClientError as error:  # a second stack in the same mock_aws block
        if error.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise

    def upload(logical_id: str, resource_type: str, local_dir: Path) -> str:
        # A layer's code goes under python/ in the zip, where `sam build` puts it.
        prefix = "python/" if resource_type == "AWS::Serverless::LayerVersion" else ""
        body = _zip_directory(local_dir, prefix)
        key = f"{logical_id}-{hashlib.sha256(body).hexdigest()[:16]}.zip"
        s3.put_object(Bucket=ARTIFACT_BUCKET, Key=key, Body=body)
        return f"s3://{ARTIFACT_BUCKET}/{key}"

    translated = translate(package_local_uris(source, base_dir, upload), parameter_values, region)

    with warnings.catch_warnings(), mock.patch.object(cloudformation_models.yaml, "load", _json_first):
        # moto warns each time it meets a resource type it cannot create (alarms, bucket policy):
        # DeployedStack.skipped lists them instead.
        warnings.filterwarnings("ignore", message="Tried to parse .* not supported by moto", category=UserWarning)
        cloudformation.create_stack(
            StackName=stack_name,
            TemplateBody=json.dumps(translated),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameter_values.items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
        stack = _wait_for_stack(cloudformation, stack_name)
        summaries: list[dict[str, Any]] = []
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name):
            summaries.extend(page["StackResourceSummaries"])
    account_id = stack["StackId"].split(":")[4] if stack.get("StackId") else DEFAULT_ACCOUNT_ID
    _unhook_moto_event_source_mappings(region, account_id)

    physical_ids = {
        s["LogicalResourceId"]: s.get("PhysicalResourceId", "") for s in summaries if s["LogicalResourceId"]
    }
    resource_types = {s["LogicalResourceId"]: s["ResourceType"] for s in summaries if s["LogicalResourceId"]}
    skipped = {
        logical_id: resource["Type"]
        for logical_id, resource in translated["Resources"].items()
        if logical_id not in physical_ids
    }
    queue_ids_by_arn = {
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]: lid
        for lid, url in physical_ids.items()
        if resource_types[lid] == "AWS::SQS::Queue"
    }

    functions: dict[str, DeployedFunction] = {}
    for logical_id, resource in translated["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function" or logical_id not in physical_ids:
            continue
        config = lambda_client.get_function_configuration(FunctionName=physical_ids[logical_id])
        mappings = lambda_client.list_event_source_mappings(FunctionName=config["FunctionName"])["EventSourceMappings"]
        sources = []
        for mapping in mappings:
            queue_arn = mapping["EventSourceArn"]
            if queue_arn not in queue_ids_by_arn:
                continue
            scaling = mapping.get("ScalingConfig") or {}
            sources.append(
                EventSource(
                    uuid=mapping["UUID"],
                    queue_logical_id=queue_ids_by_arn[queue_arn],
                    queue_arn=queue_arn,
                    queue_url=physical_ids[queue_ids_by_arn[queue_arn]],
                    batch_size=int(mapping["BatchSize"]),
                    maximum_batching_window=_as_int(mapping.get("MaximumBatchingWindowInSeconds")),
                    function_response_types=tuple(mapping.get("FunctionResponseTypes") or ()),
                    maximum_concurrency=_as_int(scaling.get("MaximumConcurrency")),
                    enabled=mapping.get("State", "Enabled") == "Enabled",
                )
            )
        rules = []
        for rule_name in events.list_rule_names_by_target(TargetArn=config["FunctionArn"])["RuleNames"]:
            rule = events.describe_rule(Name=rule_name)
            rules.append(ScheduleRule(rule["Name"], rule["Arn"], rule.get("ScheduleExpression"), rule["State"]))
        functions[logical_id] = DeployedFunction(
            logical_id=logical_id,
            name=config["FunctionName"],
            arn=config["FunctionArn"],
            handler=config["Handler"],
            runtime=config["Runtime"],
            timeout=int(config["Timeout"]),
            memory_size=int(config["MemorySize"]),
            architecture=(config.get("Architectures") or ["x86_64"])[0],
            environment={k: str(v) for k, v in (config.get("Environment") or {}).get("Variables", {}).items()},
            code_dir=code_dirs.get(logical_id, base_dir),
            event_sources=tuple(sources),
            schedule_rules=tuple(rules),
        )

    return DeployedStack(
        stack_name=stack_name,
        region=region,
        account_id=account_id,
        parameters=parameter_values,
        outputs={o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])},
        physical_ids=physical_ids,
        resource_types=resource_types,
        functions=functions,
        template=translated,
        skipped=skipped,
    )


def unique_stack_name(prefix: str = "harvester") -> str:
    """A stack name unique within the process (moto's backends are shared across mock_aws blocks)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
