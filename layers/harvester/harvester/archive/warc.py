"""Fetches as the web-archive world keeps them: WARC 1.1 records (warcio), each gzipped on its own, so any
one can be read back by its file, offset and length (a ranged GET on S3).

A fetch is a ``request`` record, a ``response`` record (the status line, headers and body as received: the
body with its Content-Encoding still on), and a ``metadata`` record with what Harvester knows of the page
(its job, sitemap, lastmod, crawl state, extensions). A fetch that gave nothing new is a ``revisit``
instead of a response: ``server-not-modified`` for a 304, ``identical-payload-digest`` for a 200 whose
payload is one already archived. Where a capture lands is its :class:`Archived` location, which the URL's
record keeps; :func:`cdxj_line` is its line in a CDXJ index.

This module is the archive's format only; where files go (a rolling local file, one object per page batch
on S3) is the writer's caller's business.
"""

from __future__ import annotations

import hashlib
import io
import json
from base64 import b32encode
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

#: The profiles of a revisit record (WARC 1.1, section 6.7).
NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"

Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Capture:
    """One fetch as it went over the wire: the request sent, and the status line and headers received
    (in order, as written) with the body as received (its Content-Encoding still on)."""

    url: str
    fetched_at: datetime
    method: str
    request_headers: Headers
    status: int
    reason: str
    response_headers: Headers
    body: bytes
    http_version: str = "HTTP/1.1"
    #: What Harvester knows of the page (job, sitemap, lastmod, crawl state, extensions): a metadata record.
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Set for a fetch that gave nothing new: the capture it revisits (its URL, time and payload digest).
    revisits: Archived | None = None


@dataclass(frozen=True)
class Archived:
    """Where a capture's main record (response or revisit) is: file, offset and length of its gzip member."""

    url: str
    fetched_at: datetime
    filename: str
    offset: int
    length: int
    payload_digest: str
    status: int
    mime: str | None
    record_type: str = "response"


def payload_digest(body: bytes) -> str:
    """WARC's payload digest: SHA-1 in base 32, as warcio and Heritrix write it."""
    return "sha1:" + b32encode(hashlib.sha1(body).digest()).decode()  # (the format's own digest)


class WarcFile:
    """Records appended to one WARC file (any binary stream being written), each its own gzip member."""

    def __init__(self, stream: BinaryIO, filename: str, *, software: str = "Harvester") -> None:
        self.stream = stream
        self.filename = filename
        self.writer = WARCWriter(stream, gzip=True, warc_version="WARC/1.1")
        info = self.writer.create_warcinfo_record(filename, {"software": software, "format": "WARC File Format 1.1"})
        self.writer.write_record(info)

    @property
    def size(self) -> int:
        return self.stream.tell()

    def add(self, capture: Capture) -> Archived:
        """Writes the capture's records; returns where its response (or revisit) record is."""
        date = _warc_date(capture.fetched_at)
        request = self.writer.create_warc_record(
            capture.url,
            "request",
            payload=io.BytesIO(b""),
            length=0,
            http_headers=StatusAndHeaders(
                f"{capture.method} {_request_target(capture.url)} {capture.http_version}",
                list(capture.request_headers),
                is_http_request=True,
            ),
            warc_headers_dict={"WARC-Date": date},
        )
        http_headers = StatusAndHeaders(
            f"{capture.status} {capture.reason}".rstrip(), list(capture.response_headers), protocol=capture.http_version
        )
        digest = payload_digest(capture.body)
        if capture.revisits is not None:
            before = capture.revisits
            if capture.status == 304:  # (no payload came: the one revisited is the capture's)
                digest = before.payload_digest
            main = self.writer.create_revisit_record(
                capture.url,
                digest=digest,
                refers_to_uri=before.url,
                refers_to_date=_warc_date(before.fetched_at),
                http_headers=http_headers,
                warc_headers_dict={"WARC-Date": date},
            )
            main.rec_headers.replace_header("WARC-Profile", NOT_MODIFIED if capture.status == 304 else IDENTICAL)
            record_type = "revisit"
        else:
            main = self.writer.create_warc_record(
                capture.url,
                "response",
                payload=io.BytesIO(capture.body),
                length=len(capture.body),
                http_headers=http_headers,
                warc_headers_dict={"WARC-Date": date},
            )
            record_type = "response"
        offset = self.stream.tell()
        self.writer.write_record(main)
        length = self.stream.tell() - offset
        main_id = main.rec_headers.get_header("WARC-Record-ID")
        request.rec_headers.replace_header("WARC-Concurrent-To", main_id)
        self.writer.write_record(request)
        if capture.metadata:
            metadata = self.writer.create_warc_record(
                capture.url,
                "metadata",
                payload=io.BytesIO(json.dumps(capture.metadata, default=str, sort_keys=True).encode()),
                warc_content_type="application/json",
                warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": main_id},
            )
            self.writer.write_record(metadata)
        mime = dict((k.lower(), v) for k, v in capture.response_headers).get("content-type")
        return Archived(
            url=capture.url,
            fetched_at=capture.fetched_at,
            filename=self.filename,
            offset=offset,
            length=length,
            payload_digest=digest,
            status=capture.status,
            mime=mime.split(";")[0].strip().lower() if mime else None,
            record_type=record_type,
        )


@dataclass(frozen=True)
class Stored:
    """A capture read back from its record: what the server sent."""

    url: str
    record_type: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def read_record(stream: BinaryIO, offset: int, length: int) -> Stored:
    """The record at ``offset`` (one gzip member of ``length`` bytes): what a ranged GET of it gives."""
    stream.seek(offset)
    member = stream.read(length)
    for record in ArchiveIterator(io.BytesIO(member)):
        http = record.http_headers
        status = int(http.get_statuscode()) if http is not None else 0
        headers = list(http.headers) if http is not None else []
        body = record.raw_stream.read()
        return Stored(record.rec_headers.get_header("WARC-Target-URI"), record.rec_type, status, headers, body)
    raise ValueError(f"no WARC record at offset {offset} (length {length})")


def records(stream: BinaryIO) -> Iterator[tuple[str, str, int]]:
    """Every record of a file: its type, target URI and offset (for tests and `harvest get`)."""
    iterator = ArchiveIterator(stream)
    for record in iterator:
        yield record.rec_type, record.rec_headers.get_header("WARC-Target-URI") or "", iterator.get_record_offset()


def surt(url: str) -> str:
    """The Sort-friendly URI Reordering Transform of a URL, as CDX indexes key it: the host reversed, a
    leading ``www`` dropped, lower case, the query's parameters sorted (``com,example)/path?a=1&b=2``)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().strip(".")
    labels = host.split(".")
    if labels[0] == "www" and len(labels) > 2:
        labels = labels[1:]
    key = ",".join(reversed(labels))
    if parts.port and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        key += f":{parts.port}"
    path = (parts.path or "/").lower()
    query = "&".join(sorted(q for q in parts.query.lower().split("&") if q))
    return f"{key}){path}" + (f"?{query}" if query else "")


def cdxj_line(archived: Archived) -> str:
    """The capture's line in a CDXJ index: SURT key, 14-digit timestamp, then its JSON block."""
    block: dict[str, Any] = {
        "url": archived.url,
        "mime": archived.mime or "unk",
        "status": str(archived.status),
        "digest": archived.payload_digest.removeprefix("sha1:"),
        "length": str(archived.length),
        "offset": str(archived.offset),
        "filename": archived.filename,
    }
    if archived.record_type == "revisit":
        block["mime"] = "warc/revisit"
    stamp = archived.fetched_at.astimezone(UTC).strftime("%Y%m%d%H%M%S")
    return f"{surt(archived.url)} {stamp} {json.dumps(block, sort_keys=False)}"


def _warc_date(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _request_target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
