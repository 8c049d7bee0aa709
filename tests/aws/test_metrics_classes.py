"""The reason classes of failed and excluded pages (the ``Reason`` dimension of PageFailures): every reason
the page worker writes falls in one class of a bounded set, whatever URL or detail the text carries."""

from __future__ import annotations

import pytest

from harvester.adapters.aws.metrics import FAILURE_CLASSES, failure_class
from harvester.crawldb.crawl_state import http_error
from harvester.fetch import FetchTimeout
from harvester.model.records import SitemapURL, UrlStatus

URL = "https://e.x/error/timeout/redirects/page.html"  # (words of the classes in the URL must not count)


def failed(reason: str, status: UrlStatus = UrlStatus.FAILED) -> SitemapURL:
    return SitemapURL(url=URL, status=status, error_message=reason)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (http_error(404), "http_4xx"),
        (http_error(403), "http_4xx"),
        (f"{http_error(503)} (gave up after 3 attempts)", "http_5xx"),
        (f"{http_error(429)} (gave up after 3 attempts)", "http_429"),
        (f"{http_error(301)} redirect without a usable Location", "http_3xx"),
        ("page larger than 10485760 bytes", "too_large"),
        ("page compressed body larger than 10485760 bytes", "too_large"),
        ("total time limit of 120.0 s exceeded (gave up after 3 attempts)", "timeout"),
        ("connecting took longer than 10.0 s (ConnectTimeout) (gave up after 3 attempts)", "timeout"),
        ("no response data for 30.0 s (gave up after 3 attempts)", "timeout"),
        ("ConnectError: [Errno 111] Connection refused (gave up after 3 attempts)", "connection"),
        ("the body was cut off (gave up after 3 attempts)", "connection"),
        (f"more than 5 redirects (at {URL}, reached by redirect)", "redirects"),
        (f"connecting took longer than 10.0 s (at {URL}, reached by redirect)", "timeout"),
        ("gzip Content-Encoding: invalid stored block lengths", "decoding"),
        ("robots.txt unreachable (503) (gave up after 3 deliveries)", "robots_unreachable"),
        ("gave up after 3 attempts without an outcome", "lost"),
        ("something nobody foresaw", "other"),
    ],
)
def test_failed_pages_fall_in_one_bounded_class(reason: str, expected: str) -> None:
    assert failure_class(failed(reason)) == expected
    assert expected in FAILURE_CLASSES


def test_excluded_pages_are_robots_or_address_policy() -> None:
    assert failure_class(failed("forbidden by robots.txt", UrlStatus.EXCLUDED)) == "robots"
    refused = "address 10.0.0.1 is private (not allowed; --allow-network to permit)"
    assert failure_class(failed(refused, UrlStatus.EXCLUDED)) == "address_policy"


def test_a_timeout_as_the_fetcher_words_it() -> None:
    reason = FetchTimeout(URL, "total time limit exceeded while reading the body").explain(URL)
    assert failure_class(failed(f"{reason} (gave up after 3 attempts)")) == "timeout"
