"""Entries from the raw field texts an XML entry element collected.

These run once per entry rather than once per event, but a 50,000-URL sitemap still makes them the
largest cost after expat itself, so the common case is kept short: exact protocol values ("daily",
"0.8", an ISO timestamp) are looked up or parsed directly, and only unusual text goes through the
forgiving converters of :mod:`harvester.sitemap.values`.

``fields`` dicts map an element's lower-cased local name to its text (never empty); a repeated field's
later values are under ``name + MORE``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from harvester.sitemap.entries import (
    Alternate,
    ChildSitemap,
    Image,
    NewsStory,
    PageEntry,
    ParseReport,
    Video,
)
from harvester.sitemap.text import looks_like_http_url
from harvester.sitemap.values import (
    CHANGEFREQS,
    STRIP_CHARS,
    clean,
    parse_changefreq,
    parse_datetime,
    parse_float,
    parse_int,
    parse_list,
    parse_priority,
    parse_yes_no,
)

Fields = dict[str, Any]

#: Suffix under which the second and later values of a repeated field are listed.
MORE = "+"
#: Where a second ``<loc>`` of an entry is (a field's later values are under ``name + MORE``).
LOC_MORE = "loc" + MORE
#: Keys for values an entry takes from attributes rather than from text (no element is called this).
LINK_HREF = "@href"
ABOUT = "@about"

_fromisoformat = datetime.fromisoformat
_CHANGEFREQ = {value: value for value in CHANGEFREQS}
_PRIORITY = {f"{tenth / 10:.1f}": tenth / 10 for tenth in range(11)} | {"1": 1.0, "0": 0.0}


def page(
    record: Fields,
    images: tuple[Image, ...],
    videos: tuple[Video, ...],
    news: NewsStory | None,
    alternates: tuple[Alternate, ...],
    report: ParseReport,
) -> PageEntry | None:
    """A ``<url>`` from the fields expat collected; None (and a warning) without a ``<loc>``. A second
    ``<loc>`` is warned of (``repeated_loc``) and the first kept: which one the site meant is not knowable."""
    get = record.get
    if LOC_MORE in record:
        report.warn("repeated_loc")
    return page_values(
        get("loc"), get("lastmod"), get("changefreq"), get("priority"), images, videos, news, alternates, report
    )


def page_values(
    url: str | None,
    lastmod: str | None,
    changefreq: str | None,
    priority: str | None,
    images: tuple[Image, ...],
    videos: tuple[Video, ...],
    news: NewsStory | None,
    alternates: tuple[Alternate, ...],
    report: ParseReport,
) -> PageEntry | None:
    """A ``<url>`` from its fields' texts (None: the element was absent or empty), however they were read:
    expat's callbacks and the plain-block reader build their pages here, so they cannot disagree."""
    if url:
        url = url.strip(STRIP_CHARS)
    if not url:
        report.warn("missing_loc")
        return None
    date: datetime | None = None
    if lastmod is not None:
        try:
            date = _fromisoformat(lastmod)
        except ValueError:
            date = parse_datetime(lastmod)
            if date is None:
                report.warn("invalid_lastmod")
        else:
            if date.tzinfo is None:
                date = date.replace(tzinfo=UTC)
    if changefreq is not None:
        changefreq = _CHANGEFREQ.get(changefreq) or parse_changefreq(changefreq)
        if changefreq is None:
            report.warn("invalid_changefreq")
    value = 0.5
    if priority is not None:
        known = _PRIORITY.get(priority)
        if known is None:
            known, valid = parse_priority(priority)
            if not valid:
                report.warn("invalid_priority")
        value = known
    return PageEntry(url, date, changefreq, value, images, news, videos, alternates)


def _date(text: str | None, report: ParseReport) -> datetime | None:
    if text is None:
        return None
    value = parse_datetime(text)
    if value is None:
        report.warn("invalid_lastmod")
    return value


def child(record: Fields, bare: list[str], report: ParseReport) -> ChildSitemap | None:
    """An index ``<sitemap>``. ``bare`` is the element's text outside its fields: the URL when there is
    no ``<loc>`` (crawler-commons' leniency)."""
    url = clean(record.get("loc"))
    if url is None and bare:
        url = clean("".join(bare))
    if url is None:
        report.warn("missing_loc")
        return None
    return ChildSitemap(url, _date(record.get("lastmod"), report))


def more_children(record: Fields, first: ChildSitemap) -> list[ChildSitemap]:
    """The further ``<loc>`` of an index's ``<sitemap>`` that has several: each is a sitemap the site lists,
    so each is read (with the element's lastmod), not only the first."""
    return [ChildSitemap(url, first.last_modified) for text in record.get(LOC_MORE, ()) if (url := clean(text))]


def rss_item(record: Fields, bare: list[str], report: ParseReport) -> PageEntry | None:
    """An RSS 2.0 or 1.0 ``<item>``: its ``<link>``, else a permalink ``<guid>``, else ``rdf:about``."""
    url = clean(record.get("link"))
    if url is None:
        for candidate in (clean(record.get("guid")), clean(record.get(ABOUT))):
            if candidate is not None and looks_like_http_url(candidate):
                url = candidate
                break
    if url is None:
        report.warn("missing_loc")
        return None
    date = record.get("pubdate") or record.get("date") or record.get("updated")
    return PageEntry(url, _date(date, report))


def atom_entry(record: Fields, bare: list[str], report: ParseReport) -> PageEntry | None:
    """An Atom 1.0 or 0.3 ``<entry>``: its alternate link, else an http(s) ``<id>``."""
    url = clean(record.get(LINK_HREF))
    if url is None:
        candidate = clean(record.get("id"))
        if candidate is not None and looks_like_http_url(candidate):
            url = candidate
    if url is None:
        report.warn("missing_loc")
        return None
    date = record.get("updated") or record.get("modified") or record.get("published") or record.get("issued")
    return PageEntry(url, _date(date, report))


def alternate(attrs: dict[str, str]) -> Alternate | None:
    """An hreflang alternate, only when rel="alternate", hreflang and href are all there."""
    rel = attrs.get("rel")
    if rel != "alternate" and (rel is None or rel.strip(STRIP_CHARS).lower() != "alternate"):
        return None
    return hreflang_alternate(attrs.get("hreflang"), attrs.get("href"))


def hreflang_alternate(hreflang: str | None, href: str | None) -> Alternate | None:
    """The alternate of a ``rel="alternate"`` link; None unless both hreflang and href say something."""
    if not hreflang or not href:
        return None
    hreflang = hreflang.strip(STRIP_CHARS)
    href = href.strip(STRIP_CHARS)
    if not hreflang or not href:
        return None
    return Alternate(hreflang, href)


def atom_link(attrs: dict[str, str]) -> str | None:
    """The page an Atom entry points to: a link with rel="alternate", or with no rel at all."""
    rel = attrs.get("rel")
    if rel is not None and rel.strip(STRIP_CHARS).lower() != "alternate":
        return None
    return clean(attrs.get("href"))


def image(fields: Fields) -> Image | None:
    loc = fields.get("loc")
    loc = loc.strip(STRIP_CHARS) if loc else None
    if not loc:
        return None
    if len(fields) == 1:
        return Image(loc)
    return Image(
        loc,
        clean(fields.get("caption")),
        clean(fields.get("title")),
        clean(fields.get("geo_location")),
        clean(fields.get("license")),
    )


def news(fields: Fields) -> NewsStory:
    return NewsStory(
        title=clean(fields.get("title")),
        publication_name=clean(fields.get("name")),
        publication_language=clean(fields.get("language")),
        publication_date=parse_datetime(fields.get("publication_date")),
        keywords=parse_list(fields.get("keywords")),
        genres=parse_list(fields.get("genres")),
        access=clean(fields.get("access")),
        stock_tickers=parse_list(fields.get("stock_tickers")),
    )


def video(fields: Fields) -> Video:
    first_tag = fields.get("tag")
    tags = (first_tag, *fields.get("tag" + MORE, ())) if first_tag else ()
    return Video(
        thumbnail_loc=clean(fields.get("thumbnail_loc")),
        title=clean(fields.get("title")),
        description=clean(fields.get("description")),
        content_loc=clean(fields.get("content_loc")),
        player_loc=clean(fields.get("player_loc")),
        duration=parse_int(fields.get("duration")),
        expiration_date=parse_datetime(fields.get("expiration_date")),
        rating=parse_float(fields.get("rating"), low=0.0, high=5.0),
        view_count=parse_int(fields.get("view_count")),
        publication_date=parse_datetime(fields.get("publication_date")),
        family_friendly=parse_yes_no(fields.get("family_friendly")),
        requires_subscription=parse_yes_no(fields.get("requires_subscription")),
        live=parse_yes_no(fields.get("live")),
        tags=tuple(tag for tag in map(clean, tags) if tag is not None),
        category=clean(fields.get("category")),
        uploader=clean(fields.get("uploader")),
    )
