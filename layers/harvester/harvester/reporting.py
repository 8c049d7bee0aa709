"""How jobs, sitemap trees and URL records are shown: the writers behind `harvest report` and `harvest sitemaps`."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TextIO

from harvester.records import SitemapIngestionResult, SitemapRecord, SitemapStatus, SitemapURL

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


def render_tree(site: str, sitemaps: list[SitemapRecord], *, show_absent: bool = False) -> str:
    """The sitemap tree under the site node, with counts, then the invalid sitemaps and their reasons."""
    children: dict[str | None, list[SitemapRecord]] = defaultdict(list)
    for sitemap in sitemaps:
        children[sitemap.parent].append(sitemap)
    absent = [s for s in sitemaps if s.status is SitemapStatus.ABSENT]
    lines = [f"{site}"]

    def label(s: SitemapRecord) -> str:
        kind = s.kind or s.status.value
        parts = [f"{s.url}  [{kind}]"]
        if s.status is SitemapStatus.COMPLETED:
            if s.pages_recorded:
                parts.append(f"{s.pages_recorded} pages")
            if s.children:
                parts.append(f"{s.children} sitemaps")
        else:
            parts.append(f"{s.status.value}: {s.error_message or ''}".rstrip(": "))
        if s.truncated:
            parts.append(f"truncated: {s.truncated}")
        dropped = sum(s.dropped.values())
        if dropped:
            parts.append(f"{dropped} entries dropped ({', '.join(f'{k} {v}' for k, v in sorted(s.dropped.items()))})")
        return "  ".join(parts)

    def walk(parent: SitemapRecord | None, prefix: str) -> None:
        shown: list[SitemapRecord | tuple[str, str]] = [
            c
            for c in children.get(parent.url if parent else None, [])
            if show_absent or c.status is not SitemapStatus.ABSENT
        ]
        shown += list(parent.invalid_children.items()) if parent else []
        for i, child in enumerate(shown):
            last = i == len(shown) - 1
            branch = "└── " if last else "├── "
            if isinstance(child, tuple):
                lines.append(f"{prefix}{branch}{child[0]}  [invalid: {child[1]}]")
                continue
            lines.append(f"{prefix}{branch}{label(child)}")
            walk(child, prefix + ("    " if last else "│   "))

    walk(None, "")
    if absent and not show_absent:
        lines.append(f"({len(absent)} well-known locations probed and not found)")
    invalid = [(s.url, s.error_message) for s in sitemaps if s.status in (SitemapStatus.INVALID, SitemapStatus.FAILED)]
    invalid += [(url, f"{why} (listed in {s.url})") for s in sitemaps for url, why in s.invalid_children.items()]
    if invalid:
        lines.append("")
        lines.append(f"invalid sitemaps ({len(invalid)}):")
        for url, reason in invalid:
            lines.append(f"  {url}: {reason}")
    pages = sum(s.pages_new for s in sitemaps)
    read = sum(1 for s in sitemaps if s.status is SitemapStatus.COMPLETED and s.kind != "robots")
    lines.append("")
    lines.append(f"{pages} pages in {read} sitemaps")
    return "\n".join(lines)


def dump_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2, default=str)
    out.write("\n")
