"""Which of a sitemap's entries a job lists: the ``select`` section of a job request.

Beyond URL patterns and scope, a job may choose page entries by what their sitemap says of them (Scrapy's
``sitemap_filter``): a lastmod since or before a moment, a least priority, some change frequencies, an
extension (news, image, video); child sitemaps by the lastmod their index gives them (``sitemap_since``);
an entry's ``xhtml:link`` alternates as pages of their own (Scrapy's ``sitemap_alternate_links``); and one
language (trafilatura's ``target_lang``). A moment is a date or datetime (``2026-01-01``, UTC without an
offset) or a duration before the job's start (``7d``), so that a scheduled job keeps meaning "the last
seven days". The entries left out are counted by reason in their sitemap's ``dropped``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from msgspec import Meta
from msgspec.structs import force_setattr

from harvester.languages import LANGUAGES
from harvester.model.base import Model, invalid
from harvester.sitemap.values import parse_datetime

ChangeFrequency = Literal["always", "hourly", "daily", "weekly", "monthly", "yearly", "never"]
Extension = Literal["news", "image", "video"]

#: Why an entry was left out by the selection, as ``dropped`` counts it (cli/reporting.py shows these apart
#: from URL hygiene's).
OLDER = "lastmod_before_since"
NEWER = "lastmod_not_before"
NO_LASTMOD = "no_lastmod"
LOW_PRIORITY = "priority_below_min"
CHANGEFREQ = "changefreq_not_chosen"
NO_EXTENSION = "no_chosen_extension"
CALLBACK = "entry_filter"
LANGUAGE = "other_language"
SITEMAP_OLDER = "sitemap_lastmod_before_since"
SITEMAP_LANGUAGE = "sitemap_other_language"
SITEMAP_CALLBACK = "sitemap_child_filter"
SELECTION_REASONS = frozenset(
    {
        OLDER,
        NEWER,
        NO_LASTMOD,
        LOW_PRIORITY,
        CHANGEFREQ,
        NO_EXTENSION,
        CALLBACK,
        LANGUAGE,
        SITEMAP_OLDER,
        SITEMAP_LANGUAGE,
        SITEMAP_CALLBACK,
    }
)

_DURATION = re.compile(r"(\d{1,9})([smhdw])\Z")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_LANGUAGE = re.compile(r"[a-z]{2}\Z")


def moment(text: str, start: datetime) -> datetime:
    """The instant ``text`` names: a duration (``90s``, ``30m``, ``12h``, ``7d``, ``2w``) before ``start``, or a
    W3C date or datetime (UTC when it gives no offset). ValueError when it is neither."""
    text = text.strip()
    duration = _DURATION.match(text.lower())
    if duration is not None:
        try:
            return start - timedelta(**{_UNITS[duration[2]]: int(duration[1])})
        except OverflowError:
            raise ValueError(f"{text!r} reaches back before the year 1") from None
    parsed = parse_datetime(text) if re.match(r"\d{4}-\d{2}", text) else None
    if parsed is None:
        raise ValueError(f"{text!r} is neither a date (2026-01-01) nor a duration (7d, 12h, 2w, 30m, 90s)")
    return parsed


class EntrySelection(Model, kw_only=True, frozen=True):
    """What a job keeps of the entries its sitemaps list (every field optional; see the module)."""

    #: Page entries whose lastmod is at or after this moment (an entry without one: see ``require_lastmod``).
    since: str | None = None
    #: Page entries whose lastmod is before this moment.
    before: str | None = None
    #: Leave out the page entries that give no lastmod (nor, for a news entry, a publication date); without
    #: it they are kept, whatever ``since`` and ``before`` say: their age is not known.
    require_lastmod: bool = False
    #: Page entries whose priority (0.5 when the sitemap gives none) is at least this.
    min_priority: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    #: Page entries whose changefreq is one of these.
    changefreq: tuple[ChangeFrequency, ...] = ()
    #: Page entries that have one of these extensions.
    extensions: tuple[Extension, ...] = ()
    #: Child sitemaps whose lastmod in their index is at or after this moment (those without one followed).
    sitemap_since: str | None = None
    #: Each entry's hreflang alternates listed as pages of their own.
    alternates: bool = False
    #: ISO 639-1 code: per entry, its alternates in this language, or its URL unless it marks another one.
    lang: str | None = None

    def __post_init__(self) -> None:
        now = datetime.now(UTC)
        moments: dict[str, datetime] = {}
        for name in ("since", "before", "sitemap_since"):
            text = getattr(self, name)
            if text is not None:
                try:
                    moments[name] = moment(text, now)
                except ValueError as exc:
                    raise invalid(name, str(exc)) from None
        # (dates only: a duration moves with the job's start, and a stored request must stay valid)
        dated = not any(_DURATION.match(str(getattr(self, n)).strip().lower()) for n in ("since", "before"))
        if "since" in moments and "before" in moments and dated and moments["since"] >= moments["before"]:
            raise invalid("before", f"{self.before!r} is not after since ({self.since!r}): no lastmod is both")
        if self.lang is not None:
            lang = self.lang.strip().lower()
            if not _LANGUAGE.match(lang) or lang not in LANGUAGES:
                raise invalid("lang", f"{self.lang!r} is not a two-letter ISO 639-1 language code")
            force_setattr(self, "lang", lang)

    @property
    def leaves_out(self) -> bool:
        """Whether the selection may leave out URLs a sitemap lists (its job cannot vouch that one is gone)."""
        return bool(
            self.since
            or self.before
            or self.require_lastmod
            or self.min_priority is not None
            or self.changefreq
            or self.extensions
            or self.sitemap_since
            or self.lang
        )

    @property
    def rewrites(self) -> bool:
        """Whether it lists URLs other than the entries' own (alternates, or an entry's in the language)."""
        return self.alternates or self.lang is not None

    def _page_fields(self) -> list[Any]:
        return [
            f
            for f in (
                self.since,
                self.before,
                self.require_lastmod,
                self.min_priority,
                self.changefreq,
                self.extensions,
            )
            if f not in (None, False, ())
        ]

    def listing(self, started: datetime) -> list[Any] | None:
        """What the selection does to a sitemap's listing for a job started at ``started`` (its moments
        resolved: a duration lists other pages for each job), or None when it changes nothing of it."""
        if not (self._page_fields() or self.alternates or self.lang):
            return None
        return [
            moment(self.since, started).isoformat() if self.since else None,
            moment(self.before, started).isoformat() if self.before else None,
            self.require_lastmod,
            self.min_priority,
            sorted(self.changefreq),
            sorted(self.extensions),
            self.alternates,
            self.lang,
        ]
