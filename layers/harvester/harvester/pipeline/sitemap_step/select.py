"""A job's selection of entries (``EntrySelection``, and the Python API's ``entry_filter`` / ``child_filter``),
made once per reading into the functions ``EntryScreen`` calls: None when the job selects nothing, so that
the screen's per-URL loop stays as it is.

A page entry goes through, in order: its fields (lastmod, or a news entry's publication date, since /
before; priority; changefreq; extensions), the ``entry_filter`` callable, the language, then its alternates.
What comes out is the pages to list, each with whether it is an alternate (whose repeats the screen does
not count as duplicates: an hreflang group names each of its pages in every entry), or the reason it was
left out. An alternate is listed as an ``AlternatePage``: the entry's lastmod, changefreq and priority at
its own URL, and ``alternate_of`` (the entry's URL) and ``hreflang`` among its extensions.

Languages (trafilatura's ``target_lang``): an entry with hreflang alternates is listed at those in the
language (``de``, ``de-AT``...); with none there, at its ``x-default`` one unless that URL marks another
language; else it is left out. An entry without alternates is left out when its URL marks another
language (``harvester.languages``). A child sitemap whose URL marks another language is not followed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from harvester.languages import hreflang_is, other_language
from harvester.model.selection import (
    CALLBACK,
    CHANGEFREQ,
    LANGUAGE,
    LOW_PRIORITY,
    NEWER,
    NO_EXTENSION,
    NO_LASTMOD,
    OLDER,
    SITEMAP_CALLBACK,
    SITEMAP_LANGUAGE,
    SITEMAP_OLDER,
    EntrySelection,
    moment,
)
from harvester.pipeline.sitemap_filter import SitemapCallbacks
from harvester.sitemap import ChildSitemap, PageEntry
from harvester.sitemap.entries import Alternate

#: The pages an entry gives (each with whether it is an alternate), or why it gives none.
Picked = list[tuple[PageEntry, bool]] | str
PickPage = Callable[[PageEntry], Picked]
#: Why a child sitemap is not followed, or None.
PickChild = Callable[[ChildSitemap], str | None]


class AlternatePage(PageEntry):
    """A page listed for an entry at another URL: one of its hreflang alternates (or the URL ``entry_filter``
    chose), with the entry's lastmod, changefreq and priority."""

    alternate_of: str = ""
    hreflang: str | None = None

    def extensions(self) -> dict[str, Any]:
        out = super().extensions()
        out["alternate_of"] = self.alternate_of
        if self.hreflang is not None:
            out["hreflang"] = self.hreflang
        return out


def alternate_page(entry: PageEntry, url: str, hreflang: str | None) -> PageEntry:
    """The page listed at ``url`` for ``entry`` (the entry itself when it is its own URL)."""
    if url == entry.url:
        return entry
    return AlternatePage(
        url,
        entry.last_modified,
        entry.change_frequency,
        entry.priority,
        alternate_of=entry.url,
        hreflang=hreflang,
    )


def pickers(
    select: EntrySelection | None, callbacks: SitemapCallbacks | None, started: datetime
) -> tuple[PickPage | None, PickChild | None]:
    """The functions choosing a reading's page entries and child sitemaps (None: all of them), for a job
    started at ``started`` (a duration is taken back from it)."""
    entry_filter = callbacks.entry_filter if callbacks is not None else None
    child_filter = callbacks.child_filter if callbacks is not None else None
    if select is None and entry_filter is None and child_filter is None:
        return None, None
    select = select or EntrySelection()
    return _page_picker(select, entry_filter, started), _child_picker(select, child_filter, started)


def _page_picker(
    select: EntrySelection, entry_filter: Callable[[PageEntry], bool | str] | None, started: datetime
) -> PickPage | None:
    checks = _field_checks(select, started)
    lang, alternates = select.lang, select.alternates
    if not checks and entry_filter is None and lang is None and not alternates:
        return None

    def pick(entry: PageEntry) -> Picked:
        for check in checks:
            reason = check(entry)
            if reason is not None:
                return reason
        chosen = False
        if entry_filter is not None:
            verdict = entry_filter(entry)
            if isinstance(verdict, str):
                url = verdict.strip()
                hreflang = next((a.hreflang for a in entry.alternates if a.href == url), None)
                first = alternate_page(entry, url, hreflang)
                chosen = True
            elif not verdict:
                return CALLBACK
            else:
                first = entry
        else:
            first = entry
        if lang is not None and not chosen:
            return _in_language(entry, lang)
        pages = [(first, first is not entry)]
        if alternates:
            pages += [(alternate_page(entry, a.href, a.hreflang), True) for a in entry.alternates]
        return pages

    return pick


def _in_language(entry: PageEntry, lang: str) -> Picked:
    """The pages of ``entry`` in ``lang`` (see the module), or why it has none."""
    links: tuple[Alternate, ...] = entry.alternates
    if not links:
        return LANGUAGE if other_language(entry.url, lang) else [(entry, False)]
    chosen = [a for a in links if hreflang_is(a.hreflang, lang)]
    if not chosen:
        chosen = [a for a in links if a.hreflang.strip().lower() == "x-default" and not other_language(a.href, lang)]
    if not chosen:
        return LANGUAGE
    pages = [alternate_page(entry, a.href, a.hreflang) for a in chosen]
    return [(page, page is not entry) for page in pages]


def _field_checks(select: EntrySelection, started: datetime) -> list[Callable[[PageEntry], str | None]]:
    """One check a field the selection sets, each giving the reason an entry fails it (None: it passes)."""
    checks: list[Callable[[PageEntry], str | None]] = []
    since = moment(select.since, started) if select.since else None
    before = moment(select.before, started) if select.before else None
    if since is not None or before is not None or select.require_lastmod:
        required = select.require_lastmod

        def dated(entry: PageEntry) -> str | None:
            when = entry.last_modified
            if when is None and entry.news is not None:
                when = entry.news.publication_date
            if when is None:
                return NO_LASTMOD if required else None
            if since is not None and when < since:
                return OLDER
            if before is not None and when >= before:
                return NEWER
            return None

        checks.append(dated)
    least = select.min_priority
    if least is not None:
        checks.append(lambda entry: LOW_PRIORITY if entry.priority < least else None)
    if select.changefreq:
        frequencies = frozenset(select.changefreq)
        checks.append(lambda entry: None if entry.change_frequency in frequencies else CHANGEFREQ)
    if select.extensions:
        kinds = frozenset(select.extensions)

        def extended(entry: PageEntry) -> str | None:
            has = ("news" in kinds and entry.news is not None) or ("image" in kinds and bool(entry.images))
            return None if has or ("video" in kinds and bool(entry.videos)) else NO_EXTENSION

        checks.append(extended)
    return checks


def _child_picker(
    select: EntrySelection, child_filter: Callable[[ChildSitemap], bool] | None, started: datetime
) -> PickChild | None:
    since = moment(select.sitemap_since, started) if select.sitemap_since else None
    lang = select.lang
    if since is None and lang is None and child_filter is None:
        return None

    def pick(child: ChildSitemap) -> str | None:
        if since is not None and child.last_modified is not None and child.last_modified < since:
            return SITEMAP_OLDER
        if lang is not None and other_language(child.url, lang):
            return SITEMAP_LANGUAGE
        if child_filter is not None and not child_filter(child):
            return SITEMAP_CALLBACK
        return None

    return pick
