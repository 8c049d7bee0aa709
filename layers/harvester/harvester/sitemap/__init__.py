"""Sitemap parsing: every format a site may serve, read as a stream, with the limits enforced as it goes.

The engine feeds :class:`SitemapParser` the body of each fetched sitemap; ``harvest parse FILE`` uses
:func:`parse_file`. URL hygiene, scope and patterns are the engine's job: the parser reports what the
document says.
"""

from harvester.sitemap.entries import (
    Alternate,
    ChildSitemap,
    Entry,
    Image,
    NewsStory,
    PageEntry,
    ParseReport,
    SitemapKind,
    Video,
)
from harvester.sitemap.parser import SitemapParser, parse_bytes, parse_file
from harvester.sitemap.values import parse_changefreq, parse_datetime, parse_priority

__all__ = [
    "Alternate",
    "ChildSitemap",
    "Entry",
    "Image",
    "NewsStory",
    "PageEntry",
    "ParseReport",
    "SitemapKind",
    "SitemapParser",
    "Video",
    "parse_bytes",
    "parse_changefreq",
    "parse_datetime",
    "parse_file",
    "parse_priority",
]
