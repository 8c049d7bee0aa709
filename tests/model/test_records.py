"""The records' validation rules (reference/data-model.md): each rule refuses what it must.

Input is validated where it enters (``model_validate``, ``model_validate_json``: types, bounds, unknown
fields); a rule that must hold wherever a record is built (its ``__post_init__``) refuses a construction too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import get_args

import msgspec
import pytest

from harvester.archive.results import record_line
from harvester.crawldb.crawl_state import listed
from harvester.crawldb.schedule import Schedule
from harvester.model.base import Model, ValidationError
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState, SiteCrawl, SitemapCrawl
from harvester.model.messages import JobRequest, PageTask, Scope
from harvester.model.records import (
    BulkProcessingJob,
    JobCounts,
    JobRecord,
    JobStatus,
    LoaderState,
    SitemapIngestionResult,
    SitemapRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    body_of,
)
from harvester.sitemap import Image, PageEntry, parse_bytes
from harvester.urls import normalize, screen

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_sitemap_url_rules():
    assert SitemapURL(url="https://example.com/a", priority=1.0).status is UrlStatus.PENDING
    for priority in (-0.1, 1.01):
        with pytest.raises(ValidationError, match="priority"):
            SitemapURL.model_validate({"url": "https://e.x/", "priority": priority})
    with pytest.raises(ValidationError, match="status"):
        SitemapURL.model_validate({"url": "https://e.x/", "status": "done"})
    with pytest.raises(ValidationError, match="unknown field `lastmod`"):
        SitemapURL.model_validate_json(b'{"url": "https://e.x/", "lastmod": "2026-11-01T00:00:00Z"}')
    with pytest.raises(ValueError, match="needs an error_message"):  # (a construction too)
        SitemapURL(url="https://e.x/", status=UrlStatus.FAILED)
    with pytest.raises(ValidationError, match="needs an error_message"):
        SitemapURL.model_validate({"url": "https://e.x/", "status": "failed"})
    failed = SitemapURL.model_validate({"url": "https://e.x/", "status": "failed", "error_message": "HTTP 410 Gone"})
    assert failed.status is UrlStatus.FAILED and failed.error_message


def test_a_job_request_refuses_what_a_user_may_not_ask():
    for bad, where in (
        ({"site": "example.com/a"}, "site"),
        ({"site": "ftp://example.com/a"}, "site"),
        ({"site": "https:///nohost"}, "site"),
        ({"site": "https://e.x/" + "a" * 2048}, "site"),
        ({"site": "https://e.x/", "sitemaps": ["https://e.x/s.xml", "/s.xml"]}, r"sitemaps\[1\]"),
        ({"site": "https://e.x/", "include": ["re:("]}, r"include\[0\]"),
        ({"site": "https://e.x/", "rate_limit_delay": -0.5}, "rate_limit_delay"),
        ({"site": "https://e.x/", "max_depth": 51}, "max_depth"),
        ({"site": "https://e.x/", "job_id": "a b"}, "job_id"),
        ({"site": "https://e.x/", "job_id": "ab\n"}, "job_id"),
        ({"site": "https://e.x/", "scope": "world"}, "scope"),
        ({"site": "https://e.x/", "sites": ["https://e.x/"]}, "sites"),
    ):
        with pytest.raises(ValidationError, match=where):
            JobRequest.model_validate(bad)
        with pytest.raises(ValidationError, match=where):
            JobRequest.model_validate_json(json.dumps(bad))
    request = JobRequest.model_validate({"site": " https://e.x/ ", "rate_limit_delay": 1, "scope": "any"})
    assert (request.site, request.rate_limit_delay, request.scope.value) == ("https://e.x/", 1.0, "any")
    with pytest.raises(ValueError, match="site"):  # (the URL rules hold for a construction too)
        JobRequest(site="ftp://e.x/")


def job(**fields):
    return JobRecord(job_id="j", request=JobRequest(site="https://e.x/", **fields), start_time=T0)


def test_bulk_processing_job_rules():
    counts = JobCounts(urls_total=10, urls_succeeded=6, urls_failed=1, sitemaps_total=3, sitemaps_done=2)
    view = BulkProcessingJob.of(job(), counts, last_update=T0 + timedelta(seconds=5))
    assert (view.processed_count, view.current_url_index, view.progress_percentage) == (7, 7, 70.0)
    assert view.discovery_complete is False and view.rate_limit_delay == 0.05
    fields = view.model_dump()
    assert BulkProcessingJob.model_validate(fields) == view
    for change in (
        {"progress_percentage": 100.5},
        {"current_url_index": 11},
        {"processed_count": 8},
        {"rate_limit_delay": -1},
        {"status": "paused"},
    ):
        with pytest.raises(ValidationError, match=next(iter(change))):
            BulkProcessingJob.model_validate(fields | change)
    with pytest.raises(ValueError, match="processed_count"):
        BulkProcessingJob(**(fields | {"processed_count": 8}))


def test_progress_of_an_empty_job():
    empty = JobCounts(sitemaps_total=1, sitemaps_done=1)
    assert BulkProcessingJob.of(job(), empty, last_update=T0).progress_percentage == 0.0
    ended = job().model_copy(update={"status": JobStatus.COMPLETED})
    assert BulkProcessingJob.of(ended, empty, last_update=T0).progress_percentage == 100.0


def test_ingestion_result_rules():
    good = {
        "job_id": "j", "site": "https://e.x/", "status": "completed", "total_urls": 3,
        "successful_processing": 2, "failed_processing": 1, "start_time": T0, "end_time": T0 + timedelta(seconds=1),
        "total_duration": 1.0,
    }  # fmt: skip
    assert SitemapIngestionResult.model_validate(good).total_urls == 3
    for change in (
        {"total_urls": 4},
        {"end_time": T0},
        {"failed_processing": -1, "total_urls": 1},
        {"total_duration": -1},
    ):
        with pytest.raises(ValidationError):
            SitemapIngestionResult.model_validate(good | change)
    with pytest.raises(ValueError, match="total_urls"):
        SitemapIngestionResult(**(good | {"total_urls": 4}))


def test_done_needs_discovery_to_be_over():
    assert not JobCounts(urls_total=2, urls_succeeded=2, sitemaps_total=2, sitemaps_done=1).done
    assert JobCounts(urls_total=2, urls_succeeded=1, urls_failed=1, sitemaps_total=2, sitemaps_done=2).done
    assert not JobCounts().done  # nothing registered yet is not "done"


def test_a_checkpoint_never_runs_ahead_of_what_was_recorded():
    with pytest.raises(ValueError, match="pages_enqueued"):
        SitemapRecord(url="https://e.x/s.xml", origin="index", depth=2, pages_recorded=3, pages_enqueued=4)
    with pytest.raises(ValidationError, match="pages_enqueued"):
        SitemapRecord.model_validate_json(
            b'{"url":"https://e.x/s.xml","origin":"index","depth":2,"pages_recorded":3,"pages_enqueued":4}'
        )


def test_loader_state_view():
    sitemaps = [
        SitemapRecord(url="https://e.x/a.xml", origin="index", depth=2),
        SitemapRecord(url="https://e.x/b.xml", origin="index", depth=2, status=SitemapStatus.PROCESSING,
                      pages_recorded=7, pages_enqueued=5),
        SitemapRecord(url="https://e.x/c.xml", origin="index", depth=2, status=SitemapStatus.COMPLETED),
    ]  # fmt: skip
    state = LoaderState.of(sitemaps, JobCounts(urls_total=9, urls_succeeded=4, sitemaps_total=3, sitemaps_done=1))
    assert state.pending_sitemap_urls == ["https://e.x/a.xml"]
    assert state.in_progress_sitemaps == {"https://e.x/b.xml": 5}
    assert state.processed_sitemap_urls == ["https://e.x/c.xml"]
    assert (state.total_count, state.handled_count, state.completed) == (9, 4, False)


def _models_below(model: type[Model], seen: set[type[Model]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for field in msgspec.structs.fields(model):
        for kind in (field.type, *get_args(field.type)):
            for inner in (kind, *get_args(kind)):
                if isinstance(inner, type) and issubclass(inner, Model):
                    _models_below(inner, seen)


@pytest.mark.parametrize("stored", [JobRecord, SitemapRecord, SitemapURL, CrawlRecord, SitemapCrawl, SiteCrawl])
def test_stored_records_lose_nothing_without_their_empty_fields(stored):
    """body_of leaves None out: only right while no optional field of a stored model (or of a model inside
    it) defaults to anything but None."""
    models: set[type[Model]] = set()
    _models_below(stored, models)
    assert len(models) > 1 or stored is not SitemapURL
    for model in models:
        for field in msgspec.structs.fields(model):
            optional = type(None) in get_args(field.type)
            assert not optional or field.required or field.default is None, f"{model.__name__}.{field.name}"


def crawl_record() -> CrawlRecord:
    return CrawlRecord(
        url="https://example.com/a",
        fetch_interval=86400,
        next_fetch_time=T0,
        first_listed=T0,
        last_listed=T0,
        last_listed_job="j",
    )


def test_a_stored_record_reads_back_the_same():
    known = crawl_record()
    page = SitemapURL(url="https://example.com/a", last_modified=T0, known=known, extensions={"images": [{"loc": "x"}]})
    body = body_of(page)
    assert "null" not in body and SitemapURL.model_validate_json(body) == page


def test_a_url_line_is_its_stored_body_or_the_same_bytes_built_again():
    """The job's records reuse a stored body as the line where it is one: whichever way a line is made,
    it is the record without its empty fields and without the crawl database's snapshot."""
    known = crawl_record()
    pages = [
        SitemapURL(url="https://example.com/a", last_modified=T0, known=known),
        SitemapURL(
            url="https://例え.jp/ä?q=%22known%22:1",
            priority=0.3,
            last_modified=T0 + timedelta(microseconds=7),
            extensions={"images": [{"loc": "https://e.x/i.png", "title": 't "q"'}], "news": {"title": None}},
            status=UrlStatus.FAILED,
            error_message='HTTP 500 "known": :null',
        ),
        SitemapURL(url="https://example.com/b", status=UrlStatus.COMPLETED, finished_at=T0, fetch_reason="listed"),
    ]
    for page in pages:
        for body in (body_of(page), page.model_dump_json()):  # (a body written before body_of kept its nulls)
            line = json.loads(record_line(body))
            assert "known" not in line and None not in line.values()
            assert SitemapURL.model_validate(line) == page.model_copy(update={"known": None})
    plain = body_of(pages[2])
    assert record_line(plain) == plain.encode()  # reused as it is


def test_a_record_the_engine_builds_is_the_validated_one():
    """The engine builds a URL's record from values the parser and the crawl database already typed, without
    validating them again: for every kind of entry a sitemap may hold, and with a crawl record's fields, it
    is what validation builds (fields, the JSON, the stored body, read back), and no two records share
    their extensions."""
    fixture = Path(__file__).parent.parent / "sitemap" / "fixtures" / "urlset_extensions.xml"
    entries, _ = parse_bytes("https://example.com/sitemap.xml", fixture.read_bytes())
    pages = [e for e in entries if isinstance(e, PageEntry)]
    assert {"images", "news", "videos", "alternates"} <= {k for p in pages for k in p.extensions()}
    known = crawl_record()
    for page in pages:
        base = {
            "url": page.url,
            "last_modified": page.last_modified,
            "change_frequency": page.change_frequency,
            "priority": page.priority,
            "sitemap": "https://example.com/sitemap.xml",
            "extensions": page.extensions(),
            "discovered_at": T0,
        }
        listed = {**base, "status": UrlStatus.COMPLETED, "finished_at": T0, "fetch_reason": "listed"}
        unfetched = {**listed, "crawl_state": known.state, "next_fetch_time": known.next_fetch_time, "size": 3}
        pending = {**base, "known": known, "fetch_reason": "new", "change": ChangeKind.NEW}
        for fields in (base, listed, unfetched, pending, {"url": page.url}):
            built = SitemapURL(**fields)
            validated = SitemapURL.model_validate(dict(fields))
            assert built == validated and SitemapURL.model_validate_json(body_of(built)) == built
            assert built.model_dump_json() == validated.model_dump_json() and body_of(built) == body_of(validated)
    one, two = SitemapURL(url="https://e.x/1"), SitemapURL(url="https://e.x/2")
    one.extensions["x"] = 1
    assert two.extensions == {}
    entry = PageEntry("https://e.x/3", images=(Image(loc="https://e.x/i.png"),))
    three = SitemapURL(url=entry.url, extensions=entry.extensions())
    three.extensions["images"].append({"loc": "https://e.x/j.png"})  # (an entry's are made for each record)
    assert entry.extensions() == {"images": [{"loc": "https://e.x/i.png"}]}


def test_a_stored_body_is_msgspecs_json_whichever_encoder_wrote_it():
    """body_of writes the two per-URL records with orjson: the bytes msgspec writes, for every kind of
    entry, every field of a crawl record, datetimes of any offset, and a value orjson refuses (an integer
    beyond 64 bits, written by msgspec then); each reads back as the record it was."""
    fixture = Path(__file__).parent.parent / "sitemap" / "fixtures" / "urlset_extensions.xml"
    entries, _ = parse_bytes("https://example.com/sitemap.xml", fixture.read_bytes())
    full = CrawlRecord(
        url='https://example.com/a?q="é"',
        state=CrawlState.ORPHAN,
        retries=2,
        fetch_interval=3600.5,
        next_fetch_time=T0 + timedelta(microseconds=1),
        last_fetch_time=T0,
        http_status=200,
        signature="s",
        etag='W/"e"',
        http_last_modified="Sun, 01 Nov 2026 00:00:00 GMT",
        content_type="text/html",
        size=0,
        document_key="d",
        last_modified=datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=-5))),
        fetched_last_modified=T0,
        change_frequency="daily",
        priority=1.0,
        sitemap="https://example.com/sitemap.xml",
        first_listed=T0,
        last_listed=T0,
        last_listed_job="j",
        changes=3,
        orphan_of=CrawlState.FETCHED,
        orphaned_job="k",
        version=7,
    )
    records: list[Model] = [crawl_record(), full]
    for entry in entries:
        if isinstance(entry, PageEntry):
            records.append(SitemapURL(url=entry.url, last_modified=entry.last_modified, extensions=entry.extensions()))
            records.append(
                SitemapURL(url=entry.url, priority=0.0, status=UrlStatus.FAILED, error_message="x", known=full)
            )
    huge = SitemapURL(url="https://example.com/v", extensions={"videos": [{"view_count": 2**70, "rating": 4.5}]})
    records.append(huge)
    for record in records:
        assert body_of(record) == record.model_dump_json(exclude_none=True), record.url
        assert type(record).model_validate_json(body_of(record)) == record
    assert str(2**70) in body_of(huge)


def test_a_new_crawl_record_is_the_validated_one():
    """A new URL's crawl record is built without validation (crawl_state.listed): for every changefreq a
    schedule knows (or none), with or without a lastmod, it is the record validation builds, field for
    field and byte for byte."""
    schedule = Schedule(min_interval=60, max_interval=86400 * 365)  # (integers where floats are expected)
    for changefreq in (None, "always", "hourly", "daily", "weekly", "monthly", "yearly", "never", "bogus"):
        for lastmod in (None, T0 - timedelta(days=3, microseconds=5)):
            record = listed(
                None,
                url="https://example.com/a",
                lastmod=lastmod,
                changefreq=changefreq,
                priority=0.3,
                sitemap="https://example.com/s.xml",
                job_id="j",
                now=T0,
                schedule=schedule,
            )
            fields = json.loads(record.model_dump_json())
            validated = CrawlRecord.model_validate(fields)
            assert record == validated and type(validated.fetch_interval) is float
            assert body_of(record) == body_of(validated) == validated.model_dump_json(exclude_none=True)


def test_input_is_read_as_leniently_as_before():
    """Values a message or a configuration gave as text, or an int as a float, are converted as pydantic
    converted them: what was accepted stays accepted."""
    request = JobRequest.model_validate_json(
        b'{"site": "https://e.x/", "max_depth": "5", "rate_limit_delay": "0.5", "fetch_pages": "false"}'
    )
    assert (request.max_depth, request.rate_limit_delay, request.fetch_pages) == (5, 0.5, False)
    assert JobRequest.model_validate({"site": "https://e.x/", "max_depth": 5.0}).max_depth == 5
    with pytest.raises(ValidationError, match="max_depth"):
        JobRequest.model_validate({"site": "https://e.x/", "max_depth": 5.5})


def test_a_request_built_in_code_is_started_in_the_form_the_queue_reads():
    """``JobRequest(...)`` checks its URLs, not its types and bounds: ``validated`` gives what decoding its
    JSON gives (so what a job stores and fingerprints is what reading it back gives), or refuses it."""
    built = JobRequest(site="https://e.x/", rate_limit_delay=1, scope="any")  # type: ignore[arg-type]
    request = built.validated()
    assert type(request.rate_limit_delay) is float and request.scope is Scope.ANY
    assert request == JobRequest.model_validate_json(built.model_dump_json())
    assert request.fingerprint() == JobRequest.model_validate_json(request.model_dump_json()).fingerprint()
    for bad in ({"max_depth": 100}, {"rate_limit_delay": 61}, {"scope": "world"}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            JobRequest(site="https://e.x/", **bad).validated()  # type: ignore[arg-type]


def test_a_page_task_holds_its_url_in_the_form_records_are_keyed_by():
    task = PageTask.model_validate_json(b'{"job_id": "j", "url": "HTTPS://E.x:443/a#frag"}')
    assert task.url == "https://e.x/a" and task.model_copy(update={"url": normalize(task.url)}) == task
    pathless = "https://e.x?" + "q" * (2048 - len("https://e.x?"))
    assert len(pathless) == 2048
    with pytest.raises(ValidationError, match="longer than 2048"):  # (2,049 with its "/")
        PageTask.model_validate({"job_id": "j", "url": pathless})
    assert screen(pathless) == "too_long"


def test_an_empty_reason_is_no_reason():
    with pytest.raises(ValueError, match="needs an error_message"):
        SitemapURL(url="https://e.x/", status=UrlStatus.FAILED, error_message="")
