"""Records stored by the version before the output names changed still read, with today's names.

Until then a crawl record called the sitemap's values ``lastmod`` / ``fetched_lastmod`` / ``changefreq``
and the HTTP ``Last-Modified`` header ``last_modified``; a job record called that header
``last_modified_header``; a sitemap reading called it ``last_modified``. Both state stores keep records as
their JSON, so these bodies are exactly what a SQLite file or a DynamoDB table of that version holds
(written by that version's ``body_of``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from harvester.archive.results import record_line
from harvester.model.crawl import CrawlRecord, SitemapCrawl
from harvester.model.records import SitemapURL, body_of

AT = datetime(2024, 5, 1, tzinfo=UTC)
LISTED_AT = datetime(2024, 4, 30, tzinfo=UTC)
HEADER = "Wed, 01 May 2024 00:00:00 GMT"

OLD_CRAWL = (
    '{"url":"https://example.com/page-1","state":"fetched","retries":0,"fetch_interval":86400.0,'
    '"next_fetch_time":"2024-05-01T00:00:00Z","last_fetch_time":"2024-05-01T00:00:00Z","http_status":200,'
    '"signature":"sig-1","etag":"\\"e1\\"","last_modified":"Wed, 01 May 2024 00:00:00 GMT",'
    '"content_type":"text/html","size":10,"document_key":"docs/p1","lastmod":"2024-04-30T00:00:00Z",'
    '"fetched_lastmod":"2024-04-30T00:00:00Z","changefreq":"daily","priority":0.8,'
    '"sitemap":"https://example.com/sitemap-1.xml","first_listed":"2024-05-01T00:00:00Z",'
    '"last_listed":"2024-05-01T00:00:00Z","last_listed_job":"job-1","changes":0,"version":2}'
)
#: A fetched page whose sitemap gave neither lastmod nor changefreq: only the header says "last_modified".
OLD_CRAWL_HEADER_ONLY = (
    '{"url":"https://example.com/page-1","state":"fetched","retries":0,"fetch_interval":86400.0,'
    '"next_fetch_time":"2024-05-01T00:00:00Z","last_fetch_time":"2024-05-01T00:00:00Z","http_status":200,'
    '"signature":"sig-1","etag":"\\"e1\\"","last_modified":"Wed, 01 May 2024 00:00:00 GMT",'
    '"content_type":"text/html","size":10,"document_key":"docs/p1","priority":0.8,'
    '"sitemap":"https://example.com/sitemap-1.xml","first_listed":"2024-05-01T00:00:00Z",'
    '"last_listed":"2024-05-01T00:00:00Z","last_listed_job":"job-1","changes":0,"version":2}'
)
OLD_PAGE = (
    '{"url":"https://example.com/page-1","last_modified":"2024-04-30T00:00:00Z","change_frequency":"daily",'
    '"priority":0.8,"status":"completed","sitemap":"https://example.com/sitemap-1.xml","extensions":{},'
    '"crawl_state":"fetched","retries":0,"attempts":0,"http_status":200,"signature":"sig-1","etag":"\\"e1\\"",'
    '"last_modified_header":"Wed, 01 May 2024 00:00:00 GMT","fetch_time":"2024-05-01T00:00:00Z",'
    f'"known":{OLD_CRAWL},"fetch_reason":"lastmod","change":"unchanged"}}'
)
OLD_SITEMAP = (
    '{"url":"https://example.com/sitemap-1.xml","fetched_at":"2024-05-01T00:00:00Z","http_status":200,'
    '"etag":"\\"s1\\"","last_modified":"Wed, 01 May 2024 00:00:00 GMT","signature":"x","document_key":"d/s1",'
    '"kind":"urlset","warnings":{},"entries":3}'
)


def expected_crawl(**fields: object) -> CrawlRecord:
    values: dict[str, object] = {
        "url": "https://example.com/page-1",
        "state": "fetched",
        "fetch_interval": 86400.0,
        "next_fetch_time": AT,
        "last_fetch_time": AT,
        "http_status": 200,
        "signature": "sig-1",
        "etag": '"e1"',
        "http_last_modified": HEADER,
        "content_type": "text/html",
        "size": 10,
        "document_key": "docs/p1",
        "last_modified": LISTED_AT,
        "fetched_last_modified": LISTED_AT,
        "change_frequency": "daily",
        "priority": 0.8,
        "sitemap": "https://example.com/sitemap-1.xml",
        "first_listed": AT,
        "last_listed": AT,
        "last_listed_job": "job-1",
        "version": 2,
    }
    return CrawlRecord(**(values | fields))


def test_an_old_crawl_record_reads_with_the_sitemaps_values_and_the_header_apart():
    assert CrawlRecord.model_validate_json(OLD_CRAWL) == expected_crawl()
    assert CrawlRecord.model_validate_json(OLD_CRAWL_HEADER_ONLY) == expected_crawl(
        last_modified=None, fetched_last_modified=None, change_frequency=None
    )


@pytest.mark.parametrize("header", [None, HEADER])
@pytest.mark.parametrize("lastmod", [None, LISTED_AT])
def test_a_crawl_record_written_today_reads_back_the_same(lastmod, header):
    """Whichever of the sitemap's date and the header it holds: never one taken for the other."""
    record = expected_crawl(
        last_modified=lastmod, fetched_last_modified=lastmod, change_frequency=None, http_last_modified=header
    )
    body = body_of(record)
    assert not any(old in body for old in ('"lastmod":', '"changefreq":', '"fetched_lastmod":'))
    assert CrawlRecord.model_validate_json(body) == record


def test_an_old_job_record_reads_with_the_header_and_its_crawl_record_renamed():
    page = SitemapURL.model_validate_json(OLD_PAGE)
    assert page.http_last_modified == HEADER and page.last_modified == LISTED_AT
    assert page.known == expected_crawl()
    assert SitemapURL.model_validate_json(body_of(page)) == page


def test_an_old_job_record_is_written_to_the_records_with_todays_names():
    """The job's records file passes a stored body through when it can: not one of the old version's."""
    for body in (OLD_PAGE, OLD_PAGE.replace(f',"known":{OLD_CRAWL}', "")):
        line = record_line(body).decode()
        assert '"last_modified_header"' not in line and '"http_last_modified":"Wed, 01 May 2024' in line
        assert SitemapURL.model_validate_json(line).http_last_modified == HEADER


def test_an_old_sitemap_reading_keeps_its_validators():
    reading = SitemapCrawl.model_validate_json(OLD_SITEMAP)
    assert (reading.etag, reading.http_last_modified) == ('"s1"', HEADER)


def test_a_body_with_both_names_reads_todays():
    """A header's old name beside its new one (a body no version wrote, but one a hand may): today's name
    is the value read, for a URL record and a sitemap's reading alike."""
    page = SitemapURL.model_validate_json(
        b'{"url": "https://e.x/a", "last_modified_header": "old", "http_last_modified": "' + HEADER.encode() + b'"}'
    )
    assert page.http_last_modified == HEADER
    reading = SitemapCrawl.model_validate(
        {"url": "https://e.x/s.xml", "fetched_at": "2024-05-01T00:00:00Z", "http_status": 200, "signature": "s",
         "document_key": "d", "last_modified": "old", "http_last_modified": HEADER}
    )  # fmt: skip
    assert reading.http_last_modified == HEADER
    assert (
        SitemapURL.model_validate_json(b'{"url": "https://e.x/a", "last_modified_header": "old"}').http_last_modified
        == "old"
    )
