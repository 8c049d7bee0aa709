"""The well-known paths on a re-crawl: those the site's last job found absent are asked by robots.txt's task, each
once, and registered absent as their own tasks would have ended them; one that comes back is read."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from harvester.adapters.local.runner import LocalHarvest
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import SitemapRecord
from harvester.pipeline import sitemap_step
from harvester.pipeline.discovery import KNOWN_PATHS
from tests.recrawl.test_sitemap_parts import START, crawl

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>%s</loc></url></urlset>
"""


def probes(state: Path, job_id: str) -> dict[str, SitemapRecord]:
    with LocalHarvest.open(state) as harvest:
        return {s.url: s for s in harvest.store.sitemaps(job_id) if s.origin is SitemapOrigin.KNOWN_PATH}


def fields(record: SitemapRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"discovered_at", "finished_at"})


def test_paths_absent_last_time_are_asked_by_robots_txt_and_one_that_came_back_is_read(
    live_site, tmp_path, monkeypatch
):
    site = live_site(pages=20, sitemaps=1)
    state = tmp_path / "state"
    tasks: list[str] = []  # (the sitemap tasks the runner ran, by URL)
    process = sitemap_step.process_sitemap

    async def counted(ctx: Any, task: Any) -> Any:
        tasks.append(task.url)
        return await process(ctx, task)

    monkeypatch.setattr(sitemap_step, "process_sitemap", counted)
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    first = crawl(state, request.model_copy(update={"job_id": "first"}), at=START, parts=True)
    paths = [f"/{p}" for p in KNOWN_PATHS if p != "sitemap_index.xml"]  # (that one robots.txt declares)
    asked = [h.path for h in site.hits]
    assert all(asked.count(p) == 1 for p in paths)
    assert len(tasks) == 3 + len(paths)  # (robots.txt, the index, its urlset, and a task a path)
    before = probes(state, "first")
    assert len(before) == len(paths) and {s.status.value for s in before.values()} == {"absent"}

    site.reset_log()
    tasks.clear()
    second = crawl(state, request.model_copy(update={"job_id": "second"}), at=START + timedelta(days=1), parts=True)
    asked = [h.path for h in site.hits]
    assert all(asked.count(p) == 1 for p in paths)
    assert [t.removeprefix(site.base) for t in tasks] == ["/robots.txt", "/sitemap_index.xml", "/sitemaps/0.xml"]
    after = probes(state, "second")
    # Registered as their own tasks ended them: the same records, status, answer, reason and attempt.
    assert {u: fields(s) for u, s in after.items()} == {u: fields(s) for u, s in before.items()}
    assert (second.sitemaps_total, second.sitemaps_ok, second.total_urls) == (
        first.sitemaps_total,
        first.sitemaps_ok,
        first.total_urls,
    )

    # /sitemap.xml comes back with a page of its own: asked by robots.txt's task, then read by its own.
    answer = site.answer
    extra = site.url("/pages/extra.html")

    def answering(path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        if path == "/sitemap.xml":
            return 200, {"Content-Type": "application/xml"}, URLSET % extra.encode()
        return answer(path, headers)

    monkeypatch.setattr(site, "answer", answering)
    site.reset_log()
    tasks.clear()
    third = crawl(state, request.model_copy(update={"job_id": "third"}), at=START + timedelta(days=2), parts=True)
    assert [h.path for h in site.hits].count("/sitemap.xml") == 2
    assert site.url("/sitemap.xml") in tasks and len(tasks) == 4
    back = probes(state, "third")[site.url("/sitemap.xml")]
    assert (back.status.value, back.pages_recorded, back.attempts) == ("completed", 1, 1)
    assert third.total_urls == first.total_urls + 1
    with LocalHarvest.open(state) as harvest:
        noted = harvest.crawldb.get_site(site.base)
    assert noted is not None and site.url("/sitemap.xml") not in noted.absent_paths
    assert len(noted.absent_paths) == len(paths) - 1
