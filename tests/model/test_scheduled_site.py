"""A schedule's periods, slots and job ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.model.base import ValidationError
from harvester.model.messages import JobRequest
from harvester.model.scheduled_site import ScheduledSite, default_name, duration_text, parse_duration, spread_offset

REQUEST = JobRequest(site="https://example.com/")
NOW = datetime(2026, 11, 30, 13, 10, tzinfo=UTC)


def test_one_job_id_per_slot_at_the_schedules_offset():
    schedule = ScheduledSite.new(REQUEST, timedelta(hours=6), now=NOW, name="news", offset=3600)
    at = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
    assert schedule.slot_at_or_before(at) == at
    assert schedule.slot_at_or_before(datetime(2026, 11, 30, 12, 59, 59, tzinfo=UTC)) == at
    assert schedule.slot_after(at) == datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
    assert schedule.next_due == datetime(2026, 11, 30, 19, 0, tzinfo=UTC)  # (the first slot after it was added)
    assert schedule.job_id() == "news-20261130T190000Z"
    moved = schedule.model_copy(update={"next_due": schedule.slot_after(datetime(2026, 12, 3, 9, 0, tzinfo=UTC))})
    assert moved.job_id() == "news-20261203T130000Z"
    at_once = ScheduledSite.new(REQUEST, timedelta(hours=6), now=NOW.replace(microsecond=250), name="n", at_once=True)
    assert at_once.next_due == NOW.replace(microsecond=250) and at_once.job_id() == "n-20261130T131000.000250Z"


def test_offsets_spread_the_schedules_of_a_period_over_it():
    day = timedelta(days=1)
    hours = [spread_offset(f"site-{i}.example", day) // 3600 for i in range(24_000)]
    per_hour = [hours.count(h) for h in range(24)]
    assert min(per_hour) > 800 and max(per_hour) < 1200  # (1,000 an hour, give or take the hash's spread)
    assert spread_offset("a", day) == spread_offset("a", day)


def test_a_schedule_survives_being_stored():
    schedule = ScheduledSite.new(REQUEST.model_copy(update={"include": ("/blog/",)}), timedelta(days=7), now=NOW)
    assert ScheduledSite.stored(schedule.stored_json()) == schedule
    paused = schedule.paused_now()
    assert (paused.paused, paused.next_due) == (True, None)
    resumed = paused.resumed(NOW + timedelta(days=30))
    assert resumed.next_due is not None and NOW + timedelta(days=30) < resumed.next_due <= NOW + timedelta(days=37)
    assert resumed.as_json()["request"] == {"site": "https://example.com/", "include": ["/blog/"]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"every": "5s"}, "once a minute"),
        ({"every": "often"}, "not a duration"),
        ({"name": "two words"}, "name"),
        ({"request": {"site": "https://e.x/", "job_id": "fixed"}}, "must not carry a job_id"),
        ({"offset": 90000}, "less than the period"),
        ({"request": {"site": "ftp://x"}}, "site"),
    ],
)
def test_a_bad_schedule_names_the_field_and_reason(fields, message):
    body = {"name": "news", "every": "1d", "request": {"site": "https://example.com/"}, "added_at": NOW} | fields
    with pytest.raises(ValidationError, match=message):
        ScheduledSite.model_validate(body)


def test_durations_and_names():
    assert parse_duration("1d") == timedelta(days=1)
    assert parse_duration(" 90 m ") == timedelta(minutes=90)
    assert parse_duration(3600) == timedelta(hours=1)
    assert parse_duration("90") == timedelta(seconds=90) and parse_duration("0", period=False) == timedelta(0)
    for bad, why in (("367d", "longer than 366 days"), ("99999999999999w", "not a duration"), ("5", "once a minute")):
        with pytest.raises(ValueError, match=why):
            parse_duration(bad)
    assert [duration_text(parse_duration(t)) for t in ("2w", "1d", "36h", "90m", "61s")] == [
        "2w",
        "1d",
        "36h",
        "90m",
        "61s",
    ]
    assert default_name("https://Example.com/news/") == "example.com"
    assert default_name("http://127.0.0.1:8080/") == "127.0.0.1-8080"
