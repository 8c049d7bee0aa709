"""What a ``PartMaker`` holds while a job's end goes through its records: places in its spool, not lines, and
few of them: a run of one sitemap's lines grows instead of adding a place a line, and the lines it holds back
to write together are written once many sitemaps hold some (a site of many small sitemaps)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import msgspec
import orjson

from harvester.adapters.local.documents import FolderDocumentStore
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus
from harvester.pipeline import parts
from harvester.pipeline.parts import MakerState, PartMaker
from harvester.settings import EngineSettings

SITE = "https://example.com"
#: The last fields of a line of a URL listed and not fetched (``crawldb.parts.tail``).
TAIL = {"discovered_at": "2026-11-01T00:00:00Z", "finished_at": "2026-11-01T00:00:00Z"} | {
    "fetch_reason": "not_due",
    "change": "not_due",
}


def maker(sitemaps: int, documents: object = None) -> PartMaker:
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
    context = SimpleNamespace(settings=EngineSettings(), documents=documents)
    return PartMaker(context, job, records)  # type: ignore[arg-type]


def line(n: int, sitemap: int, **fields: object) -> tuple[bytes, dict[str, object]]:
    record = {"url": f"{SITE}/page-{n}.html", "sitemap": f"{SITE}/sitemap-{sitemap}.xml", "status": "failed", **fields}
    return orjson.dumps(record), record


def test_a_sitemaps_fetched_lines_one_after_another_are_one_run():
    with maker(2) as made:
        for n in range(3000):
            made.fetched_line(*line(n, n // 1000 % 2))  # (1,000 of one sitemap, then of the other, ...)
        assert [len(made.fetched[f"{SITE}/sitemap-{s}.xml"]) for s in (0, 1)] == [2, 1]
        assert list(made.spool.lines(made.fetched[f"{SITE}/sitemap-0.xml"])) == [
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


def test_a_paused_makers_lines_are_read_by_a_later_one_a_run_a_sitemap_and_kind(tmp_path):
    """A step of a job's end stores its maker's spool with each sitemap's lines, keys and fetched lines in a
    run each (``pause``); a later step's maker reads them by range from the stored document (``resume``), the
    earlier steps' before its own, as one maker of all the lines holds them."""
    documents = FolderDocumentStore(tmp_path)
    one = maker(3)
    steps = [maker(3, documents) for _ in range(3)]
    for n in range(900):  # (three sitemaps' lines interleaved, a step a third of them)
        step = steps[n // 300]
        listed = line(n, n % 3, status="completed")[1] | TAIL
        fetched = line(n, (n + 1) % 3)
        for made in (one, step):
            made.listed_line(orjson.dumps(listed), listed)
            made.fetched_line(*fetched)
    last, stored = steps[-1], []
    for n, step in enumerate(steps[:-1]):
        state, spool = step.pause()
        assert all(len(runs) == 1 for kind in (state.lines, state.keys, state.fetched) for runs in kind.values())
        documents.put(f"steps/j/piece-{n}.spool", spool)
        stored.append(msgspec.json.decode(msgspec.json.encode(state), type=MakerState))  # (as a tally keeps it)
        step.close()
    for n in reversed(range(len(stored))):  # (the last piece first: each goes before what the maker holds)
        last.resume(stored[n], f"steps/j/piece-{n}.spool")
    one._flush()
    last._flush()
    for sitemap in (f"{SITE}/sitemap-{s}.xml" for s in range(3)):
        assert list(last.spool.lines(last.fetched[sitemap])) == list(one.spool.lines(one.fetched[sitemap]))
        assert last._keys(sitemap) == one._keys(sitemap)
        assert b"".join(last.spool.read(last.lines[sitemap])) == b"".join(one.spool.read(one.lines[sitemap]))
    assert last.counts == one.counts
    one.close()
    last.close()
