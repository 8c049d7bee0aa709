"""A cycle that adopts its unchanged sitemaps' parts writes what a cycle listing every entry writes.

The same site is crawled through the re-crawl bench's cycles (a first crawl; unchanged; 1 % and 10 % of the
pages changed; 1 % removed and 1 % added; the same bytes under new ETags) into two state directories side by
side: one keeping and adopting the sitemaps' parts, one with them off (``EngineSettings.sitemap_parts``), every
reading listing its URLs one by one. Each cycle runs at the same instant in both (a clock that stands still for
the job) with the same job id, so the two must agree to the byte: the result's counts, each line of
``urls.jsonl`` and ``changes.jsonl`` (as sets: lines come in the order the sitemaps were read), the index's
rows, and the crawl database as the port reads it. Left out: where a capture sits in the job's WARC files
(``warc``: its offset follows the order the pages were fetched), and a record's ``version``, which counts
writes: an adopted part writes none.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest
from harvester.model.records import SitemapIngestionResult
from harvester.pipeline.sitemap_step.partial import PartialAdoption
from harvester.settings import EngineSettings
from harvester.sitemap.elements import ElementDiff
from tests.archive.checks import index_rows

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)
CYCLES = ("first crawl", "unchanged", "1% changed", "10% changed", "1% removed, 1% added", "unchanged", "redeployed")
START = datetime(2026, 3, 1, tzinfo=UTC)
#: Urlsets of a hundred URLs, and fewer after some are removed, keep parts here (the default keeps none below 100).
SMALLEST = 10
#: A field of a line whose value follows the order of the job's writes, not what it found (see the docstring).
_ORDERED = ("warc", "fetch_ms")


def alter(site: LiveSite, cycle: str, rng: random.Random) -> None:
    paths = site.page_paths()
    share = {"1% changed": 100, "10% changed": 10}.get(cycle)
    if share:
        for path in rng.sample(paths, max(1, len(paths) // share)):
            site.change(path)
    elif cycle == "redeployed":  # the same bytes under new ETags: each sitemap comes back 200, not 304
        site.deployment += "-again"
    elif cycle.startswith("1% removed"):
        for path in rng.sample(paths, max(1, len(paths) // 100)):
            site.unlist(path)
        for n in range(max(1, len(paths) // 100)):
            site.add(f"/pages/added-{n}.html")


def crawl(
    state: Path, request: JobRequest, *, at: datetime, parts: bool, concurrency: int = 4, **more: Any
) -> SitemapIngestionResult:
    with LocalHarvest.open(state) as harvest:
        clocked(harvest, at)
        settings = EngineSettings(sitemap_parts=parts, sitemap_part_min_urls=SMALLEST, **more)
        runner = LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=concurrency)
        outcome = asyncio.run(runner.crawl(request))
        assert outcome.result is not None
        return outcome.result


def clocked(harvest: LocalHarvest, at: datetime) -> None:
    """The engines the harvest makes tell the time ``at``."""
    making = harvest.engine

    def engine(*args: Any, **kwargs: Any) -> Any:
        made = making(*args, **kwargs)
        made.clock = lambda: at
        return made

    harvest.engine = engine  # type: ignore[method-assign]


def lines(path: str) -> list[bytes]:
    """The file's lines, each as written, or without the fields that follow the order of writes or the
    network's timing (``fetch_ms``)."""
    out = []
    for line in Path(path).read_bytes().splitlines():
        if any(f'"{name}":'.encode() in line for name in _ORDERED):
            record = json.loads(line)
            for name in _ORDERED:
                record.pop(name, None)
            line = json.dumps(record, sort_keys=True).encode()
        out.append(line)
    return sorted(out)


def index_of(location: str | None) -> list[dict[str, Any]]:
    """The job's index, row by row (the columns of where a capture sits in the WARC files left out)."""
    assert location is not None
    where = ("warc_filename", "warc_record_offset", "warc_record_length")
    return [{k: v for k, v in row.items() if k not in where} for row in index_rows(Path(location))]


def crawl_database(state: Path, site: str) -> dict[str, dict[str, Any]]:
    with LocalHarvest.open(state) as harvest:
        records = {
            r.url: r.model_dump(mode="json", exclude={"version", "warc"}) for r in harvest.crawldb.site_urls(site)
        }
        sitemaps = {s.url: s.model_dump(mode="json", exclude={"warc"}) for s in harvest.crawldb.site_sitemaps(site)}
    return {"urls": records, "sitemaps": sitemaps}


def adopted(state: Path, job_id: str, *, partly: bool = False) -> int:
    """How many parts the job adopted (``partly``: of those, how many in part)."""
    partial = " AND excluded IS NOT NULL" if partly else ""
    with closing(sqlite3.connect(state / "harvest.db")) as db:
        sql = f"SELECT count(*) FROM job_parts WHERE job_id = ?{partial}"
        return int(db.execute(sql, (job_id,)).fetchone()[0])


def summary(result: SitemapIngestionResult) -> dict[str, Any]:
    """The result but what is one run's own: its job, places, times and fetch latencies."""
    dumped: dict[str, Any] = result.model_dump(
        mode="json",
        exclude={
            "job_id",
            "processed_urls",
            "changes_location",
            "url_index",
            "start_time",
            "end_time",
            "total_duration",
        },
    )
    if dumped.get("fetches"):
        dumped["fetches"].pop("latency_ms", None)
    return dumped


Check = Callable[[SitemapIngestionResult, SitemapIngestionResult], None]


def side_by_side(
    states: dict[bool, Path], site: LiveSite, request: JobRequest, *, at: datetime, label: object, concurrency: int = 4
) -> SitemapIngestionResult:
    """Runs the job in both state directories (parts on and off) and checks that the two agree to the byte:
    the result's counts, ``urls.jsonl``, ``changes.jsonl``, the index's rows and the crawl database; the
    result of the one with parts."""
    results = {
        parts: crawl(state, request, at=at, parts=parts, concurrency=concurrency) for parts, state in states.items()
    }
    ours, theirs = results[True], results[False]
    assert summary(ours) == summary(theirs), label
    assert lines(ours.processed_urls) == lines(theirs.processed_urls), label
    assert lines(ours.changes_location) == lines(theirs.changes_location), label
    assert index_of(ours.url_index) == index_of(theirs.url_index), label  # (each sorted by SURT key)
    assert crawl_database(states[True], site.base) == crawl_database(states[False], site.base), label
    return ours


def element_comparisons(monkeypatch: pytest.MonkeyPatch) -> list[ElementDiff]:
    """The element comparisons the readings make from now on (``PartialAdoption.elements``), those that apply."""
    compared: list[ElementDiff] = []
    elements = PartialAdoption.elements

    def spied(self: PartialAdoption, *args: Any, **kwargs: Any) -> ElementDiff | None:
        found = elements(self, *args, **kwargs)
        if found is not None:
            compared.append(found)
        return found

    monkeypatch.setattr(PartialAdoption, "elements", spied)
    return compared


class Killed(BaseException):
    """The process died (nothing in Harvester catches this)."""


def crawl_killed(state: Path, request: JobRequest, adopting: Callable[..., bool]) -> None:
    """Runs the job with parts, one sitemap at a time, its store's ``adopt_part`` replaced by
    ``adopting(adopt, *args, **kwargs)``, which raises Killed when the process is to die."""
    with LocalHarvest.open(state) as harvest:
        adopt = harvest.store.adopt_part
        harvest.store.adopt_part = lambda *args, **kwargs: adopting(adopt, *args, **kwargs)  # type: ignore[method-assign]
        settings = EngineSettings(sitemap_parts=True, sitemap_part_min_urls=SMALLEST)
        with pytest.raises(Killed):
            asyncio.run(LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=1).crawl(request))


@pytest.mark.parametrize("fetch_pages", [True, False], ids=["pages", "no-pages"])
def test_a_cycle_that_adopts_parts_writes_what_listing_every_entry_writes(live_site, tmp_path, fetch_pages):
    site = live_site(pages=400, sitemaps=4)
    rng = random.Random(39)
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, cycle in enumerate(CYCLES):
        alter(site, cycle, rng)
        at = START + timedelta(days=n)
        job_id = f"cycle-{n}"
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=fetch_pages, job_id=job_id)
        side_by_side(states, site, request, at=at, label=cycle)
        assert adopted(states[False], job_id) == 0
        if cycle in ("unchanged", "redeployed"):  # every urlset's part adopted whole
            assert adopted(states[True], job_id) == 4, cycle
        if "%" in cycle:  # the urlsets with changed entries: adopted in part, those entries listed one by one
            assert adopted(states[True], job_id, partly=True) >= 1, cycle
        # A sitemap keeps the documents of its part and of the one before (a job may still read them).
        folders = (states[True] / "documents" / "sites").glob("*/parts/*")
        assert all(len(list(folder.iterdir())) <= 4 for folder in folders if folder.is_dir()), cycle


#: Jobs of one site with other options between them: a job about some pages only writes their crawl
#: records (the parts that hold them must not be adopted after), a job fetching pages moves them again.
MIXED = (
    ("first crawl", {"fetch_pages": False}),
    ("unchanged", {"fetch_pages": False, "include": ("*/pages/1*",)}),
    ("unchanged", {"fetch_pages": False}),
    ("unchanged", {"fetch_pages": True}),
    ("1% changed", {"fetch_pages": False}),
    ("unchanged", {"fetch_pages": True}),
    ("unchanged", {"fetch_pages": False}),
)


def test_jobs_with_other_options_between_cycles_leave_nothing_stale_to_adopt(live_site, tmp_path):
    site = live_site(pages=400, sitemaps=4)
    rng = random.Random(40)
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    taken = []
    for n, (cycle, options) in enumerate(MIXED):
        alter(site, cycle, rng)
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, job_id=f"job-{n}", **options)
        side_by_side(states, site, request, at=START + timedelta(days=n), label=(n, cycle, options))
        taken.append(adopted(states[True], f"job-{n}"))
    # Adopted where nothing moved: the job about /pages/1* had other options (its own listing), the job after
    # it found every urlset's records written since their parts were made (each lists a /pages/1* page).
    assert taken[:3] == [0, 0, 0]
    assert taken[3] == 0  # a job fetching pages: every URL of the no-pages parts is due (never fetched)
    assert taken[6] == 4  # after a job that fetched everything: nothing due, nothing moved


def test_a_sitemap_delivered_again_after_its_part_was_adopted_counts_it_once(live_site, tmp_path):
    """A kill right after the adoption committed (before the sitemap was finished): the sitemap's task comes
    back, and the sitemap is finished as adopted, its URLs neither lost nor counted twice."""
    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request, at=START, parts=True)

    def dying(adopt: Callable[..., bool], *args: Any, **kwargs: Any) -> bool:
        if adopt(*args, **kwargs):
            raise Killed
        return False

    crawl_killed(state, request, dying)
    site.reset_log()
    resumed = crawl(state, request, at=START + timedelta(days=1), parts=True)
    # The urlset adopted before the kill is not asked for again; the other one is (and adopted now).
    assert len([hit for hit in site.hits if hit.path.startswith("/sitemaps/")]) == 1
    records = [json.loads(line) for line in Path(resumed.processed_urls).read_bytes().splitlines()]
    assert resumed.total_urls == len(records) == len({r["url"] for r in records}) == 200
    assert resumed.changes.listed == 200 and resumed.sitemaps_ok == 3  # the index and its two urlsets
    assert adopted(state, resumed.job_id) == 2


def test_a_sitemap_delivered_again_after_its_part_was_adopted_in_part_counts_it_once(live_site, tmp_path):
    """A kill right after a part was adopted in part (its changed entries listed one by one first): the
    sitemap's task comes back and finishes it as adopted, every URL once."""
    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request, at=START, parts=True)
    for path in site.page_paths()[:4]:
        site.change(path)
    site.unlist(site.page_paths()[5])
    site.add("/pages/added.html")

    def dying(adopt: Callable[..., bool], *args: Any, **kwargs: Any) -> bool:
        if adopt(*args, **kwargs) and kwargs.get("checkpoint") is not None:
            raise Killed
        return False

    crawl_killed(state, request, dying)
    resumed = crawl(state, request, at=START + timedelta(days=1), parts=True)
    records = [json.loads(line) for line in Path(resumed.processed_urls).read_bytes().splitlines()]
    assert sorted(r["url"] for r in records) == sorted(site.url(path) for path in site.page_paths())
    assert resumed.total_urls == len(records) == 200
    assert resumed.changes.listed == 199 and resumed.changes.new == 1 and resumed.changes.removed == 1
    assert adopted(state, resumed.job_id, partly=True) == 2


#: A part made of one adopted in part (its records still naming the earlier part's job), then replaced by a
#: listing of the whole urlset (a job about some pages wrote records of it in between) that leaves a URL of it
#: unlisted and not orphan, then the URL orphaned.
INHERITED = (
    ("first crawl", {}),
    ("two pages changed", {}),
    ("a job about some pages", {"include": ("*/pages/1*",)}),
    ("one unlisted, a urlset missing", {}),
    ("urlset back", {}),
)


def test_a_url_left_out_of_a_part_that_replaced_an_inheriting_one_reads_as_it_did(live_site, tmp_path):
    site = live_site(pages=200, sitemaps=2)
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, (cycle, options) in enumerate(INHERITED):
        if cycle == "two pages changed":
            site.change("/pages/2.html")
            site.change("/pages/3.html")
        replace(site, cycle, "/pages/0.html")
        request = JobRequest(
            site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id=f"cycle-{n}", **options
        )
        ours = side_by_side(states, site, request, at=START + timedelta(days=n), label=cycle)
    assert adopted(states[True], "cycle-1", partly=True) == 2
    assert ours.changes.removed == 1


def test_a_reading_that_compared_and_was_cut_short_lists_every_entry_when_resumed(live_site, tmp_path):
    """A kill just before an adoption in part, once the reading had kept entries for the part (past its
    checkpoint, unrecorded); then an entry the reading kept changes: the resumed reading starts over and lists
    every entry, none lost."""
    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request, at=START, parts=True)
    zero = [path for path in site.page_paths() if site.site[path].sitemap == 0]
    site.change(zero[-1])

    def dying(adopt: Callable[..., bool], *args: Any, **kwargs: Any) -> bool:
        if kwargs.get("checkpoint") is not None:
            raise Killed
        return adopt(*args, **kwargs)

    crawl_killed(state, request, dying)
    site.change(zero[0])
    resumed = crawl(state, request, at=START + timedelta(days=1), parts=True)
    records = [json.loads(line) for line in Path(resumed.processed_urls).read_bytes().splitlines()]
    assert sorted(r["url"] for r in records) == sorted(site.url(path) for path in site.page_paths())
    assert resumed.total_urls == 200


#: Pages that move between urlsets, and a page a second urlset lists too: a part whose URL another urlset of
#: the job listed first is not adopted (that URL is the job's already), and a URL gone from a part to another
#: urlset is the other's.
MOVES = ("first crawl", "a page moved", "a page listed twice", "unchanged", "a page moved back")


def move(site: LiveSite, cycle: str, pages: list[str]) -> None:
    if cycle == "a page moved":
        site.list_only_in(pages[0], 1)
    elif cycle == "a page listed twice":
        site.list_also(pages[2], 0)
        site.change(pages[1])
    elif cycle == "a page moved back":
        site.list_only_in(pages[0], 0)


@pytest.mark.parametrize("fetch_pages", [True, False], ids=["pages", "no-pages"])
def test_pages_moving_between_urlsets_read_as_listing_every_entry_reads_them(live_site, tmp_path, fetch_pages):
    """(One sitemap read at a time: which of two urlsets lists a page first is the order they are read in,
    and its record names that one.)"""
    site = live_site(pages=200, sitemaps=2)
    pages = [path for path in site.page_paths() if site.site[path].sitemap == 0][:2]
    pages.append(next(path for path in site.page_paths() if site.site[path].sitemap == 1))
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, cycle in enumerate(MOVES):
        move(site, cycle, pages)
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=fetch_pages, job_id=f"c-{n}")
        side_by_side(states, site, request, at=START + timedelta(days=n), label=cycle, concurrency=1)
        if cycle == "a page moved":
            assert adopted(states[True], f"c-{n}", partly=True) >= 1


#: A part adopted, then replaced by a listing that leaves a URL of it unlisted and not orphan (another urlset
#: went missing: the tree is not whole), then the URL orphaned once the urlset is back.
REPLACED = ("first crawl", "unchanged", "one unlisted, a urlset missing", "urlset back")


def replace(site: LiveSite, cycle: str, gone: str) -> None:
    if cycle.startswith("one unlisted"):
        site.unlist(gone)
        site.break_document("/sitemaps/1.xml", 404)
    elif cycle == "urlset back":
        site.break_document("/sitemaps/1.xml", None)


def test_a_url_left_out_of_a_part_that_replaced_an_adopted_one_reads_as_the_adopter_listed_it(live_site, tmp_path):
    """A record the part's maker listed reads as listed by the part's adopter; when a job that lists the
    sitemap anew (and does not list the URL any more, nor orphan it) replaces the part, the record still
    reads so, and its orphaning later says when it was last listed as a listing one by one would."""
    site = live_site(pages=200, sitemaps=2)
    gone = site.page_paths()[0]
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, cycle in enumerate(REPLACED):
        replace(site, cycle, gone)
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id=f"cycle-{n}")
        ours = side_by_side(states, site, request, at=START + timedelta(days=n), label=cycle)
    assert ours.changes.removed == 1
    assert adopted(states[True], "cycle-1") == 2


def test_a_cycle_with_a_few_entries_changed_lists_only_those_one_by_one(live_site, tmp_path, monkeypatch):
    """The partly changed re-crawl costs per changed entry: with 1 % of the pages changed (lastmod advanced), a
    cycle lists those URLs one by one and takes the rest of each changed urlset from its part."""
    site = live_site(pages=400, sitemaps=4)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=True)
    crawl(state, request.model_copy(update={"job_id": "first"}), at=START, parts=True)
    changed = random.Random(39).sample(site.page_paths(), 4)
    for path in changed:
        site.change(path)
    compared = element_comparisons(monkeypatch)
    result = crawl(state, request.model_copy(update={"job_id": "second"}), at=START + timedelta(days=1), parts=True)
    with LocalHarvest.open(state) as harvest:
        taken = harvest.store.page_rows.adopted("second")
    one_by_one = result.total_urls - sum(a.urls for a in taken)
    assert result.total_urls == 400 and len(taken) == 4
    assert one_by_one <= 4 * len(changed)
    assert sorted(u for a in taken for u in a.excluded) == sorted(site.url(path) for path in changed)
    # Each changed urlset was compared with its stored copy element by element: only the changed ones parsed.
    assert len(compared) == len({site.site[path].sitemap for path in changed})
    assert sum(len(found.added) for found in compared) == sum(len(found.removed) for found in compared) == 4


def test_a_urlset_that_lists_a_kept_url_twice_is_read_whole(live_site, tmp_path):
    """An entry whose element the stored copy holds is kept unparsed; when an element read apart has its URL
    too (the urlset repeats the entry), which of the two comes first decides which one is the duplicate: the
    urlset is read whole, as a listing one by one reads it."""
    site = live_site(pages=200, sitemaps=2)
    zero = [path for path in site.page_paths() if site.site[path].sitemap == 0]
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, cycle in enumerate(("first crawl", "a page repeated", "unchanged", "repeat gone")):
        if cycle == "a page repeated":
            site.repeat(zero[5])
            site.change(zero[7])
        elif cycle == "repeat gone":
            site.repeat(zero[5], False)
            site.change(zero[8])
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id=f"c-{n}")
        ours = side_by_side(states, site, request, at=START + timedelta(days=n), label=cycle)
        if cycle == "a page repeated":
            assert ours.entries_dropped == {"duplicate_in_sitemap": 1}
            assert adopted(states[True], f"c-{n}", partly=True) == 0  # (urlset 0 listed whole)
        if cycle == "repeat gone":  # (its part counted a drop: compared entry by entry)
            assert adopted(states[True], f"c-{n}", partly=True) == 1


def verbatim(state: Path) -> list[bool]:
    """Each current part's ``verbatim``."""
    with closing(sqlite3.connect(state / "harvest.db")) as db:
        return [
            json.loads(body).get("verbatim", False)
            for (body,) in db.execute("SELECT part FROM crawl_parts WHERE part IS NOT NULL")
        ]


def test_a_part_whose_lines_carry_a_later_listings_extensions_is_compared_entry_by_entry(live_site, tmp_path):
    """A URL two urlsets list, the second with an image the first lacks: its record (and the part line the
    first urlset's part holds) carries that image. Once the second stops listing it, the first urlset's element
    of it is unchanged but its line is not what a listing writes now: the part is not a verbatim listing of
    its document, so it is compared entry by entry, which lists that URL again."""
    site = live_site(pages=200, sitemaps=2)
    zero = [path for path in site.page_paths() if site.site[path].sitemap == 0]
    site.list_also(zero[3], 1, image=True)
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, cycle in enumerate(("first crawl", "listed once, a page changed", "another page changed")):
        if cycle == "listed once, a page changed":
            site.list_only_in(zero[3], 0)
            site.change(zero[9])
        elif cycle == "another page changed":
            site.change(zero[10])
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id=f"c-{n}")
        side_by_side(states, site, request, at=START + timedelta(days=n), label=cycle, concurrency=1)
        if cycle == "first crawl":  # (the second urlset listed a URL the first had: it keeps no part)
            assert verbatim(states[True]) == [False]
        else:
            assert adopted(states[True], f"c-{n}", partly=True) >= 1
    assert True in verbatim(states[True])  # (made by a job without such records: verbatim again)


def test_a_urlset_larger_than_the_element_bound_is_compared_entry_by_entry(live_site, tmp_path, monkeypatch):
    """A urlset past ``ELEMENTS_MAX_BYTES`` is not held twice in memory with its elements: parsed whole, each
    entry compared with its part's line, it is adopted in part all the same."""
    monkeypatch.setattr("harvester.pipeline.sitemap_step.partial.ELEMENTS_MAX_BYTES", 1000)
    compared = element_comparisons(monkeypatch)
    site = live_site(pages=200, sitemaps=2)
    states = {True: tmp_path / "parts", False: tmp_path / "one-by-one"}
    for n, cycle in enumerate(("first crawl", "1% changed")):
        alter(site, cycle, random.Random(39))
        request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id=f"c-{n}")
        side_by_side(states, site, request, at=START + timedelta(days=n), label=cycle)
    assert adopted(states[True], "c-1", partly=True) >= 1
    assert compared == []


def test_a_part_made_when_the_jobs_index_failed_has_the_rows_of_every_line(live_site, tmp_path, monkeypatch):
    """The job's index is its records' view: when it cannot be built (a /tmp too small), the job ends all the
    same, and the parts it makes of the parts it adopted in part still get the index rows of the entries it
    listed one by one (made of their lines): a later job adopting them whole has a row for every URL."""
    from harvester.pipeline import job_index

    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    crawl(state, request.model_copy(update={"job_id": "first"}), at=START, parts=True)
    for path in site.page_paths()[:6]:
        site.change(path)
    build = job_index.build_index

    def broken(*args: Any, **kwargs: Any) -> int:
        raise OSError("No space left on device")

    monkeypatch.setattr(job_index, "build_index", broken)
    second = crawl(state, request.model_copy(update={"job_id": "second"}), at=START + timedelta(days=1), parts=True)
    assert second.url_index is None and adopted(state, "second", partly=True) == 2
    monkeypatch.setattr(job_index, "build_index", build)
    third = crawl(state, request.model_copy(update={"job_id": "third"}), at=START + timedelta(days=2), parts=True)
    assert adopted(state, "third") == 2 and adopted(state, "third", partly=True) == 0
    urls = sorted(json.loads(line)["url"] for line in Path(third.processed_urls).read_bytes().splitlines())
    assert sorted(row["url"] for row in index_of(third.url_index)) == urls and len(urls) == 200


def made_parts(state: Path) -> int:
    with closing(sqlite3.connect(state / "harvest.db")) as db:
        return int(db.execute("SELECT count(*) FROM crawl_parts WHERE part IS NOT NULL").fetchone()[0])


def test_a_sitemap_read_in_a_second_delivery_that_recorded_nothing_before_gets_its_part(live_site, tmp_path):
    """A reading that needed a second delivery (the first answered 503: nothing listed) lists what one
    reading lists: it makes its part, which the next job adopts."""
    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    site.break_document("/sitemaps/0.xml", 503, times=1)
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False)
    for n in range(2):
        at = START + timedelta(days=n)
        result = crawl(
            state, request.model_copy(update={"job_id": f"c-{n}"}), at=at, parts=True, retry_backoff_seconds=0.01
        )
        assert result.total_urls == 200
        assert (made_parts(state), adopted(state, f"c-{n}")) == [(2, 0), (2, 2)][n]


def crawl_cut(
    state: Path, request: JobRequest, *, at: datetime, record_batch: int = 49, at_checkpoint: int | None = None
) -> None:
    """Runs the job with parts, one sitemap at a time, killed right after a batch of its pages was recorded
    (the first, or the one whose checkpoint is ``at_checkpoint``): its reading cut short past a checkpoint,
    as an invocation's end or a kill cuts it."""
    with LocalHarvest.open(state) as harvest:
        record = harvest.store.record_pages

        def dying(*args: Any, **kwargs: Any) -> Any:
            recorded = record(*args, **kwargs)
            if at_checkpoint is None or kwargs["checkpoint"] == at_checkpoint:
                raise Killed
            return recorded

        harvest.store.record_pages = dying  # type: ignore[method-assign]
        clocked(harvest, at)
        settings = EngineSettings(sitemap_parts=True, sitemap_part_min_urls=SMALLEST, record_batch=record_batch)
        with pytest.raises(Killed):
            asyncio.run(LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=1).crawl(request))


def lastmods_of(result: SitemapIngestionResult, url: str) -> list[str]:
    lines = [json.loads(line) for line in Path(result.processed_urls).read_bytes().splitlines()]
    return [line["last_modified"] for line in lines if line["url"] == url]


@pytest.mark.parametrize("changed", [False, True], ids=["same document", "a recorded entry changed"])
def test_a_reading_resumed_on_the_bytes_it_read_before_gets_its_part(live_site, tmp_path, changed):
    """A first crawl killed once its first urlset's reading recorded a batch (as a reading cut short by an
    invocation's end is), then resumed. On the same document the reading goes on from its checkpoint and
    the job keeps both urlsets' parts: the next job adopts both. When an entry the first delivery recorded
    changed meanwhile (its lastmod; its URL the same, so the reading goes on), the job's record of it is the
    first document's, which the document read last does not list: no part of that urlset; the next job
    lists it one by one (its record then the new document's) and makes the part the job after adopts."""
    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id="c-0")
    crawl_cut(state, request, at=START)
    first = next(path for path in site.page_paths() if site.site[path].sitemap == 0)
    if changed:
        site.change(first)
    made, lastmods = [], []
    for n in range(3):
        job = request.model_copy(update={"job_id": f"c-{n}"})
        result = crawl(state, job, at=START + timedelta(days=n), parts=True)
        assert result.total_urls == 200
        made.append((made_parts(state), adopted(state, f"c-{n}")))
        lastmods += lastmods_of(result, site.url(first))
    assert made == ([(1, 0), (2, 1), (2, 2)] if changed else [(2, 0), (2, 2), (2, 2)])
    assert (lastmods[0] != lastmods[1], lastmods[1] == lastmods[2]) == (changed, True)


@pytest.mark.parametrize("cut", ["every entry recorded", "the last batch unsent"])
def test_a_reading_resumed_on_other_bytes_past_what_it_verifies_gets_no_part(live_site, tmp_path, cut):
    """A first crawl killed once its urlset's reading recorded every entry (before it finished the sitemap),
    or, fetching pages, between its last batch's record and the sending of that batch's tasks (the bytes
    the checkpoint vouches for end before that batch); an entry of what was recorded then changes (its
    lastmod). The resumed reading records nothing more, or that batch again (the job keeps its first
    records), so no checkpoint of its own says what it found: the job's outcome does, and the job keeps no
    part; the next job lists the urlset and writes the new lastmod."""
    fetch = cut == "the last batch unsent"
    site = live_site(pages=1400 if fetch else 200, sitemaps=1 if fetch else 2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=fetch, job_id="c-0")
    crawl_cut(state, request, at=START, record_batch=300 if fetch else 49, at_checkpoint=1400 if fetch else 100)
    changed = site.page_paths()[-1] if fetch else next(p for p in site.page_paths() if site.site[p].sitemap == 0)
    site.change(changed)
    lastmods = []
    for n in range(2):
        job = request.model_copy(update={"job_id": f"c-{n}"})
        at = START + timedelta(minutes=5 * n) if fetch else START + timedelta(days=n)
        result = crawl(state, job, at=at, parts=True, record_batch=300 if fetch else 49)
        assert result.total_urls == len(site.page_paths())
        assert adopted(state, f"c-{n}") == (0 if n == 0 or fetch else 1), n  # (the other urlset's)
        lastmods += lastmods_of(result, site.url(changed))
    assert lastmods[0] != lastmods[1]


def test_a_reading_that_started_over_on_an_emptied_urlset_gets_no_part(live_site, tmp_path):
    """A first crawl killed once its first urlset's reading recorded a batch; the urlset is then emptied. The
    resumed reading finds fewer entries than its checkpoint, starts over, and lists none: no checkpoint of
    its own, but the job's outcome says it started over, and the job keeps no part of it (the URLs recorded
    before are the job's, not the empty urlset's). The next job lists only the other urlset's URLs."""
    site = live_site(pages=200, sitemaps=2)
    state = tmp_path / "state"
    request = JobRequest(site=site.url("/"), rate_limit_delay=0.0001, fetch_pages=False, job_id="c-0")
    crawl_cut(state, request, at=START)
    for path in [path for path in site.page_paths() if site.site[path].sitemap == 0]:
        site.unlist(path)
    totals = []
    for n in range(2):
        job = request.model_copy(update={"job_id": f"c-{n}"})
        totals.append(crawl(state, job, at=START + timedelta(days=n), parts=True).total_urls)
    assert totals == [149, 100]
