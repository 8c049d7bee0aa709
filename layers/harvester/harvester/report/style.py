"""The crawl report's stylesheet, inlined in the page (it fetches nothing: no font, no image, no script)."""

from __future__ import annotations

CSS = """
:root { --ink: #1d2733; --muted: #5b6b7c; --line: #d9e0e7; --card: #f5f7fa; --accent: #2f6fb0; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: #fff; }
header { padding: 20px 32px 12px; border-bottom: 1px solid var(--line); background: var(--card); }
header h1 { margin: 0 0 4px; font-size: 20px; overflow-wrap: anywhere; }
header p { margin: 0; color: var(--muted); }
main { padding: 8px 32px 32px; max-width: 1100px; }
section { margin-top: 22px; }
h2 { font-size: 16px; margin: 0 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; margin: 0; }
.cards div { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.cards dt { color: var(--muted); font-size: 12px; }
.cards dd { margin: 0; font-size: 22px; font-weight: 600; }
.two { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 24px; }
@media (max-width: 900px) { .two { grid-template-columns: 1fr; } }
table { border-collapse: collapse; width: 100%; margin-top: 6px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.url, li .url { overflow-wrap: anywhere; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.note { color: var(--muted); font-size: 12px; margin: 4px 0; }
.chart { max-width: 100%; height: auto; font-size: 12px; fill: var(--ink); }
.chart .axis { stroke: var(--line); }
.chart .tick { fill: var(--muted); font-size: 10px; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 11px; background: var(--line); }
.badge.completed { background: #d5f0dc; } .badge.failed, .badge.invalid { background: #f8d4d4; }
.badge.absent, .badge.duplicate { background: #ececec; color: var(--muted); }
ul.tree, ul.tree ul { list-style: none; margin: 0; padding-left: 18px; }
ul.tree { padding-left: 0; }
ul.tree li { margin: 3px 0; }
ul.tree .counts { color: var(--muted); font-size: 12px; }
ul.tree .error { color: #a12626; font-size: 12px; }
.new, .back { fill: #3c9a5f; } .changed { fill: #e0962b; } .unchanged, .notmodified { fill: #8fb3d9; }
.gone, .failed { fill: #c94a4a; } .excluded, .not_due, .listed, .removed { fill: #b5bcc4; }
.s2xx { fill: #3c9a5f; } .s3xx { fill: #8fb3d9; } .s4xx { fill: #e0962b; } .s5xx, .snone { fill: #c94a4a; }
.bucket, .t-listed { fill: var(--accent); } .t-fetched { fill: #8fb3d9; } .t-changed { fill: #e0962b; }
footer { padding: 12px 32px 24px; color: var(--muted); font-size: 12px; }
"""
