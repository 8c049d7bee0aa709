"""How jobs, sitemap trees and URL records are shown: the writers behind `harvest report` and `harvest sitemaps`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from typing import Any, TextIO

from harvester.records import SitemapIngestionResult, SitemapURL

CSV_FIELDS = (
    "url",
    "status",
    "error_message",
    "http_status",
    "content_type",
    "size",
    "last_modified",
    "change_frequency",
    "priority",
    "sitemap",
    "crawl_state",
    "document_key",
)


def write_jsonl(records: Iterable[SitemapURL], out: TextIO) -> int:
    count = 0
    for record in records:
        out.write(record.model_dump_json(exclude_none=True) + "\n")
        count += 1
    return count


def write_csv(records: Iterable[SitemapURL], out: TextIO) -> int:
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    count = 0
    for record in records:
        writer.writerow(record.model_dump(mode="json"))
        count += 1
    return count


def page_line(record: SitemapURL) -> dict[str, Any]:
    """One page as `harvest sitemaps --format jsonl` prints it: what its sitemap said about it."""
    return {
        "url": record.url,
        "lastmod": record.last_modified.isoformat() if record.last_modified else None,
        "changefreq": record.change_frequency,
        "priority": record.priority,
        "sitemap": record.sitemap,
        **record.extensions,
    }


def summary_text(result: SitemapIngestionResult, *, resumed: bool = False, max_errors: int = 20) -> str:
    lines = [
        f"job {result.job_id}: {result.status.value}{' (resumed)' if resumed else ''}",
        f"  site          {result.site}",
        f"  total urls    {result.total_urls}",
        f"  successful    {result.successful_processing}",
        f"  failed        {result.failed_processing}",
        f"  sitemaps      {result.sitemaps_ok} read, {result.sitemaps_total} looked at",
        f"  duration      {result.total_duration:.1f} s",
        f"  records       {result.processed_urls}",
    ]
    if result.error_details:
        lines.append(f"  errors ({len(result.error_details) + result.errors_omitted}):")
        for detail in result.error_details[:max_errors]:
            lines.append(f"    [{detail.kind}] {detail.url}: {detail.error}")
        more = len(result.error_details) + result.errors_omitted - max_errors
        if more > 0:
            lines.append(f"    ... and {more} more (see the records)")
    return "\n".join(lines)


def dump_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2, default=str)
    out.write("\n")
