"""What each step does when a write meets a service that stays busy past its patience (Busy): it gives its
work back with the site's attempts as they were, and the crawl ends exactly as without it.

The local backend, with one store, queue or document call made to raise Busy, either before it does
anything (refused: a throttled request) or after it landed (unanswered: a timeout whose write happened).
tests/aws/test_throttling.py makes the services refuse on the AWS path; this names each step's case."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, Output
from harvester.model.records import JobStatus, SitemapStatus
from harvester.patience import Busy
from harvester.settings import EngineSettings

PAGES = 12
POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)
SETTINGS = EngineSettings(retry_backoff_seconds=0.01, busy_give_back_seconds=1.0, result_grace_seconds=0.5)


class BusyOnce:
    """Forwards everything; the ``when``-th call of ``method`` (by its arguments: ``picks``) raises Busy,
    before it does anything (``landed=False``) or after (``landed=True``)."""

    def __init__(
        self, inner: Any, method: str, *, when: int = 1, landed: bool = False, picks: Callable[..., bool] | None = None
    ) -> None:
        self._inner, self._method, self._when, self._landed = inner, method, when, landed
        self._picks = picks or (lambda *_, **__: True)
        self.calls = 0
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name != self._method:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self._picks(*args, **kwargs):
                return attribute(*args, **kwargs)
            self.calls += 1
            if self.calls != self._when:
                return attribute(*args, **kwargs)
            self.raised += 1
            if self._landed:
                attribute(*args, **kwargs)
            raise Busy("test", name, "refused for a moment" if not self._landed else "timed out after it landed")

        return call


def busy(port: str, method: str, **once: Any) -> Callable[[LocalHarvest], BusyOnce]:
    """Makes ``method`` of the harvest's ``port`` (store, documents, warcs) busy once (see BusyOnce)."""

    def wrap(harvest: LocalHarvest) -> BusyOnce:
        wrapped = BusyOnce(getattr(harvest, port), method, **once)
        setattr(harvest, port, wrapped)
        return wrapped

    return wrap


def crawl(tmp_path: Path, wrap: Callable[[LocalHarvest], BusyOnce], **request: Any) -> tuple[Any, LiveSite, BusyOnce]:
    site = LiveSite(pages=PAGES, sitemaps=2, gzip_last=True)
    with site.serving():
        site.fail("/pages/5.html", 404)
        with LocalHarvest.open(tmp_path / "state") as harvest:
            busy = wrap(harvest)
            runner = LocalRunner(harvest, policy=POLICY, settings=SETTINGS, concurrency=4)
            job = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, **request)
            outcome = asyncio.run(runner.crawl(job))
    with LocalHarvest.open(tmp_path / "state") as harvest:
        job_id = outcome.job.job_id
        counts = harvest.store.counts(job_id)
        assert outcome.job.status is JobStatus.COMPLETED
        assert counts == harvest.store.recount(job_id)
        assert (counts.urls_total, counts.urls_succeeded, counts.urls_failed) == (PAGES, PAGES - 1, 1)
        pages = list(harvest.store.pages(job_id))
        assert sorted(p.url for p in pages) == sorted(site.url(p) for p in site.page_paths())
        assert {p.url: p.attempts for p in pages if p.attempts != 1} == {}
        sitemaps = list(harvest.store.sitemaps(job_id))
        assert not [s.url for s in sitemaps if s.status in (SitemapStatus.FAILED, SitemapStatus.INVALID)]
        assert {s.url: s.attempts for s in sitemaps if s.status is SitemapStatus.COMPLETED and s.attempts != 1} == {}
        assert harvest.queue.dead_letters(job_id) == []
        assert outcome.result is not None and outcome.result.total_urls == PAGES
    assert busy.raised == 1
    return outcome, site, busy


def page_hits(site: LiveSite) -> Counter[str]:
    return Counter(hit.path for hit in site.hits if hit.page)


@pytest.mark.parametrize("landed", [False, True], ids=["refused", "unanswered"])
def test_a_sitemap_whose_listing_stays_busy_is_given_back_and_read_again(tmp_path: Path, landed: bool) -> None:
    _, site, _ = crawl(tmp_path, busy("store", "record_pages", when=2, landed=landed))
    read = Counter(hit.path for hit in site.hits if hit.path.startswith("/sitemaps/"))
    assert sorted(read.values()) == [1, 2], read  # (the one given back, read again from its checkpoint)
    assert set(page_hits(site).values()) == {1}


@pytest.mark.parametrize("landed", [False, True], ids=["refused", "unanswered"])
def test_pages_whose_claim_stays_busy_are_given_back_unfetched(tmp_path: Path, landed: bool) -> None:
    _, site, _ = crawl(tmp_path, busy("store", "claim_pages", landed=landed))
    assert set(page_hits(site).values()) == {1}


@pytest.mark.parametrize("landed", [False, True], ids=["refused", "unanswered"])
def test_pages_whose_settlement_stays_busy_are_given_back(tmp_path: Path, landed: bool) -> None:
    """Their requests were made: they are made again (the outcome was not kept), their attempts as they were."""

    _, site, _ = crawl(tmp_path, busy("store", "finish_pages", landed=landed))
    hits = page_hits(site)
    assert set(hits) == set(site.page_paths()) and max(hits.values()) <= 2
    if not landed:  # (landed: the settlement stands, and the pages given back are final already)
        assert 2 in hits.values()


def test_a_page_whose_document_stays_unstored_is_given_back_alone(tmp_path: Path) -> None:
    """(Each page's document stored on its own: ``--output files``.)"""

    _, site, _ = crawl(
        tmp_path, busy("documents", "put", picks=lambda key, *_, **__: "/pages/" in key), output=Output.FILES
    )
    assert sorted(page_hits(site).values()) == [1] * (PAGES - 1) + [2]


def test_pages_whose_archive_stays_unstored_are_given_back(tmp_path: Path) -> None:
    """(The batch's captures are one WARC write: its pages go back together.)"""

    def pages(job_id: str, chunk: Any, captures: list[Any]) -> bool:
        return any("/pages/" in capture.url for capture in captures)

    _, site, _ = crawl(tmp_path, busy("warcs", "append", picks=pages))
    hits = page_hits(site)
    assert set(hits) == set(site.page_paths()) and max(hits.values()) == 2


def test_the_jobs_end_that_stays_busy_is_looked_at_again(tmp_path: Path) -> None:
    crawl(tmp_path, busy("store", "end_job"))


def test_a_result_whose_write_stays_busy_is_written_by_a_later_step(tmp_path: Path) -> None:
    _, _, refused = crawl(tmp_path, busy("store", "set_result"))
    assert refused.calls >= 2


def test_an_index_whose_write_stays_busy_is_written_with_the_result_later(tmp_path: Path) -> None:
    """The job's Parquet index is not given up on for our own store's sake: the result is written again,
    index and all."""
    index = busy("documents", "put", picks=lambda key, *_, **__: "/index/" in key)
    outcome, _, refused = crawl(tmp_path, index)
    assert refused.calls >= 2 and outcome.result.url_index is not None
