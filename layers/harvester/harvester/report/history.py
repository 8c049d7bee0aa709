"""A site's crawls, one point each, for the crawl report's timeline: what each job listed, fetched and changed.

The job's end (both backends) keeps them in one small document of the site's, ``sites/<site>/crawls.json``:
it reads it, puts the job's point in (once: a step written again replaces it) and writes it back, the latest
``POINTS_KEPT`` crawls. That is one read and one write a job, whatever the site's history, where listing the
site's jobs would need a listing the AWS state store does not keep (jobs are found by id). Two jobs of one
site ending at the same moment may each write the document without the other's point: the timeline then
misses a crawl, and the crawls' own results are whole. ``harvest report JOB --html`` on a local state
directory builds the timeline from the jobs' results instead (``points_of``), those ended before the
document was kept included.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from harvester.archive.stores import DocumentStore
from harvester.crawldb.documents import site_slug
from harvester.model.base import Model, NonNegative, ValidationError
from harvester.model.records import SitemapIngestionResult

log = logging.getLogger(__name__)

#: The crawls a site's timeline keeps (the latest).
POINTS_KEPT = 60


class CrawlPoint(Model, kw_only=True):
    """One crawl of a site on the timeline."""

    job_id: str
    start_time: datetime
    status: str
    listed: NonNegative
    #: None for a job whose result predates the count of its fetches.
    fetched: NonNegative | None = None
    changed: NonNegative = 0
    new: NonNegative = 0
    gone: NonNegative = 0
    failed: NonNegative = 0

    @classmethod
    def of(cls, result: SitemapIngestionResult) -> CrawlPoint:
        changes = result.changes
        return cls(
            job_id=result.job_id,
            start_time=result.start_time,
            status=result.status.value,
            listed=result.total_urls,
            fetched=result.fetches.fetched if result.fetches is not None else None,
            changed=changes.changed,
            new=changes.new + changes.back,
            gone=changes.gone,
            failed=result.failed_processing,
        )


class CrawlHistory(Model, kw_only=True):
    crawls: list[CrawlPoint] = []


def history_key(origin: str) -> str:
    return f"sites/{site_slug(origin)}/crawls.json"


def points_of(results: Iterable[SitemapIngestionResult], upto: SitemapIngestionResult) -> list[CrawlPoint]:
    """The timeline up to ``upto`` (included) from the site's results: by start time, the latest kept."""
    points = {r.job_id: CrawlPoint.of(r) for r in results if r.start_time <= upto.start_time}
    points[upto.job_id] = CrawlPoint.of(upto)
    return _latest(points.values())


def remember(documents: DocumentStore, origin: str, result: SitemapIngestionResult) -> list[CrawlPoint]:
    """Puts the job's point in its site's history document and returns the timeline up to it (a document
    that cannot be read is started again: the timeline is the report's, not a record anything else needs)."""
    key = history_key(origin)
    try:
        history = CrawlHistory.model_validate_json(documents.get(key))
    except FileNotFoundError:
        history = CrawlHistory()
    except ValidationError as exc:
        log.warning("a site's crawl history could not be read; it starts again", extra={"key": key, "error": str(exc)})
        history = CrawlHistory()
    points = {p.job_id: p for p in history.crawls}
    points[result.job_id] = CrawlPoint.of(result)
    kept = _latest(points.values())
    documents.put(key, CrawlHistory(crawls=kept).model_dump_json().encode(), content_type="application/json")
    return [p for p in kept if p.start_time <= result.start_time]


def _latest(points: Iterable[CrawlPoint]) -> list[CrawlPoint]:
    return sorted(points, key=lambda p: (p.start_time, p.job_id))[-POINTS_KEPT:]
