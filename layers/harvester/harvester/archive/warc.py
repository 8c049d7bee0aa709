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
import zlib
from base64 import b32encode
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from msgspec import Struct, field
from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import BufferedReader
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

#: The profiles of a revisit record (WARC 1.1, section 6.7).
NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"

Headers = Sequence[tuple[str, str]]

#: zlib's default, and what Heritrix and Common Crawl's crawler write (Java's default deflate level). warcio's
#: own gzip is fixed at 9, which takes longer for a barely smaller output (bench/warc_write.py compares
#: them): time spent on the one event loop of a local crawl, or in a page function's billed time.
COMPRESSION_LEVEL = 6


class Capture(Struct, frozen=True):
    """One fetch as it went over the wire: the request sent, and the status line and headers received
    (in order, as written) with the body as received (its Content-Encoding still on).

    ``body`` is bytes or a file read from its start (a spooled page: no page is held whole for its
    record); a file's ``body_length`` and ``body_digest`` (:func:`payload_digest`) are given by whoever
    spooled it, having seen every byte go by."""

    url: str
    fetched_at: datetime
    method: str
    request_headers: Headers
    status: int
    reason: str
    response_headers: Headers
    body: bytes | BinaryIO
    http_version: str = "HTTP/1.1"
    #: What Harvester knows of the page (job, sitemap, lastmod, crawl state, extensions): a metadata record.
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Set for a fetch that gave nothing new: the capture it revisits (its URL, time and payload digest).
    revisits: Archived | None = None
    body_length: int | None = None
    body_digest: str | None = None


class Archived(Struct, frozen=True):
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
    return digest_text(hashlib.sha1(body))  # (the format's own digest)


def digest_text(sha1: Any) -> str:
    """A SHA-1 hash object as WARC writes it: for a payload digested as it streamed by."""
    return "sha1:" + b32encode(sha1.digest()).decode()


#: Response headers that describe the bytes as they were framed on the wire. The body is kept with its
#: transfer coding undone (aiohttp undoes it), so the header is renamed, as Common Crawl does, or a reader
#: would try to undo it again.
_FRAMING = {"transfer-encoding": "X-Crawler-Transfer-Encoding"}


class WarcFile:
    """Records appended to one WARC file (any binary stream being written), each its own gzip member.

    ``warcinfo=False`` writes a chunk of captures for a file that has its warcinfo record already (or will
    have it put in front): the offsets it hands out are then the chunk's own, which its store shifts."""

    def __init__(self, stream: BinaryIO, filename: str, *, software: str = "Harvester", warcinfo: bool = True) -> None:
        self.stream = stream
        self.filename = filename
        self.writer = _writer(stream)
        if warcinfo:
            self.writer.write_record(_warcinfo(self.writer, filename, software))

    @property
    def size(self) -> int:
        return self.stream.tell()

    def add(self, capture: Capture) -> Archived:
        """Writes the capture's records, its request and metadata first and its response (or revisit) last,
        so the end of a file's last indexed record is the end of what was written whole; returns where the
        response (or revisit) record is."""
        date = _warc_date(capture.fetched_at)
        body, length, digest = _payload(capture)
        http_headers = StatusAndHeaders(
            f"{capture.status} {capture.reason}".rstrip(),
            [(_FRAMING.get(k.lower(), k), v) for k, v in capture.response_headers],
            protocol=capture.http_version,
        )
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
                payload=body,
                length=length,
                http_headers=http_headers,
                warc_headers_dict={"WARC-Date": date, "WARC-Payload-Digest": digest},
            )
            record_type = "response"
        main_id = main.rec_headers.get_header("WARC-Record-ID")
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
            warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": main_id},
        )
        self.writer.write_record(request)
        if capture.metadata:
            metadata = self.writer.create_warc_record(
                capture.url,
                "metadata",
                payload=io.BytesIO(json.dumps(capture.metadata, default=_json_value, sort_keys=True).encode()),
                warc_content_type="application/json",
                warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": main_id},
            )
            self.writer.write_record(metadata)
        offset = self.stream.tell()
        self.writer.write_record(main)
        length = self.stream.tell() - offset
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


def warcinfo(filename: str, *, software: str = "Harvester") -> bytes:
    """The warcinfo record that opens a file: what a store puts in front of a chunk of captures."""
    out = io.BytesIO()
    writer = _writer(out)
    writer.write_record(_warcinfo(writer, filename, software))
    return out.getvalue()


def _writer(stream: BinaryIO) -> WARCWriter:
    """A warcio writer whose every record becomes one gzip member of ``stream``, at COMPRESSION_LEVEL."""
    return WARCWriter(_GzipMembers(stream), gzip=False, warc_version="WARC/1.1")


class _GzipMembers:
    """What a ``WARCWriter(gzip=False)`` writes a record to, as a gzip member of the stream: warcio writes a
    record in a few ``write`` calls and ends it with ``flush``, which ends the member. A body given as a
    file streams through in chunks, as with warcio's own gzip (no page is held whole)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self._member: Any = None

    def write(self, data: bytes) -> None:
        if self._member is None:
            self._member = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, 31)  # (31: with a gzip header)
        self.stream.write(self._member.compress(data))

    def flush(self) -> None:
        if self._member is not None:
            self.stream.write(self._member.flush())
            self._member = None
        self.stream.flush()


def _warcinfo(writer: WARCWriter, filename: str, software: str) -> Any:
    return writer.create_warcinfo_record(filename, {"software": software, "format": "WARC File Format 1.1"})


def _payload(capture: Capture) -> tuple[BinaryIO, int, str]:
    """The body as a stream from its start, its length and its payload digest."""
    if isinstance(capture.body, bytes | bytearray):
        return io.BytesIO(capture.body), len(capture.body), payload_digest(bytes(capture.body))
    if capture.body_length is None or capture.body_digest is None:
        raise ValueError("a capture's body given as a file needs its body_length and body_digest")
    capture.body.seek(0)
    return capture.body, capture.body_length, capture.body_digest


class Stored(Struct, frozen=True):
    """A capture read back from its record: what the server sent (``body``: as received, its
    Content-Encoding still on; ``content``: with it undone, what the page's signature was taken of)."""

    url: str
    record_type: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    content: bytes
    #: A revisit's: the record it refers to (its target URI and WARC-Date).
    refers_to: tuple[str, str] | None = None
    #: The HTTP status line as received (``HTTP/1.1 200 OK``): what ``harvest get --headers`` prints first.
    status_line: str = ""


def read_record(stream: BinaryIO, offset: int, length: int) -> Stored:
    """The record at ``offset`` (one gzip member of ``length`` bytes): what a ranged GET of it gives."""
    stream.seek(offset)
    return parse_record(stream.read(length), where=f"offset {offset} (length {length})")


def parse_record(member: bytes, *, where: str = "") -> Stored:
    """The record a ranged read gave (one gzip member); ValueError when those bytes hold none."""
    try:
        return _parse_record(member, where)
    except ValueError:
        raise
    except Exception as exc:  # (warcio's and zlib's errors for bytes that are no WARC record)
        raise ValueError(f"no readable WARC record at {where}: {exc}".replace(" at :", ":")) from exc


def _parse_record(member: bytes, where: str) -> Stored:
    for record in ArchiveIterator(io.BytesIO(member)):
        http = record.http_headers
        status = int(http.get_statuscode()) if http is not None and http.get_statuscode() else 0
        headers = list(http.headers) if http is not None else []
        body = record.raw_stream.read()
        content = body
        coding = (http.get_header("content-encoding") or "").strip().lower() if http is not None else ""
        if coding in BufferedReader.get_supported_decompressors() and body:
            content = BufferedReader(io.BytesIO(body), decomp_type=coding).read()
        rec = record.rec_headers
        refers = None
        if record.rec_type == "revisit":
            refers = (rec.get_header("WARC-Refers-To-Target-URI") or "", rec.get_header("WARC-Refers-To-Date") or "")
        line = f"{http.protocol} {http.statusline}" if http is not None else ""
        target = rec.get_header("WARC-Target-URI")
        return Stored(target, record.rec_type, status, headers, body, content, refers, line)
    raise ValueError(f"no WARC record at {where}".rstrip())


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


def _json_value(value: object) -> str:
    """A metadata value JSON has no type for: a time in ISO 8601 (as every other output writes it)."""
    return value.isoformat() if isinstance(value, datetime) else str(value)
