"""The sitemap tree of a site, as USP's API has it and as ``harvest sitemaps`` prints it.

:class:`SitemapTree` is the site node and every location looked at below it (robots.txt, the well-known
locations, the sitemaps they list), built from a discovery's sitemap records; each :class:`SitemapNode`
says how its reading went, and one that could not be read, or was refused, is an :class:`InvalidSitemap`.
They answer as USP's objects do (``url``, ``sub_sitemaps``, ``pages``, ``all_sitemaps()``, ``all_pages()``);
a tree built with its pages reads them from the temporary file it owns (harvester/adapters/local/page_spool.py),
which goes with the tree. A discovery builds the tree: harvester/api/pages.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harvester.adapters.local.page_spool import PageSpool
from harvester.model.messages import SitemapOrigin
from harvester.model.records import JobStatus, SitemapRecord, SitemapStatus, SitemapURL
from harvester.sitemap.entries import notices, values_set_aside
from harvester.words import count

__all__ = ["InvalidSitemap", "SitemapNode", "SitemapTree"]


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

    def unreachable(self) -> str | None:
        """Why no location of the site answered (robots.txt, the well-known locations, the sitemaps asked
        for: their errors, each once), or None when one did, whatever it answered: a site answering "not
        found" everywhere has no sitemap, and says so. The API raises
        :class:`~harvester.api.errors.SiteUnreachable` with it."""
        if not self.children or not all(_unanswered(c) for c in self.children):
            return None
        return "; ".join(dict.fromkeys(c.error or "" for c in self.children))

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
        for error, many in unanswered.items():
            lines.append(f"({count(many, 'well-known location')} could not be probed: {error})")
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
        lines += ["", f"{count(self.distinct_pages, 'page')} in {count(read, 'sitemap')}"]
        return "\n".join(lines)


def _found(node: SitemapNode) -> bool:
    """Whether a child of the site node is one of USP's: USP leaves out a robots.txt or a well-known location
    it could not read. One the request named stays, as does one that gave something before it broke."""
    if not isinstance(node, InvalidSitemap) or node.origin == SitemapOrigin.REQUESTED:
        return True
    return bool(node.page_count or node.children)


def _unanswered(node: SitemapNode) -> bool:
    """A location that got no answer (refused by the address policy, unreachable): for a probe, not found
    is not known."""
    return node.status in _NO_ANSWER and node.http_status is None and bool(node.error)


_NO_ANSWER = frozenset({SitemapStatus.ABSENT, SitemapStatus.FAILED})


def _label(node: SitemapNode) -> str:
    if node.origin is None:  # a child refused as a sitemap (USP's InvalidSitemap)
        return f"{node.url}  [invalid: {node.error}]"
    parts = [f"{node.url}  [{node.kind or node.status}]"]
    if node.status == SitemapStatus.COMPLETED:
        if node.page_count:
            parts.append(count(node.page_count, "page"))
        followed = sum(1 for c in node.children if c.origin not in (None, "known_path"))
        if followed:
            parts.append(count(followed, "sitemap"))
    else:
        parts.append(f"{node.status}: {node.error or ''}".rstrip(": "))
    if node.truncated:
        parts.append(f"truncated: {node.truncated}")
    dropped = sum(node.dropped.values())
    if dropped:
        parts.append(
            f"{count(dropped, 'entry')} dropped ({', '.join(f'{k} {v}' for k, v in sorted(node.dropped.items()))})"
        )
    values = values_set_aside(node.warnings)
    if warned := sum(values.values()):
        parts.append(f"{warned} values set aside ({', '.join(f'{k} {v}' for k, v in sorted(values.items()))})")
    parts.extend(notices(node.warnings))
    return "  ".join(parts)
