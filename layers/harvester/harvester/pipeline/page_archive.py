"""A fetch as the web-archive world keeps it: a WARC capture of the request and of the response as received
(its body's bytes before any Content-Encoding was undone), with a metadata record of what the job knows
of the page; a revisit record instead when the fetch gave nothing new (a 304, or a payload identical to
the stored one), which refers to the response record that holds the content. Sitemaps and robots.txt, as
read, are captured the same way (:func:`exchange`).

The page worker fetches; this module turns what came into captures for the batch's
:class:`~harvester.archive.batch.WarcBatch` and stores the batch before the pages are settled. The sitemap
step's capture of a sitemap or robots.txt is stored as a batch of its own (:func:`store_sitemap`).
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any

from harvester.archive.batch import WarcBatch, archived
from harvester.archive.warc import Archived, Capture, digest_text
from harvester.fetch import FetchResponse
from harvester.fetch.response import Exchange
from harvester.limits import SPOOL_IN_MEMORY
from harvester.model.crawl import WarcLocation
from harvester.model.messages import Output, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapURL
from harvester.pipeline.context import StepContext


class RawBody:
    """The body's pieces as received (the fetch's ``raw_sink``), spooled and digested as they go by: the
    response record's payload, and its WARC payload digest, without reading the body twice."""

    def __init__(self) -> None:
        self.file = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 (closed with the page)
        self._sha1 = hashlib.sha1()  # (WARC's payload digest)
        self.length = 0

    def write(self, data: bytes, /) -> int:
        self._sha1.update(data)
        self.length += len(data)
        return self.file.write(data)

    @property
    def digest(self) -> str:
        return digest_text(self._sha1)

    def close(self) -> None:
        self.file.close()


def identical(stored: WarcLocation | None, body: RawBody) -> WarcLocation | None:
    """``stored`` when the body just read is byte for byte its payload (what a revisit with the profile
    identical-payload-digest then refers to), else None."""
    return stored if stored is not None and stored.payload_digest == body.digest else None


def add_answer(
    archive: WarcBatch,
    key: str,
    response: FetchResponse,
    *,
    fetched_at: datetime,
    metadata: dict[str, Any],
    job_id: str,
    body: RawBody | None = None,
    revisits: WarcLocation | None = None,
) -> None:
    """Adds the capture of an answer to the batch under ``key`` (the URL asked for): a response read whole
    into ``body``, or a revisit of the stored record ``revisits``; after the redirects that led to it."""
    refers = archived(revisits.url or key, revisits) if revisits is not None else None
    main = exchange(response.exchange, fetched_at=fetched_at, metadata=metadata, body=body, revisits=refers)
    archive.add(key, main, hops=hops(response, fetched_at=fetched_at, job_id=job_id))


#: A page whose body is at least this big has its records written in a thread: the compression and the
#: digests (zlib and hashlib let go of the GIL) then run beside the event loop, on the machine's other core,
#: where on the loop they would hold up every other page of the run. A smaller page's records cost less
#: than the hand-off to a thread and back.
IN_THREAD_BYTES = 32 * 1024


async def add_with_hops(
    archive: WarcBatch,
    job: JobRecord,
    record: SitemapURL,
    response: FetchResponse,
    *,
    body: RawBody | None = None,
    revisits: WarcLocation | None = None,
) -> None:
    """Adds the capture of a page's answer (``add_answer``), with what the job knows of the page; in a
    thread for a large body (``IN_THREAD_BYTES``). The body's file stays open until this returns."""
    assert record.fetch_time is not None  # (set when the response came)
    write = partial(
        add_answer,
        archive,
        record.url,
        response,
        fetched_at=record.fetch_time,
        metadata=metadata(job, record),
        job_id=job.job_id,
        body=body,
        revisits=revisits,
    )
    if body is not None and body.length >= IN_THREAD_BYTES:
        await asyncio.to_thread(write)
    else:
        write()


def exchange(
    head: Exchange,
    *,
    fetched_at: datetime,
    metadata: dict[str, Any],
    body: RawBody | None = None,
    revisits: Archived | None = None,
    renamed: Mapping[str, str] | None = None,
) -> Capture:
    """The capture of any fetch (a page, a sitemap, robots.txt, a redirect on the way): the request as sent,
    the response as received (``renamed``: response headers kept under another name)."""
    renamed = renamed or {}
    return Capture(
        url=head.url,
        fetched_at=fetched_at,
        method="GET",
        request_headers=head.request_headers,
        status=head.status,
        reason=head.reason,
        response_headers=[(renamed.get(k.lower(), k), v) for k, v in head.response_headers],
        http_version=head.http_version,
        body=body.file if body is not None else b"",  # type: ignore[arg-type]
        body_length=body.length if body is not None else None,
        body_digest=body.digest if body is not None else None,
        metadata=metadata,
        revisits=revisits,
    )


#: A redirect's head is kept without its body (discarded unread): these would describe bytes not there.
_BODY_HEADERS = {"content-length": "X-Crawler-Content-Length", "content-encoding": "X-Crawler-Content-Encoding"}


def hops(response: FetchResponse, *, fetched_at: datetime, job_id: str) -> list[Capture]:
    """The redirects that led to the response, each a capture of its own (WARC keeps every exchange)."""
    metadata = {"job_id": job_id, "kind": "redirect", "final_url": response.url}
    return [exchange(hop, fetched_at=fetched_at, metadata=metadata, renamed=_BODY_HEADERS) for hop in response.hops]


def metadata(job: JobRecord, record: SitemapURL) -> dict[str, Any]:
    """What Harvester knows of the page beyond the exchange: its metadata record."""
    known: dict[str, Any] = {
        "job_id": job.job_id,
        "kind": "page",
        "url": record.url,
        "sitemap": record.sitemap,
        "last_modified": record.last_modified,
        "change_frequency": record.change_frequency,
        "priority": record.priority,
        "crawl_state": record.crawl_state,
        "change": record.change,
        "fetch_reason": record.fetch_reason,
        "signature": record.signature,
        "error_message": record.error_message,
        "extensions": record.extensions or None,
    }
    return {k: v for k, v in known.items() if v is not None}


async def store(ctx: StepContext, job: JobRecord, batch: WarcBatch) -> dict[str, WarcLocation]:
    """Stores the batch's captures (in a thread when the store is S3: its PUTs must not hold up the loop)."""
    if not len(batch):
        return {}
    warcs = ctx.warcs
    if warcs is None:
        raise RuntimeError(f"job {job.job_id} keeps its pages as WARC, and this engine was given no WARC store")
    if warcs.writes_inline:
        return batch.store(warcs, job.job_id)
    return await asyncio.to_thread(batch.store, warcs, job.job_id)


async def store_sitemap(
    ctx: StepContext,
    job: JobRecord,
    sitemap: SitemapRecord,
    response: FetchResponse,
    *,
    body: RawBody | None = None,
    revisits: WarcLocation | None = None,
) -> WarcLocation | None:
    """The capture of a sitemap's reading (a response with ``body``, or a revisit of the record ``revisits``:
    a 304 or the same bytes again), after the redirects that led to it, stored in the job's WARC files as a
    batch of its own (a sitemap is read once per job: one object, or one append, per sitemap). Where its
    main record was stored."""
    kind = "robots.txt" if sitemap.origin is SitemapOrigin.ROBOTS else "sitemap"
    metadata = {"job_id": job.job_id, "kind": kind, "url": sitemap.url, "depth": sitemap.depth}
    batch = WarcBatch()
    try:
        add_answer(
            batch,
            sitemap.url,
            response,
            fetched_at=ctx.clock(),
            metadata=metadata,
            job_id=job.job_id,
            body=body,
            revisits=revisits,
        )
        return (await store(ctx, job, batch)).get(sitemap.url)
    finally:
        batch.close()


async def store_sitemap_body(
    ctx: StepContext,
    job: JobRecord,
    sitemap: SitemapRecord,
    response: FetchResponse,
    body: RawBody,
    stored: WarcLocation | None,
) -> WarcLocation | None:
    """A sitemap's body read whole, archived (``store_sitemap``): a revisit of the record ``stored`` when it
    holds the same bytes, else a response. The response record's location (what the crawl database keeps of
    the reading); None for a revisit: the record it refers to holds the bytes."""
    at = await store_sitemap(ctx, job, sitemap, response, body=body, revisits=identical(stored, body))
    return at if at is not None and at.record_type == "response" else None


async def store_sitemap_revisit(
    ctx: StepContext, job: JobRecord, sitemap: SitemapRecord, response: FetchResponse, stored: WarcLocation | None
) -> None:
    """A 304's reading of a sitemap archived as a revisit of the record holding its stored reading's bytes
    (``stored``), where the job keeps WARC and such a record exists."""
    if job.request.output is Output.WARC and stored is not None:
        await store_sitemap(ctx, job, sitemap, response, revisits=stored)
