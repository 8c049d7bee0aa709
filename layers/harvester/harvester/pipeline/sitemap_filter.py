"""Which child sitemaps a job follows: the job's sitemap patterns, then USP's callbacks.

The patterns (``sitemap_include`` / ``sitemap_exclude``) travel in the job request, so they hold on AWS
too. The callbacks have the semantics of ultimate-sitemap-parser's: ``recurse_list_callback(urls,
recursion_level, parent_urls) -> urls`` sees all the children of one sitemap at once and goes first, then
``recurse_callback(url, recursion_level, parent_urls) -> bool`` decides each remaining one. As in USP,
they choose among the children of robots.txt and of sitemap indexes only (the well-known locations are
the site's own children: every one is probed) and the level is USP's: 0 for robots.txt's children, 1 for
those of an index it declares, ...; ``parent_urls`` are the ancestors of the listing sitemap (the site
node left out) and itself. Python functions cannot ride in a queue message, so only in-process runs (the
Python API, `harvest sitemaps`) have callbacks.

Two more callbacks choose entries by what their sitemap says (Scrapy's ``sitemap_filter``), applied where the
entries are screened (``sitemap_step.select``): ``entry_filter(entry) -> bool | str`` sees each page entry
(``PageEntry``, all its fields and extensions) and keeps it (True), leaves it out (False) or names the URL
to list instead (one of its alternates, say); ``child_filter(child) -> bool`` sees each child sitemap
(``ChildSitemap``: its URL and its ``<lastmod>``) of robots.txt or of an index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from msgspec import Struct

from harvester.sitemap import ChildSitemap, PageEntry
from harvester.urls import UrlFilter

RecurseCallback = Callable[[str, int, set[str]], bool]
RecurseListCallback = Callable[[list[str], int, set[str]], list[str]]
EntryFilter = Callable[[PageEntry], bool | str]
ChildFilter = Callable[[ChildSitemap], bool]


class SitemapCallbacks(Struct, frozen=True):
    recurse_callback: RecurseCallback | None = None
    recurse_list_callback: RecurseListCallback | None = None
    entry_filter: EntryFilter | None = None
    child_filter: ChildFilter | None = None


def follow(
    urls: Sequence[str],
    *,
    level: int,
    parents: set[str],
    patterns: UrlFilter,
    callbacks: SitemapCallbacks | None,
) -> tuple[list[str], dict[str, str]]:
    """The children to follow, in order, and the refused ones with the reason (pattern or callback)."""
    refused: dict[str, str] = {}
    kept = []
    for url in urls:
        reason = patterns.refusal(url)
        if reason is None:
            kept.append(url)
        else:
            refused[url] = f"sitemap {reason.replace('_', ' ')} by the job's sitemap patterns"
    if callbacks is None:
        return kept, refused
    if callbacks.recurse_list_callback is not None:
        chosen = set(callbacks.recurse_list_callback(list(kept), level, set(parents)))
        refused |= {url: "left out by recurse_list_callback" for url in kept if url not in chosen}
        kept = [url for url in kept if url in chosen]
    if callbacks.recurse_callback is not None:
        refused |= {
            url: "left out by recurse_callback"
            for url in kept
            if not callbacks.recurse_callback(url, level, set(parents))
        }
        kept = [url for url in kept if url not in refused]
    return kept, refused
