"""What a sitemap's reading leaves for the next job's: its document, stored, and the crawl database's record
of the reading.

The next job asks with the validators of the last complete reading (``validators``): a 304 is answered
from the stored document, replayed. A changed document is stored under a key holding its signature
(``store_copy``) and its reading remembered whole (``remember``); an unchanged one refreshes what is
remembered when its validators moved, it came back after a miss, or its bytes were archived now
(``refresh``); ``settle`` chooses.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import Any

from harvester.crawldb.documents import sitemap_key
from harvester.fetch import conditional_headers
from harvester.model.crawl import SitemapCrawl, WarcLocation
from harvester.model.records import JobRecord
from harvester.model.state import SitemapOutcome
from harvester.pipeline.context import StepContext


def validators(prior: SitemapCrawl | None, *, warc: bool) -> dict[str, str]:
    """The conditional headers of a sitemap read before (its stored copy answers a 304). For a job that
    keeps WARC, only of a reading a WARC record holds, which a 304 is archived as a revisit of: one no WARC
    record holds (read by a job that kept files) is asked for whole once. (A reading cut at the size limit
    is never archived: it stays conditional.)"""
    if prior is None or (warc and prior.warc is None and not prior.truncated):
        return {}
    return conditional_headers(prior.etag, prior.http_last_modified)


def store_copy(
    ctx: StepContext,
    job: JobRecord,
    url: str,
    raw: tempfile.SpooledTemporaryFile[bytes],
    content_type: str | None,
    signature: str,
    prior: SitemapCrawl | None,
) -> str:
    """Stores the document as it arrived (``raw``), under a key holding its signature, unless the stored
    reading (``prior``) holds these bytes already; its key."""
    if prior is not None and signature == prior.signature and ctx.documents.exists(prior.document_key):
        return prior.document_key  # (stored already: its key is its signature)
    raw.seek(0)
    key = sitemap_key(job.request.origin, url, signature)
    ctx.documents.put(key, raw, content_type=content_type, metadata={"url": url, "job-id": job.job_id})
    return key


def refresh(
    ctx: StepContext, site: str, prior: SitemapCrawl, headers: Mapping[str, str], *, warc: WarcLocation | None = None
) -> None:
    """An unchanged sitemap under new validators (a redeploy, another server) or back after a miss: the
    next job asks with these validators, and the orphan rule counts it present. ``warc``: its bytes
    archived as a response now, where the stored reading has none (it was kept as loose files)."""
    etag = headers.get("etag") or prior.etag
    last_modified = headers.get("last-modified") or prior.http_last_modified
    update: dict[str, Any] = {}
    if (etag, last_modified) != (prior.etag, prior.http_last_modified) or prior.absent_since is not None:
        update = {"etag": etag, "http_last_modified": last_modified, "absent_since": None}
    if warc is not None:
        update["warc"] = warc
    if update:
        update["fetched_at"] = ctx.clock()
        ctx.crawldb.put_sitemap(site, prior.model_copy(update=update))


def remember(
    ctx: StepContext,
    site: str,
    outcome: SitemapOutcome,
    headers: Mapping[str, str],
    *,
    url: str,
    signature: str,
    entries: int,
    warc: WarcLocation | None,
) -> None:
    """Keeps what the next job needs to read this sitemap conditionally and replay it if unchanged
    (``entries``: the entries the reading produced, which a replay must produce again)."""
    assert outcome.document_key is not None and outcome.http_status is not None
    ctx.crawldb.put_sitemap(
        site,
        SitemapCrawl(
            url=url,
            fetched_at=ctx.clock(),
            http_status=outcome.http_status,
            final_url=outcome.final_url,
            etag=headers.get("etag"),
            http_last_modified=headers.get("last-modified"),
            signature=signature,
            document_key=outcome.document_key,
            kind=outcome.kind,
            truncated=outcome.truncated,
            warnings=outcome.warnings,
            entries=entries,
            warc=warc,
        ),
    )


def settle(
    ctx: StepContext,
    site: str,
    outcome: SitemapOutcome,
    prior: SitemapCrawl | None,
    headers: Mapping[str, str],
    *,
    url: str,
    signature: str,
    entries: int,
    warc: WarcLocation | None,
) -> None:
    """What the next job reads of a complete reading: the stored reading refreshed when the body is the one
    it read (``refresh``), else this one remembered (``remember``)."""
    if prior is not None and signature == prior.signature:
        refresh(ctx, site, prior, headers, warc=warc)
    else:
        remember(ctx, site, outcome, headers, url=url, signature=signature, entries=entries, warc=warc)
