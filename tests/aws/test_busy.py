"""AWS answers that mean "not now" (throttling, transaction conflicts, SlowDown, 5xx, timeouts): waited out
within the step's patience however many tries that takes, then raised as Busy; every other error stays the
ClientError it is. The answers are played at botocore's ``before-send`` (where a real answer arrives), so
that botocore's own retry loop and its handlers see them as they would see DynamoDB's, S3's and SQS's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import BytesIO
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, ReadTimeoutError

from harvester.adapters.aws import BOTO_CONFIG
from harvester.adapters.aws.busy import busy_answer, refused, watch
from harvester.adapters.aws.dynamodb import DynamoStateStore
from harvester.adapters.aws.sqs import SqsTaskQueue
from harvester.adapters.aws.state_table import TransactionFailed, batch_get
from harvester.model.messages import SitemapTask
from harvester.patience import PATIENCE, TRIES_WITHOUT_DEADLINE, Busy, Patience

#: A busy service waited out within about a second of patience: `make test` runs these beside the
#: others, which it nices.
pytestmark = pytest.mark.time_budget

CREDENTIALS = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}
ITEMS = [
    {"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}, "ConditionExpression": "x"}}
]


class Raw(BytesIO):
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.read()


def dynamodb_error(code: str, message: str = "", **fields: Any) -> tuple[int, dict[str, str], bytes]:
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **fields}
    return 400, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(body).encode()


def cancelled(*codes: str) -> tuple[int, dict[str, str], bytes]:
    return dynamodb_error("TransactionCanceledException", "cancelled", CancellationReasons=[{"Code": c} for c in codes])


OK_JSON = (200, {"Content-Type": "application/x-amz-json-1.0"}, b"{}")


class Answers:
    """Answers each request of ``client`` with the next of the answers given (then 200 ``{}``), counting them."""

    def __init__(self, client: Any, *answers: tuple[int, dict[str, str], bytes] | BaseException) -> None:
        self.answers = list(answers)
        self.sent = 0
        client.meta.events.register_first("before-send", self.answer)

    def answer(self, request: Any, **_: Any) -> AWSResponse:
        self.sent += 1
        answer = self.answers.pop(0) if self.answers else OK_JSON
        if isinstance(answer, BaseException):
            raise answer
        status, headers, body = answer
        return AWSResponse(request.url, status, headers, Raw(body))


def client(service: str, patience: Patience) -> Any:
    return watch(boto3.client(service, config=BOTO_CONFIG, **CREDENTIALS), patience)


@pytest.fixture
def patience(monkeypatch: pytest.MonkeyPatch) -> Iterator[Patience]:
    """The process's patience, with back-offs of a millisecond at most and about a second to wait in."""
    monkeypatch.setattr(PATIENCE, "base", 0.0005)
    monkeypatch.setattr(PATIENCE, "cap", 0.001)
    with PATIENCE.until(4.0):  # (a reserve of 3 s: about one second to wait in)
        yield PATIENCE


def test_a_transaction_cancelled_by_conflicts_is_sent_again_until_it_lands(patience):
    dynamodb = client("dynamodb", patience)
    sent = Answers(dynamodb, cancelled("None", "TransactionConflict"), cancelled("TransactionConflict", "None"))
    DynamoStateStore(dynamodb, "t").jobs.transact(ITEMS)
    assert sent.sent == 3


def test_a_failed_condition_is_not_sent_again(patience):
    dynamodb = client("dynamodb", patience)
    sent = Answers(dynamodb, cancelled("ConditionalCheckFailed", "TransactionConflict"))
    with pytest.raises(TransactionFailed) as failure:
        DynamoStateStore(dynamodb, "t").jobs.transact(ITEMS)
    assert failure.value.failed_conditions(2) == {0} and sent.sent == 1


def test_throttling_is_waited_out_past_botocores_own_retries(patience):
    """botocore's standard mode tries a request 8 times (BOTO_CONFIG); a throttle is waited out as long as
    the step has time, here 20 refusals in a row."""
    dynamodb = client("dynamodb", patience)
    throttled = dynamodb_error("ProvisionedThroughputExceededException", "slow down")
    sent = Answers(dynamodb, *[throttled] * 20, (200, {}, b'{"Item": {"pk": {"S": "a"}}}'))
    assert dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}
    assert sent.sent == 21


@pytest.mark.parametrize(
    "answer",
    [
        dynamodb_error("ProvisionedThroughputExceededException", "slow down"),
        dynamodb_error("ThrottlingException", "rate exceeded"),
        dynamodb_error("TransactionConflictException", "in a transaction"),
        cancelled("None", "ThrottlingError"),
        cancelled("ProvisionedThroughputExceeded", "TransactionConflict"),
    ],
    ids=["throughput", "throttling", "conflict", "cancelled-throttled", "cancelled-both"],
)
def test_what_stays_refused_past_the_deadline_is_busy(answer):
    patience = Patience(base=0.01, cap=0.05)
    dynamodb = client("dynamodb", patience)
    sent = Answers(dynamodb, *[answer] * 10_000)
    with patience.until(3.3), pytest.raises(Busy) as busy:  # (0.3 s to wait in)
        dynamodb.transact_write_items(TransactItems=ITEMS)
    assert busy.value.service == "dynamodb" and busy.value.operation == "TransactWriteItems"
    assert 5 < sent.sent < 10_000
    assert patience.gave_up == 1


def test_giving_back_may_wait_in_the_reserve():
    patience = Patience(base=0.01, cap=0.05)
    with patience.until(3.3):
        assert patience.backoff(1) is not None
        patience.deadline = 0.0  # (the step's own time is over)
        assert patience.backoff(1) is None
        with patience.giving_back():
            assert patience.backoff(1) is not None
        assert patience.backoff(1) is None
    assert patience.deadline is None and patience.end is None


def test_without_a_deadline_a_request_is_tried_a_bounded_number_of_times():
    patience = Patience(base=0.0001, cap=0.0001)
    dynamodb = client("dynamodb", patience)
    sent = Answers(dynamodb, *[dynamodb_error("ThrottlingException")] * 10_000)
    with pytest.raises(Busy):
        dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert sent.sent == TRIES_WITHOUT_DEADLINE


def test_unanswered_requests_are_botocores_to_retry_then_busy(patience, monkeypatch):
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda *_: 0.0)
    dynamodb = client("dynamodb", patience)
    sent = Answers(dynamodb, *[dynamodb_error("InternalServerError", "oops")] * 100)
    sent.answers = [(500, a[1], a[2]) for a in sent.answers]
    with pytest.raises(Busy, match="InternalServerError"):
        dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert sent.sent == BOTO_CONFIG.retries["total_max_attempts"]


def test_a_timeout_talking_to_aws_is_busy(patience):
    dynamodb = client("dynamodb", patience)
    Answers(dynamodb, *[ReadTimeoutError(endpoint_url="https://dynamodb")] * 100)
    with pytest.raises(Busy, match="ReadTimeoutError"):
        dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})


def test_other_errors_stay_client_errors(patience):
    dynamodb = client("dynamodb", patience)
    sent = Answers(dynamodb, dynamodb_error("ConditionalCheckFailedException", "no"))
    with pytest.raises(ClientError) as error:
        dynamodb.put_item(TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
    assert error.value.response["Error"]["Code"] == "ConditionalCheckFailedException" and sent.sent == 1
    sent.answers.append(dynamodb_error("ValidationException", "bad"))
    with pytest.raises(ClientError, match="ValidationException"):
        dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})


def test_s3_slow_down_is_waited_out(patience):
    s3 = client("s3", patience)
    slow = (503, {"Content-Type": "application/xml"}, b"<Error><Code>SlowDown</Code><Message>Reduce</Message></Error>")
    sent = Answers(s3, *[slow] * 12, (200, {}, b""))
    s3.put_object(Bucket="b", Key="k", Body=b"body")
    assert sent.sent == 13


def test_sqs_throttling_is_waited_out_and_failed_entries_sent_again(patience):
    sqs = client("sqs", patience)
    throttled = (
        400,
        {"Content-Type": "application/x-amz-json-1.0", "x-amzn-query-error": "RequestThrottled;Sender"},
        json.dumps({"__type": "com.amazonaws.sqs#RequestThrottled", "message": "throttled"}).encode(),
    )
    partly = json.dumps(
        {"Successful": [], "Failed": [{"Id": "0", "SenderFault": False, "Code": "ServiceUnavailable"}]}
    ).encode()
    landed = json.dumps({"Successful": [{"Id": "0", "MessageId": "m", "MD5OfMessageBody": "x"}], "Failed": []})
    sent = Answers(sqs, *[throttled] * 9, (200, {}, partly), (200, {}, landed.encode()))
    queue = SqsTaskQueue(sqs, job_queue_url="q", sitemap_queue_url="https://sqs/sitemaps", page_queue_url="q")
    queue.push([SitemapTask(job_id="j", url="https://example.com/sitemap.xml", origin="robots", depth=1)])
    assert sent.sent == 11


def test_keys_dynamodb_leaves_unprocessed_are_asked_for_again_then_busy(patience):
    dynamodb = client("dynamodb", patience)
    key = {"pk": {"S": "a"}}
    unprocessed = json.dumps({"Responses": {"t": []}, "UnprocessedKeys": {"t": {"Keys": [key]}}}).encode()
    found = json.dumps({"Responses": {"t": [key]}}).encode()
    sent = Answers(dynamodb, *[(200, {}, unprocessed)] * 3, (200, {}, found))
    assert list(batch_get(dynamodb, "t", [key])) == [key] and sent.sent == 4
    sent.answers = [(200, {}, unprocessed)] * 100_000
    with pytest.raises(Busy, match="unprocessed"):
        list(batch_get(dynamodb, "t", [key]))


def test_what_is_refused_and_what_is_busy():
    assert refused({"Error": {"Code": "SlowDown"}}) == "SlowDown"
    reasons = {"Error": {"Code": "TransactionCanceledException"}, "CancellationReasons": [{"Code": "None"}]}
    assert refused(reasons) is None  # (cancelled for no moment's reason: not ours to wait out)
    mixed = {"Error": {"Code": "TransactionCanceledException"}}
    mixed["CancellationReasons"] = [{"Code": "ConditionalCheckFailed"}, {"Code": "ThrottlingError"}]
    assert refused(mixed) is None
    assert busy_answer(503, {"Error": {"Code": "ServiceUnavailable"}}) == "ServiceUnavailable"
    assert busy_answer(400, {"Error": {"Code": "ValidationException"}}) is None
