"""How jobs, sitemap trees and URL records are shown: the writers behind `harvest report` and `harvest sitemaps`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TextIO
from urllib.parse import urlsplit

from harvester.archive.lines import json_bytes
from harvester.crawldb.changes import OLD_FEED_NAMES, FeedLine
from harvester.model.base import Model
from harvester.model.crawl import CrawlRecord, CrawlState, HostTrust
from harvester.model.records import SitemapIngestionResult, SitemapURL
from harvester.model.selection import SELECTION_REASONS
from harvester.ports import CrawlDatabase
from harvester.sitemap import PageEntry
from harvester.sitemap.entries import OVER_WARN_SIZE, URL_REPAIRED, values_set_aside
from harvester.urls import host_of
from harvester.words import count

#: The crawl record a job record carries is the engine's working copy; ``harvest report --url`` shows it.
_ENGINE_ONLY = {"known"}


def columns(model: type[Model]) -> tuple[str, ...]:
    """A model's CSV columns: every field its JSON Lines may have, in the model's order (so a new field is a
    new column without anyone listing it)."""
    return tuple(name for name in model.__struct_fields__ if name not in _ENGINE_ONLY)


#: ``harvest report JOB --format csv``: the seed's ``url · last_modified · change_frequency · priority ·
#: status · error_message`` first, then what the sitemap and the fetch added.
CSV_FIELDS = columns(SitemapURL)
#: ``harvest report --site SITE --format csv``: every field of a crawl record.
CRAWL_CSV_FIELDS = columns(CrawlRecord)
#: ``harvest changes --format csv``: every field a line of the change feed may have.
CHANGE_CSV_FIELDS = tuple(FeedLine.__annotations__)


def write_jsonl(records: Iterable[Model], out: TextIO) -> int:
    """One JSON object per record (a job's URL records, or a site's crawl records)."""
    count = 0
    for record in records:
        out.write(record.model_dump_json(exclude_none=True, exclude=_ENGINE_ONLY) + "\n")
        count += 1
    return count


def write_csv(records: Iterable[Model], out: TextIO, fields: Sequence[str] = CSV_FIELDS) -> int:
    """The records as CSV: a column per field, a cell as the JSON Lines have the value (see ``cell``)."""
    rows = (record.model_dump(mode="json", exclude_none=True, exclude=_ENGINE_ONLY) for record in records)
    return write_rows(rows, out, fields)


def write_dicts(rows: list[dict[str, Any]], out: TextIO, fmt: str, fields: Sequence[str]) -> None:
    """Rows of JSON values in the format a ``--format`` names: one JSON list, JSON Lines, or CSV (``fields``)."""
    if fmt == "json":
        dump_json(rows, out)
    elif fmt == "jsonl":
        out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    else:
        write_rows(rows, out, fields)


def cell(value: Any) -> str:
    """A JSON value as one CSV cell: text as it is, nothing as nothing, anything else (numbers, booleans,
    the extensions, dicts, lists) as its compact JSON, so that one cell holds it whole and it parses back."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json_bytes(value).decode()


def write_rows(rows: Iterable[dict[str, Any]], out: TextIO, fields: Sequence[str]) -> int:
    """Rows of JSON values as CSV: a header of ``fields``, then a line a row (a cell each: ``cell``)."""
    writer = csv.writer(out)
    writer.writerow(fields)
    count = 0
    for row in rows:
        writer.writerow([cell(row.get(name)) for name in fields])
        count += 1
    return count


def write_changes(feed: bytes, out: TextIO, *, fmt: str = "jsonl") -> int:
    """A job's change feed as stored (JSON Lines), or as CSV. A feed stored under the old names is shown
    under the data model's (its ``lastmod`` is ``last_modified``)."""
    lines = [line for line in feed.decode().splitlines() if line.strip()]
    if fmt == "jsonl":
        for line in lines:
            out.write((_current_line(line) if '"lastmod":' in line else line) + "\n")
        return len(lines)
    return write_rows((_current(json.loads(line)) for line in lines), out, CHANGE_CSV_FIELDS)


def _current(line: dict[str, Any]) -> dict[str, Any]:
    """A feed line under today's names, its fields in their order."""
    if not OLD_FEED_NAMES.keys() & line.keys():
        return line
    return {OLD_FEED_NAMES.get(name, name): value for name, value in line.items()}


def _current_line(line: str) -> str:
    return json.dumps(_current(json.loads(line)), separators=(",", ":"), ensure_ascii=False)


def site_view(site: str, records: Iterable[CrawlRecord], crawldb: CrawlDatabase, *, now: datetime) -> dict[str, Any]:
    """What the crawl database knows of a site: its URLs by state, what is due, lastmod trust, its sitemaps."""
    states: dict[str, int] = {}
    total = due = changed = 0
    next_due: datetime | None = None
    for record in records:
        total += 1
        states[record.state.value] = states.get(record.state.value, 0) + 1
        changed += record.changes
        if record.state is CrawlState.ORPHAN:
            continue
        if record.next_fetch_time <= now:
            due += 1
        elif next_due is None or record.next_fetch_time < next_due:
            next_due = record.next_fetch_time
    stored = crawldb.get_site(site)
    # The trust in effect: what the jobs measured, and the initial trust for the site's host until they do.
    trust = {host_of(site): HostTrust(), **(stored.hosts if stored else {})}
    return {
        "site": site,
        "urls": total,
        "by_state": dict(sorted(states.items())),
        "due_now": due,
        "next_due": next_due.isoformat() if next_due else None,
        "content_changes_seen": changed,
        "lastmod_trust": {h: t.model_dump(mode="json") for h, t in trust.items()},
        "sitemaps": [
            s.model_dump(mode="json", include={"url", "fetched_at", "etag", "http_last_modified", "kind", "entries"})
            for s in crawldb.site_sitemaps(site)
        ],
    }


def listed_lines(sitemap: str, listed: list[tuple[str, PageEntry]]) -> bytes:
    """Pages as `harvest sitemaps --format jsonl` prints them, a line each: what their sitemap said about
    them. Made straight from the entries."""
    return b"".join(
        [
            json_bytes(
                {
                    "url": url,
                    "last_modified": entry.last_modified.isoformat() if entry.last_modified else None,
                    "change_frequency": entry.change_frequency,
                    "priority": entry.priority,
                    "sitemap": sitemap,
                    **entry.extensions(),
                },
                newline=True,
            )
            for url, entry in listed
        ]
    )


_CHANGE_ORDER = ("new", "changed", "unchanged", "notmodified", "gone", "failed", "back", "removed", "not_due", "listed")


def summary_text(result: SitemapIngestionResult, *, resumed: bool = False, max_errors: int = 20) -> str:
    lines = [
        f"job {result.job_id}: {result.status.value}{' (resumed)' if resumed else ''}",
        f"  site          {result.site}",
        f"  total urls    {result.total_urls:,}",
        f"  successful    {result.successful_processing:,}",
        f"  failed        {result.failed_processing:,}{_known(result)}",
        _reasons("excluded", result.excluded_processing, result.exclusions),
        f"  sitemaps      {result.sitemaps_ok:,} read, {result.sitemaps_total:,} looked at",
        f"  duration      {result.total_duration:.1f} s",
        f"  records       {result.processed_urls}",
    ]
    changes = result.changes
    if changes.listed_total() or changes.removed:
        shown = [f"{getattr(changes, k):,} {k.replace('_', ' ')}" for k in _CHANGE_ORDER if getattr(changes, k)]
        lines.append(f"  changes       {', '.join(shown) or 'none'}")
        lines.append(f"  change feed   {result.changes_location}")
    hygiene = {k: n for k, n in result.entries_dropped.items() if k not in SELECTION_REASONS}
    if dropped := sum(hygiene.values()):
        lines.append(_reasons("dropped", dropped, hygiene, noun="entry", what=" (URL hygiene)"))
    chosen = {k: n for k, n in result.entries_dropped.items() if k in SELECTION_REASONS}
    if left_out := sum(chosen.values()):
        lines.append(_reasons("left out", left_out, chosen, noun="entry", what=" (the job's selection)"))
    outside = result.entries_dropped.get("out_of_scope", 0)
    if outside and outside >= result.total_urls:
        lines.append(
            f"  note          {count(outside, 'entry')} name pages on other hosts than {urlsplit(result.site).netloc},"
            " which the job's --scope leaves out (same-host by default): crawl the site under the host its"
            " sitemaps use, or give --scope same-domain or --scope any"
        )
    values = values_set_aside(result.entry_warnings)
    if warned := sum(values.values()):
        lines.append(_reasons("set aside", warned, values, noun="value", what=" (entries kept)"))
    if repaired := result.entry_warnings.get(URL_REPAIRED):
        lines.append(f"  repaired      {count(repaired, 'URL')} written without a scheme (given their sitemap's)")
    if large := result.entry_warnings.get(OVER_WARN_SIZE):
        lines.append(f"  large         {count(large, 'sitemap')} past the warning size (reading.warn_size)")
    for host, trust in result.lastmod_trust.items():
        lines.append(
            f"  lastmod       {host}: trust {trust.went.replace('_', ' ')}"
            f" ({trust.score_before:.2f} -> {trust.score:.2f}; this job: {trust.confirmed:,} confirmed,"
            f" {trust.refuted:,} refuted)"
        )
    if result.error_details:
        lines.append(f"  errors ({len(result.error_details) + result.errors_omitted}):")
        for detail in result.error_details[:max_errors]:
            lines.append(f"    [{detail.kind}] {detail.url}: {detail.error}")
        more = len(result.error_details) + result.errors_omitted - max_errors
        if more > 0:
            lines.append(f"    ... and {more} more (see the records)")
    return "\n".join(lines)


def _known(result: SitemapIngestionResult) -> str:
    known = result.known_failures
    if not known:
        return ""
    if known == result.failed_processing:
        return " (known gone or failing from earlier crawls; not due, not fetched again)"
    return f" ({known:,} of them known gone or failing from earlier crawls; not due, not fetched again)"


def _reasons(label: str, total: int, reasons: dict[str, int], *, noun: str | None = None, what: str = "") -> str:
    """``label  total`` (with its ``noun`` in the number it takes) and its reasons, most frequent first."""
    shown = ", ".join(f"{reason} {n:,}" for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"  {label:<13} {count(total, noun) if noun else f'{total:,}'}{what}" + (f": {shown}" if shown else "")


def dump_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2, default=str)
    out.write("\n")
