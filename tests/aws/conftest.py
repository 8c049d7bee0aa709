"""Fixtures for tests that run the stack in moto: fake credentials, a deployed stack and its poller.

Why: every AWS client must be created inside ``mock_aws()`` with fake credentials (a real profile or
endpoint in the environment must never be reached), and a test should get the stack exactly as the
template defines it, with nothing to set up by hand.

Use: ``def test_x(deployed_stack): stack, poller = deployed_stack``. Override ``stack_parameters`` in a
module (or parametrize it indirectly) to deploy with other parameter values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from moto import mock_aws

from tests.aws.moto_dynamodb_speedups import moto_dynamodb_speedups
from tests.aws.moto_speedups import moto_sqs_speedups
from tests.aws.poller import LambdaPoller
from tests.aws.stack import TEMPLATE_PATH, DeployedStack, deploy_stack

#: Parameters the tests deploy with: fetches may reach local test servers (pytest-httpserver).
TEST_PARAMETERS: dict[str, str] = {"AllowedNetworks": "127.0.0.0/8"}


class Deployment(NamedTuple):
    """What ``deployed_stack`` yields; unpacks as ``stack, poller``."""

    stack: DeployedStack
    poller: LambdaPoller


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and region; nothing from the developer's AWS configuration is used."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    # DynamoDB Streams clients under botocore 1.44 need this to reach moto.
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")


@pytest.fixture
def stack_parameters(request: pytest.FixtureRequest) -> dict[str, str]:
    """Template parameters for ``deployed_stack``; indirect parametrization merges over TEST_PARAMETERS."""
    overrides: dict[str, Any] = getattr(request, "param", {}) or {}
    return {**TEST_PARAMETERS, **{k: str(v) for k, v in overrides.items()}}


@pytest.fixture
def deployed_stack(stack_parameters: dict[str, str]) -> Iterator[Deployment]:
    """template.yaml created in moto (with the SQS and DynamoDB speedups), and a poller for its real handlers."""
    with mock_aws(), moto_sqs_speedups(), moto_dynamodb_speedups():
        stack = deploy_stack(TEMPLATE_PATH, stack_parameters)
        poller = LambdaPoller(stack)
        try:
            yield Deployment(stack, poller)
        finally:
            poller.close()
