"""Every output of `harvest` fits the others: what a sitemap said of a page is ``last_modified``,
``change_frequency`` and ``priority`` wherever it is shown (the seed data model's names), the HTTP
``Last-Modified`` validator is ``http_last_modified`` beside ``etag``, and a CSV carries every field the
JSON Lines of the same records carry."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any

from tests.support import LOOPBACK, harvest, harvest_json

ALLOW = ("--allow-network", LOOPBACK)
#: The names outputs used before they all took the data model's.
OLD_NAMES = {"lastmod", "changefreq", "fetched_lastmod", "last_modified_header"}


def _names(value: Any) -> set[str]:
    """Every key of a JSON value, at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(_names(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_names(v) for v in value))
    return set()


def _lines(*args: str) -> list[dict[str, Any]]:
    run = harvest(*args)
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def _csv(*args: str) -> tuple[list[str], list[dict[str, str]]]:
    run = harvest(*args)
    assert run.returncode == 0, run.stderr
    reader = csv.DictReader(io.StringIO(run.stdout))
    rows = list(reader)
    return list(reader.fieldnames or ()), rows


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def test_parse_names_a_pages_and_a_child_sitemaps_values_as_the_data_model_does(tmp_path):
    (tmp_path / "pages.xml").write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://e.x/a</loc>'
        "<lastmod>2024-05-01T10:00:00Z</lastmod><changefreq>daily</changefreq><priority>0.8</priority></url>"
        "<url><loc>https://e.x/b</loc></url></urlset>"
    )
    (tmp_path / "index.xml").write_text(
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>https://e.x/s.xml</loc>'
        "<lastmod>2024-05-02T00:00:00Z</lastmod></sitemap></sitemapindex>"
    )
    assert _lines("parse", str(tmp_path / "pages.xml")) == [
        {
            "url": "https://e.x/a",
            "last_modified": "2024-05-01T10:00:00+00:00",
            "change_frequency": "daily",
            "priority": 0.8,
        },
        {"url": "https://e.x/b", "last_modified": None, "change_frequency": None, "priority": 0.5},
    ]
    assert _lines("parse", str(tmp_path / "index.xml")) == [
        {"sitemap": "https://e.x/s.xml", "last_modified": "2024-05-02T00:00:00+00:00"}
    ]


def test_every_output_names_what_the_sitemap_said_and_the_http_validator_alike(site_factory, tmp_path):
    """`sitemaps --format jsonl`, a job's records, the crawl records (`--site`, `--url`) and the change feed
    say the same of a page under the same names; the page's Last-Modified header is a name of its own."""
    site = site_factory(pages=12, broken=0)
    base, state = f"{site.base_url}/", str(tmp_path / "s")
    listed = {line["url"]: line for line in _lines("sitemaps", base, *ALLOW, "--format", "jsonl")}
    job_id = harvest_json("crawl", base, "--state-dir", state, *ALLOW, "--quiet")["job_id"]
    records = {r["url"]: r for r in _lines("report", job_id, "--state-dir", state, "--format", "jsonl")}
    crawl = {r["url"]: r for r in _lines("report", "--site", base, "--state-dir", state, "--format", "jsonl")}
    feed = {line["url"]: line for line in _lines("changes", job_id, "--state-dir", state)}

    assert listed and set(listed) == set(records) == set(crawl) == set(feed)
    for output in (listed, records, crawl, feed):
        assert not _names(list(output.values())) & OLD_NAMES
    for page, line in listed.items():
        assert line["last_modified"] and line["change_frequency"]
        said = (_when(line["last_modified"]), line["change_frequency"], line["priority"], line["sitemap"])
        for record in (records[page], crawl[page]):
            shown_as = (_when(record["last_modified"]), record["change_frequency"], record["priority"])
            assert (*shown_as, record["sitemap"]) == said
        assert (_when(feed[page]["last_modified"]), feed[page]["sitemap"]) == (said[0], said[3])
        # The header the page was served with, as it was sent (an HTTP date), not the sitemap's value.
        header = records[page]["http_last_modified"]
        assert header.endswith(" GMT") and crawl[page]["http_last_modified"] == header
        assert _when(crawl[page]["fetched_last_modified"]) == said[0]
    report_url = json.loads(harvest("report", "--url", site.page_urls[0], "--state-dir", state).stdout)
    assert not _names(report_url) & OLD_NAMES
    assert report_url[0]["http_last_modified"] == crawl[site.page_urls[0]]["http_last_modified"]
    sitemaps = json.loads(harvest("report", "--site", base, "--state-dir", state).stdout)["sitemaps"]
    assert sitemaps and all("http_last_modified" in s and "last_modified" not in s for s in sitemaps)


def _cell(value: Any) -> str:
    """A JSON value as its CSV cell: text as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _covers(header: list[str], lines: list[dict[str, Any]], rows: list[dict[str, str]], key: str = "url") -> None:
    """The header names every field of every line, and each row holds its line's values."""
    assert len(header) == len(set(header))
    assert set().union(*(set(line) for line in lines)) <= set(header)
    by_key = {row[key]: row for row in rows}
    assert len(by_key) == len(rows) == len(lines)
    for line in lines:
        row = by_key[line[key]]
        assert {name: _cell(value) for name, value in line.items()} == {name: row[name] for name in line}
        assert all(row[name] == "" for name in header if name not in line)


def test_every_csv_carries_every_field_of_its_json_lines(site_factory, tmp_path):
    site = site_factory(pages=12, broken=1, images_every=3)
    base, state = f"{site.base_url}/", str(tmp_path / "s")
    job_id = harvest_json("crawl", base, "--state-dir", state, *ALLOW, "--quiet")["job_id"]
    for args in ((job_id,), ("--site", base)):
        lines = _lines("report", *args, "--state-dir", state, "--format", "jsonl")
        header, rows = _csv("report", *args, "--state-dir", state, "--format", "csv")
        _covers(header, lines, rows)
    records = _lines("report", job_id, "--state-dir", state, "--format", "jsonl")
    assert {"signature", "fetch_time", "extensions", "http_last_modified"} <= set().union(*records)
    assert any(r["extensions"].get("images") for r in records)
    header, _ = _csv("report", job_id, "--state-dir", state, "--format", "csv")
    assert header[:6] == ["url", "last_modified", "change_frequency", "priority", "status", "error_message"]
    assert "final_url" in header and "known" not in header  # (a redirected page's; the engine's snapshot)

    lines = _lines("changes", job_id, "--state-dir", state)
    header, rows = _csv("changes", job_id, "--state-dir", state, "--format", "csv")
    _covers(header, lines, rows)


def test_the_change_csv_has_a_column_for_every_field_a_feed_line_may_have():
    """Lines of every kind, each with every value it can hold: a fetched URL's, a removed URL's."""
    from harvester.cli.reporting import write_changes
    from harvester.crawldb.changes import feed_line, removed_line
    from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState

    at = datetime(2024, 5, 1, tzinfo=UTC)
    known = {"state": "fetched", "http_status": 200, "signature": "old"}
    fetched = {
        "url": "https://e.x/a",
        "last_modified": "2024-04-01T00:00:00Z",
        "change_frequency": "daily",
        "sitemap": "https://e.x/s.xml",
        "fetch_reason": "lastmod",
        "crawl_state": "fetched",
        "http_status": 200,
        "signature": "new",
        "document_key": "d/a",
        "fetch_time": "2024-05-01T00:00:00Z",
        "error_message": "none really",
        "known": known,
    }
    gone = CrawlRecord(
        url="https://e.x/b",
        state=CrawlState.ORPHAN,
        orphan_of=CrawlState.FETCHED,
        fetch_interval=60,
        next_fetch_time=at,
        http_status=200,
        signature="s",
        document_key="d/b",
        sitemap="https://e.x/s.xml",
        first_listed=at,
        last_listed=at,
        last_listed_job="job-1",
    )
    lines = [feed_line(fetched, ChangeKind.CHANGED), removed_line(gone)]
    feed = "".join(json.dumps(line) + "\n" for line in lines).encode()
    out = io.StringIO()
    write_changes(feed, out, fmt="csv")
    reader = csv.DictReader(io.StringIO(out.getvalue()))
    rows = list(reader)
    _covers(list(reader.fieldnames or ()), lines, rows)
    assert "last_modified" in lines[0] and "last_listed" in lines[1]


def test_a_change_feed_written_before_the_names_changed_is_shown_with_todays():
    from harvester.cli.reporting import write_changes

    old = b'{"url":"https://e.x/a","change":"new","reason":"listed","lastmod":"2024-04-01T00:00:00+00:00","state":"unfetched"}\n'
    for fmt in ("jsonl", "csv"):
        out = io.StringIO()
        write_changes(old, out, fmt=fmt)
        assert "lastmod" not in out.getvalue() and "2024-04-01T00:00:00+00:00" in out.getvalue(), fmt
    out = io.StringIO()
    write_changes(old, out)
    assert json.loads(out.getvalue()) == {
        "url": "https://e.x/a",
        "change": "new",
        "reason": "listed",
        "last_modified": "2024-04-01T00:00:00+00:00",
        "state": "unfetched",
    }
