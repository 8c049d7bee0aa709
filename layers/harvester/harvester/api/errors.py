"""What the Python API raises when it could read nothing at all.

A discovery reports every sitemap it could not read in its tree (``SitemapTree.invalid()``) and goes on: a
site that answers "not found" everywhere has no sitemap, which is an answer. One where no location answered
(the host refuses connections, cannot be resolved, or sits in a network the fetch policy refuses) is
another matter: there is no tree to speak of, and an empty one would read as "no sitemap".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harvester.api.tree import SitemapTree

__all__ = ["SiteUnreachable"]


class SiteUnreachable(Exception):
    """No location of ``site`` answered (robots.txt, the well-known locations, or the sitemaps asked for):
    ``reason`` says why, as the fetches said it (a refusal by the address policy names the
    ``allow_networks=[...]`` that lets it through); ``tree`` is the discovery's tree, each location with its
    error, for who wants to look further."""

    def __init__(self, site: str, reason: str, tree: SitemapTree) -> None:
        looked = sum(1 for _ in tree.children)
        super().__init__(f"{site}: nothing could be read: none of the {looked} locations looked at answered: {reason}")
        self.site = site
        self.reason = reason
        self.tree = tree
