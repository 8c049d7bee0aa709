"""The screening of a sitemap's entries, and the following of the child sitemaps it lists.

``EntryScreen.take`` judges each parsed entry as it comes. A page URL passes URL hygiene (http(s),
length), the job's scope and patterns, and goes to the listing the first time the sitemap lists it. A
child sitemap passes hygiene, is checked against the ancestor chain that travels with the task
(recursion) and the job's ``max_depth``, and is kept. A job that selects entries (``select``: by their
fields, alternates, language; the Python API's filters) has each entry chosen first (``select.pickers``:
made once per reading, None without a selection, so that the loop of a job without one is unchanged). The
job's reading rules (``ReadingRules``) may repair a URL hygiene refused for want of a scheme (counted as
``url_repaired`` among the sitemap's warnings) and hold page URLs to the sitemap's location
(``harvester.url_rules``); with the rules off, the loop is the same as without them. Whatever is left out
is counted by reason (``dropped``); invalid children are named with their reason, up to
``MAX_INVALID_CHILDREN_LISTED``.

Once the sitemap is read, ``follow`` applies the job's sitemap patterns and callbacks to the children kept,
all at once, registers the ones followed (once per job) and sends their tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from harvester.keyset import KeySet, bits_of, url_bits
from harvester.model.messages import SitemapOrigin
from harvester.model.reading import rules_of
from harvester.model.records import FILTERED, TOO_DEEP, JobRecord, SitemapRecord, SitemapStatus, url_key
from harvester.pipeline import sitemap_filter
from harvester.pipeline.context import StepContext
from harvester.pipeline.discovery import known_path_probes, site_node, task_for
from harvester.pipeline.sitemap_filter import SitemapCallbacks
from harvester.pipeline.sitemap_step.probes import asked
from harvester.pipeline.sitemap_step.select import pickers
from harvester.sitemap import ChildSitemap, PageEntry
from harvester.sitemap.entries import URL_REPAIRED
from harvester.url_rules import OUTSIDE, SitemapLocation, repaired
from harvester.urls import UrlFilter, host_in_scope, host_of, normalize, origin_of, refusal, screen

MAX_INVALID_CHILDREN_LISTED = 100

#: Given each page URL the screen accepts, in document order: (URL, entry, its key's bits, the form the
#: checkpoint digests).
Accept = Callable[[str, PageEntry, int, bytes], None]


class EntryScreen:
    """What one reading of a sitemap made of its entries: the pages accepted (handed to ``accept``), the
    children kept, what was left out and why."""

    def __init__(self, ctx: StepContext, job: JobRecord, record: SitemapRecord, accept: Accept) -> None:
        self.ctx = ctx
        self.job = job
        self.record = record
        self.accept = accept
        self.request = job.request
        self.is_robots = record.origin is SitemapOrigin.ROBOTS
        self.filter = UrlFilter.of(self.request.include, self.request.exclude)
        self.site_host = host_of(self.request.site)
        self.sitemap_patterns = UrlFilter.of(self.request.sitemap_include, self.request.sitemap_exclude)
        self.chain = {normalize(a) for a in record.ancestors} | {record.url}
        self.dropped: dict[str, int] = {}
        self.invalid_children: dict[str, str] = {}
        self.seen_pages = KeySet()  # (12 bytes a URL, not a string each)
        self.seen_children: set[str] = set()
        self.found: list[SitemapRecord] = []  # valid children, followed (filtered, registered) at the end
        self.children = 0  # children followed (the known-path probes left out)
        self.declared: list[str] = []  # robots.txt Sitemap: lines, to leave out of the known-path probes
        self.entries = 0  # entries the reading produced, children included
        self.pick, self.pick_child = pickers(self.request.select, ctx.callbacks, job.start_time)
        rules = rules_of(self.request.reading)
        self.repair = rules.repair_urls
        self.repaired = 0  # URLs given the sitemap's scheme (``repair``)
        self.location: SitemapLocation | None = None
        if rules.strict_location:
            declared = origin_of(self.request.site) + "/robots.txt" in record.ancestors
            self.location = SitemapLocation([record.url], declared_host=self.site_host if declared else None)
        self.where = record.url  # where the sitemap was read from: the scheme a repaired URL takes
        # The page patterns, behind the location rule when it holds.
        self.patterns: UrlFilter | _Located = (
            self.filter if self.location is None else _Located(self.location, self.filter)
        )

    def read_at(self, final_url: str) -> None:
        """Where the document is read from (after redirects): its scheme is the one a repaired URL takes,
        and its directory one a strict location allows."""
        self.where = normalize(final_url)
        if self.location is not None:
            self.location.at(self.where)

    def warnings(self, found: Mapping[str, int]) -> dict[str, int]:
        """The sitemap's warnings: those of its document (``found``) and the URLs repaired here."""
        counted = dict(found)
        if self.repaired:
            counted[URL_REPAIRED] = counted.get(URL_REPAIRED, 0) + self.repaired
        return counted

    def take(self, entries: Sequence[PageEntry | ChildSitemap]) -> None:
        """A parsed piece's entries: page URLs pass hygiene, scope, patterns and the first-declaration rule,
        and go to the listing. One loop on local names: it runs for every URL a site lists."""
        if self.pick is not None:
            self._take_selected(entries)
            return
        self.entries += len(entries)
        site_host, scope, patterns = self.site_host, self.request.scope, self.patterns
        repair = self._repaired if self.repair else None
        first = self.seen_pages.add
        accept = self.accept
        drop = self._drop
        durable = self.ctx.counter is None  # (a throwaway run needs no URL key: its store keeps only bits)
        from_bytes = int.from_bytes
        for entry in entries:
            if isinstance(entry, ChildSitemap):
                self._take_child(entry)
                continue
            screened = screen(entry.url)
            if isinstance(screened, str) and (
                repair is None or isinstance(screened := repair(entry.url, screened), str)
            ):
                drop(screened)
                continue
            url, host = screened
            if host != site_host and not host_in_scope(host, site_host, scope):
                drop("out_of_scope")
                continue
            if patterns:
                reason = patterns.refusal(url)
                if reason is not None:
                    drop(reason)
                    continue
            if durable:
                key = url_key(url)
                bits = bits_of(key)
                raw = key.encode() + b"\n"
            else:
                raw = url_bits(url)
                bits = from_bytes(raw)
            if not first(bits):
                drop("duplicate_in_sitemap")
                continue
            accept(url, entry, bits, raw)

    def _take_selected(self, entries: Sequence[PageEntry | ChildSitemap]) -> None:
        """``take`` for a job that selects entries: each page entry chosen (``pick``) gives the pages to
        screen, or the reason it gives none."""
        self.entries += len(entries)
        pick = self.pick
        assert pick is not None
        for entry in entries:
            if isinstance(entry, ChildSitemap):
                self._take_child(entry)
                continue
            picked = pick(entry)
            if isinstance(picked, str):
                self._drop(picked)
                continue
            for page, alternate in picked:
                self._take_page(page, alternate=alternate)

    def _take_page(self, entry: PageEntry, *, alternate: bool) -> None:
        """One page of ``_take_selected`` through the screen of ``take`` (its reading rules included); an
        alternate listed already is passed over without being counted (every entry of an hreflang group names
        the group's pages)."""
        screened = screen(entry.url)
        if isinstance(screened, str) and (
            not self.repair or isinstance(screened := self._repaired(entry.url, screened), str)
        ):
            self._drop(screened)
            return
        url, host = screened
        if host != self.site_host and not host_in_scope(host, self.site_host, self.request.scope):
            self._drop("out_of_scope")
            return
        if self.patterns:
            reason = self.patterns.refusal(url)
            if reason is not None:
                self._drop(reason)
                return
        if self.ctx.counter is None:
            key = url_key(url)
            bits = bits_of(key)
            raw = key.encode() + b"\n"
        else:
            raw = url_bits(url)
            bits = int.from_bytes(raw)
        if not self.seen_pages.add(bits):
            if not alternate:
                self._drop("duplicate_in_sitemap")
            return
        self.accept(url, entry, bits, raw)

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _repaired(self, url: str, reason: str) -> tuple[str, str] | str:
        """A URL hygiene refused (``reason``) as ``screen`` takes it once given the sitemap's scheme, or the
        reason it stays refused."""
        if reason != "not_http" or (fixed := repaired(url, self.where)) is None:
            return reason
        screened = screen(fixed)
        if isinstance(screened, str):
            return reason
        self.repaired += 1
        return screened

    def _take_child(self, entry: ChildSitemap) -> None:
        url = entry.url
        reason = refusal(url)
        if reason is not None and self.repair and not isinstance(fixed := self._repaired(url, reason), str):
            reason, url = None, fixed[0]
        if reason is not None:
            self._drop(f"sitemap_{reason}")
            return
        url = normalize(url)
        if url in self.seen_children:
            self._drop("duplicate_in_sitemap")
            return
        self.seen_children.add(url)
        if self.is_robots:
            self.declared.append(url)
        if url in self.chain:
            reason = "lists itself" if url == self.record.url else "is an ancestor of the sitemap listing it"
            self._invalid_child(url, f"recursion: {reason}")
            return
        depth = self.record.depth + 1
        if depth > self.request.max_depth:
            self._invalid_child(url, f"deeper than max_depth {self.request.max_depth}", drop=TOO_DEEP)
            return
        if self.pick_child is not None:
            reason = self.pick_child(entry if entry.url == url else ChildSitemap(url, entry.last_modified))
            if reason is not None:
                self._drop(reason)
                return
        origin = SitemapOrigin.DECLARED if self.is_robots else SitemapOrigin.INDEX
        child = SitemapRecord(
            url=url,
            origin=origin,
            depth=depth,
            ancestors=(*self.record.ancestors, self.record.url),
            parent=self.record.url,
            discovered_at=self.ctx.clock(),
        )
        self.found.append(child)

    def _invalid_child(self, url: str, reason: str, *, drop: str = "invalid_sitemap") -> None:
        self._drop(drop)
        if len(self.invalid_children) < MAX_INVALID_CHILDREN_LISTED:
            self.invalid_children[url] = reason

    async def follow_found(self) -> None:
        """The children the reading found, followed (``follow``); robots.txt also leads to the site's
        well-known paths (unless the job's discovery skips them), whatever happened to it (a site may have
        none). They are the site's own children, not robots.txt's: USP's callbacks choose among the
        children of robots.txt and of indexes, and USP reads every well-known path whatever they say. Those
        the site's last job found absent are asked here (``probes.asked``); the others are tasks of their
        own."""
        record, request = self.record, self.job.request
        # USP's numbering: robots.txt's children are at level 0, with robots.txt as their only parent.
        parents = {a for a in record.ancestors if a != site_node(request)} | {record.url}
        self.follow(self.found, level=record.depth - 1, parents=parents, callbacks=self.ctx.callbacks)
        if self.is_robots:
            probes = known_path_probes(request, self.declared, now=self.ctx.clock())
            self.register(await asked(self.ctx, self.job, self.chosen(probes, level=0, parents=set(), callbacks=None)))

    def follow(
        self, children: list[SitemapRecord], *, level: int, parents: set[str], callbacks: SitemapCallbacks | None
    ) -> None:
        """Applies the job's sitemap patterns and ``callbacks`` to the children, all of them at once (as USP's
        list callback wants), then registers the ones followed and sends their tasks."""
        self.register(self.chosen(children, level=level, parents=parents, callbacks=callbacks))

    def chosen(
        self, children: list[SitemapRecord], *, level: int, parents: set[str], callbacks: SitemapCallbacks | None
    ) -> list[SitemapRecord]:
        """The children the job's sitemap patterns and ``callbacks`` follow (the others counted as dropped)."""
        kept, refused = sitemap_filter.follow(
            [c.url for c in children],
            level=level,
            parents=parents,
            patterns=self.sitemap_patterns,
            callbacks=callbacks,
        )
        for _ in refused:
            self._drop(FILTERED)
        followed = set(kept)
        return [c for c in children if c.url in followed]

    def register(self, chosen: list[SitemapRecord]) -> None:
        """Registers the children followed (once per job) and sends the tasks of those pending."""
        self.children += sum(1 for c in chosen if c.origin is not SitemapOrigin.KNOWN_PATH)
        step = self.ctx.record_batch
        for start in range(0, len(chosen), step):
            self._register(chosen[start : start + step])

    def _register(self, batch: list[SitemapRecord]) -> None:
        stored = self.ctx.store.add_sitemaps(self.job.job_id, batch)
        mine = {c.url for c in batch}
        # Ours to send: every child still pending that this sitemap registered, now or before a restart
        # (robots.txt also registers the known-path probes, which hang under the site node).
        to_send = [
            task_for(self.job.job_id, s)
            for s in stored
            if s.url in mine and s.status is SitemapStatus.PENDING and self._registered_by_us(s)
        ]
        self.ctx.queue.push(to_send)

    def _registered_by_us(self, sitemap: SitemapRecord) -> bool:
        if sitemap.parent == self.record.url:
            return True
        return self.is_robots and sitemap.origin is SitemapOrigin.KNOWN_PATH


class _Located:
    """The job's page patterns behind the location rule: what ``EntryScreen.take`` asks of its patterns."""

    __slots__ = ("location", "patterns")

    def __init__(self, location: SitemapLocation, patterns: UrlFilter) -> None:
        self.location = location
        self.patterns = patterns

    def __bool__(self) -> bool:
        return True

    def refusal(self, url: str) -> str | None:
        if not self.location.allows(url):
            return OUTSIDE
        return self.patterns.refusal(url) if self.patterns else None
