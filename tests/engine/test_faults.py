"""Exact accounting under faults: a worker killed between any two writes, and every message delivered twice.

The local adapters are wrapped so that the N-th write (state store, queue or document store) commits and
then the process "dies" (a BaseException nothing catches). The crawl is then run again on the same state
directory, as a user would, and must end with exactly the counts of an uninterrupted run, with every
counter equal to a recount of the records and one stored document per successful page.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.archive.stored import read_capture
from harvester.crawldb.documents import site_prefix
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, Output
from harvester.model.records import UrlStatus
from harvester.settings import EngineSettings
from tests.support import crawl_database, stored_versions

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)
SETTINGS = EngineSettings(retry_backoff_seconds=0.01)


class Killed(BaseException):
    """The process died: nothing in Harvester may catch this."""


class Writes:
    """Counts writes across the adapters and kills the process right after the ``kill_after``-th one."""

    def __init__(self, kill_after: int | None) -> None:
        self.kill_after = kill_after
        self.count = 0

    def happened(self) -> None:
        self.count += 1
        if self.kill_after is not None and self.count == self.kill_after:
            raise Killed(f"killed after write {self.count}")


class Wrapped:
    """Forwards everything; the named methods count as writes (the write itself completes first)."""

    def __init__(self, inner: Any, writes: Writes, methods: set[str]) -> None:
        self._inner, self._writes, self._methods = inner, writes, methods

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._methods:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            self._writes.happened()
            return result

        return counted


STORE_WRITES = {
    "create_job", "mark_seeded", "end_job", "set_result", "add_sitemaps", "claim_sitemap", "record_pages",
    "mark_enqueued", "finish_sitemap", "claim_pages", "finish_pages", "retry_pages", "release_leases", "close_job",
    "adopt_part",
}  # fmt: skip
QUEUE_WRITES = {"push", "take_pages", "take_control", "delete", "release", "dead_letter", "recover", "purge"}
CRAWLDB_WRITES = {"put_urls", "put_sitemap", "put_site", "put_part"}


class TwiceQueue:
    """Every message sent is delivered twice: SQS's at-least-once, at its worst."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def push(self, messages: Any, *, delay_seconds: Any = 0) -> None:
        delays = delay_seconds if isinstance(delay_seconds, int | float) else list(delay_seconds) * 2
        self._inner.push(list(messages) * 2, delay_seconds=delays)


def crawl(
    state: Path,
    request: JobRequest,
    *,
    kill_after: int | None = None,
    twice: bool = False,
    memory: bool = False,
    settings: EngineSettings = SETTINGS,
) -> int:
    """Runs (or resumes) the crawl; returns the number of writes made, raising Killed if it was killed.
    ``memory``: the queue is kept in memory (`harvest crawl --memory`): a kill loses all of it."""
    writes = Writes(kill_after)
    with LocalHarvest.open(state, memory_queue=memory) as harvest:
        queue: Any = harvest.queue
        if twice:
            queue = TwiceQueue(queue)
        harvest.store = Wrapped(harvest.store, writes, STORE_WRITES)  # type: ignore[assignment]
        harvest.queue = Wrapped(queue, writes, QUEUE_WRITES)  # type: ignore[assignment]
        harvest.documents = Wrapped(harvest.documents, writes, {"put"})  # type: ignore[assignment]
        harvest.warcs = Wrapped(harvest.warcs, writes, {"append"})  # type: ignore[assignment]
        harvest.crawldb = Wrapped(harvest.crawldb, writes, CRAWLDB_WRITES)  # type: ignore[assignment]
        runner = LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=1)
        asyncio.run(runner.crawl(request))
    return writes.count


#: The share of a reference run's writes a run may do without: a run's writes vary with timing (a page the
#: gate defers goes back to the queue, a write), so a run may end before the write it was to be killed after.
TIMING_SHARE = 0.1


def crawl_killed(
    state: Path,
    request: JobRequest,
    *,
    kill_after: int,
    reference: int,
    memory: bool = False,
    settings: EngineSettings = SETTINGS,
) -> bool:
    """Runs the crawl to be killed after write ``kill_after``: whether it was. A run that ended first must
    really have made fewer writes, and not many fewer than the ``reference`` run (a kill that never fired
    would pass every check after it); its job is over, and running the command again would start another."""
    try:
        made = crawl(state, request, kill_after=kill_after, memory=memory, settings=settings)
    except Killed:
        return True
    assert made < kill_after, f"write {kill_after} of {made} was not killed"
    assert made > reference * (1 - TIMING_SHARE), f"the run made {made} writes, the reference {reference}"
    return False


def check_invariants(state: Path, *, total: int, succeeded: int, failed: int) -> None:
    with LocalHarvest.open(state) as harvest:
        jobs = harvest.store.all_jobs()
        assert len(jobs) == 1, "a resumed crawl must continue its job, not start another"
        job = jobs[0]
        assert job.status.final and job.result_key
        snapshot = harvest.store.snapshot(job.job_id)
        assert snapshot is not None
        counts = snapshot.counts
        assert counts == harvest.store.recount(job.job_id)
        assert (counts.urls_total, counts.urls_succeeded, counts.urls_failed) == (total, succeeded, failed)
        pages = list(harvest.store.pages(job.job_id))
        assert all(p.status.final for p in pages)
        completed = [p for p in pages if p.status is UrlStatus.COMPLETED]
        assert len(completed) == succeeded
        if job.request.output is Output.FILES:
            stored = list(harvest.documents.keys(site_prefix(job.request.origin)))
            assert sorted(stored) == sorted(p.document_key for p in completed)
        else:
            # Every page's capture is stored where its record says; a page fetched again after a kill may
            # have been archived twice (a WARC keeps every fetch), but each version is one content.
            for page in completed:
                assert page.warc is not None and read_capture(harvest.warcs, page.warc).url == page.url
            assert len(stored_versions(harvest.documents, job.request.origin)) == succeeded
            for key in harvest.warcs.files(job.job_id):  # every file whole: what the kills left was cut off
                with (state / "documents" / key).open("rb") as file:
                    assert sum(1 for _ in ArchiveIterator(file)) > 1
        result = harvest.result(job.job_id)
        assert result is not None
        assert (result.total_urls, result.successful_processing, result.failed_processing) == (total, succeeded, failed)


@pytest.fixture
def small_site(site_factory):
    # Two urlsets (one gzipped) under an index, discovered through robots.txt; 6 pages, 1 broken.
    return site_factory(pages=6, broken=1, sitemaps=2)


def request_for(site: Any, **fields: Any) -> JobRequest:
    return JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001, **fields)


@pytest.mark.parametrize("output", list(Output))
def test_uninterrupted_run_is_the_baseline(small_site, tmp_path, output):
    writes = crawl(tmp_path / "s", request_for(small_site, output=output))
    assert writes > 40
    check_invariants(tmp_path / "s", total=7, succeeded=6, failed=1)


@pytest.mark.parametrize("memory", [False, True], ids=["disk-queue", "memory-queue"])
def test_killed_after_any_write_the_rerun_ends_exactly(small_site, tmp_path, memory):
    """With the queue in memory too: a kill loses every task, and the rerun sends the job's open work again
    from its records. (With the queue on disk a kill follows every write; with it in memory, every other
    one: the records a rerun starts from are the same writes', and the suite's time is a budget.)"""
    baseline = crawl(tmp_path / "baseline", request_for(small_site), memory=memory)
    # Between any two writes: after the last one (the run closing its job) the job is fully done and reported,
    # and running the command again rightly starts a new one.
    for kill_after in range(1, baseline, 2 if memory else 1):
        state = tmp_path / f"kill-{kill_after}"
        if crawl_killed(state, request_for(small_site), kill_after=kill_after, reference=baseline, memory=memory):
            crawl(state, request_for(small_site), memory=memory)
        try:
            check_invariants(state, total=7, succeeded=6, failed=1)
        except AssertionError as exc:
            raise AssertionError(f"after a kill following write {kill_after}: {exc}") from exc


def test_killed_twice_in_a_row_still_ends_exactly(small_site, tmp_path):
    baseline = crawl(tmp_path / "baseline", request_for(small_site))
    state = tmp_path / "s"
    for kill_after in (baseline // 3, baseline // 4):
        with pytest.raises(Killed):
            crawl(state, request_for(small_site), kill_after=kill_after)
    crawl(state, request_for(small_site))
    check_invariants(state, total=7, succeeded=6, failed=1)


@pytest.mark.parametrize("fetch_pages", [True, False])
def test_every_message_delivered_twice_counts_once(small_site, tmp_path, fetch_pages):
    crawl(tmp_path / "s", request_for(small_site, fetch_pages=fetch_pages), twice=True)
    if fetch_pages:
        check_invariants(tmp_path / "s", total=7, succeeded=6, failed=1)
    else:
        check_invariants_no_pages(tmp_path / "s", total=7)


def check_invariants_no_pages(state: Path, *, total: int) -> None:
    with LocalHarvest.open(state) as harvest:
        (job,) = harvest.store.all_jobs()
        snapshot = harvest.store.snapshot(job.job_id)
        assert snapshot is not None
        assert snapshot.counts == harvest.store.recount(job.job_id)
        assert (snapshot.counts.urls_total, snapshot.counts.urls_succeeded) == (total, total)


# re-crawls -----------------------------------------------------------------------------------------


def records_of(state: Path, site: str, settings: EngineSettings) -> dict[str, dict[str, object]]:
    """The crawl records; with parts, without their versions: a kill may make the resumed job list a urlset
    one by one instead of adopting its part (a reading that compared, cut short, starts over), the same
    records written once more."""
    records = crawl_database(state, site)
    if settings is PARTS:
        for record in records.values():
            record.pop("version", None)
    return records


def adopted_in_part(state: Path) -> int:
    """How many parts the newest job adopted in part."""
    with LocalHarvest.open(state) as harvest:
        job = harvest.store.all_jobs()[-1]
        return sum(1 for item in harvest.store.page_rows.adopted(job.job_id) if item.partly)


def changes_of(state: Path) -> set[tuple[str, str]]:
    """The (url, change) lines of the newest job's change feed."""
    with LocalHarvest.open(state) as harvest:
        job = harvest.store.all_jobs()[-1]
        feed = harvest.documents.get(f"jobs/{job.job_id}/changes.jsonl").decode()
    return {(line["url"], line["change"]) for line in map(json.loads, feed.splitlines())}


#: Sitemap parts kept for urlsets of two URLs and more: the re-crawl adopts them in part.
PARTS = EngineSettings(retry_backoff_seconds=0.01, sitemap_part_min_urls=2)


@pytest.mark.parametrize("settings", [SETTINGS, PARTS], ids=["listing", "parts"])
def test_a_recrawl_killed_after_any_write_leaves_the_crawl_database_as_an_uninterrupted_one(tmp_path, settings):
    """With parts, the re-crawl adopts each urlset's part in part (its changed, touched, removed and added
    entries listed one by one): a kill after any write of it, the adoptions' included, changes nothing."""
    with LiveSite(pages=8, sitemaps=2).serving() as site:
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001)
        first = tmp_path / "first"
        crawl(first, request, settings=settings)
        pages = site.page_paths()
        site.change(pages[0])
        site.change(pages[1])
        site.touch(pages[2])  # a 304
        site.unlist(pages[3])  # removed
        site.fail(pages[4], 404)  # gone
        site.add("/pages/new.html")
        reference = tmp_path / "reference"
        shutil.copytree(first, reference)
        writes = crawl(reference, request, settings=settings)
        expected, expected_changes = records_of(reference, site.base, settings), changes_of(reference)
        assert {change for _, change in expected_changes} == {"changed", "notmodified", "removed", "gone", "new"}
        if settings is PARTS:
            assert adopted_in_part(reference) == 2
        for kill_after in range(1, writes):
            state = tmp_path / f"kill-{kill_after}"
            shutil.copytree(first, state)
            if crawl_killed(state, request, kill_after=kill_after, reference=writes, settings=settings):
                crawl(state, request, settings=settings)
            try:
                assert records_of(state, site.base, settings) == expected
                assert changes_of(state) == expected_changes
            except AssertionError as exc:
                raise AssertionError(f"after a kill following write {kill_after} of the re-crawl: {exc}") from exc
            shutil.rmtree(state)
