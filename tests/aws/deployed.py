"""What a stack deployed into moto is, as the tests and the containers read it: its functions (their
environment, code and event sources), its outputs and resources; and its JSON form, which hands it to a
container process (``tests.aws.container``). Kept apart from ``tests.aws.stack`` (which deploys, and imports
moto and samtranslator) so that a container starts with only what a Lambda container has."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EventSource:
    """One SQS event source mapping, as the Lambda API reports it (numbers as ints)."""

    uuid: str
    queue_logical_id: str
    queue_arn: str
    queue_url: str
    batch_size: int
    maximum_batching_window: int | None
    function_response_types: tuple[str, ...]
    maximum_concurrency: int | None
    enabled: bool

    @property
    def reports_batch_item_failures(self) -> bool:
        return "ReportBatchItemFailures" in self.function_response_types


@dataclass(frozen=True)
class ScheduleRule:
    """An EventBridge rule that targets a function (SAM's ``Type: Schedule`` event)."""

    name: str
    arn: str
    schedule_expression: str | None
    state: str


@dataclass(frozen=True)
class DeployedFunction:
    """A function as deployed: what moto's Lambda reports, plus where its code is in the repo."""

    logical_id: str
    name: str
    arn: str
    handler: str
    runtime: str
    timeout: int
    memory_size: int
    environment: dict[str, str]
    code_dir: Path
    event_sources: tuple[EventSource, ...] = ()
    schedule_rules: tuple[ScheduleRule, ...] = ()
    architecture: str = "x86_64"  # (Lambda's default)

    @property
    def sqs_event_source(self) -> EventSource | None:
        """The function's single SQS event source (the harvester functions have at most one)."""
        return self.event_sources[0] if self.event_sources else None


@dataclass
class DeployedStack:
    """What ``deploy_stack`` created. Keys are the template's logical ids."""

    stack_name: str
    region: str
    account_id: str
    parameters: dict[str, str]
    outputs: dict[str, str]
    physical_ids: dict[str, str]
    resource_types: dict[str, str]
    functions: dict[str, DeployedFunction]
    template: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)

    def function(self, logical_id: str) -> DeployedFunction:
        return self.functions[logical_id]

    def queue_url(self, logical_id: str) -> str:
        """URL of a queue by logical id (``JobQueue``, ``PageDeadLetterQueue``...)."""
        if self.resource_types.get(logical_id) != "AWS::SQS::Queue":
            raise KeyError(f"{logical_id} is not a queue of stack {self.stack_name}")
        return self.physical_ids[logical_id]

    def queue_urls(self) -> dict[str, str]:
        return {lid: pid for lid, pid in self.physical_ids.items() if self.resource_types[lid] == "AWS::SQS::Queue"}

    @property
    def sqs_functions(self) -> list[DeployedFunction]:
        """Functions triggered by SQS, in template order."""
        return [f for f in self.functions.values() if f.event_sources]

    def with_functions(
        self, environment: Mapping[str, str], timeouts: Mapping[str, int] | None = None
    ) -> DeployedStack:
        """The stack as its containers are to see it: every function's environment with ``environment`` added,
        and the Timeouts of ``timeouts`` (function logical id -> seconds): a test compressing the product's
        waits, or making an invocation run out of time."""
        timeouts = timeouts or {}
        functions = {
            logical_id: dataclasses.replace(
                function,
                environment={**function.environment, **environment},
                timeout=timeouts.get(logical_id, function.timeout),
            )
            for logical_id, function in self.functions.items()
        }
        return dataclasses.replace(self, functions=functions)


def stack_to_json(stack: DeployedStack) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(stack), default=str))


def stack_from_json(data: dict[str, Any]) -> DeployedStack:
    functions = {}
    for logical_id, f in data["functions"].items():
        functions[logical_id] = DeployedFunction(
            **{
                **f,
                "code_dir": Path(f["code_dir"]),
                "event_sources": tuple(
                    EventSource(**{**e, "function_response_types": tuple(e["function_response_types"])})
                    for e in f["event_sources"]
                ),
                "schedule_rules": tuple(ScheduleRule(**r) for r in f["schedule_rules"]),
            }
        )
    return DeployedStack(**{**data, "functions": functions})
