"""Field values: dates (W3C and RFC 822), change frequencies and priorities."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from harvester.sitemap.values import parse_changefreq, parse_datetime, parse_list, parse_priority, parse_yes_no

PLUS2 = timezone(timedelta(hours=2))
MINUS5 = timezone(timedelta(hours=-5))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024", datetime(2024, 1, 1, tzinfo=UTC)),
        ("2024-03", datetime(2024, 3, 1, tzinfo=UTC)),
        ("2024-03-05", datetime(2024, 3, 5, tzinfo=UTC)),
        ("2024-03-05T14:30+02:00", datetime(2024, 3, 5, 14, 30, tzinfo=PLUS2)),
        ("2024-03-05T14:30:15Z", datetime(2024, 3, 5, 14, 30, 15, tzinfo=UTC)),
        ("2024-03-05T14:30:15.25-05:00", datetime(2024, 3, 5, 14, 30, 15, 250000, tzinfo=MINUS5)),
        ("2024-03-05T14:30:15.123456789Z", datetime(2024, 3, 5, 14, 30, 15, 123456, tzinfo=UTC)),
        ("2024-03-05T14:30:15", datetime(2024, 3, 5, 14, 30, 15, tzinfo=UTC)),  # no offset: UTC
        ("2024-03-05t14:30:15z", datetime(2024, 3, 5, 14, 30, 15, tzinfo=UTC)),
        ("2024-03-05T14:30:15 +0200", datetime(2024, 3, 5, 14, 30, 15, tzinfo=PLUS2)),
        ("2024-03-05T14:30:15,5Z", datetime(2024, 3, 5, 14, 30, 15, 500000, tzinfo=UTC)),
        ("  2024-03-05\n", datetime(2024, 3, 5, tzinfo=UTC)),
        # RFC 822, as in RSS <pubDate>, including two-digit years and named zones.
        ("Tue, 05 Mar 2024 14:30:15 GMT", datetime(2024, 3, 5, 14, 30, 15, tzinfo=UTC)),
        ("Tue, 05 Mar 2024 14:30:15 +0200", datetime(2024, 3, 5, 14, 30, 15, tzinfo=PLUS2)),
        ("05 Mar 24 14:30 EST", datetime(2024, 3, 5, 14, 30, tzinfo=MINUS5)),
        ("Sun, 1 Jan 95 00:00:00 -0000", datetime(1995, 1, 1, tzinfo=UTC)),
    ],
)
def test_dates(text, expected):
    parsed = parse_datetime(text)
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo is not None
    assert parsed.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        "yesterday",
        "2024-13-01",
        "2024-02-30",
        "2024-03-05T25:00Z",
        "0000-01-01",
        "99999",
        "2024-03-05T10:00+25:00",
        "\x00",
    ],
)
def test_unreadable_dates_are_none(text):
    assert parse_datetime(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("always", "always"),
        ("HOURLY", "hourly"),
        (" Daily\n", "daily"),
        ("weekly", "weekly"),
        ("Monthly", "monthly"),
        ("yearly", "yearly"),
        ("never", "never"),
        ("fortnightly", None),
        ("", None),
        (None, None),
    ],
)
def test_changefreq(text, expected):
    assert parse_changefreq(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, (0.5, True)),
        ("", (0.5, True)),
        ("0.8", (0.8, True)),
        (" 1.0 ", (1.0, True)),
        ("0", (0.0, True)),
        ("1e-1", (0.1, True)),
        ("1.01", (0.5, False)),
        ("-0.5", (0.5, False)),
        ("inf", (0.5, False)),
        ("nan", (0.5, False)),
        ("high", (0.5, False)),
    ],
)
def test_priority(text, expected):
    assert parse_priority(text) == expected


def test_lists_and_flags():
    assert parse_list(" a, b ,,c ") == ("a", "b", "c")
    assert parse_list(None) == ()
    assert parse_yes_no(" Yes ") is True
    assert parse_yes_no("false") is False
    assert parse_yes_no("maybe") is None
