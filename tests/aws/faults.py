"""Our own infrastructure refusing Harvester's requests: DynamoDB throttling and transaction conflicts, S3's
503 SlowDown, SQS's throttling, answered *before the request reaches moto* (nothing of a refused request is
done, as with the real services), so that botocore's retries and Harvester's patience see them first.

A :class:`Faults` decides, request by request, whether the request is answered by moto or refused, and how
(a refusal of the right protocol for its service); it keeps what it did. It is installed in front of moto
in this process (``in_process``, for the LambdaPoller's handlers) or in front of moto served over HTTP
(``tests.aws.concurrent.moto_over_http(faults=...)``, for containers run side by side). Only requests made
by Harvester's clients are refused (``app/harvester`` in their User-Agent, adapters.aws.BOTO_CONFIG): the
pollers' own receives and deletes, playing Lambda's service, and the test's reads are not.

Plans refuse each call (botocore's invocation, the same id over its retries) a number of tries in a row, so
that a call refused more times than botocore's 8 attempts is what Harvester's patience must wait out.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse

Answer = tuple[int, dict[str, str], bytes]
_SCOPE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")
HARVESTER = "app/harvester"
_ASKED_AGAIN = frozenset({"BatchGetItem", "BatchWriteItem", "SendMessageBatch"})
#: Tries botocore makes of a call on its own (adapters.aws.BOTO_CONFIG's standard mode).
BOTOCORE_ATTEMPTS = 8


@dataclass(frozen=True)
class Call:
    """One try of a request, as the services see it."""

    service: str  # dynamodb, s3, sqs
    operation: str  # DynamoDB's and SQS's operation; S3's method and key
    body: bytes
    invocation: str  # botocore's id of the call, the same over its retries
    harvester: bool

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def key(self) -> str:
        """What a refusal budget is kept by: botocore's call, over its retries; for the batch calls a refusal
        answers with a 200 (what was not processed comes back, Harvester asks again in a new call), the
        request itself, so that asking again for the same keys or messages counts as trying again."""
        if self.operation in _ASKED_AGAIN:
            return f"{self.operation}:{hashlib.blake2b(self.body, digest_size=12).hexdigest()}"
        return self.invocation


def call_of(headers: Mapping[str, Any], body: bytes, method: str, path: str) -> Call:
    lowered = {str(k).lower(): v for k, v in headers.items()}

    def header(name: str) -> str:
        value = lowered.get(name.lower()) or ""
        return value.decode() if isinstance(value, bytes) else str(value)

    scope = _SCOPE.search(header("Authorization"))
    service = scope.group(1) if scope else "?"
    target = header("X-Amz-Target")
    operation = target.rpartition(".")[2] if target else f"{method} {path}"
    return Call(service, operation, body, header("amz-sdk-invocation-id"), HARVESTER in header("User-Agent"))


def dynamodb_refusal(call: Call, rng: random.Random) -> Answer:
    """How DynamoDB refuses ``call`` when its table (or an item) is too busy."""
    json_type = {"Content-Type": "application/x-amz-json-1.0"}
    if call.operation in ("TransactWriteItems", "TransactGetItems"):
        items = len(json.loads(call.body).get("TransactItems", []))
        reasons = [{"Code": "None"} for _ in range(items)]
        reasons[rng.randrange(items)] = {
            "Code": rng.choice(["ThrottlingError", "ProvisionedThroughputExceeded", "TransactionConflict"])
        }
        body = {
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "message": "Transaction cancelled, please refer cancellation reasons for specific reasons",
            "CancellationReasons": reasons,
        }
        return 400, json_type, json.dumps(body).encode()
    if call.operation == "BatchGetItem":  # (a batch read is throttled by leaving its keys unprocessed)
        request = json.loads(call.body)["RequestItems"]
        return 200, json_type, json.dumps({"Responses": {t: [] for t in request}, "UnprocessedKeys": request}).encode()
    if call.operation == "BatchWriteItem":
        return 200, json_type, json.dumps({"UnprocessedItems": json.loads(call.body)["RequestItems"]}).encode()
    codes = ["ProvisionedThroughputExceededException", "ThrottlingException"]
    if call.operation in ("PutItem", "UpdateItem", "DeleteItem"):
        codes.append("TransactionConflictException")
    code = rng.choice(codes)
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "refused for a moment"}
    return 400, json_type, json.dumps(body).encode()


def s3_refusal(call: Call, rng: random.Random) -> Answer:
    body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
    return 503, {"Content-Type": "application/xml"}, body


def sqs_refusal(call: Call, rng: random.Random) -> Answer:
    if call.operation == "SendMessageBatch" and rng.random() < 0.5:  # (SQS's fault for every entry)
        entries = json.loads(call.body).get("Entries", [])
        failed = [{"Id": e["Id"], "SenderFault": False, "Code": "ServiceUnavailable"} for e in entries]
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps({"Failed": failed}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-query-error": "RequestThrottled;Sender"}
    body = {"__type": "com.amazonaws.sqs#RequestThrottled", "message": "Request is throttled."}
    return 400, headers, json.dumps(body).encode()


REFUSALS: dict[str, Callable[[Call, random.Random], Answer]] = {
    "dynamodb": dynamodb_refusal,
    "s3": s3_refusal,
    "sqs": sqs_refusal,
}

#: How many tries of a call are refused in a row: most calls none, some a few, some more than botocore's
#: own attempts (so that only Harvester's patience gets them through). (weight, lowest, highest)
HIGH_RATE = ((0.55, 0, 0), (0.30, 1, 3), (0.10, 4, 7), (0.05, BOTOCORE_ATTEMPTS, BOTOCORE_ATTEMPTS + 6))


def refusals(rng: random.Random, plan: tuple[tuple[float, int, int], ...] = HIGH_RATE) -> int:
    pick = rng.random()
    for weight, low, high in plan:
        if pick < weight:
            return rng.randint(low, high)
        pick -= weight
    return 0


@dataclass
class Faults:
    """Refuses Harvester's calls as ``plan`` says (None: answered by moto): ``plan(call, tries_so_far)``
    returns True to refuse this try. ``refused`` counts refusals by service and operation; ``longest`` the
    most tries of one call refused in a row."""

    plan: Callable[[Call, int], bool]
    seed: int = 0
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    answered: Counter[tuple[str, str]] = field(default_factory=Counter)
    streaks: Counter[str] = field(default_factory=Counter)
    longest: int = 0
    on: bool = True

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.lock = threading.Lock()

    def answer(self, call: Call) -> Answer | None:
        if not call.harvester or not self.on or call.service not in REFUSALS:
            return None
        with self.lock:
            tries = self.streaks[call.key]
            if not self.plan(call, tries):
                self.streaks.pop(call.key, None)
                self.answered[(call.service, call.operation)] += 1
                return None
            self.streaks[call.key] = tries + 1
            self.longest = max(self.longest, tries + 1)
            self.refused[(call.service, call.operation.split(" ")[0])] += 1
            return REFUSALS[call.service](call, self.rng)

    def over_botocore(self) -> bool:
        """Whether a call was refused more tries in a row than botocore makes on its own."""
        return self.longest > BOTOCORE_ATTEMPTS


def at_rate(seed: int, plan: tuple[tuple[float, int, int], ...] = HIGH_RATE) -> Callable[[Call, int], bool]:
    """Each call refused its first ``refusals()`` tries."""
    rng = random.Random(seed)
    budgets: dict[str, int] = {}
    lock = threading.Lock()

    def refuse(call: Call, tries: int) -> bool:
        with lock:
            if call.key not in budgets:
                budgets[call.key] = refusals(rng, plan)
            return tries < budgets[call.key]

    return refuse


def after(trigger: Callable[[Call], bool], then: Callable[[Call, int], bool]) -> Callable[[Call, int], bool]:
    """Nothing refused until a call ``trigger`` picks has been seen (answered), then ``then``'s refusals."""
    seen = threading.Event()

    def refuse(call: Call, tries: int) -> bool:
        if not seen.is_set():
            if trigger(call):
                seen.set()
            return False
        return then(call, tries)

    return refuse


@contextmanager
def in_process(faults: Faults) -> Iterator[Faults]:
    """``faults`` in front of moto for this process's clients (mock_aws must be active)."""
    original = BotocoreStubber.__call__

    def answer(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
        if self.enabled:
            body = request.body if isinstance(request.body, bytes) else (request.body or b"")
            if not isinstance(body, bytes):
                body = b""  # (a streamed S3 body: its length is all a refusal needs, and it needs none)
            path = request.url.split("://", 1)[-1].partition("/")[2]
            refusal = faults.answer(call_of(request.headers, body, request.method, "/" + path))
            if refusal is not None:
                status, headers, content = refusal
                return AWSResponse(request.url, status, headers, MockRawResponse(content))
        return original(self, event_name, request, **kwargs)

    with mock.patch.object(BotocoreStubber, "__call__", answer):
        yield faults


def wsgi_refusal(faults: Faults, environ: dict[str, Any]) -> Answer | None:
    """What ``faults`` answers a request moto's server received (its body left readable for moto)."""
    import io

    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    headers = {k[5:].replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}
    path = environ.get("PATH_INFO", "")
    return faults.answer(call_of(headers, body, environ.get("REQUEST_METHOD", ""), path))
