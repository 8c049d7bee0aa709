"""A URL listed for the first time by a job that fetches nothing is written straight as JSON
(pipeline.listed_rows): the bytes must be those of the validated models the other path builds, and its
feed line the one the job's end makes of the stored record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from harvester.archive.lines import json_bytes
from harvester.archive.results import stored_record
from harvester.crawldb.changes import feed_line, kind_of
from harvester.crawldb.crawl_state import listed
from harvester.crawldb.schedule import Schedule
from harvester.model.crawl import ChangeKind, CrawlRecord, CrawlState
from harvester.model.records import CrawlRow, ListedRow, SitemapURL, UrlStatus, body_of
from harvester.pipeline.listed_rows import first_listings, listed_fields
from harvester.sitemap import Alternate, Image, PageEntry, Video, parse_bytes

SITEMAP = "https://example.com/sitemap.xml"
FIXTURE = Path(__file__).parent.parent / "sitemap" / "fixtures" / "urlset_extensions.xml"


def _entries() -> list[PageEntry]:
    """Every kind of entry: the extensions fixture (images, news, videos, alternates), and plain entries
    with every changefreq (or none), with and without a lastmod (UTC, another offset, microseconds), at
    the priorities' edges, with characters JSON escapes."""
    parsed, _ = parse_bytes(SITEMAP, FIXTURE.read_bytes())
    entries = [e for e in parsed if isinstance(e, PageEntry)]
    assert {"images", "news", "videos", "alternates"} <= {k for e in entries for k in e.extensions()}
    lastmods = (  # (the last three: one instant in three offsets, equal as datetimes, written apart)
        None,
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=timezone(-timedelta(hours=5))),
        datetime(2026, 1, 1, 5, tzinfo=UTC),
        datetime(2026, 1, 1, 6, tzinfo=timezone(timedelta(hours=1))),
    )
    changefreqs = (None, "always", "hourly", "daily", "weekly", "monthly", "yearly", "never")
    n = 0
    for lastmod in lastmods:
        for changefreq in changefreqs:
            for priority in (0.0, 0.5, 1.0):
                n += 1
                entries.append(
                    PageEntry(
                        f'https://example.com/p/{n}?q="é"\\',
                        last_modified=lastmod,
                        change_frequency=changefreq,
                        priority=priority,
                        images=(Image(loc=f"https://example.com/i/{n}.png"),) if n % 2 else (),
                        alternates=(Alternate(hreflang="de", href=f"https://example.com/de/{n}"),) if n % 3 else (),
                    )
                )
    return entries


def _models(entry: PageEntry, now: datetime, schedule: Schedule) -> tuple[SitemapURL, CrawlRecord]:
    """What the model path makes of a first listing in a job that fetches nothing, validated."""
    known = listed(
        None,
        url=entry.url,
        lastmod=entry.last_modified,
        changefreq=entry.change_frequency,
        priority=entry.priority,
        sitemap=SITEMAP,
        job_id="job-1",
        now=now,
        schedule=schedule,
    )
    fields = listed_fields(entry.url, entry, SITEMAP, now)
    fields.update(
        status=UrlStatus.COMPLETED,
        finished_at=now,
        fetch_reason="listed",
        change=ChangeKind.NEW,
        crawl_state=known.state,
        next_fetch_time=known.next_fetch_time,
    )
    crawl = CrawlRecord.model_validate(json.loads(known.model_dump_json()))
    return SitemapURL.model_validate(fields), crawl


def test_rows_are_the_bytes_of_the_validated_records():
    entries = _entries()
    for now in (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 1, 12, 30, 1, 999, tzinfo=UTC)):
        for schedule in (Schedule(), Schedule(min_interval=7200, max_interval=86400 * 10)):
            rows = first_listings(
                [(e.url, e) for e in entries], sitemap=SITEMAP, job_id="job-1", now=now, schedule=schedule
            )
            assert len(rows) == len(entries)
            for entry, row in zip(entries, rows, strict=True):
                assert row is not None, entry.url
                page, crawl = row
                page_model, crawl_model = _models(entry, now, schedule)
                assert isinstance(page, ListedRow) and isinstance(crawl, CrawlRow)
                assert page.body == page_model.model_dump_json(exclude_none=True), entry.url
                assert crawl.body == crawl_model.model_dump_json(exclude_none=True), entry.url
                assert (page.url, page.status, page.key, crawl.url, crawl.version) == (
                    entry.url,
                    UrlStatus.COMPLETED,
                    page_model.key,
                    entry.url,
                    1,
                )
                assert body_of(page) == page.body and body_of(crawl) == crawl.body
                # What the job's end takes of it, as it would make it from the stored body.
                stored = stored_record(page.body)
                assert page.change == kind_of(stored).value == ChangeKind.NEW.value
                line = feed_line(stored)
                assert line is not None and page.feed == json_bytes(line), entry.url
                assert crawl_model.state is CrawlState.UNFETCHED and crawl_model.next_fetch_time == now


def test_an_entry_orjson_cannot_write_exactly_is_left_to_the_models():
    """An integer beyond 64 bits (a video's view count) is written by msgspec: its row is None, and only
    its; the caller builds that one as models."""
    huge = PageEntry(
        "https://example.com/v", videos=(Video(thumbnail_loc="t", title="t", description="d", view_count=2**70),)
    )
    plain = PageEntry("https://example.com/w")
    rows = first_listings(
        [(huge.url, huge), (plain.url, plain)],
        sitemap=SITEMAP,
        job_id="j",
        now=datetime(2026, 1, 1, tzinfo=UTC),
        schedule=Schedule(),
    )
    assert rows[0] is None and rows[1] is not None
