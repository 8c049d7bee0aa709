"""The AWS answers that mean "not now", waited out within the step's patience, then raised as Busy.

Two kinds of answer are told apart:

* **refused, nothing done**: throttling (DynamoDB's ProvisionedThroughputExceeded and ThrottlingException,
  S3's 503 SlowDown, SQS's throttling), a single write refused because a transaction holds its item
  (TransactionConflictException), a transaction cancelled only for throttling or conflicts (every other
  reason ``None``). The same request is tried again after a back-off, for as long as the step's patience
  lasts (``harvester.patience``), whatever botocore's own retry count says: botocore's retries do not know
  the invocation's deadline, and its retry quota stops retrying in a long storm, which is when waiting
  matters;
* **not answered**: a 5xx, a request timeout, a connection that broke or timed out. botocore tries these
  again itself (standard mode); what it gives up on is raised as Busy too, since the step can neither tell
  what happened nor blame the site for it.

Everything else (a failed condition, a validation error, a missing object) stays the ClientError it is.

Raising Busy from botocore's ``after-call`` events reaches every caller of the clients the adapters make,
paginators and S3's managed transfers included, without wrapping each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError

from harvester.patience import PATIENCE, Busy, Patience

#: Error codes of a request that was refused and not carried out: safe to send again as it was.
REFUSED = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TransactionInProgressException",
        "TransactionConflictException",
        "SlowDown",
        "KmsThrottled",
        "KMS.ThrottlingException",
    }
)
#: A transaction's cancellation reasons that mean it was refused for a moment, not for its conditions.
_REFUSED_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded", "TransactionConflict"})
_CANCELLED = "TransactionCanceledException"
#: Error codes of a request that was not answered (botocore tries them again first).
UNANSWERED = frozenset(
    {"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "InternalServerError",
     "InternalError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException"}
)  # fmt: skip


def error_code(parsed: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> str | None:
    """The error code of a parsed answer, as botocore raises it."""
    override = (context or {}).get("error_code_override")
    return override or parsed.get("Error", {}).get("Code")


def refused(parsed: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> str | None:
    """Why the answer refused the request without carrying it out, or None when it did not. (SQS's JSON
    answers name their error twice, by shape and by its query-protocol code: either may say throttled.)"""
    code = error_code(parsed, context)
    if code in REFUSED:
        return code
    query_code = parsed.get("Error", {}).get("QueryErrorCode")
    if query_code in REFUSED:
        return query_code
    if code == _CANCELLED:
        reasons = [r.get("Code") or "None" for r in parsed.get("CancellationReasons") or []]
        moments = [r for r in reasons if r in _REFUSED_REASONS]
        if moments and all(r in _REFUSED_REASONS or r == "None" for r in reasons):
            return f"{_CANCELLED} {moments}"
    return None


def busy_answer(status: int, parsed: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> str | None:
    """Why an error answer means the service is busy (refused, or not answered), or None."""
    why = refused(parsed, context)
    if why is not None:
        return why
    code = error_code(parsed, context)
    if code in UNANSWERED or status in (500, 502, 503, 504):
        return code or f"HTTP {status}"
    return None


def watch(client: Any, patience: Patience = PATIENCE) -> Any:
    """Makes ``client`` wait out refusals within ``patience`` and raise Busy for what stays busy; returns it."""
    service = client.meta.service_model.service_id.hyphenize()
    events = client.meta.events

    def needs_retry(response: Any = None, attempts: int = 1, operation: Any = None, **_: Any) -> float | bool | None:
        # (first among the service's handlers: the first answer that is not None decides; None leaves the
        # decision to botocore's own retry handler)
        if response is not None and response[0].status_code >= 300 and refused(response[1]) is not None:
            wait = patience.backoff(attempts)
            return False if wait is None else wait
        # (not answered, or not refused: botocore's to decide, unless the step's time is up)
        return False if patience.out_of_time() else None

    def after_call(http_response: Any, parsed: Mapping[str, Any], model: Any, context: Any = None, **_: Any) -> None:
        if http_response.status_code >= 300:
            why = busy_answer(http_response.status_code, parsed, context)
            if why is not None:
                message = parsed.get("Error", {}).get("Message") or ""
                raise Busy(service, model.name, f"{why}: {message}" if message else why)

    def after_call_error(exception: BaseException, context: Any = None, **kwargs: Any) -> None:
        if isinstance(exception, BotoConnectionError | HTTPClientError):
            operation = kwargs.get("event_name", "").rpartition(".")[2] or "request"
            raise Busy(service, operation, f"{type(exception).__name__}: {exception}") from exception

    events.register_first(f"needs-retry.{service}", needs_retry, unique_id=f"harvester-patience-{service}")
    events.register(f"after-call.{service}", after_call, unique_id=f"harvester-busy-{service}")
    events.register(f"after-call-error.{service}", after_call_error, unique_id=f"harvester-unanswered-{service}")
    return client
