"""Fixtures for tests that run the stack in moto: fake credentials, a deployed stack and its poller.

Why: every AWS client must be created inside ``mock_aws()`` with fake credentials (a real profile or
endpoint in the environment must never be reached), and a test should get the stack exactly as the
template defines it, with nothing to set up by hand.

Use: ``def test_x(deployed_stack): stack, poller = deployed_stack``. Override ``stack_parameters`` in a
module (or parametrize it indirectly) to deploy with other parameter values.

The tests of a process (a worker's) share a stack while they ask for the same parameters: it is created at
the first test that asks for it (translating and creating the template is most of a small test's time) and
emptied before each next one:
its table's items, its queues' messages, its buckets' objects, the metric data moto kept, and the
stack's description as deployed (its functions and their environments, which a test may change). A test
that starts a ``mock_aws()`` of its own resets moto, and the next test deploys again.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import boto3
import pytest
from moto import mock_aws
from moto.cloudwatch.models import cloudwatch_backends
from moto.dynamodb.models import dynamodb_backends
from moto.sqs.models import sqs_backends

from tests.aws.deployed import DeployedStack
from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.aws.stack import TEMPLATE_PATH, deploy_stack

#: Parameters the tests deploy with: fetches may reach local test servers (pytest-httpserver).
TEST_PARAMETERS: dict[str, str] = {"AllowedNetworks": "127.0.0.0/8"}


class Deployment(NamedTuple):
    """What ``deployed_stack`` yields; unpacks as ``stack, poller``."""

    stack: DeployedStack
    poller: LambdaPoller


#: What every AWS client of a test sees: fake credentials and region; nothing of the developer's configuration.
FAKE_ENVIRONMENT = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    # DynamoDB Streams clients under botocore 1.44 need this to reach moto.
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and region; nothing from the developer's AWS configuration is used."""
    fake_credentials(monkeypatch)


@pytest.fixture
def stack_parameters(request: pytest.FixtureRequest) -> dict[str, str]:
    """Template parameters for ``deployed_stack``; indirect parametrization merges over TEST_PARAMETERS."""
    overrides: dict[str, Any] = getattr(request, "param", {}) or {}
    return {**TEST_PARAMETERS, **{k: str(v) for k, v in overrides.items()}}


class _Deployed(NamedTuple):
    stack: DeployedStack
    #: The stack as deployed (a test may change its functions, their environments...).
    deployed: DeployedStack
    #: The clients that empty it (made once: a client costs more than emptying a small stack).
    clients: dict[str, Any]


@pytest.fixture(scope="session")
def _stacks() -> Iterator[dict[tuple[tuple[str, str], ...], _Deployed]]:
    """The stack by its parameters: moto keeps it between tests, of any module (``deployed_stack`` stops its
    mock without removing the data); at the session's end what moto holds is removed."""
    yield {}
    with mock_aws():  # (started first, it resets moto; stopped last, it removes the data)
        pass


def _alive(stack: DeployedStack) -> bool:
    """Whether moto still holds the stack (a ``mock_aws()`` started alone since resets it)."""
    return stack.outputs["StateTableName"] in dynamodb_backends[stack.account_id][stack.region].tables


def _emptied(deployed: _Deployed) -> DeployedStack:
    """The stack as a new deployment has it: no item, message or object; its description as deployed."""
    stack, dynamodb, sqs, s3 = deployed.stack, *(deployed.clients[name] for name in ("dynamodb", "sqs", "s3"))
    table = stack.outputs["StateTableName"]
    keys = [
        {"pk": item["pk"], "sk": item["sk"]}
        for page in dynamodb.get_paginator("scan").paginate(TableName=table, ProjectionExpression="pk, sk")
        for item in page["Items"]
    ]
    for start in range(0, len(keys), 25):
        requests = [{"DeleteRequest": {"Key": key}} for key in keys[start : start + 25]]
        dynamodb.batch_write_item(RequestItems={table: requests})
    with pytest.MonkeyPatch.context() as monkeypatch:  # (moto keeps SQS's one purge a minute, unless told)
        monkeypatch.setenv("MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR", "false")
        for url in stack.queue_urls().values():
            sqs.purge_queue(QueueUrl=url)
    for queue in sqs_backends[stack.account_id][stack.region].queues.values():
        queue.last_purged_at = None  # (a new queue was never purged: a test may purge it at once)
    for logical_id, kind in stack.resource_types.items():
        if kind == "AWS::S3::Bucket":
            s3.Bucket(stack.physical_ids[logical_id]).object_versions.delete()
    cloudwatch = cloudwatch_backends[stack.account_id][stack.region]  # (its data points; the dashboard stays)
    cloudwatch.metric_data, cloudwatch.paged_metric_data = [], {}
    for field in dataclasses.fields(stack):
        if field.name != "template":  # (read only)
            object.__setattr__(stack, field.name, copy.deepcopy(getattr(deployed.deployed, field.name)))
    return stack


def stack_as_deployed(stacks: dict[Any, _Deployed], parameters: dict[str, str]) -> DeployedStack:
    """The stack of these parameters as a new deployment has it: the one ``stacks`` holds, emptied, or deployed
    anew (moto reset first) when it holds none or moto lost it. Call inside a ``mock_aws()`` started with
    ``reset=False`` and stopped with ``remove_data=False`` (moto keeps the stack for the next caller)."""
    key = tuple(sorted(parameters.items()))
    deployed = stacks.get(key)
    if deployed is not None and _alive(deployed.stack):
        return _emptied(deployed)
    stacks.clear()
    mock_aws().reset()  # (whatever an earlier test left in moto)
    stack = deploy_stack(TEMPLATE_PATH, parameters)
    clients = {
        "dynamodb": boto3.client("dynamodb", region_name=stack.region),
        "sqs": boto3.client("sqs", region_name=stack.region),
        "s3": boto3.resource("s3", region_name=stack.region),
    }
    stacks[key] = _Deployed(stack, copy.deepcopy(stack), clients)
    return stack


@contextmanager
def moto_kept() -> Iterator[None]:
    """moto on, its data kept when the block ends (for ``stack_as_deployed``)."""
    mock = mock_aws()
    mock.start(reset=False)
    try:
        yield
    finally:
        mock.stop(remove_data=False)


@pytest.fixture
def deployed_stack(stack_parameters: dict[str, str], _stacks: dict[Any, _Deployed]) -> Iterator[Deployment]:
    """template.yaml created in moto (with the SQS and DynamoDB speedups), and a poller for its real handlers."""
    with moto_kept():
        stack = stack_as_deployed(_stacks, stack_parameters)
        with moto_sqs_speedups(), moto_dynamodb_speedups():
            poller = LambdaPoller(stack)
            try:
                yield Deployment(stack, poller)
            finally:
                poller.close()


@pytest.fixture
def stacks_as_deployed(_stacks: dict[Any, _Deployed]) -> Iterator[Callable[..., DeployedStack]]:
    """For a test that deploys when it is ready (or once for each of many runs: a container killed at each
    write in turn): a function giving the stack of TEST_PARAMETERS and the parameters it is called with, as a
    new deployment has it (``stack_as_deployed``)."""
    with moto_kept():
        yield lambda **parameters: stack_as_deployed(_stacks, {**TEST_PARAMETERS, **parameters})
