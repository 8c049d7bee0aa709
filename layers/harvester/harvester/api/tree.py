"""The Python API without AWS: a site's sitemap tree, and its pages as a stream.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import tempfile
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from harvester.adapters.local.page_spool import PageSpool
from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.fetch import policy_for
from harvester.model.base import ValidationError
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import JobStatus, SitemapRecord, SitemapStatus, SitemapURL, utcnow
from harvester.pipeline.listed_rows import listed_page
from harvester.pipeline.sitemap_filter import RecurseCallback, RecurseListCallback, SitemapCallbacks
from harvester.sitemap import PageEntry

__all__ = [
    "Discovery",
    "InvalidSitemap",
    "SitemapNode",
    "SitemapTree",
    "aiter_pages",
    "iter_pages",
    "sitemap_tree_for_homepage",
]

T = TypeVar("T")
_HANDOVER = 1024  # pages waiting for a slow consumer before the readers are held back
_HANDOVER_BATCHES = 4  # batches waiting between the discovery thread and a slow `iter_pages` consumer


@dataclass
class SitemapNode:
    """One sitemap of the tree, how its reading went, and its children (refused ones as ``invalid``).

    It answers as USP's sitemap objects do: ``url``, ``sub_sitemaps``, ``pages`` (read back from the tree's
    spool), ``all_sitemaps()`` and ``all_pages()``. Unlike USP's, a sitemap that broke off keeps what it
    gave before (its pages were handed out, and counted), and a sitemap two indexes list is read, and
    shown, once."""

    url: str
    status: str
    origin: str | None = None
    kind: str | None = None
    error: str | None = None
    page_count: int = 0  # page entries accepted from this sitemap (as many as ``pages``)
    new_pages: int = 0  # of those, the pages no other sitemap of the job had listed first
    truncated: str | None = None
    http_status: int | None = None
    final_url: str | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)
    children: list[SitemapNode] = field(default_factory=list)
    _spool: PageSpool | None = field(default=None, repr=False, compare=False)

    def walk(self) -> Iterator[SitemapNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def sub_sitemaps(self) -> list[SitemapNode]:
        """USP's name for the children (an empty list for a page sitemap, or one that could not be read)."""
        return self.children

    @property
    def pages(self) -> list[SitemapURL]:
        """The pages this sitemap listed, in its order (none for an index): USP's list, read from disk."""
        return list(self._pages())

    def all_sitemaps(self) -> Iterator[SitemapNode]:
        """Every sitemap below this one, depth first (USP's: not this one)."""
        for child in self.children:
            yield from child.walk()

    def all_pages(self) -> Iterator[SitemapURL]:
        """The pages of this sitemap and of every one below it, depth first, read as they are asked for; a
        page once per sitemap listing it, as USP gives them (``iter_pages`` gives each page once)."""
        for node in self.walk():
            yield from node._pages()

    def _pages(self) -> Iterator[SitemapURL]:
        if not self.page_count:
            return iter(())
        if self._spool is None:
            raise RuntimeError(
                f"{self.url}: the tree was built without its pages (Discovery(keep_pages=True) keeps them)"
            )
        return self._spool.pages(self.url)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.url,
            "origin": self.origin,
            "status": self.status,
            "kind": self.kind,
            "pages": self.page_count,
            "new_pages": self.new_pages,
            "children": [c.to_json() for c in self.children],
        }
        optional = {
            "error": self.error,
            "http_status": self.http_status,
            "final_url": self.final_url,
            "truncated": self.truncated,
            "dropped": self.dropped,
            "warnings": self.warnings,
        }
        out.update({k: v for k, v in optional.items() if v})
        return out


class InvalidSitemap(SitemapNode):
    """A sitemap that could not be read (failed, invalid, or a well-known location not found), or a child
    refused as one (recursion, depth): USP's ``InvalidSitemap``, with its ``reason``."""

    @property
    def reason(self) -> str:
        return self.error or self.status


_INVALID = frozenset({SitemapStatus.INVALID, SitemapStatus.FAILED, SitemapStatus.ABSENT})


@dataclass
class SitemapTree:
    """The site node and everything below it: USP's ``IndexWebsiteSitemap`` (``url``, ``sub_sitemaps``,
    ``all_sitemaps()``, ``all_pages()``), and Harvester's view of every location looked at (``children``,
    ``sitemaps()``, ``render()``). With its pages (``sitemap_tree_for_homepage``), the tree owns the
    temporary file holding them: it goes when the tree is closed (``close()``, or ``with``), or collected."""

    site: str
    children: list[SitemapNode]
    status: JobStatus = JobStatus.COMPLETED
    _spool: PageSpool | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        site: str,
        records: Iterable[SitemapRecord],
        status: JobStatus = JobStatus.COMPLETED,
        *,
        spool: PageSpool | None = None,
    ) -> SitemapTree:
        by_parent: dict[str | None, list[SitemapRecord]] = defaultdict(list)
        for record in records:
            by_parent[record.parent].append(record)

        def node(r: SitemapRecord) -> SitemapNode:
            children = [node(c) for c in by_parent.get(r.url, [])]
            children += [InvalidSitemap(url=u, status="invalid", error=why) for u, why in r.invalid_children.items()]
            kind = InvalidSitemap if r.status in _INVALID else SitemapNode
            return kind(
                url=r.url,
                status=r.status.value,
                origin=r.origin.value,
                kind=r.kind,
                error=r.error_message,
                page_count=r.pages_recorded,
                new_pages=r.pages_new,
                truncated=r.truncated,
                http_status=r.http_status,
                final_url=r.final_url,
                dropped=r.dropped,
                warnings=r.warnings,
                children=children,
                _spool=spool,
            )

        return cls(site=site, children=[node(r) for r in by_parent.get(None, [])], status=status, _spool=spool)

    # USP's IndexWebsiteSitemap -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The home page."""
        return self.site

    @property
    def sub_sitemaps(self) -> list[SitemapNode]:
        """robots.txt, then the sitemaps found at well-known locations (or those the request named)."""
        return [c for c in self.children if _found(c)]

    @property
    def pages(self) -> list[SitemapURL]:
        """No page: the site node is an index (USP's ``pages`` of an index is an empty list)."""
        return []

    def all_sitemaps(self) -> Iterator[SitemapNode]:
        """Every sitemap of the tree, depth first, as USP has them (the locations found empty left out)."""
        for child in self.sub_sitemaps:
            yield from child.walk()

    def all_pages(self) -> Iterator[SitemapURL]:
        """Every page of every sitemap, depth first, read from disk as they are asked for: a page once per
        sitemap listing it, as USP gives them (``distinct_pages`` counts each once)."""
        for child in self.sub_sitemaps:
            yield from child.all_pages()

    @property
    def spool_path(self) -> Path | None:
        """The temporary file holding the pages (None for a tree built without them, or closed)."""
        return None if self._spool is None or self._spool.closed else self._spool.path

    def close(self) -> None:
        """Removes the pages' temporary file now (the structure stays readable, the pages do not)."""
        if self._spool is not None:
            self._spool.close()

    def __enter__(self) -> SitemapTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Harvester's view ----------------------------------------------------------------------------

    def sitemaps(self) -> Iterator[SitemapNode]:
        """Every sitemap of the tree, depth first (robots.txt and the probed locations included)."""
        for child in self.children:
            yield from child.walk()

    def invalid(self) -> list[SitemapNode]:
        """The sitemaps that could not be read, or were refused, with their reasons."""
        return [s for s in self.sitemaps() if s.status in ("invalid", "failed")]

    @property
    def distinct_pages(self) -> int:
        """The distinct pages the sitemaps listed (``iter_pages`` gives as many)."""
        return sum(s.new_pages for s in self.sitemaps())

    def with_parents(self) -> Iterator[tuple[SitemapNode, SitemapNode | None]]:
        """Every node with the node listing it (None for the site's own children)."""
        stack: list[tuple[SitemapNode, SitemapNode | None]] = [(c, None) for c in reversed(self.children)]
        while stack:
            node, parent = stack.pop()
            yield node, parent
            stack.extend((c, node) for c in reversed(node.children))

    def to_json(self) -> dict[str, Any]:
        return {"url": self.site, "kind": "site", "children": [c.to_json() for c in self.children]}

    def _absent_lines(self) -> list[str]:
        """The probed locations left out of the tree, in a line: those the site answered "not there", and,
        grouped by reason, those that got no answer (which says nothing of whether they are there)."""
        absent = [s for s in self.sitemaps() if s.status == SitemapStatus.ABSENT]
        lines = []
        if found := sum(1 for s in absent if not _unanswered(s)):
            lines.append(f"({found} well-known locations probed and not found)")
        unanswered: dict[str, int] = defaultdict(int)
        for node in absent:
            if _unanswered(node):
                unanswered[node.error or ""] += 1
        for error, count in unanswered.items():
            lines.append(f"({count} well-known locations could not be probed: {error})")
        return lines

    def render(self, *, show_absent: bool = False) -> str:
        """The tree as `harvest sitemaps` prints it, then the invalid sitemaps with their reasons."""
        lines = [self.site]
        absent = sum(1 for s in self.sitemaps() if s.status == SitemapStatus.ABSENT)

        def walk(nodes: Sequence[SitemapNode], prefix: str) -> None:
            shown = [n for n in nodes if show_absent or n.status != SitemapStatus.ABSENT]
            for i, child in enumerate(shown):
                last = i == len(shown) - 1
                lines.append(f"{prefix}{'└── ' if last else '├── '}{_label(child)}")
                walk(child.children, prefix + ("    " if last else "│   "))

        walk(self.children, "")
        if absent and not show_absent:
            lines.extend(self._absent_lines())
        invalid = [(s, p) for s, p in self.with_parents() if s.status in ("invalid", "failed")]
        if invalid:
            lines += ["", f"invalid sitemaps ({len(invalid)}):"]
            for s, parent in invalid:
                listed = f" (listed in {parent.url})" if s.origin is None and parent else ""
                lines.append(f"  {s.url}: {s.error}{listed}")
        read = sum(1 for s in self.sitemaps() if s.status == SitemapStatus.COMPLETED and s.kind != "robots")
        lines += ["", f"{self.distinct_pages} pages in {read} sitemaps"]
        return "\n".join(lines)


def _found(node: SitemapNode) -> bool:
    """Whether a child of the site node is one of USP's: USP leaves out a robots.txt or a well-known location
    it could not read. One the request named stays, as does one that gave something before it broke."""
    if not isinstance(node, InvalidSitemap) or node.origin == SitemapOrigin.REQUESTED:
        return True
    return bool(node.page_count or node.children)


def _unanswered(node: SitemapNode) -> bool:
    """A probe that got no answer (refused by the address policy, unreachable): not found is not known."""
    return node.status == SitemapStatus.ABSENT and node.http_status is None and bool(node.error)


def _label(node: SitemapNode) -> str:
    if node.origin is None:  # a child refused as a sitemap (USP's InvalidSitemap)
        return f"{node.url}  [invalid: {node.error}]"
    parts = [f"{node.url}  [{node.kind or node.status}]"]
    if node.status == SitemapStatus.COMPLETED:
        if node.page_count:
            parts.append(f"{node.page_count} pages")
        followed = sum(1 for c in node.children if c.origin not in (None, "known_path"))
        if followed:
            parts.append(f"{followed} sitemaps")
    else:
        parts.append(f"{node.status}: {node.error or ''}".rstrip(": "))
    if node.truncated:
        parts.append(f"truncated: {node.truncated}")
    dropped = sum(node.dropped.values())
    if dropped:
        parts.append(f"{dropped} entries dropped ({', '.join(f'{k} {v}' for k, v in sorted(node.dropped.items()))})")
    warned = sum(node.warnings.values())
    if warned:
        parts.append(f"{warned} values set aside ({', '.join(f'{k} {v}' for k, v in sorted(node.warnings.items()))})")
    return "  ".join(parts)


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
    request; ``allow_networks`` lets fetches reach non-public networks (a local test site);
    ``rate_limit_delay``: the least time between two requests to one host (robots.txt, sitemaps, probes);
    ``keep_pages``: the tree keeps each sitemap's pages, on disk, for USP's ``pages`` and ``all_pages()`` (a
    stream of the pages has no need of them: without it, they are handed out and gone).
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
        allow_networks: Sequence[str] = (),
        user_agent: str | None = None,
        concurrency: int = 8,
        rate_limit_delay: float = 0.05,
        keep_pages: bool = False,
    ) -> None:
        try:
            self.request = JobRequest.model_validate(
                {
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
            )
        except ValidationError as exc:
            raise ValueError(f"invalid discovery options: {exc}") from None
        self.callbacks = SitemapCallbacks(recurse_callback, recurse_list_callback)
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
        per-item cost of an async generator matters (``iter_pages``)."""
        async for batch in self.batches(_records):
            yield batch

    async def batches(self, make: Callable[[str, list[tuple[str, PageEntry]]], T]) -> AsyncIterator[T]:
        """What ``make`` builds of each batch of pages new to the run, given the sitemap listing them and
        each page's URL (normal form) and entry: the records :meth:`page_batches` hands out, or whatever a
        consumer writes (``harvest sitemaps`` makes its JSON lines straight from the entries). ``make`` runs
        as the batch is counted; ``tree`` is set once every batch is out."""
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


def _records(sitemap: str, listed: list[tuple[str, PageEntry]]) -> list[SitemapURL]:
    now = utcnow()
    return [listed_page(url, entry, sitemap, now) for url, entry in listed]


def sitemap_tree_for_homepage(homepage: str, **options: Any) -> SitemapTree:
    """USP's entry point: the sitemap tree of a site, with its pages (on disk until the tree is closed or
    collected); options: those of :class:`Discovery` (``keep_pages=False``: the structure alone)."""
    options.setdefault("keep_pages", True)
    return asyncio.run(Discovery(homepage, **options).run())


def aiter_pages(site: str, **options: Any) -> AsyncIterator[SitemapURL]:
    return Discovery(site, **options).pages()


def iter_pages(site: str, **options: Any) -> Iterator[SitemapURL]:
    """The pages of a site's sitemaps, as they are read (discovery runs on a thread of its own)."""
    # Batches cross the thread boundary, not pages: a queue's locks are paid once a batch.
    handover: queue.Queue[list[SitemapURL] | BaseException | None] = queue.Queue(maxsize=_HANDOVER_BATCHES)
    stop = threading.Event()

    async def produce() -> None:
        async for batch in Discovery(site, **options).page_batches():
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
