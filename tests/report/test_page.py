"""The crawl report page from records built here: hostile text stays text (checked in Chromium too), a result
written before its fetches were counted still renders, a site's thousands of sitemaps are cut to a bounded
tree, and the site's history document keeps one point a crawl."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harvester.adapters.local.documents import FolderDocumentStore
from harvester.model.crawl import TrustChange
from harvester.model.fetch_stats import FetchStats
from harvester.model.records import ErrorDetail, JobStatus, SitemapIngestionResult, SitemapRecord, SitemapStatus
from harvester.report import history, page
from harvester.report.sitemap_tree import SITEMAPS_SHOWN
from tests.browser import Browser

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOSTILE = "\"'><script>document.title='owned'</script><img src=http://127.0.0.1:9/x.png onerror=alert(1)>"


def result(job_id: str = "job-1", *, start: datetime = T0, fetches: FetchStats | None = None, **more: object):
    values: dict[str, object] = {
        "job_id": job_id,
        "site": "https://e.x/",
        "status": JobStatus.COMPLETED,
        "total_urls": 3,
        "successful_processing": 2,
        "failed_processing": 1,
        "start_time": start,
        "end_time": start + timedelta(seconds=5),
        "total_duration": 5.0,
        "fetches": fetches,
    }
    return SitemapIngestionResult(**(values | more))  # type: ignore[arg-type]


def test_text_a_site_wrote_is_shown_as_text_and_neither_runs_nor_loads(tmp_path):
    stats = FetchStats(fetched=1, http_statuses={"500": 1}, failures={HOSTILE: 1}, failure_samples={HOSTILE: [HOSTILE]})
    hostile = result(
        site=f"https://e.x/{HOSTILE}",
        fetches=stats,
        error_details=[ErrorDetail(url=HOSTILE, kind="sitemap", error=HOSTILE)],
        lastmod_trust={
            HOSTILE: TrustChange(score_before=0.5, score=0.75, trusted_before=False, trusted=True, confirmed=1)
        },
    )
    sitemap = SitemapRecord(
        url=f"https://e.x/{HOSTILE}",
        origin="robots",
        depth=0,
        status=SitemapStatus.INVALID,
        error_message=HOSTILE,
        invalid_children={HOSTILE: HOSTILE},
    )
    text = page.render(hostile, [sitemap], [history.CrawlPoint.of(hostile)])
    assert "<script" not in text and "<img" not in text  # (the tags, as text: &lt;script&gt;)
    assert html.escape(HOSTILE) in text
    file = tmp_path / "hostile.html"
    file.write_text(text, encoding="utf-8")
    with Browser(tmp_path / "profile") as browser:
        browser.open(file.as_uri())
        assert browser.evaluate("document.title") == f"Crawl report: https://e.x/{HOSTILE}"
        assert browser.evaluate("document.querySelectorAll('script, img').length") == 0
        reasons = browser.evaluate("[...document.querySelectorAll('tr[data-reason]')].map(r => r.dataset.reason)")
        assert reasons == [HOSTILE]
        assert browser.errors() == [] and browser.requests() == [file.as_uri()]


def test_a_result_written_before_its_fetches_were_counted_still_renders():
    old = result(error_details=[ErrorDetail(url="https://e.x/a", kind="page", error="HTTP 404 Not Found")])
    text = page.render(old, [], [history.CrawlPoint.of(old)])
    assert text.count("Not counted for this job.") == 3  # (statuses, latency, sizes)
    assert 'data-figure="failures.HTTP 404 Not Found" data-value="1"' in text  # (from its error details)
    assert 'data-fetched=""' in text and 'data-figure="fetches.fetched"' not in text


def test_the_sitemap_tree_shows_a_bounded_number_of_sitemaps_and_says_how_many_more():
    index = SitemapRecord(url="https://e.x/index.xml", origin="robots", depth=0, status=SitemapStatus.COMPLETED)
    children = [
        SitemapRecord(
            url=f"https://e.x/s{n}.xml", origin="index", depth=1, parent=index.url, status=SitemapStatus.COMPLETED
        )
        for n in range(SITEMAPS_SHOWN + 99)
    ]
    text = page.render(result(), [index, *children], [])
    assert f'data-figure="sitemaps.shown" data-value="{SITEMAPS_SHOWN}"' in text
    assert 'data-figure="sitemaps.not_shown" data-value="100"' in text
    assert text.count("<li data-sitemap=") == SITEMAPS_SHOWN


def test_the_history_document_keeps_one_point_a_crawl_in_start_order(tmp_path):
    documents = FolderDocumentStore(tmp_path)
    second = result("job-2", start=T0 + timedelta(hours=1))
    first = result("job-1", start=T0)
    assert [p.job_id for p in history.remember(documents, "https://e.x", second)] == ["job-2"]
    assert [p.job_id for p in history.remember(documents, "https://e.x", first)] == ["job-1"]  # (up to it)
    again = history.remember(documents, "https://e.x", second)  # (an end written again: its point replaced)
    assert [(p.job_id, p.listed) for p in again] == [("job-1", 3), ("job-2", 3)]
    many = [result(f"job-{n:03d}", start=T0 + timedelta(days=n)) for n in range(history.POINTS_KEPT + 5)]
    for one in many:
        kept = history.remember(documents, "https://e.x", one)
    assert [p.job_id for p in kept] == [r.job_id for r in many[-history.POINTS_KEPT :]]
    key = history.history_key("https://e.x")
    documents.put(key, b"{not json", content_type="application/json")  # (damaged: started again)
    assert [p.job_id for p in history.remember(documents, "https://e.x", first)] == ["job-1"]
    assert Path(tmp_path, key).exists()
