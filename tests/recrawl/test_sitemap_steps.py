"""Re-crawls whose sitemaps are read in steps (``sitemap_step_urls``) write what readings in one step write: a
reading that compares a changed sitemap with its part lists the changed entries in steps, each delivery
comparing the entries before its checkpoint again, and adopts the part for the others at the end."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import logging
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest
from harvester.pipeline.sitemap_step import step_document
from harvester.settings import EngineSettings
from tests.recrawl.test_sitemap_parts import (
    POLICY,
    SMALLEST,
    START,
    Killed,
    adopted,
    clocked,
    crawl,
    crawl_database,
    index_of,
    lines,
    summary,
)
from tests.support import warc_captures

#: Pages a listed batch holds, and URLs a step lists: a urlset of 100 is read in several steps.
BATCH = 10
STEP = 20
CYCLES = ("first crawl", "10% changed", "40% changed", "unchanged", "40% changed")


def alter(site: LiveSite, cycle: str, rng: random.Random) -> None:
    share = {"10% changed": 10, "40% changed": 40}.get(cycle)
    if share:
        paths = site.page_paths()
        for path in rng.sample(paths, len(paths) * share // 100):
            site.change(path)


@pytest.mark.parametrize("fetch_pages", [True, False], ids=["pages", "no-pages"])
def test_re_crawls_read_in_steps_write_what_readings_in_one_step_write(live_site, tmp_path, fetch_pages):
    site = live_site(pages=400, sitemaps=4)
    rng = random.Random(7)
    states = {"steps": tmp_path / "steps", "whole": tmp_path / "whole"}
    steps = {"steps": STEP, "whole": 0}
    for n, cycle in enumerate(CYCLES):
        alter(site, cycle, rng)
        site.reset_log()
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=fetch_pages, job_id=f"c{n}")
        results = {
            name: crawl(
                state,
                request,
                at=START + timedelta(days=n),
                parts=True,
                record_batch=BATCH,
                sitemap_step_urls=steps[name],
            )
            for name, state in states.items()
        }
        ours, theirs = results["steps"], results["whole"]
        assert summary(ours) == summary(theirs), cycle
        assert lines(ours.processed_urls) == lines(theirs.processed_urls), cycle
        assert lines(ours.changes_location) == lines(theirs.changes_location), cycle
        assert index_of(ours.url_index) == index_of(theirs.url_index), cycle
        assert crawl_database(states["steps"], site.base) == crawl_database(states["whole"], site.base), cycle
        assert adopted(states["steps"], f"c{n}") == adopted(states["whole"], f"c{n}"), cycle
        if cycle == "40% changed":  # (each urlset's 40 changed entries listed in steps; the rest adopted)
            assert adopted(states["steps"], f"c{n}", partly=True) == 4, cycle
        if cycle == "first crawl":  # (each urlset of 100: five steps of 20 in one run, one reading in the other)
            readings = [hit for hit in site.hits if hit.path.startswith("/sitemaps/")]
            assert len(readings) == 4 + 4  # (a reading's later steps replay the copy its first step kept)


@pytest.mark.parametrize("kept", [True, False], ids=["copy-kept", "copy-not-kept"])
def test_a_comparing_reading_whose_kept_entry_changed_between_steps(live_site, tmp_path, kept):
    """An entry the reading kept for the part before its checkpoint changes before the next step. With the
    document the first step kept, the later steps read the version it began: they compare as it did and adopt
    the part in part. Without it (its body broke off after the pause), the next delivery downloads the new
    version, decides otherwise on that entry, its checkpoint's digest says so, and it starts over, listing
    every entry: none is lost, none counted twice either way."""
    site = live_site(pages=100, sitemaps=1)
    state = Path(tmp_path / "state")
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request, at=START, parts=True, record_batch=BATCH)
    paths = site.page_paths()
    for path in paths[1::2]:
        site.change(path)  # (every other entry: 50 listed one by one, 50 kept)
    from harvester.pipeline.sitemap_step import listing

    ended = 0
    original = listing.PageListing._end_step

    def changing(self: listing.PageListing) -> None:
        nonlocal ended
        try:
            original(self)
        except listing.StepEnded:
            ended += 1
            if ended == 1:
                site.change(paths[0])  # (kept by the step that ends now: before its checkpoint)
            raise

    async def not_kept(*args: Any, **kwargs: Any) -> None:
        return None

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(listing.PageListing, "_end_step", changing)
        if not kept:
            monkeypatch.setattr(step_document, "downloaded", not_kept)
        result = crawl(
            state, request, at=START + timedelta(days=1), parts=True, record_batch=BATCH, sitemap_step_urls=STEP
        )
    assert ended >= 2
    records = lines(result.processed_urls)
    assert len(records) == result.total_urls == 100
    if kept:  # (the version the reading began: 50 listed, the part adopted for the 50 kept)
        assert adopted(state, result.job_id, partly=True) == 1
    else:  # (started over: every entry listed one by one)
        assert adopted(state, result.job_id) == 0


def test_a_comparing_reading_killed_before_its_adoption_compares_again_and_adopts(live_site, tmp_path):
    """A kill after the comparing reading's last write, before its adoption in part, the sitemap's last entries
    kept for the part: the delivery after it finds the checkpoint it stored (past those kept entries), compares
    again and adopts the part in part, rather than starting over."""
    site = live_site(pages=100, sitemaps=1)
    state = Path(tmp_path / "state")
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request, at=START, parts=True, record_batch=BATCH)
    for path in site.page_paths()[:70:2]:  # (35 changed entries among the first 70; the last 30 kept)
        site.change(path)
    settings = EngineSettings(
        sitemap_parts=True, sitemap_part_min_urls=SMALLEST, record_batch=BATCH, sitemap_step_urls=STEP
    )
    with LocalHarvest.open(state) as harvest:
        clocked(harvest, START + timedelta(days=1))
        adopt = harvest.store.adopt_part

        def dying(*args: Any, **kwargs: Any) -> bool:
            if kwargs.get("checkpoint") is not None:
                raise Killed
            return adopt(*args, **kwargs)

        harvest.store.adopt_part = dying  # type: ignore[method-assign]
        with pytest.raises(Killed):
            asyncio.run(LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=1).crawl(request))
    resumed = crawl(
        state, request, at=START + timedelta(days=1), parts=True, record_batch=BATCH, sitemap_step_urls=STEP
    )
    assert len(lines(resumed.processed_urls)) == resumed.total_urls == 100
    assert adopted(state, resumed.job_id, partly=True) == 1


def test_a_reading_in_steps_archives_its_document_once_and_a_304_is_replayed_in_steps(live_site, tmp_path):
    """The first crawl, in steps: the urlset downloaded once, archived once as a response (by the step that
    kept it), and remembered with that record. The next crawl, without parts (a 304 replayed entry by entry),
    in steps: the site rewrites the sitemap once the first step has paused, and the later steps still replay
    the copy the 304 named: one request, one revisit record, the version the crawl began listed, nothing
    started over."""
    site = live_site(pages=100, sitemaps=1)
    state = Path(tmp_path / "state")
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    urlset = site.sitemap_urls[1]
    first = crawl(state, request, at=START, parts=False, record_batch=BATCH, sitemap_step_urls=STEP)
    assert len([hit for hit in site.hits if site.url(hit.path) == urlset]) == 1
    with LocalHarvest.open(state) as harvest:
        captured = [c for c in warc_captures(harvest.documents) if c[2] == urlset]
        stored = harvest.crawldb.get_sitemap(request.origin, urlset)
    assert [c[1] for c in captured] == ["response"]
    assert stored is not None and stored.warc is not None and stored.warc.record_type == "response"
    assert stored.entries == 100 and first.total_urls == 100

    before = sorted(site.url(path) for path in site.page_paths())
    site.reset_log()
    replayed = step_document.replayed

    notes: list[Any] = []

    async def replayed_then_rewritten(*args: Any, **kwargs: Any) -> Any:
        notes.append(note := await replayed(*args, **kwargs))
        site.unlist(site.page_paths()[0])
        site.add("/pages/added.html")
        return note

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(step_document, "replayed", replayed_then_rewritten)
        again = crawl(
            state, request, at=START + timedelta(days=1), parts=False, record_batch=BATCH, sitemap_step_urls=STEP
        )
    hits = [hit for hit in site.hits if site.url(hit.path) == urlset]
    assert [hit.status for hit in hits] == [304] and len(notes) == 1 and notes[0] is not None
    assert sorted(json.loads(line)["url"] for line in lines(again.processed_urls)) == before
    with LocalHarvest.open(state) as harvest:
        captured = [c for c in warc_captures(harvest.documents) if c[2] == urlset]
        record = harvest.store.get_sitemap(again.job_id, urlset)
    assert sorted(c[1] for c in captured) == ["response", "revisit"]
    assert record is not None and record.not_modified and not record.restarted and record.attempts == 1


def test_a_reading_in_steps_does_not_remember_its_document_over_a_newer_reading(live_site, tmp_path):
    """A re-crawl's reading in steps gets a 304 and pauses (its note: the stored copy A); meanwhile another job
    of the site reads the sitemap, changed, and remembers B. The last step keeps B (it does not put A, or a
    reading with HTTP status 304, back over it)."""
    site = live_site(pages=100, sitemaps=1)
    state = Path(tmp_path / "state")
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request, at=START, parts=False, record_batch=BATCH)
    replayed = step_document.replayed
    newer: list[Any] = []

    async def replayed_then_another_job_reads(ctx: Any, job: Any, record: Any, response: Any, *more: Any) -> Any:
        note = await replayed(ctx, job, record, response, *more)
        if not newer:
            prior = ctx.crawldb.get_sitemap(job.request.origin, record.url)
            b = prior.model_copy(update={"signature": "b" * 64, "document_key": "sites/x/b", "etag": '"b"'})
            ctx.crawldb.put_sitemap(job.request.origin, b)
            newer.append(b)
        return note

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(step_document, "replayed", replayed_then_another_job_reads)
        again = crawl(
            state, request, at=START + timedelta(days=1), parts=False, record_batch=BATCH, sitemap_step_urls=STEP
        )
    with LocalHarvest.open(state) as harvest:
        stored = harvest.crawldb.get_sitemap(request.origin, site.sitemap_urls[1])
    assert newer and again.total_urls == 100
    assert stored is not None and stored == newer[0]


def test_a_gzip_encoded_sitemap_read_in_steps_is_stored_and_archived_as_one_reading_stores_it(
    live_site, tmp_path, caplog
):
    """A sitemap sent with Content-Encoding gzip, read in steps and in one step: the same stored copy, entries
    and WARC records; the next crawl's 304 replays the copy the steps stored."""
    site = live_site(pages=100, sitemaps=1)
    answer = site.answer

    def encoded(path: str, headers: Any) -> Any:
        status, head, body = answer(path, headers)
        if path.startswith("/sitemaps/") and status == 200:
            return status, {**head, "Content-Encoding": "gzip"}, gzip.compress(body, mtime=0)
        return status, head, body

    site.answer = encoded  # type: ignore[method-assign]
    urlset = site.sitemap_urls[1]
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    readings = {}
    for name, step in (("steps", STEP), ("whole", 0)):
        crawl(tmp_path / name, request, at=START, parts=False, record_batch=BATCH, sitemap_step_urls=step)
        with LocalHarvest.open(tmp_path / name) as harvest:
            stored = harvest.crawldb.get_sitemap(request.origin, urlset)
            assert stored is not None and stored.warc is not None
            body = harvest.documents.get(stored.document_key)
            captured = [c[1] for c in warc_captures(harvest.documents) if c[2] == urlset]
        readings[name] = (stored.signature, hashlib.sha256(body).hexdigest(), stored.entries, captured)
    assert readings["steps"] == readings["whole"] and readings["steps"][3] == ["response"]
    site.reset_log()
    with caplog.at_level(logging.WARNING):
        again = crawl(
            tmp_path / "steps",
            request,
            at=START + timedelta(days=1),
            parts=False,
            record_batch=BATCH,
            sitemap_step_urls=STEP,
        )
    assert [hit.status for hit in site.hits if site.url(hit.path) == urlset] == [304]
    assert not [r for r in caplog.records if "unreadable" in r.getMessage()] and again.total_urls == 100
