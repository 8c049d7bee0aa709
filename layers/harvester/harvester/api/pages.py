"""Running a discovery for the Python API: a site's sitemap tree, and its pages as a stream.

    from harvester import sitemap_tree_for_homepage, iter_pages

    tree = sitemap_tree_for_homepage("https://example.com/")       # USP's: tree.all_pages(), sub_sitemaps...
    for page in iter_pages("https://example.com/", include=["*/blog/*"]):
        print(page.url, page.last_modified)

Discovery runs the engine itself — the very code the Lambda functions run — as a discovery-only job
(``fetch_pages=False``) on a temporary local state, so the tree follows every rule of a real job (robots.txt
then the known paths, recursion, depth, patterns, one reading per sitemap URL) and USP's
``recurse_callback`` / ``recurse_list_callback`` can choose the sitemaps to follow. The run is ephemeral
(see ``StepContext.ephemeral``): no crawl database, no stored documents, no result, and of each page only
its 12-byte key is kept (to de-duplicate, harvester/keyset.py), so memory stays flat whatever the site's
size. Pages are handed out as each batch of them is recorded, while the other sitemaps are
still being read; none is held in memory. A tree that answers USP's ``all_pages()`` keeps them where USP
(>= 1.0) does: on disk, in a temporary file that goes with the tree (harvester/adapters/local/page_spool.py).
The tree itself: harvester/api/tree.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

from harvester.adapters.local.page_spool import PageSpool
from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.api.errors import SiteUnreachable
from harvester.api.tree import SitemapTree
from harvester.fetch import policy_for
from harvester.model.base import ValidationError
from harvester.model.messages import JobRequest
from harvester.model.reading import reading_section
from harvester.model.records import SitemapURL, utcnow
from harvester.model.selection import EntrySelection
from harvester.pipeline.listed_rows import listed_page
from harvester.pipeline.sitemap_filter import (
    ChildFilter,
    EntryFilter,
    RecurseCallback,
    RecurseListCallback,
    SitemapCallbacks,
)
from harvester.sitemap import PageEntry

__all__ = ["Discovery", "SiteUnreachable", "aiter_pages", "iter_pages", "sitemap_tree_for_homepage"]

T = TypeVar("T")
_HANDOVER = 1024  # pages waiting for a slow consumer before the readers are held back
_HANDOVER_BATCHES = 4  # batches waiting between the discovery thread and a slow `iter_pages` consumer


class _Handover(Generic[T]):
    """The batches made of the pages counted and not yet taken by the consumer. Counting cannot wait (it
    runs inside a sitemap reading), so the readers are held back instead, at their next chunk (``room``),
    while more than ``_HANDOVER`` pages wait: memory stays flat however fast the sitemaps arrive."""

    def __init__(self) -> None:
        self.batches: asyncio.Queue[tuple[T, int] | BaseException | None] = asyncio.Queue()
        self.room = asyncio.Event()
        self.room.set()
        self.waiting = 0

    def put(self, batch: T, pages: int) -> None:
        self.batches.put_nowait((batch, pages))
        self.waiting += pages
        if self.waiting > _HANDOVER:
            self.room.clear()

    def end(self) -> None:
        self.batches.put_nowait(None)

    def fail(self, error: BaseException) -> None:
        """The consumer gets ``error`` instead of the batches still to come."""
        self.batches.put_nowait(error)

    async def get(self) -> T | None:
        item = await self.batches.get()
        if item is None:
            return None
        if isinstance(item, BaseException):
            raise item
        batch, pages = item
        self.waiting -= pages
        if self.waiting <= _HANDOVER:
            self.room.set()
        return batch


class Discovery:
    """One discovery run: ``async for page in discovery.pages()`` streams the pages, then ``discovery.tree``.

    ``site`` is the home page (robots.txt and the well-known locations of its origin are looked at), or,
    with ``sitemaps``, the scope and the parent of the sitemaps to start from. Options are those of a job
    request; discovery's have USP's names and meaning: ``use_robots=False`` skips robots.txt (as a source of
    sitemaps), ``use_known_paths=False`` the well-known locations, ``extra_known_paths`` are paths probed
    besides them (relative to the home page; none when ``use_known_paths`` is off, as in USP), and
    ``normalize_homepage_url=False`` keeps the home page's path: robots.txt and the known paths are looked
    for under it. ``allow_networks`` lets fetches reach non-public networks (a local test site);
    ``rate_limit_delay``: the least time between two requests to one host (robots.txt, sitemaps, probes);
    ``keep_pages``: the tree keeps each sitemap's pages, on disk, for USP's ``pages`` and ``all_pages()`` (a
    stream of the pages has no need of them: without it, they are handed out and gone).

    The entries to list (a job request's ``select``: harvester/model/selection.py): ``since`` / ``before``
    (a date or datetime, a duration before the run's start as a ``timedelta`` or text such as ``"7d"``),
    ``require_lastmod``, ``min_priority``, ``changefreq``, ``extensions`` (``news``, ``image``, ``video``),
    ``sitemap_since`` (child sitemaps by their index lastmod), ``alternates`` (each entry's hreflang
    alternates as pages: their ``extensions`` name the entry, ``alternate_of``, and the ``hreflang``),
    ``lang``; and two callables (Scrapy's ``sitemap_filter``): ``entry_filter(entry: PageEntry)`` returns
    True to keep the entry, False to leave it out, or a URL to list instead (one of ``entry.alternates``,
    say); ``child_filter(child: ChildSitemap)`` returns whether to follow a child sitemap. The entries left
    out are counted by reason in their sitemap's ``dropped``.

    The reading rules (``harvester.model.reading.ReadingRules``): ``repair_urls``, ``strict_location``,
    ``allow_doctype``, and ``warn_size`` (bytes; None: 32 MiB; 0: no warning).
    """

    def __init__(
        self,
        site: str,
        *,
        sitemaps: Sequence[str] = (),
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        sitemap_include: Sequence[str] = (),
        sitemap_exclude: Sequence[str] = (),
        scope: str = "same-host",
        max_depth: int = 10,
        recurse_callback: RecurseCallback | None = None,
        recurse_list_callback: RecurseListCallback | None = None,
        use_robots: bool = True,
        use_known_paths: bool = True,
        extra_known_paths: Iterable[str] | None = None,
        normalize_homepage_url: bool = True,
        allow_networks: Sequence[str] = (),
        user_agent: str | None = None,
        concurrency: int = 8,
        rate_limit_delay: float = 0.05,
        keep_pages: bool = False,
        since: str | date | timedelta | None = None,
        before: str | date | timedelta | None = None,
        require_lastmod: bool = False,
        min_priority: float | None = None,
        changefreq: Sequence[str] = (),
        extensions: Sequence[str] = (),
        sitemap_since: str | date | timedelta | None = None,
        alternates: bool = False,
        lang: str | None = None,
        entry_filter: EntryFilter | None = None,
        child_filter: ChildFilter | None = None,
        repair_urls: bool = False,
        strict_location: bool = False,
        allow_doctype: bool = False,
        warn_size: int | None = None,
    ) -> None:
        select = _selection(
            since=since,
            before=before,
            require_lastmod=require_lastmod,
            min_priority=min_priority,
            changefreq=changefreq,
            extensions=extensions,
            sitemap_since=sitemap_since,
            alternates=alternates,
            lang=lang,
        )
        fields: dict[str, Any] = {
            "site": site,
            "sitemaps": tuple(sitemaps),
            "include": tuple(include),
            "exclude": tuple(exclude),
            "sitemap_include": tuple(sitemap_include),
            "sitemap_exclude": tuple(sitemap_exclude),
            "scope": scope,
            "max_depth": max_depth,
            "fetch_pages": False,
            "rate_limit_delay": rate_limit_delay,
        }
        discovery = {
            "use_robots": use_robots,
            "use_known_paths": use_known_paths,
            "extra_known_paths": _paths(extra_known_paths) if use_known_paths else (),
            "normalize_homepage_url": normalize_homepage_url,
        }
        fields["discovery"] = discovery  # (a section of defaults is none: JobRequest drops it)
        if select:
            fields["select"] = select
        reading = reading_section(
            repair_urls=repair_urls, strict_location=strict_location, allow_doctype=allow_doctype, warn_size=warn_size
        )
        if reading is not None:
            fields["reading"] = reading
        try:
            if select:  # (alone first: a refusal names its field, not the section's)
                EntrySelection.model_validate(select)
            self.request = JobRequest.model_validate(fields)
        except ValidationError as exc:
            raise ValueError(f"invalid discovery options: {exc}") from None
        self.callbacks = SitemapCallbacks(recurse_callback, recurse_list_callback, entry_filter, child_filter)
        self.policy = policy_for(allow_networks, user_agent)
        self.concurrency = concurrency
        self.keep_pages = keep_pages
        self.tree: SitemapTree | None = None

    async def pages(self) -> AsyncIterator[SitemapURL]:
        """The pages, as the sitemaps listing them are read; ``tree`` is set once they are all out."""
        async for batch in self.page_batches():
            for page in batch:
                yield page

    async def page_batches(self) -> AsyncIterator[list[SitemapURL]]:
        """:meth:`pages` a counted batch at a time (up to a few hundred): for consumers to whom the
        per-item cost of an async generator matters (``iter_pages``). Raises :class:`SiteUnreachable` at
        the end when no location of the site answered (``tree`` is set all the same)."""
        async for batch in self.batches(_records):
            yield batch
        assert self.tree is not None
        reason = self.tree.unreachable()
        if reason is not None:
            self.tree.close()  # (it has no page to keep)
            raise SiteUnreachable(self.request.site, reason, self.tree)

    async def batches(self, make: Callable[[str, list[tuple[str, PageEntry]]], T]) -> AsyncIterator[T]:
        """What ``make`` builds of each batch of pages new to the run, given the sitemap listing them and
        each page's URL (normal form) and entry: the records :meth:`page_batches` hands out, or whatever a
        consumer writes (``harvest sitemaps`` makes its JSON lines straight from the entries). ``make`` runs
        as the batch is counted; ``tree`` is set once every batch is out. A site that did not answer ends it
        as any other (``tree.unreachable()`` says so): the caller judges."""
        found: _Handover[T] = _Handover()

        def counted(sitemap: str, listed: list[tuple[str, PageEntry]]) -> None:
            # The pages are counted already (their sitemap's checkpoint moved past them): a batch ``make``
            # cannot make ends the run with its error rather than with pages missing from what it handed out.
            try:
                batch = make(sitemap, listed)
            except Exception as exc:
                found.fail(exc)
                raise
            found.put(batch, len(listed))

        spool = PageSpool() if self.keep_pages else None
        try:
            with (
                tempfile.TemporaryDirectory(prefix="harvest-discovery-") as tmp,
                LocalHarvest.open(Path(tmp), ephemeral=True) as harvest,
            ):
                runner = LocalRunner(
                    harvest,
                    policy=self.policy,
                    concurrency=self.concurrency,
                    callbacks=self.callbacks,
                    pause=found.room.wait,
                    found=counted,
                    listed=spool.add if spool is not None else None,
                )
                run = asyncio.ensure_future(runner.crawl(self.request))
                run.add_done_callback(lambda _: found.end())
                try:
                    while (batch := await found.get()) is not None:
                        yield batch
                    outcome = await run
                finally:
                    if not run.done():
                        run.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await run
                records = harvest.store.sitemaps(outcome.job.job_id)
                self.tree = SitemapTree.of(self.request.site, records, outcome.job.status, spool=spool)
                spool = None  # (the tree's now)
        finally:
            if spool is not None:  # no tree owns it (the run failed, or its consumer left): it goes now
                spool.close()

    async def run(self) -> SitemapTree:
        async for _ in self.page_batches():  # (not page by page: an async generator's step per page)
            pass
        assert self.tree is not None
        return self.tree


def _selection(**given: Any) -> dict[str, Any]:
    """The ``select`` section of the keyword arguments given (empty when none is): a moment given as a
    datetime or date is written as ISO 8601, a timedelta as a duration in seconds."""
    section: dict[str, Any] = {}
    for name, value in given.items():
        if value in (None, False, ()) or (isinstance(value, list) and not value):
            continue
        if isinstance(value, timedelta):
            value = f"{int(value.total_seconds())}s"
        elif isinstance(value, date):
            value = value.isoformat()
        elif isinstance(value, list | tuple):
            value = tuple(value)
        section[name] = value
    return section


def _paths(paths: Iterable[str] | None) -> tuple[str, ...]:
    """USP's ``extra_known_paths`` (a set there: any collection of paths here), in their order, each once."""
    if isinstance(paths, str):
        raise ValueError(f"invalid discovery options: extra_known_paths is a collection of paths, not {paths!r}")
    return tuple(dict.fromkeys(paths or ()))


def _records(sitemap: str, listed: list[tuple[str, PageEntry]]) -> list[SitemapURL]:
    now = utcnow()
    return [listed_page(url, entry, sitemap, now) for url, entry in listed]


def sitemap_tree_for_homepage(homepage: str, **options: Any) -> SitemapTree:
    """USP's entry point: the sitemap tree of a site, with its pages (on disk until the tree is closed or
    collected); options: those of :class:`Discovery` (``keep_pages=False``: the structure alone).
    Raises :class:`SiteUnreachable` when no location of the site answered."""
    options.setdefault("keep_pages", True)
    return asyncio.run(Discovery(homepage, **options).run())


def aiter_pages(site: str, **options: Any) -> AsyncIterator[SitemapURL]:
    """:func:`iter_pages` for asyncio (``Discovery.pages()``): options are checked here, at the call."""
    return Discovery(site, **options).pages()


def iter_pages(site: str, **options: Any) -> Iterator[SitemapURL]:
    """The pages of a site's sitemaps, as they are read (discovery runs on a thread of its own). The
    options are checked at the call (``ValueError``, ``TypeError``); :class:`SiteUnreachable` comes from
    the loop, before any page, when no location of the site answered."""
    return _stream(Discovery(site, **options))


def _stream(discovery: Discovery) -> Iterator[SitemapURL]:
    # Batches cross the thread boundary, not pages: a queue's locks are paid once a batch.
    handover: queue.Queue[list[SitemapURL] | BaseException | None] = queue.Queue(maxsize=_HANDOVER_BATCHES)
    stop = threading.Event()

    async def produce() -> None:
        async for batch in discovery.page_batches():
            while not stop.is_set():
                try:
                    handover.put(batch, timeout=0.1)  # a slow consumer holds the discovery back
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return

    def run() -> None:
        try:
            asyncio.run(produce())
        except BaseException as exc:  # handed over to the consumer, whatever it is
            handover.put(exc)
            return
        handover.put(None)

    thread = threading.Thread(target=run, name="harvest-discovery", daemon=True)
    thread.start()
    try:
        while (item := handover.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield from item
    finally:
        stop.set()
        while thread.is_alive():  # let the producer see the stop, even if it waits on a full queue
            with contextlib.suppress(queue.Empty):
                handover.get_nowait()
            thread.join(timeout=0.05)
