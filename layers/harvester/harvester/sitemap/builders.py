"""Entries from the raw field texts an XML entry element collected.

These run once per entry rather than once per event, but a 50,000-URL sitemap still makes them the
largest cost after expat itself, so the common case is kept short: exact protocol values ("daily",
"0.8", an ISO timestamp) are looked up or parsed directly, and only unusual text goes through the
forgiving converters of :mod:`harvester.sitemap.values`.

``fields`` dicts map an element's lower-cased local name to its text (never empty); a repeated field's
later values are under ``name + MORE``. Their keys keep the order in which the values were read, which is how
an entry whose end tag was lost is told apart from the next one run into it (:func:`split`).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from harvester.sitemap.entries import (
    Alternate,
    ChildSitemap,
    ContentSegment,
    Image,
    NewsStory,
    PageEntry,
    PageMapObject,
    ParseReport,
    TvShow,
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
#: Set on a ``<url>`` that holds something unusual (a second ``<loc>``, ``<mobile:mobile>``, a PageMap), so that
#: one test tells the usual entry from it. At a second ``<loc>`` it holds how many of each extension the entry
#: had read by then (``Counts``): those read later are not the first ``<loc>``'s.
RARE = "@rare"
MOBILE = "@mobile"
PAGEMAP = "@pagemap"
#: A feed item's ``<news:news>`` (a NewsStory), kept in its fields so that their order places it.
NEWS = "@news"
#: Keys of the values nested elements collect (a video's, a PageMap's).
TVSHOW = "@tvshow"
SEGMENTS = "@segments"
OBJECTS = "@objects"
ATTRIBUTES = "@attributes"

#: How many images, videos, news stories, alternates and PageMap objects an entry had at its second <loc>,
#: and how many values each of its repeated fields.
Counts = tuple[int, int, int, int, int, dict[str, int]]

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
    """A ``<url>`` from the fields expat collected; None (and a warning) without a ``<loc>``."""
    get = record.get
    if RARE in record:
        return unusual_page(record, images, videos, news, alternates, report)
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


def unusual_page(
    record: Fields,
    images: tuple[Image, ...],
    videos: tuple[Video, ...],
    news: NewsStory | None,
    alternates: tuple[Alternate, ...],
    report: ParseReport,
) -> PageEntry | None:
    """A ``<url>`` with a second ``<loc>``, ``<mobile:mobile>`` or a PageMap.

    A second ``<loc>`` is warned of (``repeated_loc``) and the first kept: which one the site meant is not
    knowable, and it is most often two entries run together, the first one's end tag lost. So the first
    ``<loc>`` keeps only what was read before the second: a field, an extension written after it may be the
    next entry's, and no value of one entry may be given to another."""
    pagemap: list[PageMapObject] = record.get(PAGEMAP, [])
    if LOC_MORE in record:
        report.warn("repeated_loc")
        counts: Counts = record[RARE]
        record = split(record, LOC_MORE, counts[5])[0]
        images, videos, alternates = images[: counts[0]], videos[: counts[1]], alternates[: counts[3]]
        news = news if counts[2] else None
        pagemap = pagemap[: counts[4]]
    get = record.get
    entry = page_values(
        get("loc"), get("lastmod"), get("changefreq"), get("priority"), images, videos, news, alternates, report
    )
    if entry is not None:
        entry.mobile = MOBILE in record
        entry.pagemap = tuple(pagemap)
    return entry


def at_second_loc(
    record: Fields,
    images: list[Image] | None,
    videos: list[Video] | None,
    news: NewsStory | None,
    alternates: list[Alternate] | None,
) -> Counts:
    """What an entry holds when a second ``<loc>`` comes (see :func:`unusual_page` and :func:`split`)."""
    return (
        len(images) if images else 0,
        len(videos) if videos else 0,
        news is not None,
        len(alternates) if alternates else 0,
        len(record.get(PAGEMAP, ())),
        {key: len(value) for key, value in record.items() if key.endswith(MORE)},
    )


def split(record: Fields, marker: str, lengths: dict[str, int] | None = None) -> tuple[Fields, Fields]:
    """The fields of an element holding two entries run together (``marker``: the second value of the field
    that names an entry, a ``<loc>``): the first entry's, read before the marker, and the second's, read
    after it, each field's first value (none when the element names three entries or more: which of them a
    value after the second belongs to cannot be known). The second's own name is the marker's first value.
    ``lengths``: how many values each repeated field had at the marker, when known (else the later values of
    a field repeated before the marker are nobody's)."""
    first: Fields = {}
    after: Fields = {}
    target = first
    for key, value in record.items():
        if key == marker:
            target = after
        else:
            target[key] = value
    second: Fields = {}
    alone = len(record[marker]) == 1
    if lengths:
        for key, count in lengths.items():
            values = first.get(key)
            if values is not None and len(values) > count:
                first[key] = values[:count]
                if alone and key[: -len(MORE)] not in after:
                    second[key[: -len(MORE)]] = values[count]
    if alone:
        for key, value in after.items():
            if not key.endswith(MORE):
                second[key] = value
            elif (name := key[: -len(MORE)]) in first:
                second[name] = value[0]  # (its first value was the first entry's; every later one is after)
    return first, second


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


def children(record: Fields, bare: list[str], report: ParseReport) -> list[ChildSitemap]:
    """An index ``<sitemap>`` with several ``<loc>``: each is a sitemap the site lists, so each is read, not
    only the first. Most often these are entries run together (an end tag lost), so a ``<lastmod>`` goes to
    the ``<loc>`` it follows (:func:`split`), never to another."""
    first_fields, second_fields = split(record, LOC_MORE, record[RARE][5])
    found = []
    first = child(first_fields, bare, report)
    if first is not None:
        found.append(first)
    locs = record[LOC_MORE]
    second = clean(locs[0])
    if second is not None:
        found.append(ChildSitemap(second, _date(second_fields.get("lastmod"), report)))
    found += (ChildSitemap(url) for text in locs[1:] if (url := clean(text)))
    return found


def rss_item(record: Fields, bare: list[str], report: ParseReport) -> PageEntry | None:
    """An RSS 2.0 or 1.0 ``<item>``: its ``<link>``, else a permalink ``<guid>``, else ``rdf:about``; its
    title (else its description) and date as its news story, as ultimate-sitemap-parser keeps them, unless
    the item carries a Google News ``<news:news>``."""
    if "link" + MORE in record or "guid" + MORE in record:
        record = _first_item(record, ("link" + MORE, "guid" + MORE))
    url = clean(record.get("link"))
    if url is None:
        for candidate in (clean(record.get("guid")), clean(record.get(ABOUT))):
            if candidate is not None and looks_like_http_url(candidate):
                url = candidate
                break
    if url is None:
        report.warn("missing_loc")
        return None
    published = record.get("pubdate") or record.get("date")
    date = published or record.get("updated")
    return PageEntry(url, _date(date, report), news=_feed_news(record, "description", published))


def atom_entry(record: Fields, bare: list[str], report: ParseReport) -> PageEntry | None:
    """An Atom 1.0 or 0.3 ``<entry>``: its alternate link, else an http(s) ``<id>``; its title (else its
    summary) and publication date (else its update's) as its news story, as ultimate-sitemap-parser keeps
    them, unless the entry carries a Google News ``<news:news>``."""
    if "id" + MORE in record:
        record = _first_item(record, ("id" + MORE,))
    url = clean(record.get(LINK_HREF))
    if url is None:
        candidate = clean(record.get("id"))
        if candidate is not None and looks_like_http_url(candidate):
            url = candidate
    if url is None:
        report.warn("missing_loc")
        return None
    date = record.get("updated") or record.get("modified") or record.get("published") or record.get("issued")
    published = record.get("published") or record.get("issued") or record.get("updated") or record.get("modified")
    return PageEntry(url, _date(date, report), news=_feed_news(record, "summary", published))


def _first_item(record: Fields, markers: tuple[str, ...]) -> Fields:
    """The fields of a feed item read before its naming field came a second time (two items run together,
    an end tag lost): what follows is not the first item's (see :func:`split`)."""
    marker = next(key for key in record if key in markers)
    return split(record, marker)[0]


def _feed_news(record: Fields, description: str, published: str | None) -> NewsStory | None:
    """A feed item's news story: its ``<news:news>``, else its title (else ``description``'s text, an Atom
    0.3 ``<tagline>`` too) with the date given, HTML entities decoded as ultimate-sitemap-parser does; None
    without any of them."""
    story: NewsStory | None = record.get(NEWS)
    if story is not None:
        return story
    title = clean(record.get("title")) or clean(record.get(description)) or clean(record.get("tagline"))
    if title is None:
        return None
    if "&" in title:
        title = clean(html.unescape(title))
    return NewsStory(title=title, publication_date=parse_datetime(published))


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
    segments = fields.get(SEGMENTS)
    tvshow = fields.get(TVSHOW)
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
        content_segments=_segments(segments) if segments else (),
        tvshow=None if tvshow is None else tv_show(tvshow),
    )


def _segments(found: list[tuple[str, str | None]]) -> tuple[ContentSegment, ...]:
    """A video's ``<video:content_segment_loc duration="...">`` (text, duration) pairs, those with a URL."""
    return tuple(ContentSegment(loc, parse_int(duration)) for text, duration in found if (loc := clean(text)))


def tv_show(fields: Fields) -> TvShow:
    return TvShow(
        show_title=clean(fields.get("show_title")),
        video_type=clean(fields.get("video_type")),
        episode_title=clean(fields.get("episode_title")),
        season_number=parse_int(fields.get("season_number")),
        episode_number=parse_int(fields.get("episode_number")),
        premier_date=parse_datetime(fields.get("premier_date")),
    )


def pagemap_object(type_: str | None, id_: str | None, attributes: dict[str, str]) -> PageMapObject:
    return PageMapObject(clean(type_), clean(id_), attributes)


def pagemap_value(text: str, value: str | None) -> str:
    """A PageMap ``<Attribute>``'s value: its text, else its ``value`` attribute (crawler-commons' rule)."""
    text = text.strip(STRIP_CHARS)
    if not text and value is not None:
        return value.strip(STRIP_CHARS)
    return text
