"""What each fetch came to, told in the log: a line per page request, retry and deferral, a line per sitemap.

The lines are Scrapy's kind (``harvest crawl -v``): each message reads alone, with its URL, the HTTP status,
the attempt (the record's count of requests sent, this one included), the seconds to the answer's headers,
the bytes and what the page came to; a retry or a deferral says why and when it comes back (local time,
``12:03:05``). The same facts travel in ``extra``, so that a structured logger (Powertools' JSON on AWS)
carries them as fields. What is routine is DEBUG (``-vv``): a well-known sitemap location probed and not
found, a page listed by a job that fetches nothing, the conditional headers a request sent.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from harvester.model.records import SitemapRecord, SitemapStatus, SitemapURL, UrlStatus
from harvester.model.state import PageOutcome, PageRetry
from harvester.words import count

log = logging.getLogger(__name__)


def clock(at: datetime | float) -> str:
    """``12:03:05``: a moment of today's run in local time (the log's reader's clock)."""
    moment = datetime.fromtimestamp(at, UTC) if isinstance(at, float | int) else at
    return moment.astimezone().strftime("%H:%M:%S")


def page(
    job_id: str, record: SitemapURL, settled: PageOutcome | PageRetry, *, latency: float | None, retry_max: int
) -> None:
    """One claimed page's delivery: ``record`` as claimed (its attempts counting this delivery's request),
    ``settled`` what it came to, ``latency`` the seconds from its request to the answer's headers (None:
    no answer)."""
    if not log.isEnabledFor(logging.DEBUG if _routine(settled) else logging.INFO):
        return
    if isinstance(settled, PageRetry):
        _retry(job_id, record, settled, retry_max)
        return
    done = settled.record
    fields: dict[str, Any] = {
        "job_id": job_id,
        "url": done.url,
        "outcome": done.status.value,
        "http_status": done.http_status,
        "attempt": done.attempts,
        "seconds": None if latency is None else round(latency, 3),
        "bytes": done.size,
        "change": done.change.value if done.change else None,
        "crawl_state": done.crawl_state.value if done.crawl_state else None,
        "error": done.error_message,
    }
    if done.status is UrlStatus.EXCLUDED:
        log.info("excluded %s: %s", done.url, done.error_message, extra=fields)
        return
    if done.status is UrlStatus.COMPLETED and done.http_status is None:
        log.debug("listed %s (pages are not fetched)", done.url, extra=fields)
        return
    said = [f"attempt {done.attempts}"]
    if latency is not None:
        said.append(seconds(latency))
    if done.status is UrlStatus.COMPLETED:
        if done.size is not None and done.http_status != 304:
            said.append(f"{done.size:,} bytes")
        status = done.http_status
        log.info("fetched %s %s (%s): %s", status, done.url, ", ".join(said), fields["change"], extra=fields)
        return
    status = f"{done.http_status} " if done.http_status is not None else ""
    state = f" (now {fields['crawl_state']})" if fields["crawl_state"] else ""
    log.info("failed %s%s (%s): %s%s", status, done.url, ", ".join(said), done.error_message, state, extra=fields)


def seconds(latency: float) -> str:
    """``12 ms``, ``1.25 s``."""
    return f"{latency * 1000:.0f} ms" if latency < 1 else f"{latency:.2f} s"


def _routine(settled: PageOutcome | PageRetry) -> bool:
    """A page a job listed without fetching (``--no-pages``): nothing to tell at INFO."""
    if isinstance(settled, PageRetry):
        return False
    return settled.record.status is UrlStatus.COMPLETED and settled.record.http_status is None


def _retry(job_id: str, record: SitemapURL, retry: PageRetry, retry_max: int) -> None:
    """A page sent back to pending: for the site's sake (its answer, no answer), for its host's turn, or for
    our own infrastructure's (``retries`` None)."""
    when = clock(retry.not_before)
    fields: dict[str, Any] = {
        "job_id": job_id,
        "url": retry.url,
        "reason": retry.error_message,
        "not_before": retry.not_before.isoformat(),
        "attempt": record.attempts if not retry.untried else max(0, record.attempts - 1),
        "retry_after": retry.retry_after,
    }
    if retry.retries is None:
        log.info("given back %s: %s, again at %s", retry.url, retry.error_message, when, extra=fields)
    elif retry.untried and retry.retries == record.retries:  # (a turn: no try counted, none to count)
        fields["outcome"] = "deferred"
        log.info("deferred %s: %s until %s", retry.url, retry.error_message, when, extra=fields)
    elif retry.untried:
        fields["outcome"] = "retry"
        log.info("retry %s: %s (not sent), again at %s", retry.url, retry.error_message, when, extra=fields)
    else:
        fields["outcome"] = "retry"
        why = f" (Retry-After {retry.retry_after:g} s)" if retry.retry_after is not None else ""
        log.info(
            "retry %s: %s (attempt %d of %d), again at %s%s",
            retry.url,
            retry.error_message,
            record.attempts,
            retry_max,
            when,
            why,
            extra=fields,
        )


def deferred(job_id: str, url: str, until: float, *, place: float | None = None) -> None:
    """A page sent back unclaimed before its request, to come back for its host's turn (or its place in the
    host's waiting line) at ``until`` (epoch seconds)."""
    if not log.isEnabledFor(logging.INFO):
        return
    where = "its place in its host's line" if place is not None else "its host's turn"
    fields = {
        "job_id": job_id,
        "url": url,
        "outcome": "deferred",
        "not_before": datetime.fromtimestamp(until, UTC).isoformat(),
    }
    log.info("deferred %s: waiting for %s until %s", url, where, clock(until), extra=fields)


def sitemap(job_id: str, record: SitemapRecord) -> None:
    """A sitemap read to its end (or given up on): its URL, kind, status and counts."""
    absent = record.status is SitemapStatus.ABSENT
    if not log.isEnabledFor(logging.DEBUG if absent else logging.INFO):
        return
    fields: dict[str, Any] = {
        "job_id": job_id,
        "url": record.url,
        "outcome": record.status.value,
        "kind": record.kind,
        "http_status": record.http_status,
        "attempt": record.attempts,
        "pages": record.pages_recorded,
        "pages_new": record.pages_new,
        "children": record.children,
        "dropped": sum(record.dropped.values()),
        "invalid_children": len(record.invalid_children),
        "warnings": sum(record.warnings.values()),
        "error": record.error_message,
    }
    said = [record.kind or "unknown kind"]
    if record.http_status is not None:
        said.append(str(record.http_status))
    said.append(f"attempt {record.attempts}")
    head = f"sitemap {record.status.value} {record.url} ({', '.join(said)})"
    if absent:
        log.debug("%s: %s", head, record.error_message or "not there", extra=fields)
        return
    counts = [count(record.pages_recorded, "page"), count(record.children, "sitemap")]
    if record.not_modified:
        counts.append("unchanged since the last reading")
    if record.dropped:
        counts.append(f"{count(fields['dropped'], 'entry')} dropped ({_tally(record.dropped)})")
    if record.invalid_children:
        counts.append(f"{count(len(record.invalid_children), 'child sitemap')} refused")
    if record.warnings:
        counts.append(f"{count(fields['warnings'], 'warning')} ({_tally(record.warnings)})")
    if record.truncated:
        counts.append(f"cut short: {record.truncated}")
    if record.error_message:
        counts.append(record.error_message)
    log.info("%s: %s", head, ", ".join(counts), extra=fields)


def sitemap_retry(job_id: str, url: str, reason: str, *, attempts: int | None, retry_max: int, until: float) -> None:
    """A sitemap whose reading failed for a reason that may pass: read again at ``until`` (epoch seconds)."""
    if not log.isEnabledFor(logging.INFO):
        return
    fields = {
        "job_id": job_id,
        "url": url,
        "outcome": "retry",
        "reason": reason,
        "attempt": attempts,
        "not_before": datetime.fromtimestamp(until, UTC).isoformat(),
    }
    tried = f" (attempt {attempts} of {retry_max})" if attempts is not None else ""
    log.info("retry sitemap %s: %s%s, again at %s", url, reason, tried, clock(until), extra=fields)


def _tally(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.items()))
