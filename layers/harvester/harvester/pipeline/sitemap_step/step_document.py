"""The document a reading in steps reads (``StepDocument``): kept by the step that pauses first, replayed from
the document store by every later step.

Why: were each step to download the sitemap again, a site that rewrites it between two steps (a "latest
first" news sitemap, a sitemap regenerated every few minutes) would make the next step find other entries
before its checkpoint and start over, listing every entry up to the checkpoint again in one invocation; and
each step would cost the site a request. So the step that pauses first finishes downloading the body (its
parser paused; the bytes still go to the reading's spool), stores it as a complete reading stores it
(``remembered.store_copy``, keyed by its signature: the copy the last step remembers), archives it when the
job keeps WARC, and the sitemap's record notes it; the later steps replay that copy as a 304 replays the
stored one. A 304's reading notes the stored copy it replays.

Not kept (the next step asks the site again, as a reading resumed after a kill does): a body that breaks off
after the pause.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator

from harvester.fetch import FetchError, FetchResponse
from harvester.model.crawl import SitemapCrawl
from harvester.model.records import JobRecord, SitemapRecord, StepDocument
from harvester.pipeline import page_archive
from harvester.pipeline.context import StepContext
from harvester.pipeline.sitemap_step import remembered
from harvester.pipeline.sitemap_step.prefix import DocumentPrefix

log = logging.getLogger(__name__)


async def downloaded(
    ctx: StepContext,
    job: JobRecord,
    record: SitemapRecord,
    response: FetchResponse,
    rest: AsyncIterator[bytes],
    raw: tempfile.SpooledTemporaryFile[bytes],
    document: DocumentPrefix,
    *,
    prior: SitemapCrawl | None,
    as_received: page_archive.RawBody | None,
    final_url: str,
) -> StepDocument | None:
    """The body whose reading pauses (``rest``: what is left of its download; ``raw``: the bytes so far,
    ``document`` their digest), downloaded whole, stored and archived: its note; None when it is not kept."""
    raw.seek(0, 2)
    try:
        async for chunk in rest:
            raw.write(chunk)
            document.update(chunk)
    except FetchError as exc:
        log.info(
            "sitemap broke off after its step; the next step downloads it again",
            extra={"url": record.url, "error": exc.explain(record.url)},
        )
        return None
    if not response.complete and not response.truncated:
        return None
    signature = document.digest.hexdigest()
    key = remembered.store_copy(ctx, job, record.url, raw, response.content_type, signature, prior)
    warc = None
    if as_received is not None and response.complete:
        stored = prior.warc if prior is not None else None
        warc = await page_archive.store_sitemap_body(ctx, job, record, response, as_received, stored)
    return StepDocument(
        key=key,
        signature=signature,
        read_against=prior.signature if prior is not None else None,
        http_status=response.status_code,
        final_url=final_url,
        etag=response.headers.get("etag"),
        last_modified=response.headers.get("last-modified"),
        truncated=response.truncated,
        warc=warc,
    )


def stored(prior: SitemapCrawl, response: FetchResponse, final_url: str) -> StepDocument:
    """The stored copy a 304 names (``prior``'s), as a reading replays it."""
    return StepDocument(
        key=prior.document_key,
        signature=prior.signature,
        read_against=prior.signature,
        http_status=response.status_code,
        final_url=final_url,
        etag=response.headers.get("etag"),
        last_modified=response.headers.get("last-modified"),
        truncated=prior.truncated,
    )


async def replayed(
    ctx: StepContext,
    job: JobRecord,
    record: SitemapRecord,
    response: FetchResponse,
    copy: StepDocument,
    prior: SitemapCrawl,
) -> StepDocument:
    """The stored copy a 304's reading replays (``copy``, ``prior``'s) when the reading pauses, archived now
    (a revisit) where the job keeps WARC: its note."""
    await page_archive.store_sitemap_revisit(ctx, job, record, response, prior.warc)
    return copy
