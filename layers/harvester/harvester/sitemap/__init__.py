"""Sitemap parsing: every format a site may serve, read as a stream, with the limits enforced as it goes.

The engine feeds :class:`SitemapParser` the body of each fetched sitemap; ``harvest parse FILE`` uses
:func:`parse_file`. URL hygiene, scope and patterns are the engine's job: the parser reports what the
document says.

The entries (what a sitemap lists) are imported here; the parser and the value parsers are loaded on first
use, because the records every handler imports name ``PageEntry`` and a page handler, which parses no
sitemap, should not pay for the XML parser's import at its cold start.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from harvester.sitemap.entries import (
    Alternate,
    ChildSitemap,
    ContentSegment,
    Entry,
    Image,
    NewsStory,
    PageEntry,
    PageMapObject,
    ParseReport,
    SitemapKind,
    TvShow,
    Video,
)

if TYPE_CHECKING:
    from harvester.sitemap.parser import SitemapParser, parse_bytes, parse_file
    from harvester.sitemap.values import parse_changefreq, parse_datetime, parse_priority

_LAZY = {
    "SitemapParser": "harvester.sitemap.parser",
    "parse_bytes": "harvester.sitemap.parser",
    "parse_file": "harvester.sitemap.parser",
    "parse_changefreq": "harvester.sitemap.values",
    "parse_datetime": "harvester.sitemap.values",
    "parse_priority": "harvester.sitemap.values",
}

__all__ = [
    "Alternate",
    "ChildSitemap",
    "ContentSegment",
    "Entry",
    "Image",
    "NewsStory",
    "PageEntry",
    "PageMapObject",
    "ParseReport",
    "SitemapKind",
    "SitemapParser",
    "TvShow",
    "Video",
    "parse_bytes",
    "parse_changefreq",
    "parse_datetime",
    "parse_file",
    "parse_priority",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harvester.sitemap' has no attribute {name!r}")
