"""The expat element handlers of each kind of XML document (urlset, index, RSS, Atom): the names an entry's
elements are read by (a grammar per kind) and the handlers themselves, closures over one parse's state.

:mod:`harvester.sitemap.xml_parser` feeds expat and installs these once the root element says what the
document is; why they are written as they are (one dict lookup and integer comparisons an event, text
collected by a list's ``append``) is told there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvester.sitemap import builders, rare_elements
from harvester.sitemap.builders import ABOUT, LINK_HREF, LOC_MORE, MORE, NEWS, RARE, Fields
from harvester.sitemap.entries import (
    Alternate,
    ChildSitemap,
    Entry,
    Image,
    NewsStory,
    ParseReport,
    SitemapKind,
    Video,
)
from harvester.sitemap.sink import Sink
from harvester.sitemap.values import STRIP_CHARS

StartHandler = Callable[[str, dict[str, str]], None]
EndHandler = Callable[[str], None]

# What an element is, once its qualified name has been classified: small ints, so that the handlers compare
# them with the interpreter's fast integer path. Fields are numbered from _FIELD on (see _FIELD_KEYS).
_IGNORE = 0
_LINK = 1  # an element whose attributes matter: <xhtml:link> in a urlset, <link href> in Atom
_ROOT = 2
_RECORD = 3  # <url>, <sitemap>, <item>, <entry>: one entry
_IMAGE = 4
_VIDEO = 5
_NEWS = 6
# 7 to 15: rare_elements' (a video's <video:tvshow>, Mobile, PageMap, ...), _SKIP among them.
_SKIP = rare_elements.SKIP  # a nested element whose fields belong to something else (Atom <source>)
_FIELD = rare_elements.FIRST_FIELD
_NO_FIELD = -1

#: Distinct qualified names remembered; past this a document of made-up names is classified each time,
#: so that the cache cannot grow with the document.
_MAX_NAMES = 4096

_PAGE_FIELDS = ("loc", "lastmod", "changefreq", "priority")
_IMAGE_FIELDS = ("loc", "caption", "title", "geo_location", "license")
_NEWS_FIELDS = (
    "name",
    "language",
    "publication_date",
    "title",
    "keywords",
    "genres",
    "stock_tickers",
    "access",
)
_VIDEO_FIELDS = (
    "thumbnail_loc",
    "title",
    "description",
    "content_loc",
    "player_loc",
    "duration",
    "expiration_date",
    "rating",
    "view_count",
    "publication_date",
    "family_friendly",
    "requires_subscription",
    "live",
    "tag",
    "category",
    "uploader",
)
_RSS_FIELDS = ("link", "guid", "pubdate", "date", "updated", "title", "description")
_ATOM_FIELDS = ("updated", "modified", "published", "issued", "id", "title", "summary", "tagline")
_INDEX_FIELDS = ("loc", "lastmod")
#: Every field's key in the dict an entry collects, indexed by its code (codes below _FIELD are not fields).
_FIELD_KEYS: tuple[str, ...] = ("",) * _FIELD + tuple(
    dict.fromkeys(
        _PAGE_FIELDS
        + _IMAGE_FIELDS
        + _NEWS_FIELDS
        + _VIDEO_FIELDS
        + rare_elements.TV_SHOW_FIELDS
        + _RSS_FIELDS
        + _ATOM_FIELDS
    )
)
_FIELD_CODES = {name: code for code, name in enumerate(_FIELD_KEYS) if code >= _FIELD}
_LOC = _FIELD_CODES["loc"]


class _Grammar:
    """The element names one kind of document is read with."""

    __slots__ = ("fields", "link", "records", "subs")

    def __init__(
        self,
        records: tuple[str, ...],
        fields: tuple[str, ...],
        *,
        subs: dict[str, int] | None = None,
        link: bool = False,
    ) -> None:
        self.records = frozenset(records)
        self.fields = {name: _FIELD_CODES[name] for name in fields}
        self.subs = subs or {}
        self.link = link


_GRAMMARS = {
    SitemapKind.URLSET: _Grammar(
        ("url",),
        _PAGE_FIELDS + _IMAGE_FIELDS + _NEWS_FIELDS + _VIDEO_FIELDS + rare_elements.TV_SHOW_FIELDS,
        subs={
            "image": _IMAGE,
            "video": _VIDEO,
            "news": _NEWS,
            **rare_elements.SUBS,
        },
        link=True,
    ),
    # crawler-commons' leniency: a <sitemap> holding its URL as bare text, without <loc>.
    SitemapKind.INDEX: _Grammar(("sitemap",), _INDEX_FIELDS),
    # RSS 2.0 <item> and RSS 1.0 <item rdf:about>; <dc:date> is "date" once the prefix is gone. A feed item
    # may carry a Google News <news:news>.
    SitemapKind.RSS: _Grammar(("item",), _RSS_FIELDS + _NEWS_FIELDS, subs={"news": _NEWS}),
    SitemapKind.ATOM: _Grammar(
        ("entry",),
        _ATOM_FIELDS + _NEWS_FIELDS,
        subs={"source": _SKIP, "news": _NEWS},
        link=True,
    ),
}

_BUILDERS: dict[SitemapKind, Callable[[Fields, list[str], ParseReport], Entry | None]] = {
    SitemapKind.INDEX: builders.child,
    SitemapKind.RSS: builders.rss_item,
    SitemapKind.ATOM: builders.atom_entry,
}


def handlers(
    kind: SitemapKind,
    parser: Any,
    root: str,
    sink: Sink,
    report: ParseReport,
    on_root_end: Callable[[], None],
) -> tuple[StartHandler, EndHandler, Callable[[], bool]]:
    """The element handlers for one kind of document, as closures over the parse state.

    Text is collected in one list, ``chars``, whose ``append`` is expat's character data handler while an
    entry is open (and no handler at all outside entries). A field remembers where its text starts and
    takes it out at its end tag, so what stays in ``chars`` is the entry's own text (an index
    ``<sitemap>`` holding its URL without ``<loc>``) and the blanks between its elements; it is emptied at
    every entry's end.

    The hot cases (fields, ``<url>``, ``<image:image>``, ``<xhtml:link>``) are handled inline rather than
    in helper functions: a function call per element is measurable at 400,000 elements per sitemap.
    """
    grammar = _GRAMMARS[kind]
    table: dict[str, int] = {}
    keys = _FIELD_KEYS
    records, subs, fields, link = grammar.records, grammar.subs, grammar.fields, grammar.link
    urlset = kind is SitemapKind.URLSET
    rss = kind is SitemapKind.RSS
    build = _BUILDERS.get(kind, builders.child)  # (a urlset builds its pages inline, below)
    out = sink.out.append  # Sink.emit, inlined below
    limit = sink.max_entries
    chars: list[str] = []
    collect = chars.append

    depth = 0  # nesting of the root's own name, so that only the real end of the root ends the document
    record: Fields | None = None  # the fields of the entry being read
    target: Fields | None = None  # where fields go: the record, or a nested image/video/news
    stack: list[Fields | None] = []  # targets suspended by nested elements
    field = _NO_FIELD  # the field whose text is being collected...
    mark = 0  # ...from this index of ``chars`` on
    # Lists made on the first item (most entries have none of some): a tuple grown by concatenation
    # would make one <url> with 100,000 images quadratic.
    images: list[Image] | None = None
    videos: list[Video] | None = None
    alternates: list[Alternate] | None = None
    news: NewsStory | None = None
    wrapped = 0  # entry elements open inside a field (read as the field's text)

    def learn(name: str) -> int:
        local = name.rpartition(":")[2].lower()
        if name == root:
            code = _ROOT
        elif local in records:
            code = _RECORD
        elif local in subs:
            code = subs[local]
        elif link and local == "link":
            code = _LINK
        else:
            code = fields.get(local, _IGNORE)
        if len(table) < _MAX_NAMES:
            table[name] = code
        return code

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal field, mark, record, target, images, videos, alternates, news, depth, wrapped
        try:
            code = table[name]
        except KeyError:
            code = learn(name)
        if code >= _FIELD:
            if target is not None:
                field = code
                mark = len(chars)
        elif code == _LINK:
            if record is not None and target is record:
                if urlset:
                    alternate = builders.alternate(attrs)
                    if alternate is not None:
                        if alternates is None:
                            alternates = [alternate]
                        else:
                            alternates.append(alternate)
                elif LINK_HREF not in record:
                    href = builders.atom_link(attrs)
                    if href is not None:
                        record[LINK_HREF] = href
        elif code == _RECORD:
            if field != _NO_FIELD:  # <loc><url>…</url></loc>: an element inside a field is its text's wrapper
                wrapped += 1
                return
            if record is not None:  # an entry inside an entry: start afresh
                field = _NO_FIELD
                news = None
                images = videos = alternates = None
                stack.clear()
                chars.clear()
            record = target = {}
            parser.CharacterDataHandler = collect
            if rss:
                about = attrs.get("rdf:about")  # RSS 1.0 items name their page in an attribute
                if about:
                    record[ABOUT] = about
        elif code == _ROOT:
            depth += 1
        elif code and record is not None:  # a nested element: an image, a video, news, ...
            stack.append(target)
            if code < _SKIP and target is not None:
                target = {}
            elif code == _SKIP or target is None:
                target = None
            else:
                target = rare_elements.start(code, target, record, attrs, len(chars))

    def end(name: str) -> None:
        nonlocal field, record, target, images, videos, alternates, news, depth, wrapped
        extra: list[ChildSitemap] | None = None
        try:
            code = table[name]
        except KeyError:
            code = learn(name)
        if code == field:
            field = _NO_FIELD
            if len(chars) == mark + 1:  # the usual case: expat delivered the text in one piece
                text = chars.pop()
            else:
                text = "".join(chars[mark:])
                del chars[mark:]
            if text and target is not None:
                key = keys[code]
                if key in target:
                    if code == _LOC and target is record and LOC_MORE not in record:
                        # (rare: a second <loc>; what the entry has now is all the first one may keep)
                        record[RARE] = builders.at_second_loc(record, images, videos, news, alternates)
                    target.setdefault(key + MORE, []).append(text)
                else:
                    target[key] = text
        elif code <= _LINK or code >= _FIELD:
            return
        elif code == _RECORD:
            if wrapped:
                wrapped -= 1
                return
            if record is None:
                return
            if urlset:
                entry = builders.page(
                    record,
                    tuple(images) if images else (),
                    tuple(videos) if videos else (),
                    news,
                    tuple(alternates) if alternates else (),
                    report,
                )
            elif LOC_MORE in record and kind is SitemapKind.INDEX:  # (rare: several <loc> in a <sitemap>)
                children = builders.children(record, chars, report)
                entry, extra = (children[0], children[1:]) if children else (None, None)
            else:
                entry = build(record, chars, report)
            record = target = news = None
            field = _NO_FIELD
            images = videos = alternates = None
            if stack:
                stack.clear()
            chars.clear()
            parser.CharacterDataHandler = None
            if entry is not None:
                if sink.count >= limit:
                    raise sink.overflow()
                sink.count += 1
                out(entry)
                if extra:  # (rare: an index <sitemap> with several <loc>; not worth inlining)
                    for child in extra:
                        sink.emit(child)
        elif code == _ROOT:
            depth -= 1
            if depth == 0:
                on_root_end()
        elif stack:
            nested, target = target, stack.pop()
            if nested is None:
                return
            if code == _IMAGE:
                loc = nested.get("loc")
                if loc is not None and len(nested) == 1:  # the usual image: only a <loc>
                    loc = loc.strip(STRIP_CHARS)
                    image: Image | None = Image(loc) if loc else None
                else:
                    image = builders.image(nested)
                if image is not None:
                    if images is None:
                        images = [image]
                    else:
                        images.append(image)
            elif code == _VIDEO:
                if videos is None:
                    videos = [builders.video(nested)]
                else:
                    videos.append(builders.video(nested))
            elif code == _NEWS and news is None:
                news = builders.news(nested)
                if not urlset and target is record:  # a feed item's: placed among its fields (builders.split)
                    record[NEWS] = news
            elif code > _NEWS and target is not None:
                rare_elements.end(code, nested, target, chars)

    def idle() -> bool:
        """No entry is open: a plain block read now means what it would mean to these handlers."""
        return record is None

    return start, end, idle
