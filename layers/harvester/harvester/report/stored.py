"""The report page as a job's end stores it: ``jobs/<id>/report.html``, beside the result."""

from __future__ import annotations

from harvester.archive.results import report_key
from harvester.archive.stores import DocumentStore
from harvester.model.records import SitemapIngestionResult, SitemapRecord
from harvester.report import history, page


def write_report(
    documents: DocumentStore, origin: str, result: SitemapIngestionResult, sitemaps: list[SitemapRecord]
) -> None:
    """The job's report page beside its result, with its site's timeline, from what the job's end holds
    already (the result, the sitemaps it read) and the site's history document (one read, one write:
    ``history.remember``). The tree shows at most ``SITEMAPS_SHOWN`` sitemaps: the page's size and the time
    to make it are bounded whatever the job's size. Nothing else is read: not the job's URL records."""
    timeline = history.remember(documents, origin, result)
    body = page.render(result, sitemaps, timeline).encode()
    documents.put(report_key(result.job_id), body, content_type="text/html; charset=utf-8")
