"""Turning the text of sitemap fields into typed values, forgivingly.

Sitemaps are written by hand, by plugins and by templates, so every converter here accepts what it can and
returns None for the rest: a bad ``<lastmod>`` must never cost the page it belongs to. Dates are cached
(a sitemap repeats the same few thousands of times); the exact protocol forms of the per-URL fields also
have a faster path in :mod:`harvester.sitemap.builders`.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from functools import lru_cache

#: Every character ``str.isspace`` knows, plus the invisible ones editors and CMSs leave around URLs
#: (zero-width space and joiners, word joiner, byte-order mark). Stripped from both ends of every value.
STRIP_CHARS = "".join(chr(c) for c in range(0x3001) if chr(c).isspace()) + "\u200b\u200c\u200d\u2060\ufeff"

#: Longer than any date anyone writes; longer text is not parsed (nor kept in the cache).
_MAX_DATE = 64
CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})
DEFAULT_PRIORITY = 0.5

# W3C datetime forms that datetime.fromisoformat does not take: "YYYY", "YYYY-MM", a time without seconds
# or with a comma fraction, and an offset without a colon; also lower-case "t"/"z".
_W3C = re.compile(
    r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})"
    r"(?:[Tt ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?\s*([Zz]|[+-]\d{2}(?::?\d{2})?)?)?)?)?"
)


def clean(text: str | None) -> str | None:
    """The value with surrounding (Unicode) whitespace removed, or None when nothing is left."""
    if text is None:
        return None
    text = text.strip(STRIP_CHARS)
    return text or None


def parse_datetime(text: str | None) -> datetime | None:
    """A W3C datetime or an RFC 822 date (RSS ``pubDate``) as an aware datetime; UTC when no offset is given.

    Returns None for anything it cannot read: dates are advisory, never a reason to drop an entry.
    """
    if not text:
        return None
    value = text.strip(STRIP_CHARS)
    if not value or len(value) > _MAX_DATE:
        return None
    return _parse_datetime(value)


@lru_cache(maxsize=4096)
def _parse_datetime(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = _w3c(value) if value[:4].isdigit() else None
        if parsed is None:
            parsed = _rfc822(value)
        if parsed is None:
            return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _w3c(value: str) -> datetime | None:
    match = _W3C.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        zone = UTC
        if offset and offset not in "Zz":
            digits = offset[1:].replace(":", "")
            delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
            zone = timezone(-delta if offset[0] == "-" else delta)
        return datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=zone,
        )
    except ValueError:
        return None


def _rfc822(value: str) -> datetime | None:
    try:
        # email.utils reads two-digit years (< 69 → 20xx, else 19xx) and named zones (GMT, EST...).
        return parsedate_to_datetime(value)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None


def parse_changefreq(text: str | None) -> str | None:
    """One of the seven protocol values, whatever its case; anything else means "not given"."""
    if not text:
        return None
    value = text.strip(STRIP_CHARS).lower()
    return value if value in CHANGEFREQS else None


def parse_priority(text: str | None) -> tuple[float, bool]:
    """(priority, valid). Missing means the protocol's 0.5; a bad value also becomes 0.5 but is not valid,
    so that the caller can count it as a warning."""
    if text is None:
        return DEFAULT_PRIORITY, True
    value = text.strip(STRIP_CHARS)
    if not value:
        return DEFAULT_PRIORITY, True
    try:
        number = float(value)
    except ValueError:
        return DEFAULT_PRIORITY, False
    if 0.0 <= number <= 1.0:  # also rejects nan
        return number, True
    return DEFAULT_PRIORITY, False


def parse_int(text: str | None, *, minimum: int = 0) -> int | None:
    value = clean(text)
    if value is None:
        return None
    try:
        number = int(float(value)) if "." in value else int(value)
    except (ValueError, OverflowError):
        return None
    return number if number >= minimum else None


def parse_float(
    text: str | None, *, low: float = -sys.float_info.max, high: float = sys.float_info.max
) -> float | None:
    value = clean(text)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if low <= number <= high else None


_YES = frozenset({"yes", "true", "1"})
_NO = frozenset({"no", "false", "0"})


def parse_yes_no(text: str | None) -> bool | None:
    """The video extension's ``yes``/``no`` flags (``true``/``false`` accepted too)."""
    value = clean(text)
    if value is None:
        return None
    value = value.lower()
    if value in _YES:
        return True
    if value in _NO:
        return False
    return None


def parse_list(text: str | None) -> tuple[str, ...]:
    """A comma-separated list (news keywords, genres, stock tickers) as a tuple of non-empty items."""
    value = clean(text)
    if value is None:
        return ()
    return tuple(item for part in value.split(",") if (item := part.strip(STRIP_CHARS)))
