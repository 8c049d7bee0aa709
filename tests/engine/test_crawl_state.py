"""The crawl-state table (reference/crawl-states.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.crawl_state import (
    MAX_INTERVAL,
    FetchResult,
    classify_status,
    http_error,
    interval_for,
    transition,
)
from harvester.records import CrawlState

NOW = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "result"),
    [
        (200, FetchResult.SUCCESS), (301, FetchResult.REDIR_PERM), (308, FetchResult.REDIR_PERM),
        (300, FetchResult.REDIR_PERM), (302, FetchResult.REDIR_TEMP), (303, FetchResult.REDIR_TEMP),
        (307, FetchResult.REDIR_TEMP), (304, FetchResult.NOTMODIFIED), (400, FetchResult.GONE),
        (401, FetchResult.GONE), (404, FetchResult.GONE), (410, FetchResult.GONE), (403, FetchResult.RETRY),
        (429, FetchResult.RETRY), (500, FetchResult.RETRY), (503, FetchResult.RETRY),
    ],
)  # fmt: skip
def test_what_a_fetch_result_is(status, result):
    assert classify_status(status) is result


def test_success_first_fetch_then_same_signature():
    first = transition(FetchResult.SUCCESS, now=NOW, retries=2, signature="a", changefreq="daily")
    assert (first.state, first.retries, first.next_fetch_time) == (CrawlState.FETCHED, 0, NOW + timedelta(days=1))
    same = transition(FetchResult.SUCCESS, now=NOW, retries=0, previous_signature="a", signature="a")
    assert same.state is CrawlState.NOTMODIFIED and same.next_fetch_time == NOW + timedelta(days=30)


def test_retry_until_the_limit_then_gone():
    one = transition(FetchResult.RETRY, now=NOW, retries=0, retry_backoff=timedelta(minutes=1))
    two = transition(FetchResult.RETRY, now=NOW, retries=1, retry_backoff=timedelta(minutes=1))
    three = transition(FetchResult.RETRY, now=NOW, retries=2)
    assert (one.state, one.retries, one.next_fetch_time) == (CrawlState.UNFETCHED, 1, NOW + timedelta(minutes=1))
    assert (two.state, two.next_fetch_time) == (CrawlState.UNFETCHED, NOW + timedelta(minutes=2))
    assert (three.state, three.retries) == (CrawlState.GONE, 3)


def test_gone_is_looked_at_again_rarely():
    gone = transition(FetchResult.GONE, now=NOW, retries=0, changefreq="never")
    assert gone.state is CrawlState.GONE and gone.next_fetch_time == NOW + MAX_INTERVAL * 0.9
    assert transition(FetchResult.GONE, now=NOW, retries=0).next_fetch_time == NOW + timedelta(days=45)


def test_changefreq_sets_the_interval():
    assert interval_for("hourly") == timedelta(hours=1)
    assert interval_for("yearly") == MAX_INTERVAL
    assert interval_for(None) == timedelta(days=30)


def test_error_messages_name_the_status():
    assert http_error(404) == "HTTP 404 Not Found"
    assert http_error(599) == "HTTP 599"
