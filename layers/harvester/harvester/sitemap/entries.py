"""What a sitemap says, entry by entry.

These are plain msgspec Structs, validated nowhere: a parser makes 50,000 of them per sitemap, from values it
checked itself, and validation here would cost more than the parse itself; the records a user sees
(:mod:`harvester.model.records`) validate where input enters instead. (Structs rather than dataclasses: a
Struct is made in C, where Python 3.11 compiles a dataclass's methods when its module is imported, a cost
paid again by every Lambda cold start.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any, TypeVar, get_args

from msgspec import Struct, field
from msgspec.structs import fields

T = TypeVar("T")


class SitemapKind(StrEnum):
    """What a fetched document turned out to be, decided by its content rather than its Content-Type."""

    URLSET = "urlset"
    INDEX = "index"
    RSS = "rss"
    ATOM = "atom"
    TEXT = "text"
    ROBOTS = "robots"


class Image(Struct, frozen=True):
    loc: str
    caption: str | None = None
    title: str | None = None
    geo_location: str | None = None
    license: str | None = None


class NewsStory(Struct, frozen=True):
    title: str | None = None
    publication_name: str | None = None
    publication_language: str | None = None
    publication_date: datetime | None = None
    keywords: tuple[str, ...] = ()
    genres: tuple[str, ...] = ()
    access: str | None = None
    stock_tickers: tuple[str, ...] = ()

    @property
    def publish_date(self) -> datetime | None:
        """USP's name (``SitemapNewsStory.publish_date``) for the sitemap's ``publication_date``."""
        return self.publication_date


class TvShow(Struct, frozen=True):
    """A video's ``<video:tvshow>``, as crawler-commons models it (``VideoAttributes.TVShow``)."""

    show_title: str | None = None
    video_type: str | None = None  # full, preview, clip, interview, news or other
    episode_title: str | None = None
    season_number: int | None = None
    episode_number: int | None = None
    premier_date: datetime | None = None


class ContentSegment(Struct, frozen=True):
    """A ``<video:content_segment_loc duration="...">``: one part of a video in several files."""

    loc: str
    duration: int | None = None


class Video(Struct, frozen=True):
    thumbnail_loc: str | None = None
    title: str | None = None
    description: str | None = None
    content_loc: str | None = None
    player_loc: str | None = None
    duration: int | None = None
    expiration_date: datetime | None = None
    rating: float | None = None
    view_count: int | None = None
    publication_date: datetime | None = None
    family_friendly: bool | None = None
    requires_subscription: bool | None = None
    live: bool | None = None
    tags: tuple[str, ...] = ()
    category: str | None = None
    uploader: str | None = None
    content_segments: tuple[ContentSegment, ...] = ()
    tvshow: TvShow | None = None


class PageMapObject(Struct, frozen=True):
    """A PageMap ``<DataObject type=".." id="..">`` and its ``<Attribute name="..">`` values (the text, else
    the ``value`` attribute; a name given twice keeps the last), as crawler-commons' ``PageMapDataObject``."""

    type: str | None = None
    id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)


class Alternate(Struct, frozen=True):
    """An ``xhtml:link rel="alternate"``; kept only when rel, hreflang and href are all present."""

    hreflang: str
    href: str


class PageEntry(Struct):
    """One page a sitemap lists: its ``<loc>``, ``<lastmod>`` (``last_modified``), ``<changefreq>``
    (``change_frequency``) and ``<priority>``, under the names every output and record gives them.
    ``priority`` is already defaulted (0.5) and clamped by the parser."""

    url: str
    last_modified: datetime | None = None
    change_frequency: str | None = None
    priority: float = 0.5
    images: tuple[Image, ...] = ()
    news: NewsStory | None = None
    videos: tuple[Video, ...] = ()
    alternates: tuple[Alternate, ...] = ()
    #: ``<mobile:mobile/>``: the page is marked as one for mobile devices.
    mobile: bool = False
    #: The DataObjects of the entry's ``<PageMap>``, in document order.
    pagemap: tuple[PageMapObject, ...] = ()

    def extensions(self) -> dict[str, Any]:
        """The extension fields that are present, JSON-ready (used by page tasks and ``--format jsonl``)."""
        out: dict[str, Any] = {}
        if self.images:
            out["images"] = [
                {"loc": i.loc}  # the usual image (the one the plain-block reader builds): a loc alone
                if i.caption is None and i.title is None and i.geo_location is None and i.license is None
                else _json_ready(i)
                for i in self.images
            ]
        if self.news is not None:
            out["news"] = _json_ready(self.news)
        if self.videos:
            out["videos"] = [_json_ready(v) for v in self.videos]
        if self.alternates:
            out["alternates"] = [{"hreflang": a.hreflang, "href": a.href} for a in self.alternates]
        if self.mobile:
            out["mobile"] = True
        if self.pagemap:
            out["pagemap"] = [_json_ready(o) for o in self.pagemap]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "last_modified": self.last_modified.isoformat() if self.last_modified else None,
            "change_frequency": self.change_frequency,
            "priority": self.priority,
            **self.extensions(),
        }


class ChildSitemap(Struct):
    """A sitemap another document points to: an index ``<sitemap>`` or a robots.txt ``Sitemap:`` line."""

    url: str
    last_modified: datetime | None = None  # its ``<lastmod>``

    def to_json(self) -> dict[str, Any]:
        return {"sitemap": self.url, "last_modified": self.last_modified.isoformat() if self.last_modified else None}


Entry = PageEntry | ChildSitemap


#: The warning of a document that inflated past the size a job warns at (``SitemapParser``'s ``warn_bytes``).
OVER_WARN_SIZE = "over_warn_size"
#: How many URLs of a sitemap the job's reading rules repaired (``ReadingRules.repair_urls``).
URL_REPAIRED = "url_repaired"
#: A sitemap's warnings that are not about values set aside (the others are: a value that does not parse).
NOTICES = frozenset({OVER_WARN_SIZE, URL_REPAIRED})


def values_set_aside(warnings: Mapping[str, int]) -> dict[str, int]:
    """The warnings about values set aside (entries kept), without the ``NOTICES``."""
    return {reason: n for reason, n in warnings.items() if reason not in NOTICES}


def notices(warnings: Mapping[str, int]) -> list[str]:
    """The ``NOTICES`` among a sitemap's warnings, in words."""
    said = []
    if n := warnings.get(URL_REPAIRED):
        said.append(f"{n:,} URL{'s' if n != 1 else ''} repaired (no scheme)")
    if n := warnings.get(OVER_WARN_SIZE):
        said.append("larger than the warning size" if n == 1 else f"{n:,} larger than the warning size")
    return said


class ParseReport(Struct):
    """How the reading of one document went, beside the entries it produced."""

    kind: SitemapKind | None = None
    error: str | None = None
    truncated: str | None = None
    warnings: dict[str, int] = field(default_factory=dict)

    def warn(self, reason: str) -> None:
        self.warnings[reason] = self.warnings.get(reason, 0) + 1


def _json_ready(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in obj.__struct_fields__:
        value = getattr(obj, name)
        if value is None or value == () or value == {}:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = [_json_ready(v) for v in value] if isinstance(value[0], Struct) else list(value)
        elif isinstance(value, Struct):
            value = _json_ready(value)
        elif isinstance(value, dict):
            value = dict(value)
        out[name] = value
    return out


def from_json(kind: type[T], data: Mapping[str, Any]) -> T:
    """An extension (an image, a news story, a video, a PageMap object) back from what
    ``PageEntry.extensions`` made of it: a job record keeps its extensions as JSON, and readers of the record
    ask for the parser's types."""
    values: dict[str, Any] = {}
    for name, is_time, nested in _shape(kind):
        if name not in data:
            continue
        value = data[name]
        if nested is not None:
            if isinstance(value, list):
                value = tuple(from_json(nested, v) for v in value)
            elif isinstance(value, Mapping):
                value = from_json(nested, value)
        elif isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, str) and is_time:
            value = datetime.fromisoformat(value)
        elif isinstance(value, dict):
            value = dict(value)
        values[name] = value
    return kind(**values)


@cache
def _shape(kind: type) -> tuple[tuple[str, bool, type | None], ...]:
    """An extension type's fields, each with whether it holds a time and the extension type it holds (a
    video's segments and TV show): once a type (msgspec resolves the annotations each time it is asked,
    where a record's extensions are read one by one)."""
    return tuple((f.name, str(f.type).startswith("datetime"), _nested(f.type)) for f in fields(kind))


def _nested(annotation: Any) -> type | None:
    """The Struct type a field holds, alone, optional or in a tuple; None for any other field."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, Struct):
            return arg
    return None
