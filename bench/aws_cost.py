"""AWS cost of a crawl: requests per fetched page and dollars per million pages, on the AWS path, in one run.

Why: issue 11 ("Cost, measured") sets the serverless path two targets, at most 2.5 AWS requests per fetched
page and at most $2 per million pages for requests and compute (storage and transfer apart), and the
batching work that is to meet them needs a figure to start from, the same figure to be held to afterwards,
and a map of where the requests come from. This script is that figure: it counts what a crawl costs, it
changes nothing in the engine.

    python bench/aws_cost.py [--pages 1000] [--where] [--top 6] [--json] [--output warc ...] [--collect]

What runs: a demo site of ``--pages`` pages (harvester.demo.live.LiveSite, served on 127.0.0.1) is crawled
twice through the AWS path of bench/_aws_path.py (template.yaml translated with samtranslator and created in
moto, the real handlers driven as Lambda's SQS poller drives them): a first crawl, which fetches and stores
every page, and a re-crawl of the unchanged site, which fetches nothing (with ``--collect``, a second
re-crawl whose end deletes the first crawl's crawl batches no pointer names any more: what keeping the crawl
database's storage bounded costs). Every AWS request is seen at
botocore's ``_make_api_call`` and counted by service and operation; each is also weighed in the units AWS
bills, and those units are priced with ``PRICES`` below. The named baseline, "loose objects", stores one S3
object per page (``--output files``); "WARC", the default, one WARC object (and its CDXJ) per page batch; both
keep the state as template.yaml's stack does (adapters/aws/dynamodb.py). ``--output`` picks one.

Denominators: the first crawl's figures are per fetched page (the site's page requests answered 200), the
re-crawl's per listed page (it fetches none). The request target counts every billed request: the handlers'
own calls, the SQS calls Lambda's event source mapping makes for them (one ReceiveMessage per batch that
returned messages, one DeleteMessageBatch per batch deleted) and the Lambda invocations; the handlers' own
calls alone are printed too (the figure earlier measurements quoted).

How the billed units are estimated (moto reports no consumed capacity, and asking for it,
``ReturnConsumedCapacity``, would change the engine's requests):

* DynamoDB item size, as AWS defines it: per attribute, the UTF-8 length of its name plus its value (strings:
  UTF-8 bytes; numbers: 1 byte per 2 significant digits + 1; binary: bytes; booleans and nulls: 1; lists and
  maps: 3 + 1 per element + the elements, and the keys of a map). Sizes of stored items are read from moto's
  table directly (no request, nothing counted), just before and just after each write.
* Writes (PutItem, UpdateItem, DeleteItem, each item of BatchWriteItem and of TransactWriteItems, condition
  checks included): ceil(max(size before, size after, 1 byte) / 1 KB) write request units per item, x2 in a
  transaction. A write whose condition fails, or a cancelled transaction, is charged the same way on the
  item as it stands (AWS charges a failed conditional write; a cancelled transaction is assumed charged in
  full: an upper bound).
* Index writes: for each global secondary index, the item's projection before and after the write: an
  entry added or removed costs ceil(size / 1 KB), an entry whose index key changed costs both, an entry
  whose projected attributes changed costs ceil(size after / 1 KB), an unchanged one nothing. Index writes
  are not doubled for transactions (a transaction's changes reach its indexes afterwards, as plain writes).
* Reads: GetItem and each key of BatchGetItem ceil(stored size / 4 KB), at least 1, times 1 for a strongly
  consistent read and 0.5 for an eventually consistent one; TransactGetItems x2 per item. Query and Scan:
  the sizes of every item *read* (before FilterExpression, whole items whatever ProjectionExpression
  keeps), summed and rounded up to 4 KB per request, at least 1 unit, x0.5 unless strongly consistent (an
  index query always is eventually consistent). When a query filters or projects, the items it read are
  had by asking moto the same query unfiltered and unprojected, uncounted.
* SQS: each request is at least one billed request, and SendMessage(Batch) / ReceiveMessage one per 64 KB
  chunk of their payload (bodies plus message attributes' names, types and values).
* S3: PUT, COPY, POST, LIST and the multipart calls at the PUT price; DELETE and AbortMultipartUpload free;
  everything else (GET, HEAD) at the GET price.
* Lambda: one request per invocation, and GB-seconds from each handler invocation's measured duration
  (timed around the handler in the poller harness, rounded up to 1 ms as Lambda bills) times the function's
  MemorySize in template.yaml, priced by its Architectures, less this script's own metering inside the
  invocation. The measured duration is an in-process one: it includes moto answering the handler's AWS
  calls (printed apart) and the demo site answering its fetches, both on this machine, not the network
  latencies of real AWS and real sites.

Not in these figures: storage and transfer (apart by definition), CloudWatch Logs ingestion, the idle long
polls Lambda's pollers make on empty queues (a cost per hour, not per page), the scheduler's ticks, the
INIT phase of cold starts, free tiers. The harness's own calls that stand for nothing billed (empty
receives, queue-depth checks, ChangeMessageVisibility for time compression) are counted apart and left out.

The script always exits 0: it measures and prints the verdicts, it does not test.
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _aws_path import REPO, AwsPath, aws_path

from harvester.demo.live import LiveSite

TARGET_REQUESTS_PER_PAGE = 2.5
TARGET_DOLLARS_PER_MILLION = 2.0

#: AWS list prices, us-east-1, as of 2026-11-25 (source: aws.amazon.com/{lambda,sqs,dynamodb,s3}/pricing, as
#: summarised in the project's cost reference, politeness-output-cost.md, "What a page costs on AWS"):
#: Lambda (x86_64 and arm64), SQS standard queues, DynamoDB on-demand (Standard table class), S3 Standard.
#: Dollars per unit.
PRICES_AS_OF = "2026-11-25"
PRICES: dict[str, float] = {
    "lambda request": 0.20 / 1e6,
    "lambda GB-second": 0.0000166667,  # x86_64
    "lambda GB-second arm64": 0.0000133334,
    "sqs request": 0.40 / 1e6,  # per 64 KB chunk of a request's payload; a batch of up to 10 is one request
    "dynamodb write request unit": 0.625 / 1e6,  # 1 KB; a transactional write 2 per KB
    "dynamodb read request unit": 0.125 / 1e6,  # 4 KB strongly consistent; eventually 0.5, transactional 2
    "s3 PUT request": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3 GET request": 0.0004 / 1000,  # GET, SELECT and all other requests
}

HARVESTER = str(REPO / "layers" / "harvester" / "harvester") + "/"
ADAPTERS = HARVESTER + "adapters/"
S3_ADAPTER = ADAPTERS + "aws/s3.py"
STORAGE_ADAPTERS = {f"{ADAPTERS}aws/{name}.py" for name in ("dynamodb", "crawl", "host_gate", "s3", "sqs")}
KB = 1024
SQS_CHUNK = 64 * KB
_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_READS = {"GetItem", "BatchGetItem", "TransactGetItems", "Query", "Scan"}
_S3_PUT_CLASS = ("Put", "Copy", "Post", "List", "Create", "Upload", "Complete")
_S3_FREE = ("Delete", "Abort")
_DYNAMODB_UNITS = ("WRU", "WRU index", "RRU")
_NAME = re.compile(r"[#:][A-Za-z0-9_]+")

# ---------------------------------------------------------------------------------------------- sizes


def number_size(text: str) -> int:
    """A DynamoDB number's size: 1 byte per two significant digits, plus 1."""
    mantissa = re.split("[eE]", text.lstrip("+-"))[0].replace(".", "")
    significant = mantissa.strip("0") or "0"
    return (len(significant) + 1) // 2 + 1


def value_size(value: Mapping[str, Any]) -> int:
    """The size DynamoDB gives an attribute value (in the wire format, ``{"S": "..."}``)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        return number_size(raw)
    if kind == "B":
        return len(raw) if isinstance(raw, bytes) else len(base64.b64decode(raw))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in raw)
    if kind == "NS":
        return sum(number_size(n) for n in raw)
    if kind == "BS":
        return sum(len(b) for b in raw)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Any] | None) -> int:
    return 0 if item is None else sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / KB))


def read_units(size: int) -> int:
    return max(1, math.ceil(size / (4 * KB)))


def sqs_payload(entries: Iterable[Mapping[str, Any]], body: str = "MessageBody") -> int:
    """Bytes of messages' bodies and attributes (name, data type and value), as SQS sizes a payload."""
    total = 0
    for entry in entries:
        total += len(str(entry.get(body, "")).encode())
        for name, attribute in (entry.get("MessageAttributes") or {}).items():
            value = attribute.get("StringValue", attribute.get("BinaryValue", b""))
            total += len(name.encode()) + len(str(attribute.get("DataType", "")).encode())
            total += len(value) if isinstance(value, bytes) else len(str(value).encode())
    return total


def sqs_chunks(payload: int) -> int:
    return max(1, math.ceil(payload / SQS_CHUNK))


def _pages_in(record: Any) -> int:
    """Pages an SQS record of the page queues carries: a page batch's, or 1 (any other record: 1)."""
    try:
        body = json.loads(record.get("body", ""))
    except (ValueError, AttributeError):
        return 1
    return len(body.get("pages", ())) if isinstance(body, dict) and body.get("kind") == "pages" else 1


# ---------------------------------------------------------------------------------------------- tally


@dataclass
class Invocation:
    function: str
    seconds: float
    memory_mb: int
    aws_seconds: float  # of which inside the handler's AWS calls (moto)
    messages: int = 0  # the event's records
    pages: int = 0  # the pages they carry (a page batch is one record for many pages)
    architecture: str = "x86_64"

    @property
    def gb_seconds(self) -> float:
        return math.ceil(self.seconds * 1000) / 1000 * self.memory_mb / 1024

    @property
    def compute_dollars(self) -> float:
        return self.gb_seconds * gb_second_price(self.architecture)


def gb_second_price(architecture: str) -> float:
    """Lambda's price of a GB-second on a function of that architecture (arm64 or x86_64)."""
    return PRICES["lambda GB-second arm64"] if architecture == "arm64" else PRICES["lambda GB-second"]


@dataclass
class Tally:
    """What one crawl cost, as seen request by request."""

    calls: collections.Counter[str] = field(default_factory=collections.Counter)  # the handlers' own
    esm: collections.Counter[str] = field(default_factory=collections.Counter)  # Lambda's poller, as billed
    harness: collections.Counter[str] = field(default_factory=collections.Counter)  # poller calls billed as nothing
    #: (unit, operation) -> units: "WRU", "WRU index", "RRU", "SQS", "S3 PUT", "S3 GET", "unpriced"
    units: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    aws_seconds: float = 0.0
    meter_seconds: float = 0.0  # this script's own work inside the handlers' calls: off their durations
    invocations: list[Invocation] = field(default_factory=list)
    sites: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)  # (op, call site)
    site_units: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    def unit(self, kind: str) -> float:
        return sum(n for (k, _), n in self.units.items() if k == kind)


class Meter:
    """The observer of bench/_aws_path.AwsRequests: makes each request, and books its count and units."""

    #: The items the last write's units were booked to: (``item_kind``, table write units).
    items_written: list[tuple[str, float]] = []

    def __init__(self, aws: AwsPath, *, where: bool) -> None:
        from moto.dynamodb.models import dynamodb_backends

        self.backend = dynamodb_backends[aws.stack.account_id][aws.stack.region]
        self.unpatched = aws.requests.unpatched
        self.where = where
        self.tally = Tally()
        self._lock = threading.Lock()  # S3 uploads come from worker threads

    def __call__(
        self, client: Any, operation: str, params: dict[str, Any], poller: bool, call: Callable[[], Any]
    ) -> Any:
        metering = time.perf_counter()
        service = client.meta.service_model.service_name
        name = f"{service}:{operation}"
        before = self._snapshot(operation, params) if service == "dynamodb" and operation in _WRITES else None
        start = time.perf_counter()
        response: Any = None
        try:
            response = call()
            return response
        finally:
            end = time.perf_counter()
            units = self._units(client, service, operation, params, response, before)
            site = self._call_site() if self.where and not poller else None
            with self._lock:
                tally = self.tally
                tally.meter_seconds += (start - metering) + (time.perf_counter() - end)
                if poller:
                    self._book_poller(tally, name, operation, response, units)
                else:
                    tally.calls[name] += 1
                    tally.aws_seconds += end - start
                    for kind, n in units:
                        tally.units[kind, name] += n
                    if site is not None:
                        tally.sites[name, site] += 1
                        tally.site_units[name, site] += sum(n for kind, n in units if kind in _DYNAMODB_UNITS)

    def _book_poller(
        self, tally: Tally, name: str, operation: str, response: Any, units: list[tuple[str, float]]
    ) -> None:
        if (operation == "ReceiveMessage" and (response or {}).get("Messages")) or operation == "DeleteMessageBatch":
            tally.esm[name] += 1
            for kind, n in units:
                tally.units[kind, name + " (Lambda's poller)"] += n
        else:
            suffix = " (empty)" if operation == "ReceiveMessage" else ""
            tally.harness[name + suffix] += 1

    # units ------------------------------------------------------------------------------------------

    def _units(
        self,
        client: Any,
        service: str,
        operation: str,
        params: dict[str, Any],
        response: Any,
        before: list[tuple[str, dict[str, Any], float, Any]] | None,
    ) -> list[tuple[str, float]]:
        if service == "dynamodb":
            if before is not None:
                return self._write_units(before)
            if operation in _READS:
                return [("RRU", self._read_units(client, operation, params, response))]
            return [("unpriced", 1)]
        if service == "sqs":
            if operation in ("SendMessage", "SendMessageBatch"):
                entries = params.get("Entries") or [params]
                return [("SQS", sqs_chunks(sqs_payload(entries)))]
            if operation == "ReceiveMessage":
                return [("SQS", sqs_chunks(sqs_payload((response or {}).get("Messages", []), body="Body")))]
            return [("SQS", 1)]
        if service == "s3":
            if operation.startswith(_S3_FREE):
                return []
            return [("S3 PUT" if operation.startswith(_S3_PUT_CLASS) else "S3 GET", 1)]
        return [("unpriced", 1)]

    def _table(self, name: str) -> Any:
        return self.backend.get_table(name)

    def _stored(self, table_name: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The item as moto holds it (wire format), read without a request."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = self._table(table_name)
        range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = table.get_item(DynamoType(key[table.hash_key_attr]), range_key)
        return None if item is None else item.to_json()["Attributes"]

    def _key_of(self, table_name: str, item: Mapping[str, Any]) -> dict[str, Any]:
        table = self._table(table_name)
        return {a: item[a] for a in (table.hash_key_attr, table.range_key_attr) if a}

    def _write_targets(self, operation: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], float]]:
        """(table, key, factor) of each item a write names."""
        if operation == "PutItem":
            return [(params["TableName"], self._key_of(params["TableName"], params["Item"]), 1)]
        if operation in ("UpdateItem", "DeleteItem"):
            return [(params["TableName"], params["Key"], 1)]
        targets: list[tuple[str, dict[str, Any], float]] = []
        if operation == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((_, body),) = entry.items()
                key = body.get("Key") or self._key_of(body["TableName"], body["Item"])
                targets.append((body["TableName"], key, 2))
        elif operation == "BatchWriteItem":
            for table_name, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        targets.append((table_name, self._key_of(table_name, request["PutRequest"]["Item"]), 1))
                    else:
                        targets.append((table_name, request["DeleteRequest"]["Key"], 1))
        return targets

    def _snapshot(self, operation: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], float, Any]]:
        return [(t, key, factor, self._stored(t, key)) for t, key, factor in self._write_targets(operation, params)]

    def _write_units(self, before: list[tuple[str, dict[str, Any], float, Any]]) -> list[tuple[str, float]]:
        table_units = 0.0
        index_units = 0.0
        self.items_written = []
        for table_name, key, factor, old in before:
            new = self._stored(table_name, key)
            units = factor * write_units(max(item_size(old), item_size(new)))
            table_units += units
            self.items_written.append((item_kind(key), units))
            for index in self._table(table_name).global_indexes:
                index_units += self._index_write_units(index, old, new)
        return [("WRU", table_units), ("WRU index", index_units)]

    @staticmethod
    def _index_write_units(index: Any, old: dict[str, Any] | None, new: dict[str, Any] | None) -> int:
        keys = [k["AttributeName"] for k in index.schema]

        def projected(item: dict[str, Any] | None) -> dict[str, Any] | None:
            if item is None or any(k not in item for k in keys):
                return None  # not in the (sparse) index
            projection = index.projection or {}
            kind = projection.get("ProjectionType", "ALL")
            if kind == "ALL":
                return item
            kept = set(index.table_key_attrs) | set(keys) | set(projection.get("NonKeyAttributes", []))
            return {k: v for k, v in item.items() if k in kept}

        was, now = projected(old), projected(new)
        if was is None and now is None:
            return 0
        if was is None or now is None:
            return write_units(item_size(was if now is None else now))
        if any(was[k] != now[k] for k in keys):
            return write_units(item_size(was)) + write_units(item_size(now))
        return write_units(item_size(now)) if was != now else 0

    def _read_units(self, client: Any, operation: str, params: dict[str, Any], response: Any) -> float:
        if operation == "GetItem":
            size = item_size(self._stored(params["TableName"], params["Key"]))
            return read_units(size) * (1 if params.get("ConsistentRead") else 0.5)
        if operation == "BatchGetItem":
            units = 0.0
            for table_name, request in params["RequestItems"].items():
                factor = 1 if request.get("ConsistentRead") else 0.5
                units += sum(read_units(item_size(self._stored(table_name, k))) * factor for k in request["Keys"])
            return units
        if operation == "TransactGetItems":
            gets = [entry["Get"] for entry in params["TransactItems"]]
            return sum(2 * read_units(item_size(self._stored(g["TableName"], g["Key"]))) for g in gets)
        # Query / Scan: every item read, whole, before any filter
        items = (response or {}).get("Items", [])
        if any(k in params for k in ("ProjectionExpression", "FilterExpression", "Select")) and response:
            items = self._items_read(client, operation, params)
        consistent = params.get("ConsistentRead") and "IndexName" not in params
        return read_units(sum(item_size(i) for i in items)) * (1 if consistent else 0.5)

    def _items_read(self, client: Any, operation: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The items a filtered or projected query read: the same query, whole and unfiltered, uncounted."""
        assert self.unpatched is not None
        plain = {k: v for k, v in params.items() if k not in ("ProjectionExpression", "FilterExpression", "Select")}
        used = set(_NAME.findall(params.get("KeyConditionExpression", "")))
        for names in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
            kept = {k: v for k, v in params.get(names, {}).items() if k in used}
            if kept:
                plain[names] = kept
            else:
                plain.pop(names, None)
        return self.unpatched(client, operation, plain).get("Items", [])

    # call sites -------------------------------------------------------------------------------------

    def _call_site(self) -> str:
        """ "port method (innermost function) <- engine caller:line": the outermost frame in a storage adapter
        (harvester/adapters/aws/{dynamodb,crawl,host_gate,s3,sqs}.py: the method the engine called), the
        innermost frame in harvester/ if it is another, and the frame that called the adapter. A request made
        in a thread that runs no harvester code (s3transfer's workers) is put on the thread that waits for it
        in the S3 adapter."""
        frames = _harvester_frames(sys._getframe(1))
        if not frames:
            for frame in sys._current_frames().values():
                frames = _harvester_frames(frame)
                if frames and frames[0].f_code.co_filename == S3_ADAPTER:
                    break
            else:
                return "(outside harvester/)"
        storage = [i for i, f in enumerate(frames) if f.f_code.co_filename in STORAGE_ADAPTERS]
        if not storage:
            return f"{_where(frames[0])}:{frames[0].f_lineno}"
        port = frames[storage[-1]]
        inner = "" if storage[-1] == 0 else f" ({_where(frames[0])})"
        if storage[-1] + 1 < len(frames):
            caller = frames[storage[-1] + 1]
            return f"{_where(port)}{inner} <- {_where(caller)}:{caller.f_lineno}"
        return f"{_where(port)}{inner} <- (a worker thread: asyncio.to_thread)"


def _harvester_frames(frame: Any) -> list[Any]:
    frames = []
    while frame is not None:
        if frame.f_code.co_filename.startswith(HARVESTER):
            frames.append(frame)
        frame = frame.f_back
    return frames


def _where(frame: Any) -> str:
    module = Path(frame.f_code.co_filename).stem
    return f"{module}.{frame.f_code.co_qualname}"


# ---------------------------------------------------------------------------------------------- runs


@dataclass
class Crawl:
    """One crawl's tally and what it is divided by."""

    name: str
    listed: int
    fetched: int
    seconds: float
    tally: Tally

    @property
    def pages(self) -> int:
        """The denominator: fetched pages, or the listed ones of a crawl that fetched none."""
        return self.fetched or self.listed

    @property
    def per(self) -> str:
        return f"{self.fetched:,} fetched" if self.fetched else f"{self.listed:,} listed"


@dataclass
class Layout:
    name: str
    crawls: list[Crawl]


def timed_handlers(aws: AwsPath, meter: Meter) -> None:
    """Times each handler invocation in the poller (the cold start's import stays off the clock, and so does
    the meter's own work: snapshots of items, queries asked again, call sites)."""
    load = aws.poller.handler

    def handler(function_id: str) -> Callable[[Any, Any], Any]:
        inner = load(function_id)
        memory, architecture = aws.stack.function(function_id).memory_size, aws.stack.function(function_id).architecture

        def invoke(event: Any, context: Any) -> Any:
            tally = meter.tally
            aws_before, meter_before = tally.aws_seconds, tally.meter_seconds
            start = time.perf_counter()
            try:
                return inner(event, context)
            finally:
                seconds = time.perf_counter() - start - (tally.meter_seconds - meter_before)
                aws_seconds = tally.aws_seconds - aws_before
                records = event.get("Records", ()) if isinstance(event, dict) else ()
                tally.invocations.append(
                    Invocation(
                        function_id,
                        seconds,
                        memory,
                        aws_seconds,
                        len(records),
                        sum(map(_pages_in, records)),
                        architecture,
                    )
                )

        return invoke

    aws.poller.handler = handler  # type: ignore[method-assign]


#: The job's rate_limit_delay by default: no spacing between a host's requests (only its 8 at once).
NO_SPACING = 0.00001


def loose_objects(pages: int, *, where: bool, delay: float = NO_SPACING, collect: bool = False) -> Layout:
    """The baseline, one S3 object per page (``--output files``): a first crawl and a re-crawl of the
    unchanged site."""
    return _layout("loose objects", "files", pages, where=where, delay=delay, collect=collect)


def warc_output(pages: int, *, where: bool, delay: float = NO_SPACING, collect: bool = False) -> Layout:
    """The defaults (``--output warc``): each page batch's captures in one WARC object and its CDXJ."""
    return _layout("WARC", "warc", pages, where=where, delay=delay, collect=collect)


#: The outputs by their ``--output`` names, in the order they are printed.
LAYOUTS = {"files": loose_objects, "warc": warc_output}


def _layout(name: str, output: str, pages: int, *, where: bool, delay: float, collect: bool = False) -> Layout:
    from harvester.model.messages import JobRequest, Output

    crawls = []
    site_serving = LiveSite(pages=pages, sitemaps=max(1, pages // 5000)).serving()
    with site_serving as site, aws_path() as aws:
        meter = Meter(aws, where=where)
        aws.requests.observer = meter
        timed_handlers(aws, meter)
        for leg_name in ("first crawl", "re-crawl", "re-crawl, collecting")[: 3 if collect else 2]:
            if leg_name.endswith("collecting"):  # (as if the jobs before had ended a quarter of an hour ago)
                for function in aws.stack.functions.values():
                    function.environment["HARVEST_COLLECT_AFTER_SECONDS"] = "0"
            site.reset_log()
            meter.tally = Tally()
            leg = aws.run(JobRequest(site=site.url("/"), rate_limit_delay=delay, output=Output(output)))
            fetched = sum(1 for hit in site.page_hits() if hit.status == 200)
            crawls.append(Crawl(leg_name, pages, fetched, leg["seconds"], meter.tally))
    return Layout(name, crawls)


# ---------------------------------------------------------------------------------------------- figures


def requests_by_operation(crawl: Crawl) -> dict[str, float]:
    """Every billed request: the handlers' calls, Lambda's poller's, and the invocations."""
    rows: dict[str, float] = dict(crawl.tally.calls)
    for name, n in crawl.tally.esm.items():
        rows[f"{name} (Lambda's poller)"] = n
    if crawl.tally.invocations:
        rows["lambda:Invoke (SQS event source)"] = len(crawl.tally.invocations)
    return rows


def costs(crawl: Crawl) -> dict[str, float]:
    """Dollars by service line, for the whole crawl."""
    tally = crawl.tally
    return priced(len(tally.invocations), sum(i.compute_dollars for i in tally.invocations), tally.unit)


def item_kind(key: Mapping[str, Any]) -> str:
    """An item's kind, from its key with the names in it starred: ``JOB BATCH#*#S`` (a batch's states),
    ``CRAWL URL#*`` (a URL's pointer), ``HOST GATE``: the segments of upper-case letters kept."""

    def shape(value: Any) -> str:
        text = str(next(iter(value.values())) if isinstance(value, Mapping) else value)
        return "#".join(part if re.fullmatch(r"[A-Z]{1,6}", part) else "*" for part in text.split("#"))

    return f"{shape(key.get('pk', '')).split('#')[0]} {shape(key.get('sk', ''))}"


def priced(invocations: int, compute: float, unit: Callable[[str], float]) -> dict[str, float]:
    """Dollars by service line for that many invocations, their compute (in dollars: GB-seconds priced by
    their functions' architecture, ``gb_second_price``) and units (``unit(kind)``: the units of a kind booked,
    "WRU", "RRU", "SQS", "S3 PUT" ...)."""
    return {
        "Lambda requests": invocations * PRICES["lambda request"],
        "Lambda compute": compute,
        "SQS": unit("SQS") * PRICES["sqs request"],
        "DynamoDB writes": (unit("WRU") + unit("WRU index")) * PRICES["dynamodb write request unit"],
        "DynamoDB reads": unit("RRU") * PRICES["dynamodb read request unit"],
        "S3 PUT/LIST": unit("S3 PUT") * PRICES["s3 PUT request"],
        "S3 GET": unit("S3 GET") * PRICES["s3 GET request"],
    }


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def report(layouts: list[Layout], pages: int, *, where: bool, top: int, delay: float = NO_SPACING) -> None:
    columns = [(layout, crawl) for layout in layouts for crawl in layout.crawls]
    width = 24
    label_width = 58

    def line(label: str, values: Iterable[str]) -> None:
        print(f"  {label:<{label_width}}" + "".join(f"{v:>{width}}" for v in values))

    def per_page(values: Callable[[Crawl], float], fmt: str = "{:.3f}") -> list[str]:
        return [fmt.format(values(c) / c.pages) for _, c in columns]

    print(
        f"AWS cost of a crawl: a {pages:,}-page demo site on 127.0.0.1, crawled {len(layouts[0].crawls)} times"
        " through the AWS path"
        " (template.yaml in moto, the real handlers driven as Lambda's SQS poller drives them)"
    )
    print(f"Prices: us-east-1 list prices as of {PRICES_AS_OF} (PRICES in this script)")
    print(f"The job's rate_limit_delay: {delay:g} s between requests to the host\n")
    line("output", [layout.name[: width - 1] for layout, _ in columns])
    line("crawl", [c.name for _, c in columns])
    line("pages (the denominator)", [c.per for _, c in columns])
    line("wall time in moto", [f"{c.seconds:.1f} s" for _, c in columns])

    print("\nRequests per page, by operation")
    rows = [requests_by_operation(c) for _, c in columns]
    names = sorted(
        {n for r in rows for n in r},
        key=lambda n: (-max(r.get(n, 0) / c.pages for r, (_, c) in zip(rows, columns, strict=True)), n),
    )
    for name in names:
        line(name, [f"{r.get(name, 0) / c.pages:.3f}" for r, (_, c) in zip(rows, columns, strict=True)])
    totals = [sum(r.values()) / c.pages for r, (_, c) in zip(rows, columns, strict=True)]
    line("all billed requests", [f"{t:.3f}" for t in totals])
    line("  of which the handlers' own calls", per_page(lambda c: sum(c.tally.calls.values())))

    print("\nBilled units per page")
    line("DynamoDB write request units, table", per_page(lambda c: c.tally.unit("WRU")))
    line("DynamoDB write request units, OpenItems index", per_page(lambda c: c.tally.unit("WRU index")))
    line("DynamoDB read request units", per_page(lambda c: c.tally.unit("RRU")))
    line("SQS requests billed (64 KB chunks)", per_page(lambda c: c.tally.unit("SQS")))
    line("S3 PUT-class requests", per_page(lambda c: c.tally.unit("S3 PUT")))
    line("S3 GET-class requests", per_page(lambda c: c.tally.unit("S3 GET")))
    line("Lambda invocations", per_page(lambda c: len(c.tally.invocations)))
    line(
        "  page deliveries (a page waiting for its host's turn: more)",
        per_page(lambda c: page_invocations(c, "pages")),
    )
    line("  page messages (page batches)", per_page(lambda c: page_invocations(c, "messages")))
    line(
        "Lambda GB-seconds (measured durations)",
        per_page(lambda c: sum(i.gb_seconds for i in c.tally.invocations), "{:.4f}"),
    )
    line("  handler seconds per page", per_page(lambda c: sum(i.seconds for i in c.tally.invocations), "{:.4f}"))
    line(
        "  of which inside AWS calls (moto, in process)",
        per_page(lambda c: sum(i.aws_seconds for i in c.tally.invocations), "{:.4f}"),
    )
    for function in sorted({i.function for _, c in columns for i in c.tally.invocations}):
        cells = []
        for _, c in columns:
            mine = [i for i in c.tally.invocations if i.function == function]
            cells.append(f"{len(mine)} x {1000 * sum(i.seconds for i in mine) / len(mine):.0f} ms" if mine else "-")
        memory = next(i.memory_mb for _, c in columns for i in c.tally.invocations if i.function == function)
        line(f"  {function} ({memory} MB): invocations x mean duration", cells)
    unpriced = [sum(n for (k, _), n in c.tally.units.items() if k == "unpriced") for _, c in columns]
    if any(unpriced):
        line("requests no price is kept for (left out of the $)", [f"{n:,}" for n in unpriced])

    print("\n$ per million pages, by service")
    spent = [costs(c) for _, c in columns]
    for service in spent[0]:
        line(service, [f"{s[service] / c.pages * 1e6:.2f}" for s, (_, c) in zip(spent, columns, strict=True)])
    dollars = [sum(s.values()) / c.pages * 1e6 for s, (_, c) in zip(spent, columns, strict=True)]
    line("total (requests and compute; storage and transfer apart)", [f"{d:.2f}" for d in dollars])

    print("\nVerdict (targets of issue 11)")
    line(
        f"billed requests per page <= {TARGET_REQUESTS_PER_PAGE}",
        [f"{verdict(t <= TARGET_REQUESTS_PER_PAGE)} ({t:.2f})" for t in totals],
    )
    line(
        f"$ per million pages <= {TARGET_DOLLARS_PER_MILLION:.0f}",
        [f"{verdict(d <= TARGET_DOLLARS_PER_MILLION)} ({d:.2f})" for d in dollars],
    )
    for layout, crawl in columns:
        harness = dict(crawl.tally.harness)
        if harness:
            print(f"  ({layout.name}, {crawl.name}: the poller harness's calls left out, billed as nothing: {harness})")

    if where:
        report_where(columns, top)


def report_where(columns: list[tuple[Layout, Crawl]], top: int) -> None:
    """Per operation, the call sites that issue it: requests (and DynamoDB units) per page."""
    for layout, crawl in columns:
        print(f"\nWhere the handlers' requests come from: {layout.name}, {crawl.name} (per page; {crawl.per})")
        print("  call site: port method (the innermost function, if another) <- the engine code that called it")
        tally = crawl.tally
        for name, count in tally.calls.most_common():
            units = sum(n for (k, op), n in tally.units.items() if op == name and k in _DYNAMODB_UNITS)
            unit_note = f", {units / crawl.pages:.2f} DynamoDB units" if units else ""
            print(f"  {name}: {count / crawl.pages:.3f} per page{unit_note}")
            sites = [(site, n) for (op, site), n in tally.sites.items() if op == name]
            sites.sort(key=lambda pair: -pair[1])
            for site, n in sites[:top]:
                site_units = tally.site_units.get((name, site), 0)
                note = f"  ({site_units / crawl.pages:.2f} units)" if site_units else ""
                print(f"      {n / crawl.pages:8.3f}  {site}{note}")
            if len(sites) > top:
                rest = sum(n for _, n in sites[top:])
                print(f"      {rest / crawl.pages:8.3f}  ({len(sites) - top} more call sites)")


def page_invocations(crawl: Any, field: str) -> int:
    """The page functions' records (``messages``) or the pages they carried (``pages``), over the crawl."""
    return sum(getattr(i, field) for i in crawl.tally.invocations if i.function.startswith("Page"))


def figures(layouts: list[Layout]) -> dict[str, dict[str, dict[str, float]]]:
    """The headline figures per layout and crawl, for a program to read (``--json``)."""
    return {
        layout.name: {
            crawl.name: {
                "pages": crawl.pages,
                "requests_per_page": sum(requests_by_operation(crawl).values()) / crawl.pages,
                "dollars_per_million_pages": sum(costs(crawl).values()) / crawl.pages * 1e6,
                "untimed_dollars_per_million_pages": sum(
                    dollars for line, dollars in costs(crawl).items() if line != "Lambda compute"
                )
                / crawl.pages
                * 1e6,
                "write_units_per_page": crawl.tally.unit("WRU") / crawl.pages,
                "index_write_units_per_page": crawl.tally.unit("WRU index") / crawl.pages,
                "s3_puts_per_page": crawl.tally.unit("S3 PUT") / crawl.pages,
                "sqs_requests_per_page": crawl.tally.unit("SQS") / crawl.pages,
                "page_messages_per_page": page_invocations(crawl, "messages") / crawl.pages,
                "page_deliveries_per_page": page_invocations(crawl, "pages") / crawl.pages,
            }
            for crawl in layout.crawls
        }
        for layout in layouts
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=1_000, help="pages of the demo site (default 1,000)")
    parser.add_argument("--where", action="store_true", help="also the top call sites of each operation")
    parser.add_argument("--top", type=int, default=6, help="call sites shown per operation with --where")
    parser.add_argument("--json", action="store_true", help="the headline figures as one JSON object, no table")
    parser.add_argument(
        "--delay",
        type=float,
        default=NO_SPACING,
        help="the job's rate_limit_delay, seconds between requests to the host (default: none, the cost of the"
        " work itself; a polite crawl's pages wait for their host's turns, and what a wait costs shows here)",
    )
    parser.add_argument(
        "--output",
        action="append",
        choices=list(LAYOUTS),
        help="only this output (repeatable; default: both, the baseline first)",
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="a third crawl, whose end collects the first's crawl batches no pointer names any more (the"
        " jobs before taken to have ended long enough ago)",
    )
    args = parser.parse_args()
    layouts = [
        LAYOUTS[name](args.pages, where=args.where, delay=args.delay, collect=args.collect)
        for name in args.output or LAYOUTS
    ]
    if args.json:
        print(json.dumps(figures(layouts)))
        return
    report(layouts, args.pages, where=args.where, top=args.top, delay=args.delay)


if __name__ == "__main__":
    main()
