"""The project's own checks on the translated template: the rules cfn-lint does not know.

Why: cfn-lint validates each resource against its schema, but not the relations between resources
that make an SQS-driven Lambda pipeline safe - a queue whose visibility timeout is shorter than the
time its consumer may hold a message (duplicates), a redrive count too low for the poller's retries
(messages in the DLQ that never failed), a function that feeds its own queue being stopped by Lambda's
recursive-loop detection, an event source without partial-batch responses (one bad record retries the
batch). The checks run on samtranslator's output, because that is where these properties live
(event source mappings, expanded IAM policy templates).

Usage: ``python -m tests.tools.check_template template.yaml`` (a SAM template, translated here) or a
translated JSON template. Exit status 1 and one line per problem when a check fails.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.tools.translate import load_template, translate_file

REQUIRED_OUTPUTS = ("JobQueueUrl", "StateTableName", "DocumentBucketName")
MIN_VISIBILITY_FACTOR = 6
MIN_MAX_RECEIVE_COUNT = 5
MIN_MAXIMUM_CONCURRENCY = 2
MAX_MAXIMUM_CONCURRENCY = 1000
LAMBDA_DEFAULT_TIMEOUT = 3
SQS_DEFAULT_VISIBILITY = 30
BUCKET_ENCRYPTION = {"AES256", "aws:kms", "aws:kms:dsse"}
PUBLIC_ACCESS_BLOCK = ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
IAM_POLICY_HOLDERS = {
    "AWS::IAM::Role": "Policies",
    "AWS::IAM::User": "Policies",
    "AWS::IAM::Group": "Policies",
    "AWS::IAM::Policy": None,
    "AWS::IAM::ManagedPolicy": None,
    "AWS::S3::BucketPolicy": None,
    "AWS::SQS::QueuePolicy": None,
}


class Unresolvable(ValueError):
    """A value the checks cannot evaluate statically (an intrinsic other than a parameter Ref)."""


@dataclass(frozen=True)
class Bound:
    """The range a value can take at deploy time: a literal, or a parameter's default and limits."""

    default: float
    low: float
    high: float


class Template:
    """Read-only helpers over a translated template."""

    def __init__(self, template: Mapping[str, Any]) -> None:
        self.raw = template
        self.resources: Mapping[str, Any] = template.get("Resources", {}) or {}
        self.parameters: Mapping[str, Any] = template.get("Parameters", {}) or {}

    def of_type(self, resource_type: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for logical_id, resource in self.resources.items():
            if isinstance(resource, Mapping) and resource.get("Type") == resource_type:
                yield logical_id, resource.get("Properties", {}) or {}

    def type_of(self, logical_id: str) -> str | None:
        resource = self.resources.get(logical_id)
        return resource.get("Type") if isinstance(resource, Mapping) else None

    def bound(self, value: Any) -> Bound:
        """A number, a numeric string, or a Ref to a Number parameter (default and Min/MaxValue)."""
        if isinstance(value, bool):
            raise Unresolvable(repr(value))
        if isinstance(value, int | float):
            return Bound(value, value, value)
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError as error:
                raise Unresolvable(repr(value)) from error
            return Bound(number, number, number)
        if isinstance(value, Mapping) and set(value) == {"Ref"} and value["Ref"] in self.parameters:
            parameter = self.parameters[value["Ref"]]
            if "Default" not in parameter:
                raise Unresolvable(f"parameter {value['Ref']} has no Default")
            default = self.bound(parameter["Default"]).default
            low = float(parameter.get("MinValue", float("-inf")))
            high = float(parameter.get("MaxValue", float("inf")))
            return Bound(default, low, high)
        raise Unresolvable(repr(value))


def referenced_ids(value: Any) -> set[str]:
    """Logical ids a value refers to through Ref, Fn::GetAtt or Fn::Sub (both forms)."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                found.add(inner)
            elif key == "Fn::GetAtt":
                target = inner[0] if isinstance(inner, list) else str(inner).split(".", 1)[0]
                found.add(target)
            elif key == "Fn::Sub":
                text = inner[0] if isinstance(inner, list) else inner
                if isinstance(text, str):
                    found.update(part.split("}", 1)[0].split(".", 1)[0] for part in text.split("${")[1:] if "}" in part)
                found |= referenced_ids(inner[1:] if isinstance(inner, list) else [])
            else:
                found |= referenced_ids(inner)
    elif isinstance(value, list):
        for inner in value:
            found |= referenced_ids(inner)
    return found


def _strings(value: Any) -> Iterator[str]:
    """Every string in a value, through lists and intrinsics (Fn::If branches included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _strings(inner)


def _statements(document: Any) -> Iterator[Mapping[str, Any]]:
    if not isinstance(document, Mapping):
        return
    statements = document.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        if isinstance(statement, Mapping):
            yield statement


def policy_documents(template: Template) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(owner logical id, policy document) for every permission policy (not trust policies)."""
    for logical_id, resource in template.resources.items():
        if not isinstance(resource, Mapping):
            continue
        resource_type = resource.get("Type", "")
        if resource_type not in IAM_POLICY_HOLDERS:
            continue
        properties = resource.get("Properties", {}) or {}
        holder = IAM_POLICY_HOLDERS[resource_type]
        if holder is None:
            yield logical_id, properties.get("PolicyDocument", {})
        else:
            for policy in properties.get(holder, []) or []:
                if isinstance(policy, Mapping):
                    yield logical_id, policy.get("PolicyDocument", {})


def event_source_mappings(template: Template) -> Iterator[tuple[str, Mapping[str, Any], str, str]]:
    """(mapping id, properties, queue id, function id) for each mapping from an SQS queue in the template."""
    for logical_id, properties in template.of_type("AWS::Lambda::EventSourceMapping"):
        queues = [
            i for i in referenced_ids(properties.get("EventSourceArn")) if template.type_of(i) == "AWS::SQS::Queue"
        ]
        functions = [
            i for i in referenced_ids(properties.get("FunctionName")) if template.type_of(i) == "AWS::Lambda::Function"
        ]
        if queues and functions:
            yield logical_id, properties, queues[0], functions[0]


def dead_letter_queues(template: Template) -> dict[str, str]:
    """DLQ logical id -> the source queue whose RedrivePolicy names it."""
    found: dict[str, str] = {}
    for queue_id, properties in template.of_type("AWS::SQS::Queue"):
        redrive = properties.get("RedrivePolicy")
        if isinstance(redrive, Mapping):
            for target in referenced_ids(redrive.get("deadLetterTargetArn")):
                if template.type_of(target) == "AWS::SQS::Queue":
                    found[target] = queue_id
    return found


# ------------------------------------------------------------------------------------------- checks


def check_visibility_timeout(template: Template) -> list[str]:
    """Lambda's guidance: a queue's visibility timeout >= 6 x its consumer's timeout.

    Shorter, and a message still being processed (or waiting in the poller's retries) becomes visible
    again and is processed twice at the same time.
    """
    problems = []
    for mapping_id, _, queue_id, function_id in event_source_mappings(template):
        queue = template.resources[queue_id].get("Properties", {}) or {}
        function = template.resources[function_id].get("Properties", {}) or {}
        try:
            visibility = template.bound(queue.get("VisibilityTimeout", SQS_DEFAULT_VISIBILITY))
            timeout = template.bound(function.get("Timeout", LAMBDA_DEFAULT_TIMEOUT))
        except Unresolvable as error:
            problems.append(f"{mapping_id}: cannot evaluate visibility timeout or function timeout: {error}")
            continue
        if visibility.low < MIN_VISIBILITY_FACTOR * timeout.high:
            problems.append(
                f"{queue_id}: VisibilityTimeout {visibility.low:g} < {MIN_VISIBILITY_FACTOR} x "
                f"{function_id} Timeout {timeout.high:g} (= {MIN_VISIBILITY_FACTOR * timeout.high:g})"
            )
    return problems


def check_redrive(template: Template) -> list[str]:
    """Every consumed queue has a DLQ, and every RedrivePolicy allows >= 5 receives.

    With fewer, messages throttled by MaximumConcurrency or returned with a failed batch reach the DLQ
    without ever having failed on their own.
    """
    problems = []
    for queue_id, properties in template.of_type("AWS::SQS::Queue"):
        redrive = properties.get("RedrivePolicy")
        if redrive is None:
            continue
        if not isinstance(redrive, Mapping):
            problems.append(f"{queue_id}: RedrivePolicy is not an object: {redrive!r}")
            continue
        try:
            count = template.bound(redrive.get("maxReceiveCount"))
        except Unresolvable as error:
            problems.append(f"{queue_id}: RedrivePolicy maxReceiveCount missing or not a number: {error}")
            continue
        if count.low < MIN_MAX_RECEIVE_COUNT:
            problems.append(f"{queue_id}: RedrivePolicy maxReceiveCount {count.low:g} < {MIN_MAX_RECEIVE_COUNT}")
    for mapping_id, _, queue_id, _ in event_source_mappings(template):
        properties = template.resources[queue_id].get("Properties", {}) or {}
        if "RedrivePolicy" not in properties:
            problems.append(f"{queue_id}: consumed by {mapping_id} but has no RedrivePolicy (no dead-letter queue)")
    return problems


def check_iam_actions(template: Template) -> list[str]:
    """No Allow statement grants ``*``, ``service:*`` or uses NotAction (least privilege).

    Deny statements may be broad (the bucket's deny-non-TLS statement is ``s3:*`` on purpose).
    """
    problems = []
    for owner, document in policy_documents(template):
        for statement in _statements(document):
            if statement.get("Effect") != "Allow":
                continue
            sid = statement.get("Sid", "")
            where = f"{owner}{f' ({sid})' if sid else ''}"
            if "NotAction" in statement:
                problems.append(f"{where}: Allow statement uses NotAction")
            for action in _strings(statement.get("Action", [])):
                service, _, name = action.partition(":")
                if action.strip() == "*" or (name.strip() == "*" and service):
                    problems.append(f"{where}: Allow statement grants action {action!r}")
    return problems


def check_event_sources(template: Template) -> list[str]:
    """Every SQS mapping reports batch item failures and has MaximumConcurrency in [2, 1000].

    Without ReportBatchItemFailures one bad record returns the whole batch (duplicates, and good
    records pushed toward the DLQ); without MaximumConcurrency the pipeline can scale past what the
    crawled sites and the account's concurrency allow. The bound applies to every value a parameter
    allows, not just its default.
    """
    problems = []
    for logical_id, properties in template.of_type("AWS::Lambda::EventSourceMapping"):
        if "ReportBatchItemFailures" not in list(_strings(properties.get("FunctionResponseTypes", []))):
            problems.append(f"{logical_id}: FunctionResponseTypes lacks ReportBatchItemFailures")
        scaling = properties.get("ScalingConfig")
        maximum = scaling.get("MaximumConcurrency") if isinstance(scaling, Mapping) else None
        if maximum is None:
            problems.append(f"{logical_id}: no ScalingConfig.MaximumConcurrency")
            continue
        try:
            bound = template.bound(maximum)
        except Unresolvable as error:
            problems.append(f"{logical_id}: cannot evaluate ScalingConfig.MaximumConcurrency: {error}")
            continue
        if not MIN_MAXIMUM_CONCURRENCY <= bound.default <= MAX_MAXIMUM_CONCURRENCY:
            problems.append(
                f"{logical_id}: ScalingConfig.MaximumConcurrency {bound.default:g} outside "
                f"[{MIN_MAXIMUM_CONCURRENCY}, {MAX_MAXIMUM_CONCURRENCY}]"
            )
        elif bound.low < MIN_MAXIMUM_CONCURRENCY or bound.high > MAX_MAXIMUM_CONCURRENCY:
            problems.append(
                f"{logical_id}: ScalingConfig.MaximumConcurrency parameter allows [{bound.low:g}, {bound.high:g}], "
                f"outside [{MIN_MAXIMUM_CONCURRENCY}, {MAX_MAXIMUM_CONCURRENCY}] (set MinValue/MaxValue)"
            )
    return problems


def queues_sent_to(template: Template, function_id: str) -> set[str]:
    """Queues the function's execution role may sqs:SendMessage to."""
    role_ids = {
        i
        for i in referenced_ids(template.resources[function_id].get("Properties", {}).get("Role"))
        if template.type_of(i) == "AWS::IAM::Role"
    }
    documents = [document for owner, document in policy_documents(template) if owner in role_ids]
    for _, properties in template.of_type("AWS::IAM::Policy"):
        if referenced_ids(properties.get("Roles", [])) & role_ids:
            documents.append(properties.get("PolicyDocument", {}))
    queues: set[str] = set()
    for document in documents:
        for statement in _statements(document):
            actions = [a.lower() for a in _strings(statement.get("Action", []))]
            if statement.get("Effect") == "Allow" and any(a.startswith("sqs:sendmessage") for a in actions):
                queues |= {
                    i for i in referenced_ids(statement.get("Resource")) if template.type_of(i) == "AWS::SQS::Queue"
                }
    return queues


def check_recursive_loop(template: Template) -> list[str]:
    """A function allowed to send to its own trigger queue sets RecursiveLoop: Allow.

    Otherwise Lambda's recursive-loop detection stops the chain after about 16 hops and drops the
    messages (a sitemap's checkpoint continuation, a page's delayed retry).
    """
    problems = []
    for mapping_id, _, queue_id, function_id in event_source_mappings(template):
        if queue_id in queues_sent_to(template, function_id):
            setting = template.resources[function_id].get("Properties", {}).get("RecursiveLoop", "Terminate")
            if setting != "Allow":
                problems.append(
                    f"{function_id}: sends to its own trigger queue {queue_id} ({mapping_id}) "
                    f"but RecursiveLoop is {setting!r}, not 'Allow'"
                )
    return problems


def check_buckets(template: Template) -> list[str]:
    """Every bucket is encrypted by default and blocks all public access."""
    problems = []
    for bucket_id, properties in template.of_type("AWS::S3::Bucket"):
        rules = (properties.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration") or []
        algorithms = {
            (rule.get("ServerSideEncryptionByDefault") or {}).get("SSEAlgorithm")
            for rule in rules
            if isinstance(rule, Mapping)
        }
        if not algorithms & BUCKET_ENCRYPTION:
            problems.append(f"{bucket_id}: no default encryption (BucketEncryption SSEAlgorithm AES256 or aws:kms)")
        block = properties.get("PublicAccessBlockConfiguration") or {}
        missing = [key for key in PUBLIC_ACCESS_BLOCK if block.get(key) not in (True, "true")]
        if missing:
            problems.append(f"{bucket_id}: PublicAccessBlockConfiguration not true for {', '.join(missing)}")
    return problems


def check_queue_encryption(template: Template) -> list[str]:
    """Every queue is encrypted at rest (SQS-managed SSE or a KMS key)."""
    return [
        f"{queue_id}: neither SqsManagedSseEnabled nor KmsMasterKeyId"
        for queue_id, properties in template.of_type("AWS::SQS::Queue")
        if properties.get("SqsManagedSseEnabled") not in (True, "true") and not properties.get("KmsMasterKeyId")
    ]


def check_dlq_alarms(template: Template) -> list[str]:
    """Each dead-letter queue has an alarm that fires on its first visible message."""
    alarmed: set[str] = set()
    for _, properties in template.of_type("AWS::CloudWatch::Alarm"):
        if properties.get("Namespace") != "AWS/SQS":
            continue
        if properties.get("MetricName") != "ApproximateNumberOfMessagesVisible":
            continue
        try:
            threshold = template.bound(properties.get("Threshold")).default
        except Unresolvable:
            continue
        operator = properties.get("ComparisonOperator")
        fires_on_one = (operator == "GreaterThanOrEqualToThreshold" and threshold <= 1) or (
            operator == "GreaterThanThreshold" and threshold < 1
        )
        if not fires_on_one:
            continue
        for dimension in properties.get("Dimensions", []) or []:
            if isinstance(dimension, Mapping) and dimension.get("Name") == "QueueName":
                alarmed |= referenced_ids(dimension.get("Value"))
    return [
        f"{dlq_id}: dead-letter queue of {source_id} has no CloudWatch alarm on ApproximateNumberOfMessagesVisible >= 1"
        for dlq_id, source_id in sorted(dead_letter_queues(template).items())
        if dlq_id not in alarmed
    ]


def check_outputs(template: Template) -> list[str]:
    """The outputs `harvest submit` / `harvest status` and the tests look up by name."""
    outputs = template.raw.get("Outputs", {}) or {}
    return [f"Outputs: missing {name}" for name in REQUIRED_OUTPUTS if name not in outputs]


CHECKS: tuple[Callable[[Template], list[str]], ...] = (
    check_visibility_timeout,
    check_redrive,
    check_iam_actions,
    check_event_sources,
    check_recursive_loop,
    check_buckets,
    check_queue_encryption,
    check_dlq_alarms,
    check_outputs,
)


def run_checks(translated: Mapping[str, Any]) -> list[str]:
    """Every problem found in a translated (plain CloudFormation) template; empty when it passes."""
    template = Template(translated)
    problems: list[str] = []
    for check in CHECKS:
        problems.extend(f"[{check.__name__.removeprefix('check_')}] {p}" for p in check(template))
    return problems


def load_translated(path: Path) -> dict[str, Any]:
    """A translated template: translate a SAM template, take a plain CloudFormation one as it is."""
    template = load_template(path)
    if "AWS::Serverless-2016-10-31" in list(_strings(template.get("Transform", []))):
        return translate_file(path)
    return template


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: print each problem and exit 1, or print a one-line summary and exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", type=Path)
    args = parser.parse_args(argv)
    try:
        translated = load_translated(args.template)
    except Exception as error:
        causes = getattr(error, "causes", None) or [error]
        for cause in causes:
            print(f"{args.template}: cannot translate: {getattr(cause, 'message', cause)}", file=sys.stderr)
        return 1
    problems = run_checks(translated)
    for problem in problems:
        print(f"{args.template}: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.template}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{args.template}: {len(CHECKS)} template checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
