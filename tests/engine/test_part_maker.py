"""What a ``PartMaker`` holds while a job's end goes through its records: places in its spool, not lines, and
few of them: a run of one sitemap's lines grows instead of adding a place a line, and the lines it holds back
to write together are written once many sitemaps hold some (a site of many small sitemaps)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import orjson

from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.pipeline import parts
from harvester.pipeline.parts import PartMaker
from harvester.settings import EngineSettings

SITE = "https://example.com"
#: The last fields of a line of a URL listed and not fetched (``crawldb.parts.tail``).
TAIL = {"discovered_at": "2026-11-01T00:00:00Z", "finished_at": "2026-11-01T00:00:00Z"} | {
    "fetch_reason": "not_due",
    "change": "not_due",
}


def maker(sitemaps: int) -> PartMaker:
    job = JobRecord(job_id="job-1", request=JobRequest(site=f"{SITE}/"), start_time=datetime(2026, 11, 1, tzinfo=UTC))
    records = [
        SitemapRecord(
            url=f"{SITE}/sitemap-{n}.xml",
            origin=SitemapOrigin.ROBOTS,
            depth=0,
            status=SitemapStatus.COMPLETED,
            kind="urlset",
        )
        for n in range(sitemaps)
    ]
    return PartMaker(SimpleNamespace(settings=EngineSettings()), job, records)  # type: ignore[arg-type]


def line(n: int, sitemap: int, **fields: object) -> tuple[bytes, dict[str, object]]:
    record = {"url": f"{SITE}/page-{n}.html", "sitemap": f"{SITE}/sitemap-{sitemap}.xml", "status": "failed", **fields}
    return orjson.dumps(record), record


def test_a_sitemaps_fetched_lines_one_after_another_are_one_run():
    with maker(2) as made:
        for n in range(3000):
            made.fetched_line(*line(n, n // 1000 % 2))  # (1,000 of one sitemap, then of the other, ...)
        assert [len(made.fetched[f"{SITE}/sitemap-{s}.xml"]) for s in (0, 1)] == [2, 1]
        assert list(made._lines(made.fetched[f"{SITE}/sitemap-0.xml"])) == [
            line(n, 0)[0] for n in [*range(1000), *range(2000, 3000)]
        ]


def test_lines_held_back_are_written_once_many_sitemaps_hold_some():
    with maker(5000) as made:
        for n in range(50_000):  # (ten lines a sitemap: none reaches the lines a sitemap holds back)
            listed = line(n, n % 5000, status="completed")[1] | TAIL
            made.listed_line(orjson.dumps(listed), listed)
            assert made._held < parts._PENDING_ALL
        made._flush()
        assert sum(made.counts.values()) == 50_000
        keys = made._keys(f"{SITE}/sitemap-7.xml")
        assert len(keys) == 10 and len(set(keys)) == 10
