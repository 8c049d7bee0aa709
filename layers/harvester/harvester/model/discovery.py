"""Where a job looks for its site's sitemaps: the options of its discovery, with USP's names.

By default a job reads the robots.txt of the site's root for its ``Sitemap:`` lines, then probes the
well-known paths robots.txt did not declare (harvester/pipeline/discovery.py). The options, as
ultimate-sitemap-parser's ``sitemap_tree_for_homepage`` has them:

* ``use_robots=False``: robots.txt is not read for sitemaps (its rules still govern the job's page fetches,
  which read it on their own: harvester/fetch/robots.py);
* ``use_known_paths=False``: no well-known path is probed (nor any extra one);
* ``extra_known_paths``: paths probed besides the well-known ones, each relative to the site node (appended
  to it, as USP does: ``custom/sitemap.xml`` under ``https://example.com/`` is
  ``https://example.com/custom/sitemap.xml``);
* ``normalize_homepage_url=False``: the site URL keeps its path (``homepage``), and discovery starts there:
  robots.txt and the known paths are looked for under it. The crawl database still knows the site by its
  origin (``JobRequest.origin``).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from msgspec import Meta

from harvester.model.base import Model, invalid
from harvester.urls import normalize, origin_of

#: The most extra known paths a job may probe (each is one request a job).
MAX_EXTRA_KNOWN_PATHS = 100
#: The longest extra known path.
MAX_KNOWN_PATH_LENGTH = 1000


class DiscoveryOptions(Model, kw_only=True, frozen=True):
    """The ``discovery`` section of a job request (None: robots.txt then the well-known paths, from the
    site's root)."""

    use_robots: bool = True
    use_known_paths: bool = True
    extra_known_paths: Annotated[tuple[str, ...], Meta(max_length=MAX_EXTRA_KNOWN_PATHS)] = ()
    normalize_homepage_url: bool = True

    def __post_init__(self) -> None:
        for i, path in enumerate(self.extra_known_paths):
            reason = _path_refusal(path)
            if reason is not None:
                raise invalid(f"extra_known_paths[{i}]", f"{path[:200]!r}: {reason}")
        if self.extra_known_paths and not self.use_known_paths:
            raise invalid("extra_known_paths", "probed with the well-known paths only, and use_known_paths is off")
        if not self.use_robots and not self.use_known_paths:
            raise invalid("use_known_paths", "use_known_paths and use_robots both off: no sitemap would be looked for")

    @property
    def default(self) -> bool:
        return self == _DEFAULT

    def partial(self, site: str) -> bool:
        """Whether a discovery of ``site`` under these options may leave out sitemaps the default discovery
        reads (robots.txt's, the well-known paths', or the root's when it starts under a path): the job
        cannot tell that a URL it did not see is gone from the site's sitemaps."""
        return not (self.use_robots and self.use_known_paths and site == origin_of(site) + "/")


_DEFAULT = DiscoveryOptions()


def homepage(url: str) -> str:
    """The site URL as ``normalize_homepage_url=False`` keeps it: its normal form without query and fragment,
    its path ending in "/" (USP appends one), so that ``robots.txt`` and the known paths go under it."""
    path = urlsplit(normalize(url)).path or "/"
    return origin_of(url) + (path if path.endswith("/") else path + "/")


def _path_refusal(path: str) -> str | None:
    if not path or path != path.strip() or any(c.isspace() for c in path):
        return "a known path is a non-empty path without spaces"
    if len(path) > MAX_KNOWN_PATH_LENGTH:
        return f"longer than {MAX_KNOWN_PATH_LENGTH} characters"
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or path.startswith("/"):
        return "a known path is relative to the site (like sitemaps/main.xml), not a URL or an absolute path"
    if parts.fragment or "#" in path:
        return "a known path has no fragment"
    return None
