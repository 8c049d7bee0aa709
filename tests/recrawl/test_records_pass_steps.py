"""A job's end whose records pass runs in steps (a step a few records, each stored as a piece, the last step
joining them) writes what an end in one step writes: the same records, change feed, index rows, summary and
sitemap parts, cycle after cycle (a first crawl with pages fetched and some failing, a re-crawl with pages
changed, failing and no longer listed, an unchanged re-crawl that adopts the parts the stepped ends made).

Two state folders crawl the same live site (127.0.0.1) in each cycle; one ends its jobs in one step, the
other in steps of ``end_step_seconds=0`` over record pages of ``PAGE`` records.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from msgspec.structs import replace

from harvester.adapters.local import record_rows
from harvester.adapters.local.crawl import SqliteCrawlDatabase
from harvester.adapters.local.documents import FolderDocumentStore
from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.demo.live import LiveSite
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.crawl import Collected
from harvester.model.messages import JobRequest
from harvester.model.records import SitemapIngestionResult
from harvester.model.state import EndProgress
from harvester.pipeline import completion
from harvester.pipeline.records_pass import RecordsPass
from harvester.settings import EngineSettings

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]), retries=0)
SETTINGS = EngineSettings(retry_backoff_seconds=0.01, retry_backoff_max_seconds=0.01, max_error_details=4)
#: Records a page of the local store's records in the stepped runs.
PAGE = 7


def crawl(state: Path, site: LiveSite, *, settings: EngineSettings = SETTINGS) -> SitemapIngestionResult:
    with LocalHarvest.open(state) as harvest:
        runner = LocalRunner(harvest, policy=POLICY, settings=settings, concurrency=1)
        outcome = asyncio.run(runner.crawl(JobRequest(site=site.url("/"), rate_limit_delay=0.0001)))
        assert outcome.result is not None
        return outcome.result


def crawl_in_steps(
    state: Path, site: LiveSite, monkeypatch: pytest.MonkeyPatch, *, step_seconds: float = 0
) -> tuple[SitemapIngestionResult, int, list[int]]:
    """A crawl whose end runs in steps (``completion.finish``, a step a record page, then a step a sitemap
    part); the pieces stored, and where each step of the parts left off."""
    pieces, parts_at = [], []
    store_piece, paused = RecordsPass.store_piece, completion._paused

    def noted(*args: Any, **kwargs: Any) -> EndProgress:
        progress = paused(*args, **kwargs)
        if progress.parts_at is not None:
            parts_at.append(progress.parts_at)
        return progress

    def counted(self: RecordsPass, stem: str) -> None:
        pieces.append(stem)
        store_piece(self, stem)

    def in_steps(ctx: Any, job_id: str, **_: Any) -> SitemapIngestionResult:
        result = completion.finish(ctx, job_id)
        assert result is not None
        return result

    with monkeypatch.context() as patched:
        patched.setattr(record_rows, "_PAGE_SIZE", PAGE)
        patched.setattr(RecordsPass, "store_piece", counted)
        patched.setattr(completion, "write_result", in_steps)
        patched.setattr(completion, "_paused", noted)
        result = crawl(state, site, settings=replace(SETTINGS, end_step_seconds=step_seconds))
    return result, len(pieces), parts_at


def outputs(state: Path, site: LiveSite, result: SitemapIngestionResult) -> dict[str, Any]:
    """What a job's end wrote, without what differs between two runs (job ids, times)."""
    with LocalHarvest.open(state) as harvest:
        documents = harvest.documents
        job = result.job_id
        records = [json.loads(line) for line in documents.get(f"jobs/{job}/urls.jsonl").splitlines()]
        feed = [json.loads(line) for line in documents.get(f"jobs/{job}/changes.jsonl").splitlines()]
        assert result.url_index is not None
        files = sorted(Path(result.url_index).glob("*.parquet"))
        for file in files:  # (each file of the index sorted by SURT key)
            keys = duckdb.sql(f"SELECT url_surtkey, url FROM read_parquet('{file}')").fetchall()
            assert keys == sorted(keys), file
        rows = duckdb.sql(
            "SELECT url, url_surtkey, change, status, fetch_status, sitemap, content_mime_type, content_digest,"
            " last_modified::VARCHAR, change_frequency, priority, crawl_state, error_message"
            f" FROM read_parquet('{result.url_index}/*.parquet') ORDER BY url"
        ).fetchall()
        parts = {}
        for sitemap in site.sitemap_urls:
            part, _ = harvest.crawldb.sitemap_part(site.base, sitemap)
            if part is not None:
                lines = documents.get(part.lines).splitlines()
                parts[sitemap] = (part.urls, [json.loads(line + b"}")["url"] for line in lines], part.due_at is None)
        steps = list(documents.keys("steps/"))
    summary = result.model_dump(
        mode="json",
        include={
            "status",
            "total_urls",
            "successful_processing",
            "failed_processing",
            "excluded_processing",
            "exclusions",
            "entries_dropped",
            "changes",
            "errors_omitted",
            "sitemaps_total",
            "sitemaps_ok",
        },
    )
    fetches = result.fetches
    assert fetches is not None
    return {
        "summary": summary,
        # (the fetches counted as one pass counts them: all but the latencies, which differ between runs)
        "fetches": (
            fetches.fetched,
            fetches.http_statuses,
            fetches.failures,
            fetches.failure_samples,
            fetches.size_bytes,
            fetches.latency_ms.count,
        ),
        "errors": [(e.url, e.kind, e.error) for e in result.error_details],
        "trust": {host: (c.went, c.confirmed, c.refuted) for host, c in result.lastmod_trust.items()},
        "records": [(r["url"], r["status"], r.get("change"), r.get("sitemap"), r.get("http_status")) for r in records],
        "feed": [(line["url"], line["change"]) for line in feed],
        "index": rows,
        "parts": parts,
        "steps left": steps,
    }


def differing_rows(got: dict[str, Any], expected: dict[str, Any]) -> str:
    """The index rows and records only one of two outputs has, and the other items that differ: what tells a
    difference in the crawls (which URLs each fetched) from one in the ends."""
    lines = [
        f"{key}: {got[key]!r} != {expected[key]!r}"
        for key in got
        if key not in ("index", "records") and got[key] != expected[key]
    ]
    for key in ("index", "records"):
        mine, theirs = set(got[key]), set(expected[key])
        lines += [f"{key} stepped only: {row}" for row in sorted(mine - theirs, key=str)]
        lines += [f"{key} one-step only: {row}" for row in sorted(theirs - mine, key=str)]
    return "\n".join(lines)


def test_an_end_whose_records_pass_runs_in_steps_writes_what_one_step_writes(live_site, tmp_path, monkeypatch):
    site = live_site(pages=240, sitemaps=2)
    for n in (3, 50, 130, 201, 222, 239):  # (more failures than the summary lists: the rest are counted)
        site.fail(f"/pages/{n}.html")
    one, stepped = tmp_path / "one", tmp_path / "stepped"

    def cycle() -> tuple[int, list[int]]:
        alone = crawl(one, site)
        result, pieces, parts_at = crawl_in_steps(stepped, site, monkeypatch)
        got, expected = outputs(stepped, site, result), outputs(one, site, alone)
        assert got == expected, differing_rows(got, expected)
        # (the records pass over, the parts one a step: each step goes on from where the last left off; the
        # step that finds the records pass over begins the parts at 0, or makes the first one; the outputs
        # are written in a step after the last part's)
        assert parts_at == list(range(parts_at[0], parts_at[0] + len(parts_at))) if parts_at else True
        return pieces, parts_at

    pieces, parts_at = cycle()
    assert pieces > 240 // PAGE  # (a first crawl, pages fetched: a step a record page)
    # (the second sitemap's part made in a step of its own, then the outputs in one of theirs)
    assert parts_at[-2:] == [1, 2]
    for n in range(0, 240, 9):
        site.change(f"/pages/{n}.html")
    for n in (3, 50):
        site.fail(f"/pages/{n}.html", 200)  # (back)
    for n in (7, 100, 180):
        site.fail(f"/pages/{n}.html", 410)
    for n in (11, 12, 150):
        site.unlist(f"/pages/{n}.html")
    assert cycle()[0] > 1
    assert cycle()[0] >= 1  # (unchanged: the parts the stepped ends made, adopted)


def test_the_summary_lists_the_sitemaps_errors_then_pages_up_to_the_cap_in_one_step_or_in_steps(
    live_site, tmp_path, monkeypatch
):
    """``max_error_details`` caps the errors listed, the failed sitemaps' first: the rest are counted."""
    site = live_site(pages=60, sitemaps=3)
    site.break_document("/sitemaps/2.xml", 500)
    for n in range(0, 60, 5):
        site.fail(f"/pages/{n}.html")
    alone = crawl(tmp_path / "one", site)
    stepped, _, _ = crawl_in_steps(tmp_path / "stepped", site, monkeypatch)
    for result in (alone, stepped):
        kinds = [e.kind for e in result.error_details]
        assert kinds == ["sitemap", "page", "page", "page"] and result.failed_processing > 3
        assert result.errors_omitted == result.failed_processing - 3
    assert outputs(tmp_path / "stepped", site, stepped) == outputs(tmp_path / "one", site, alone)


def test_an_end_with_more_parts_than_a_step_makes_makes_them_in_steps_of_their_own(live_site, tmp_path, monkeypatch):
    """An end whose records fit one step but whose sitemaps' parts are more than a step makes
    (``PARTS_IN_ONE_STEP``) stores its records as a piece and makes the parts in steps of their own, that many
    a step: the outputs are an end in one step's."""
    site = live_site(pages=330, sitemaps=3)  # (110 URLs a sitemap: each gets a part)
    monkeypatch.setattr(completion, "PARTS_IN_ONE_STEP", 2)
    alone = crawl(tmp_path / "one", site)
    stepped, pieces, parts_at = crawl_in_steps(tmp_path / "stepped", site, monkeypatch, step_seconds=300)
    # (two parts a step: the third in a step of its own; then the outputs in one of theirs)
    assert pieces == 1 and parts_at == [0, 2, 3]
    assert outputs(tmp_path / "stepped", site, stepped) == outputs(tmp_path / "one", site, alone)
    assert len(outputs(tmp_path / "one", site, alone)["parts"]) == 3


def test_an_end_whose_earlier_steps_kept_no_part_maker_makes_no_part(live_site, tmp_path, monkeypatch):
    """A step of an end that kept no part maker's state (parts were off for it: a deploy in the middle of the
    end) leaves the later steps without its lines: no part is made, rather than parts that lack them, and the
    next job lists every URL."""
    site = live_site(pages=240, sitemaps=2)
    state, made = tmp_path / "state", []
    part_maker = completion._part_maker

    def off_at_first(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return None if len(made) <= 2 else part_maker(*args, **kwargs)

    monkeypatch.setattr(completion, "_part_maker", off_at_first)
    first, pieces, _ = crawl_in_steps(state, site, monkeypatch)
    assert pieces > 2 and len(made) > 2 and first.total_urls == 240
    assert outputs(state, site, first)["parts"] == {}
    monkeypatch.setattr(completion, "_part_maker", part_maker)
    again = crawl(state, site)
    assert again.total_urls == 240 and again.changes.removed == 0


def test_an_end_whose_collection_goes_in_steps_returns_its_result_and_lets_its_states_go(
    live_site, tmp_path, monkeypatch
):
    """A crawl database whose collection pauses (as DynamoDB's does on a large site) makes the collection after
    the result go on in steps of their own, each from the state the last stored: the end still returns the
    result it wrote, the collection is given each state in turn, and no state is left under steps/."""
    site = live_site(pages=30, sitemaps=2)
    given: list[bytes | None] = []

    def collect(self: SqliteCrawlDatabase, site: str, ended: Any, **options: Any) -> Collected:
        given.append(options.get("resume"))
        return Collected(batches=4) if len(given) == 4 else Collected(paused=f"state {len(given)}".encode())

    monkeypatch.setattr(SqliteCrawlDatabase, "collect", collect)
    result, _, _ = crawl_in_steps(tmp_path / "stepped", site, monkeypatch, step_seconds=300)
    assert result.total_urls == 30
    assert given == [None, b"state 1", b"state 2", b"state 3"]
    with LocalHarvest.open(tmp_path / "stepped") as harvest:
        assert list(harvest.documents.keys("steps/")) == []


def test_a_collection_whose_state_cannot_be_stored_is_left_and_the_end_still_returns_its_result(
    live_site, tmp_path, monkeypatch, caplog
):
    """The collection after the result never fails the job's end: a paused one whose state cannot be stored
    is left (logged; what it did not collect is collected at the site's next end)."""
    site = live_site(pages=30, sitemaps=2)
    calls: list[bytes | None] = []

    def collect(self: SqliteCrawlDatabase, site: str, ended: Any, **options: Any) -> Collected:
        calls.append(options.get("resume"))
        return Collected(paused=b"state")

    put = FolderDocumentStore.put

    def failing_put(self: FolderDocumentStore, key: str, body: Any, **options: Any) -> str:
        if "/collect-" in key:
            raise OSError(28, "No space left on device")
        return put(self, key, body, **options)

    monkeypatch.setattr(SqliteCrawlDatabase, "collect", collect)
    monkeypatch.setattr(FolderDocumentStore, "put", failing_put)
    result, _, _ = crawl_in_steps(tmp_path / "stepped", site, monkeypatch, step_seconds=300)
    assert result.total_urls == 30 and calls == [None]
    assert "a collection's state could not be stored" in caplog.text
