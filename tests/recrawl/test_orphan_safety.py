"""A URL is declared orphan only when the site really stopped listing it, and resumed readings lose nothing.

Each test is a failure a reviewer found: a job that reads less of the tree, a URL listed by two sitemaps,
a sitemap missing once, a reading resumed on a sitemap that changed meanwhile, two runs of one job's end.
They run the engine in process (the local backend, a live site on 127.0.0.1), so a kill can be placed
exactly after a given write.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from harvester.adapters.local import crawl as local_crawl
from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.crawl import CrawlRecord, HostTrust, SiteCrawl
from harvester.model.messages import JobRequest
from harvester.model.records import SitemapIngestionResult
from harvester.model.state import EndProgress
from harvester.pipeline import completion
from harvester.pipeline.completion import write_result
from harvester.pipeline.context import StepContext
from harvester.settings import EngineSettings

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)
# Batches of 49: a kill after the first write stops a 100-page sitemap in the middle.
SETTINGS = EngineSettings(retry_backoff_seconds=0.01, retry_backoff_max_seconds=0.01, record_batch=49)


class Killed(BaseException):
    """The process dies here (a BaseException, so no handler of the engine catches it)."""


Wrap = Callable[[LocalHarvest], None]


#: Every reading lists its URLs one by one (no sitemap's part is adopted whole): a kill then lands inside it.
ONE_BY_ONE = replace(SETTINGS, sitemap_parts=False)


def crawl(
    state: Path, request: JobRequest, wrap: Wrap | None = None, *, settings: EngineSettings = SETTINGS
) -> SitemapIngestionResult:
    with LocalHarvest.open(state) as harvest:
        if wrap is not None:
            wrap(harvest)
        runner = LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=1)
        outcome = asyncio.run(runner.crawl(request))
        assert outcome.result is not None
        return outcome.result


def request(site: LiveSite, **options: Any) -> JobRequest:
    return JobRequest(site=site.url("/"), rate_limit_delay=0.0001, **options)


def crawl_records(state: Path, site: LiveSite) -> dict[str, CrawlRecord]:
    with LocalHarvest.open(state) as harvest:
        return {r.url: r for r in harvest.crawldb.site_urls(site.base)}


def removed(result: SitemapIngestionResult) -> list[str]:
    assert result.changes_location is not None
    lines = Path(result.changes_location).read_text().splitlines()
    return sorted(json.loads(line)["url"] for line in lines if json.loads(line)["change"] == "removed")


def kill_after(method: str) -> Wrap:
    """Kills the crawl right after the first call of one state-store write has committed."""

    def wrap(harvest: LocalHarvest) -> None:
        inner = harvest.store

        class Dying:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

        def dying(*args: Any, **kwargs: Any) -> Any:
            getattr(inner, method)(*args, **kwargs)
            raise Killed(method)

        setattr(Dying, method, staticmethod(dying))
        harvest.store = Dying()  # type: ignore[assignment]

    return wrap


def test_a_job_that_reads_less_deep_orphans_nothing_it_did_not_read(live_site, tmp_path):
    site = live_site(pages=10, sitemaps=2)
    crawl(tmp_path, request(site))
    site.unlist("/pages/3.html")
    # robots.txt is depth 1, the index 2, the urlsets 3: max_depth 2 leaves the urlsets unread.
    shallow = crawl(tmp_path, request(site, max_depth=2))
    assert shallow.changes.removed == 0
    assert {r.state.value for r in crawl_records(tmp_path, site).values()} == {"fetched"}
    full = crawl(tmp_path, request(site))
    assert removed(full) == [site.url("/pages/3.html")]


def test_a_url_still_listed_by_a_sitemap_that_failed_this_time_is_not_orphaned(live_site, tmp_path):
    site = live_site(pages=6, sitemaps=2)
    shared = "/pages/0.html"  # in urlset 0, its crawl record names urlset 0
    site.list_also(shared, 1)
    crawl(tmp_path, request(site))
    assert crawl_records(tmp_path, site)[site.url(shared)].sitemap == site.url("/sitemaps/0.xml")
    site.list_only_in(shared, 1)
    site.break_document("/sitemaps/1.xml", 500)
    failing = crawl(tmp_path, request(site))
    assert [e.url for e in failing.error_details] == [site.url("/sitemaps/1.xml")]
    assert failing.changes.removed == 0 and crawl_records(tmp_path, site)[site.url(shared)].state.value == "fetched"
    site.break_document("/sitemaps/1.xml", None)
    site.unlist(shared)
    assert removed(crawl(tmp_path, request(site))) == [site.url(shared)]


def test_a_job_that_did_not_read_the_whole_tree_reads_no_crawl_record_for_orphans(live_site, tmp_path):
    site = live_site(pages=6, sitemaps=2)
    crawl(tmp_path, request(site))
    site.unlist("/pages/0.html")
    site.break_document("/sitemaps/1.xml", 500)
    passes: list[str] = []

    def counted(harvest: LocalHarvest) -> None:
        every = harvest.crawldb.url_pages

        def url_pages(origin: str, **options: Any) -> Any:
            passes.append(origin)
            return every(origin, **options)

        harvest.crawldb.url_pages = url_pages  # type: ignore[method-assign]

    failing = crawl(tmp_path, request(site), counted)
    assert failing.changes.removed == 0 and passes == []  # (no URL can be its orphan: none is read)
    site.break_document("/sitemaps/1.xml", None)
    passes.clear()
    assert removed(crawl(tmp_path, request(site), counted)) == [site.url("/pages/0.html")] and passes


def test_a_sitemap_missing_once_is_a_glitch_and_missing_twice_is_gone(live_site, tmp_path):
    site = live_site(pages=6, sitemaps=1)
    crawl(tmp_path, request(site))
    site.unlist("/pages/2.html")
    site.break_document("/robots.txt", 404)  # the index is still found at its well-known path
    assert crawl(tmp_path, request(site)).changes.removed == 0
    assert removed(crawl(tmp_path, request(site))) == [site.url("/pages/2.html")]
    # Back with the same bytes: present again, so its next miss is a glitch again.
    site.break_document("/robots.txt", None)
    crawl(tmp_path, request(site))
    site.unlist("/pages/4.html")
    site.break_document("/robots.txt", 410)
    assert crawl(tmp_path, request(site)).changes.removed == 0


@pytest.mark.parametrize("killed_after", ["record_pages", "mark_enqueued"])
def test_a_reading_resumed_on_a_sitemap_that_changed_meanwhile_lists_every_url(live_site, tmp_path, killed_after):
    site = live_site(pages=100, sitemaps=1)
    crawl(tmp_path, request(site))
    with pytest.raises(Killed):  # the first batch of 49 is recorded
        crawl(tmp_path, request(site), wrap=kill_after(killed_after), settings=ONE_BY_ONE)
    site.unlist("/pages/0.html")  # every entry after it moves one place up
    resumed = crawl(tmp_path, request(site))
    records = crawl_records(tmp_path, site)
    assert resumed.changes.removed == 0 and resumed.total_urls == 100  # /pages/0.html was listed before
    assert {r.state.value for r in records.values()} == {"fetched"}
    assert all(r.last_listed_job == resumed.job_id for r in records.values())


@pytest.mark.parametrize("killed_after", ["record_pages", "mark_enqueued"])
def test_the_lastmod_probe_budget_is_spent_once_across_a_kill(live_site, tmp_path, killed_after):
    site = live_site(pages=120, sitemaps=1)
    crawl(tmp_path / "a", request(site))
    with LocalHarvest.open(tmp_path / "a") as harvest:  # the host's lastmod has proved untrue
        current = harvest.crawldb.get_site(site.base) or SiteCrawl(site=site.base)
        hosts = {"127.0.0.1": HostTrust(score=0.25, trusted=False)}
        assert harvest.crawldb.put_site(current.model_copy(update={"hosts": hosts, "version": current.version + 1}))
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # twins: one crawled through, one killed and resumed
    site.touch_all()

    site.reset_log()
    crawl(tmp_path / "a", request(site))
    uninterrupted = len(site.page_hits())
    site.reset_log()
    with pytest.raises(Killed):
        crawl(tmp_path / "b", request(site), wrap=kill_after(killed_after))
    crawl(tmp_path / "b", request(site))
    assert uninterrupted == SETTINGS.lastmod_probes and len(site.page_hits()) == uninterrupted


def test_two_runs_of_one_jobs_end_report_the_same_removed_urls(live_site, tmp_path):
    site = live_site(pages=6, sitemaps=1)
    crawl(tmp_path, request(site))
    site.unlist("/pages/1.html")
    site.unlist("/pages/2.html")
    other: list[SitemapIngestionResult] = []

    def racing_end(harvest: LocalHarvest) -> None:
        """Another run of the same end (``recovery.resume``) orphans the URLs first."""
        inner = harvest.crawldb

        class Racing:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def put_urls(self, site_: str, records: list[CrawlRecord], *, writer: str | None = None) -> list[str]:
                if records and not other:
                    ctx = StepContext(
                        store=harvest.store,
                        queue=harvest.queue,
                        documents=harvest.documents,
                        fetcher=None,  # type: ignore[arg-type]  # the end fetches nothing
                        crawldb=inner,
                    )
                    other.append(write_result(ctx, records[0].orphaned_job or ""))
                return inner.put_urls(site_, records, writer=writer)

        harvest.crawldb = Racing()  # type: ignore[assignment]

    result = crawl(tmp_path, request(site), wrap=racing_end)
    expected = [site.url("/pages/1.html"), site.url("/pages/2.html")]
    assert other and other[0].changes.removed == 2
    assert result.changes.removed == 2 and removed(result) == expected


def test_an_unchanged_sitemap_under_new_validators_is_asked_with_the_new_ones(live_site, tmp_path):
    site = live_site(pages=4, sitemaps=2)
    crawl(tmp_path, request(site))
    site.deployment = "-redeployed"  # same bytes, new ETags
    statuses = []
    for _ in range(2):
        site.reset_log()
        crawl(tmp_path, request(site))
        statuses.append({h.status for h in site.hits if h.path in ("/sitemap_index.xml", "/sitemaps/0.xml")})
    assert statuses == [{200}, {304}]


def ended_without_its_result(live_site: Any, tmp_path: Path, monkeypatch: Any) -> tuple[LiveSite, list[str], str]:
    """A site crawled, then crawled again with three pages no longer listed by a job that ends and dies before
    its end is written: the site, those pages, the job."""
    site = live_site(pages=30, sitemaps=2)
    crawl(tmp_path, request(site))
    gone = [site.url(f"/pages/{n}.html") for n in (1, 14, 21)]
    for url in gone:
        site.unlist(url.removeprefix(site.base))
    ended: list[str] = []

    def dies(ctx: StepContext, job_id: str, **_: Any) -> None:
        ended.append(job_id)
        raise Killed("the job's end")

    monkeypatch.setattr(completion, "write_result", dies)
    with pytest.raises(Killed):
        crawl(tmp_path, request(site))
    monkeypatch.undo()
    return site, gone, ended[0]


def end_context(harvest: LocalHarvest, store: Any = None, **settings: Any) -> StepContext:
    return StepContext(
        store=store or harvest.store,
        queue=harvest.queue,
        documents=harvest.documents,
        fetcher=None,  # type: ignore[arg-type]  # the end fetches nothing
        crawldb=harvest.crawldb,
        settings=replace(SETTINGS, **settings),
    )


@pytest.mark.parametrize("lost", [False, True], ids=["kept", "lost"])
def test_an_end_in_steps_marks_and_reports_the_same_orphans_as_one_step(live_site, tmp_path, monkeypatch, lost):
    """A step a page of records (one URL a page), each step's progress stored; with ``lost``, the documents of
    the first steps' lines are gone (expired) when the last step needs them: the pass starts over, and finds
    the URLs it marked marked by this job."""
    site, gone, job_id = ended_without_its_result(live_site, tmp_path, monkeypatch)
    monkeypatch.setattr(local_crawl, "_PAGE_SIZE", 1)
    with LocalHarvest.open(tmp_path) as harvest:
        assert harvest.store.get_job(job_id).result_key is None
        saved: list[EndProgress] = []
        inner = harvest.store

        class Saving:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def save_end(self, job_id: str, progress: EndProgress, **claims: float) -> bool:
                saved.append(progress)
                if lost and len(saved) == 3:
                    for key in progress.removed_lines:
                        harvest.documents.delete(key)
                return inner.save_end(job_id, progress, **claims)

        result = completion.finish(end_context(harvest, Saving(), end_step_seconds=0), job_id)
    assert result is not None and removed(result) == sorted(gone) and result.changes.removed == 3
    assert [p.removed for p in saved][:3] == [1, 2, 3]  # (a step a page of records, each stored)
    assert (EndProgress() in saved) is lost  # (started over)
    assert all(r.orphaned_job == job_id for url, r in crawl_records(tmp_path, site).items() if url in gone)


def test_a_step_that_outlived_its_claim_changes_nothing_its_successor_wrote(live_site, tmp_path, monkeypatch):
    """A step whose claim lapsed (it ran past the grace) while another took the end over writes its lines to a
    document of its own: the progress its successor stored names the successor's, and each URL is removed
    once."""
    _, gone, job_id = ended_without_its_result(live_site, tmp_path, monkeypatch)
    monkeypatch.setattr(local_crawl, "_PAGE_SIZE", 1)  # (a page of records a URL: a step can stop after any)

    def after_pages(n: int) -> Callable[[], bool]:
        seen = [0]

        def pause() -> bool:
            seen[0] += 1
            return seen[0] >= n

        return pause

    with LocalHarvest.open(tmp_path) as harvest:
        ctx = end_context(harvest)
        store = harvest.store
        assert store.claim_end(job_id, until=10.0, now=0.0) == EndProgress()  # (A)
        assert store.claim_end(job_id, until=21.0, now=11.0) == EndProgress()  # (B: A's claim lapsed)
        taken = completion.end_step(ctx, job_id, progress=EndProgress(), pause=after_pages(1), claim=21.0)
        assert isinstance(taken, EndProgress) and store.save_end(job_id, taken, held=21.0, handed=30.0)
        late = completion.end_step(ctx, job_id, progress=EndProgress(), pause=after_pages(2), claim=10.0)
        assert isinstance(late, EndProgress) and late.removed > taken.removed  # (A went further, and wrote)
        assert not store.save_end(job_id, late, held=10.0, handed=40.0)
        progress = store.claim_end(job_id, until=50.0, now=31.0, handed=30.0)
        assert progress == taken
        result = completion.end_step(ctx, job_id, progress=progress)
    assert isinstance(result, SitemapIngestionResult)
    assert removed(result) == sorted(gone) and result.changes.removed == 3
