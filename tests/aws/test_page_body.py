"""The packed job record (adapters/aws/page_body.py): read back, it is the body ``body_of`` wrote, field for
field, whatever its crawl-record snapshot shares with it or lacks; and a fetched page's item stays under the
1 KB a DynamoDB write unit pays for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from harvester.adapters.aws.page_body import AS_LISTED, PACKED, pack, pack_settled, unpack
from harvester.crawldb.crawl_state import Fetched, FetchResult, after_fetch, listed
from harvester.crawldb.documents import page_key
from harvester.crawldb.schedule import Schedule
from harvester.model.crawl import CrawlRecord, WarcLocation
from harvester.model.records import SitemapURL, UrlStatus, body_of
from tests.model.test_stored_names import OLD_PAGE

JOB = "job-31168a96d792493db648"
T0 = datetime(2026, 11, 25, 22, 41, 3, 566744, tzinfo=UTC)
URL = "https://www.example.com/news/2026/11/a-story-with-a-long-slug-as-real-sites-have-them.html"
SITEMAP = "https://www.example.com/sitemaps/news-2026-11.xml"
SIGNATURE = "889f58a9d16b27a1f2e026d214e77e20dffac315913a97d7bc8e67edd3c54720"


def listed_page(prior=None, **fields) -> SitemapURL:
    """A page as a first-crawl listing records it: pending, with the crawl record it wrote as ``known``."""
    known = listed(
        prior,
        url=URL,
        lastmod=T0 - timedelta(days=3),
        changefreq="daily",
        priority=0.8,
        sitemap=SITEMAP,
        job_id=JOB,
        now=T0,
        schedule=Schedule(),
    )
    values = {
        "url": URL,
        "last_modified": T0 - timedelta(days=3),
        "change_frequency": "daily",
        "priority": 0.8,
        "sitemap": SITEMAP,
        "discovered_at": T0,
        "known": known,
        "fetch_reason": "new",
        "change": "new",
    }
    return SitemapURL(**(values | fields))


def fetched(page: SitemapURL, *, signature: str = SIGNATURE) -> SitemapURL:
    """The page as its fetch's outcome stores it (page_outcomes._crawled's fields)."""
    return fetched_with_record(page, signature=signature)[0]


def fetched_with_record(
    page: SitemapURL, *, signature: str = SIGNATURE, warc: WarcLocation | None = None
) -> tuple[SitemapURL, CrawlRecord]:
    """The fetched page and the URL's crawl record after it; with ``warc``, archived in a WARC file (the
    default output) rather than as a loose document."""
    assert page.known is not None
    now = T0 + timedelta(seconds=1)
    result = Fetched(
        FetchResult.SUCCESS,
        http_status=200,
        signature=signature,
        content_type="text/html; charset=utf-8",
        size=48_213,
        document_key=None if warc else page_key("https://www.example.com", URL, signature),
        warc=warc,
        etag='"889f58a9d16b27a1-1"',
        http_last_modified="Thu, 01 Jan 2026 00:03:00 GMT",
        lastmod=page.last_modified,
    )
    after = after_fetch(page.known, result, now=now, schedule=Schedule())
    done = page.model_copy(
        update={
            "status": UrlStatus.COMPLETED,
            "attempts": 1,
            "http_status": 200,
            "content_type": after.content_type,
            "size": after.size,
            "signature": after.signature,
            "etag": after.etag,
            "http_last_modified": after.http_last_modified,
            "document_key": after.document_key,
            "warc": warc,
            "fetch_time": now,
            "finished_at": now,
            "crawl_state": after.state,
            "next_fetch_time": after.next_fetch_time,
        }
    )
    return done, after


def refetched() -> SitemapURL:
    """A re-crawl's page: its snapshot is a fetched record, whose content the new fetch found changed."""
    first = fetched(listed_page())
    assert first.known is not None
    prior = after_fetch(
        first.known,
        Fetched(FetchResult.SUCCESS, http_status=200, signature=SIGNATURE, size=40_000, document_key="sites/x/old"),
        now=T0,
        schedule=Schedule(),
    )
    later = listed_page(prior, discovered_at=T0 + timedelta(days=31), fetch_reason="due", change=None)
    return fetched(later, signature="0" * 64)


CASES = {
    "listed": listed_page,
    "fetched": lambda: fetched(listed_page()),
    "refetched": refetched,
    "failed": lambda: listed_page().model_copy(
        update={"status": UrlStatus.FAILED, "error_message": "HTTP 404 Not Found", "http_status": 404}
    ),
    "no_snapshot": lambda: listed_page(known=None),
    "other_document_key": lambda: fetched(listed_page()).model_copy(update={"document_key": "warc/a.warc.gz"}),
    "lastmod_gone": lambda: listed_page(last_modified=None),  # (the snapshot has one, the record not)
}


@pytest.mark.parametrize("case", CASES)
def test_a_packed_record_reads_back_as_written(case):
    body = body_of(CASES[case]())
    stored = pack(body, JOB)
    assert unpack(stored, JOB) == body
    assert SitemapURL.model_validate_json(unpack(stored, JOB)) == SitemapURL.model_validate_json(body)


def test_the_snapshot_keeps_only_what_the_record_does_not_say():
    page = fetched(listed_page())
    body = body_of(page)
    stored = orjson.loads(pack(body, JOB))
    assert "known" not in stored
    kept = stored[PACKED]
    for repeated in ("url", "sitemap", "priority", "last_modified", "last_listed_job", "first_listed", "retries"):
        assert repeated not in kept
    assert kept["version"] == 1 and kept["state"] == "unfetched"
    # The snapshot had no signature, etag, ...: read back as absent, not as the record's.
    assert SitemapURL.model_validate_json(unpack(pack(body, JOB), JOB)).known.signature is None  # type: ignore[union-attr]
    assert len(pack(body, JOB)) < len(body) - 350


def test_a_record_of_another_job_or_stored_whole_reads_as_it_is():
    body = body_of(fetched(listed_page()))
    other = SitemapURL.model_validate_json(unpack(pack(body, "job-other"), "job-other"))
    assert other.known is not None and other.known.last_listed_job == JOB
    assert pack(OLD_PAGE, JOB) == OLD_PAGE  # (a snapshot under the old names is stored whole)
    assert unpack(OLD_PAGE, JOB) == OLD_PAGE and unpack(body, JOB) == body


def test_a_settled_record_whose_snapshot_is_its_listed_ones_names_it_and_reads_back_whole():
    """A re-fetched page's snapshot holds its previous fetch; the outcome stores it once, with the listing."""
    page = refetched()
    listed_line = pack(body_of(page.model_copy(update={"status": UrlStatus.PENDING, "signature": None})), JOB)
    body = body_of(page)
    stored = pack_settled(body, listed_line, JOB)
    assert orjson.loads(stored)[PACKED] == AS_LISTED
    assert len(stored) < len(pack(body, JOB)) - 150
    assert unpack(stored, JOB, listed_line) == body
    with pytest.raises(ValueError, match="read without it"):
        unpack(stored, JOB)
    # A snapshot the settlement changed (or no listed line at hand) is stored as pack stores it.
    assert page.known is not None
    moved = body_of(page.model_copy(update={"known": page.known.model_copy(update={"version": 9})}))
    assert pack_settled(moved, listed_line, JOB) == pack(moved, JOB)
    assert pack_settled(body, None, JOB) == pack(body, JOB)
    assert unpack(pack_settled(moved, listed_line, JOB), JOB, listed_line) == moved
