"""The crawl report's sitemap tree: each sitemap under the one that listed it, with its counts and errors;
the well-known locations probed and not found after it, folded.

A site may have thousands of sitemaps: the tree shows the first ``SITEMAPS_SHOWN`` in tree order and says
how many it leaves out (``harvest sitemaps`` lists them all)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from html import escape

from harvester.model.records import SitemapRecord, SitemapStatus
from harvester.sitemap.entries import notices, values_set_aside
from harvester.words import count

SITEMAPS_SHOWN = 500


def tree(sitemaps: list[SitemapRecord]) -> str:
    """The sitemaps as nested lists (a record whose parent is not among them is a root)."""
    known = {s.url for s in sitemaps}
    children: dict[str | None, list[SitemapRecord]] = defaultdict(list)
    absent: list[SitemapRecord] = []
    for record in sitemaps:
        parent = record.parent if record.parent in known else None
        if parent is None and record.status is SitemapStatus.ABSENT:
            absent.append(record)
        else:
            children[parent].append(record)
    shown = 0
    out: list[str] = []

    def walk(parent: str | None) -> Iterator[str]:
        nonlocal shown
        for record in children.get(parent, []):
            if shown >= SITEMAPS_SHOWN:
                return
            shown += 1
            yield _item_open(record)
            if record.url in children or record.invalid_children:
                yield "<ul>"
                yield from walk(record.url)
                yield from _invalid(record)
                yield "</ul>"
            yield "</li>"

    out.extend(walk(None))
    probes = []
    for record in absent[: max(0, SITEMAPS_SHOWN - shown)]:
        shown += 1
        url = escape(record.url)
        probes.append(f'<li data-sitemap="{url}" data-status="absent"><span class="url">{url}</span></li>')
    if probes:
        folded = f"{len(probes):,} well-known locations probed and not found"
        out.append(f'<li><details><summary class="counts">{folded}</summary><ul>{"".join(probes)}</ul></details></li>')
    note = ""
    if shown < len(sitemaps):
        note = (
            f'<p class="note" data-figure="sitemaps.not_shown" data-value="{len(sitemaps) - shown}">'
            f"{len(sitemaps) - shown:,} more sitemaps not shown (harvest sitemaps lists them all)</p>"
        )
    return f'<ul class="tree" data-figure="sitemaps.shown" data-value="{shown}">{"".join(out)}</ul>{note}'


def _item_open(record: SitemapRecord) -> str:
    status = record.status.value
    counts = [count(record.pages_recorded, "URL")]
    if record.pages_new:
        counts.append(f"{record.pages_new:,} listed here first")
    if record.children:
        counts.append(count(record.children, "sitemap"))
    if dropped := sum(record.dropped.values()):
        counts.append(f"{count(dropped, 'entry')} dropped")
    if warned := sum(values_set_aside(record.warnings).values()):
        counts.append(f"{warned:,} values set aside")
    counts.extend(notices(record.warnings))
    if record.not_modified:
        counts.append("unchanged since the last crawl")
    if record.http_status is not None and not record.error_message:
        counts.append(f"HTTP {record.http_status}")
    if record.kind:
        counts.append(record.kind)
    error = ""
    if record.error_message:
        error = f' <span class="error">{escape(record.error_message)}</span>'
    if record.truncated:
        error += f' <span class="error">cut: {escape(record.truncated)}</span>'
    return (
        f'<li data-sitemap="{escape(record.url)}" data-status="{escape(status)}"'
        f' data-urls="{record.pages_recorded}">'
        f'<span class="badge {escape(status)}">{escape(status)}</span> <span class="url">{escape(record.url)}</span>'
        f' <span class="counts">{escape(" · ".join(counts))}</span>{error}'
    )


def _invalid(record: SitemapRecord) -> Iterator[str]:
    """The children refused as sitemaps (recursion, too deep), with the reason."""
    for url, why in record.invalid_children.items():
        yield (
            f'<li data-sitemap="{escape(url)}" data-status="invalid"><span class="badge invalid">invalid</span>'
            f' <span class="url">{escape(url)}</span> <span class="error">{escape(why)}</span></li>'
        )
