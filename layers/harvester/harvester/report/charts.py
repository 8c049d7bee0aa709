"""The crawl report's charts: inline SVG, drawn from numbers alone (no script, nothing fetched). Every text
drawn is escaped; the numbers a chart shows are in the page's tables too (``page``), where the tests read them."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from harvester.report.history import CrawlPoint

#: A bar: its label, its value, and its CSS class (the page's stylesheet colours them).
Bar = tuple[str, int, str]

_LABEL, _WIDTH, _ROW = 120, 460, 22


def bars(rows: Sequence[Bar], *, title: str) -> str:
    """Horizontal bars, one a row, scaled to the largest value."""
    if not rows:
        return ""
    top = max(value for _, value, _ in rows) or 1
    room = _WIDTH - _LABEL - 70
    height = _ROW * len(rows) + 4
    drawn = []
    for n, (label, value, kind) in enumerate(rows):
        y = n * _ROW + 2
        width = max(1, round(room * value / top)) if value else 0
        drawn.append(
            f'<text x="{_LABEL - 8}" y="{y + 15}" text-anchor="end">{escape(_short(label, 18))}</text>'
            f'<rect class="{escape(kind)}" x="{_LABEL}" y="{y + 3}" width="{width}" height="{_ROW - 6}" rx="2">'
            f"<title>{escape(label)}: {value:,}</title></rect>"
            f'<text x="{_LABEL + width + 6}" y="{y + 15}">{value:,}</text>'
        )
    return (
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {_WIDTH} {height}"'
        f' width="{_WIDTH}" height="{height}">{"".join(drawn)}</svg>'
    )


#: The timeline's series: what each crawl listed, fetched and changed.
SERIES = (("listed", "t-listed"), ("fetched", "t-fetched"), ("changed", "t-changed"))


def timeline(points: Sequence[CrawlPoint]) -> str:
    """A group of three columns a crawl, in start order, scaled to the largest listing."""
    if not points:
        return ""
    top = max([p.listed for p in points] + [p.fetched or 0 for p in points] + [p.changed for p in points]) or 1
    column, group, chart_height, base = 12, 64, 160, 180
    width = max(2 * _WIDTH, 60 + group * len(points))
    drawn = [f'<line class="axis" x1="40" y1="{base}" x2="{width - 10}" y2="{base}"/>']
    for n, point in enumerate(points):
        x0 = 50 + n * group
        for k, (name, kind) in enumerate(SERIES):
            value = getattr(point, name)
            height = round(chart_height * (value or 0) / top)
            shown = "unknown" if value is None else f"{value:,}"
            drawn.append(
                f'<rect class="{kind}" x="{x0 + k * column}" y="{base - height}" width="{column - 2}"'
                f' height="{height}"><title>{escape(point.job_id)}: {name} {shown}</title></rect>'
            )
        for line, moment in enumerate((f"{point.start_time:%m-%d}", f"{point.start_time:%H:%M}")):
            y = base + 14 + 12 * line
            drawn.append(f'<text class="tick" x="{x0 + 18}" y="{y}" text-anchor="middle">{moment}</text>')
    legend = "".join(
        f'<rect class="{kind}" x="{50 + k * 90}" y="4" width="10" height="10"/>'
        f'<text x="{64 + k * 90}" y="13">{name}</text>'
        for k, (name, kind) in enumerate(SERIES)
    )
    return (
        f'<svg class="chart" role="img" aria-label="URLs listed, fetched and changed per crawl"'
        f' viewBox="0 0 {width} {base + 34}" width="{width}" height="{base + 34}">{legend}{"".join(drawn)}</svg>'
    )


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
