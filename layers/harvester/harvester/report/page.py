"""The crawl report: one job's outcome as one self-contained HTML page (``render``).

Data in, one string out: the job's result, its sitemaps and the site's timeline (``history``). The page holds
its stylesheet and its charts (inline SVG); it has no script and its Content-Security-Policy forbids every
fetch, so that opening it asks nothing of any server, and any text a site put in a sitemap or an error
message (escaped everywhere) can neither run nor load anything. Each figure is in an element marked
``data-figure`` (the result's name for it) with ``data-value``, for tools and tests to read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from harvester.model.crawl import ChangeKind
from harvester.model.fetch_stats import NO_ANSWER, FetchStats, Histogram
from harvester.model.records import SitemapIngestionResult, SitemapRecord
from harvester.report import charts
from harvester.report.history import CrawlPoint
from harvester.report.sitemap_tree import tree
from harvester.report.style import CSS
from harvester.words import count

#: No fetch of any kind; the inline stylesheet alone.
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render(result: SitemapIngestionResult, sitemaps: list[SitemapRecord], timeline: Sequence[CrawlPoint]) -> str:
    """The report page of ``result``, its job's ``sitemaps`` and the site's crawls up to it (``timeline``)."""
    title = f"Crawl report: {result.site}"
    sections = [
        _summary(result),
        f'<div class="two">{_changes(result)}{_statuses(result.fetches)}</div>',
        _failures(result),
        f'<div class="two">{_latency(result.fetches)}{_sizes(result.fetches)}</div>',
        _trust(result),
        _sitemaps(result, sitemaps),
        _timeline(timeline),
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>"
        f'<header><h1>{escape(title)}</h1><p>job <span data-figure="job_id">{escape(result.job_id)}</span> · '
        f'<span class="badge {escape(result.status.value)}" data-figure="status">{escape(result.status.value)}</span>'
        f" · {result.start_time:%Y-%m-%d %H:%M:%S} → {result.end_time:%Y-%m-%d %H:%M:%S} UTC"
        f" ({_duration(result.total_duration)})</p></header>\n"
        f"<main>{''.join(sections)}</main>\n"
        f"<footer>Written by Harvester from the job's result (jobs/{escape(result.job_id)}/result.json);"
        " this page loads nothing from anywhere.</footer></body></html>\n"
    )


def _figure(name: str, value: int, text: str | None = None, *, tag: str = "td", css: str = "n") -> str:
    shown = f"{value:,}" if text is None else text
    return f'<{tag} class="{css}" data-figure="{escape(name)}" data-value="{value}">{escape(shown)}</{tag}>'


def _summary(result: SitemapIngestionResult) -> str:
    figures = [
        ("total_urls", "URLs listed", result.total_urls),
        ("successful_processing", "successful", result.successful_processing),
        ("failed_processing", "failed", result.failed_processing),
        ("excluded_processing", "excluded", result.excluded_processing),
        ("sitemaps_total", "sitemaps", result.sitemaps_total),
        ("sitemaps_ok", "sitemaps read", result.sitemaps_ok),
    ]
    if result.fetches is not None:
        figures.insert(1, ("fetches.fetched", "fetched", result.fetches.fetched))
    cards = "".join(
        f"<div><dt>{escape(label)}</dt>{_figure(name, v, tag='dd', css='')}</div>" for name, label, v in figures
    )
    return f'<section id="summary"><h2>Summary</h2><dl class="cards">{cards}</dl></section>'


def _table(head: Iterable[str], rows: Iterable[str], *, numbers: int = 1) -> str:
    names = list(head)
    cells = "".join(
        f'<th class="n">{escape(h)}</th>' if i >= len(names) - numbers else f"<th>{escape(h)}</th>"
        for i, h in enumerate(names)
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _changes(result: SitemapIngestionResult) -> str:
    counts = result.changes
    kinds = [(kind.value, getattr(counts, kind.value)) for kind in ChangeKind]
    chart = charts.bars([(k, v, k) for k, v in kinds if v], title="changes by kind")
    rows = (f'<tr data-change="{k}"><td>{escape(k)}</td>{_figure(f"changes.{k}", v)}</tr>' for k, v in kinds)
    return f'<section id="changes"><h2>Changes by kind</h2>{chart}{_table(("kind", "URLs"), rows)}</section>'


def _statuses(fetches: FetchStats | None) -> str:
    if fetches is None:
        return '<section id="statuses"><h2>HTTP statuses</h2><p class="note">Not counted for this job.</p></section>'
    ordered = sorted(fetches.http_statuses.items(), key=lambda kv: (kv[0] == NO_ANSWER, kv[0]))
    chart = charts.bars([(_status_label(c), n, _status_class(c)) for c, n in ordered], title="HTTP statuses")
    rows = (
        f'<tr data-status="{escape(c)}"><td>{escape(_status_label(c))}</td>{_figure(f"http_statuses.{c}", n)}</tr>'
        for c, n in ordered
    )
    note = "" if ordered else '<p class="note">The job fetched no page.</p>'
    return (
        f'<section id="statuses"><h2>HTTP statuses</h2>{chart}{note}{_table(("status", "URLs"), rows)}'
        '<p class="note">The last answer to each URL the job fetched.</p></section>'
    )


def _status_label(code: str) -> str:
    return "no answer" if code == NO_ANSWER else code


def _status_class(code: str) -> str:
    return "snone" if code == NO_ANSWER or not code[:1].isdigit() else f"s{code[0]}xx"


def _failures(result: SitemapIngestionResult) -> str:
    if result.fetches is not None:
        failures, samples = result.fetches.failures, result.fetches.failure_samples
    else:  # (a result written before the fetches were counted: what its error details name)
        failures, samples = {}, {}
        for error in result.error_details:
            if error.kind == "page":
                failures[error.error] = failures.get(error.error, 0) + 1
                samples.setdefault(error.error, []).append(error.url)
    ordered = sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))
    rows = (
        f'<tr data-reason="{escape(reason)}"><td>{escape(reason)}</td><td class="url">'
        + "<br>".join(escape(url) for url in samples.get(reason, [])[:3])
        + f"</td>{_figure(f'failures.{reason}', count)}</tr>"
        for reason, count in ordered
    )
    sitemap_errors = [e for e in result.error_details if e.kind == "sitemap"]
    body = _table(("reason", "sample URLs", "URLs"), rows) if ordered else '<p class="note">No URL failed.</p>'
    if sitemap_errors:
        body += f'<p class="note">{count(len(sitemap_errors), "sitemap")} failed: see the sitemap tree below.</p>'
    return f'<section id="failures"><h2>Failures by reason</h2>{body}</section>'


def _bucket_labels(hist: Histogram, unit: str) -> list[str]:
    bounds = hist.bounds
    labels = [f"≤ {_amount(b, unit)}" for b in bounds]
    return [*labels, f"> {_amount(bounds[-1], unit)}"] if bounds else ["all"]


def _amount(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value / 1000:g} s" if value >= 1000 else f"{value:g} ms"
    for size, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= size:
            return f"{value / size:.3g} {name}"
    return f"{value:g} B"


def _histogram(fetches: FetchStats | None, name: str, title: str, unit: str, what: str) -> str:
    head = f'<section id="{name}"><h2>{escape(title)}</h2>'
    if fetches is None:
        return head + '<p class="note">Not counted for this job.</p></section>'
    hist: Histogram = getattr(fetches, name)
    labels = _bucket_labels(hist, unit)
    chart = charts.bars([(label, n, "bucket") for label, n in zip(labels, hist.counts, strict=True)], title=title)
    count = hist.count
    mean = f"mean {_amount(hist.total / count, unit)}, largest {_amount(hist.largest, unit)}" if count else ""
    rows = (
        f"<tr><td>{escape(label)}</td>{_figure(f'{name}.{i}', n)}</tr>"
        for i, (label, n) in enumerate(zip(labels, hist.counts, strict=True))
    )
    return (
        f'{head}<p class="note"><span data-figure="{name}.count" data-value="{count}">{count:,}</span> {what}'
        f"{'; ' + mean if mean else ''}.</p>{chart}{_table(('range', 'URLs'), rows)}</section>"
    )


def _latency(fetches: FetchStats | None) -> str:
    return _histogram(fetches, "latency_ms", "Fetch latency", "ms", "answers (from the request to the headers)")


def _sizes(fetches: FetchStats | None) -> str:
    return _histogram(fetches, "size_bytes", "Page sizes", "bytes", "pages fetched whole")


def _trust(result: SitemapIngestionResult) -> str:
    rows = (
        f'<tr data-host="{escape(host)}"><td class="url">{escape(host)}</td><td>{escape(c.went)}</td>'
        f"<td>{c.score_before:.2f} → {c.score:.2f}</td>"
        f"{_figure(f'lastmod_trust.{host}.confirmed', c.confirmed)}"
        f"{_figure(f'lastmod_trust.{host}.refuted', c.refuted)}"
        "</tr>"
        for host, c in sorted(result.lastmod_trust.items())
    )
    body = (
        _table(("host", "trust", "score", "lastmods confirmed", "refuted"), rows, numbers=2)
        if result.lastmod_trust
        else '<p class="note">No evidence on any host\'s lastmod: no page was fetched for an advanced lastmod.</p>'
    )
    return f'<section id="trust"><h2>Lastmod trust per host</h2>{body}</section>'


def _sitemaps(result: SitemapIngestionResult, sitemaps: list[SitemapRecord]) -> str:
    dropped = ", ".join(f"{escape(k)} {v:,}" for k, v in sorted(result.entries_dropped.items()))
    note = f'<p class="note">Entries dropped: {dropped}.</p>' if dropped else ""
    return f'<section id="sitemaps"><h2>Sitemaps</h2>{note}{tree(sitemaps)}</section>'


def _timeline(points: Sequence[CrawlPoint]) -> str:
    rows = (
        f'<tr data-job="{escape(p.job_id)}" data-listed="{p.listed}" data-fetched="{_unknown(p.fetched, "")}"'
        f' data-changed="{p.changed}"><td>{p.start_time:%Y-%m-%d %H:%M:%S}</td><td class="url">{escape(p.job_id)}</td>'
        f'<td>{escape(p.status)}</td><td class="n">{p.listed:,}</td>'
        f'<td class="n">{_unknown(p.fetched, "?")}</td><td class="n">{p.changed:,}</td>'
        f'<td class="n">{p.new:,}</td><td class="n">{p.gone:,}</td><td class="n">{p.failed:,}</td></tr>'
        for p in points
    )
    head = ("started", "job", "status", "listed", "fetched", "changed", "new", "gone", "failed")
    return (
        f'<section id="timeline"><h2>The site\'s crawls</h2>{charts.timeline(points)}'
        f"{_table(head, rows, numbers=6)}</section>"
    )


def _unknown(value: int | None, shown: str) -> str:
    return shown if value is None else f"{value:,}" if shown else str(value)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"
