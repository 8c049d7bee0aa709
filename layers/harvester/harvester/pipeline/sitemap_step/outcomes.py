"""What a sitemap's reading came to: its outcome from what the parser reported, or the verdict on a redirect
to a sitemap the reading must not read (its ancestor, or one the job reads already)."""

from __future__ import annotations

from harvester.model.messages import SitemapOrigin
from harvester.model.records import SitemapRecord, SitemapStatus
from harvester.model.state import SitemapOutcome
from harvester.pipeline.context import StepContext
from harvester.sitemap import SitemapParser


def parsed_outcome(
    parser: SitemapParser,
    final_url: str,
    http_status: int,
    *,
    probe: bool,
    document_key: str | None,
    not_modified: bool,
    broken: str | None = None,
    truncated: str | None = None,
) -> SitemapOutcome:
    """The outcome of a reading that parsed the document (``probe``: a well-known path, absent if invalid;
    ``broken``: why the download broke off, if it did; ``truncated``: the fetcher's cut, if any)."""
    report = parser.report
    status, error = SitemapStatus.COMPLETED, report.error
    if error:
        if broken:  # it broke off before it showed a sitemap: a failed download, not an invalid sitemap
            error, status = broken, SitemapStatus.FAILED
        else:
            status = SitemapStatus.INVALID
        if probe:
            status = SitemapStatus.ABSENT
    return SitemapOutcome(
        status=status,
        kind=report.kind.value if report.kind else None,
        error_message=error,
        # The fetcher's reason first: a body cut at a size limit is not a dropped connection.
        truncated=broken or truncated or report.truncated,
        final_url=final_url,
        http_status=http_status,
        warnings=dict(report.warnings),
        document_key=document_key,
        not_modified=not_modified,
    )


def redirect_verdict(
    ctx: StepContext, job_id: str, record: SitemapRecord, chain: set[str], final_url: str
) -> SitemapOutcome | None:
    """Recursion through a redirect (``chain``: the sitemap and its ancestors), or a redirect to a sitemap
    this job already reads; None for a redirect the reading follows."""
    if final_url == record.url:
        return None
    if final_url in chain:
        return SitemapOutcome(
            status=SitemapStatus.INVALID,
            error_message=f"recursion: redirects to its ancestor {final_url}",
            final_url=final_url,
        )
    known = ctx.store.get_sitemap(job_id, final_url)
    if known is None:
        return None
    if record.origin is SitemapOrigin.KNOWN_PATH and known.origin is SitemapOrigin.DECLARED:
        reason = f"recursion: known path redirects to {final_url}, declared in robots.txt"
        return SitemapOutcome(status=SitemapStatus.INVALID, error_message=reason, final_url=final_url)
    return SitemapOutcome(
        status=SitemapStatus.DUPLICATE,
        error_message=f"redirects to {final_url}, already part of this job",
        final_url=final_url,
    )
