"""The scheduler's configuration and recurring job ids."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from harvester.pipeline.recurring import parse_duration, parse_recurring

ENTRY = {"name": "news", "every": "6h", "request": {"site": "https://example.com/"}}


def test_one_job_id_per_period():
    (job,) = parse_recurring(json.dumps([ENTRY]))
    assert job.every == timedelta(hours=6)
    a = job.job_id(datetime(2026, 11, 1, 1, 0, tzinfo=UTC))
    b = job.job_id(datetime(2026, 11, 1, 5, 59, tzinfo=UTC))
    c = job.job_id(datetime(2026, 11, 1, 6, 0, tzinfo=UTC))
    assert a == b == "news-20261101T000000Z" and c == "news-20261101T060000Z"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{", "not JSON"),
        ('{"a": 1}', "must be a JSON list"),
        (json.dumps([ENTRY | {"every": "5s"}]), "once a minute"),
        (json.dumps([ENTRY | {"every": "often"}]), "not a duration"),
        (json.dumps([ENTRY | {"request": {"site": "ftp://x"}}]), "recurring job #0"),
        (json.dumps([ENTRY | {"request": {"site": "https://e.x/", "job_id": "fixed"}}]), "must not carry a job_id"),
        (json.dumps([ENTRY, ENTRY]), "unique"),
    ],
)
def test_bad_configuration_names_the_entry_and_reason(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_recurring(raw)


def test_durations():
    assert parse_duration("1d") == timedelta(days=1)
    assert parse_duration(" 90 m ") == timedelta(minutes=90)
    assert parse_duration(3600) == timedelta(hours=1)
    assert parse_recurring("") == []
