"""Two opt-in rules on the URLs a sitemap lists (``harvester.model.reading.ReadingRules``), after crawler-commons.

* Repair (``repaired``): crawler-commons' ``BasicURLNormalizer`` gives a URL written without its scheme
  (``www.example.com/page``) one instead of refusing it. Here the scheme is the sitemap's own rather than
  always ``http``; a scheme-relative URL (``//example.com/page``) takes it too, and a path alone (``/page``)
  the sitemap's scheme and host. Anything else without a scheme (``mailto:``, ``page.html?x``) stays refused.
* Location (``SitemapLocation``): sitemaps.org's rule that a sitemap lists only URLs under its own directory
  (crawler-commons' strict mode, ``SiteMapParser.urlIsValid``), with the cross-submission robots.txt allows:
  a sitemap robots.txt declared (or a sitemap under one) may list any URL of robots.txt's host
  (``SiteMapCrossSubmitValidator``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

#: A host name or IPv4 address (at least two labels, or ``localhost``), an optional port, then the end or
#: what follows a host in a URL: where a URL without its scheme begins.
_HOST_START = re.compile(
    r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9-]{1,63}\.?|localhost)(?::[0-9]{1,5})?(?:[/?#]|\Z)"
)
_BLANK = re.compile(r"\s")

#: Why an entry is left out by the location rule, in a sitemap's ``dropped``.
OUTSIDE = "outside_sitemap_directory"


def schemeless(value: str) -> bool:
    """Whether ``value`` (a stripped line of a text sitemap) may be a URL written without its scheme."""
    if not value or _BLANK.search(value):
        return False
    return value.startswith("/") or _HOST_START.match(value) is not None


def repaired(url: str, sitemap: str) -> str | None:
    """``url`` with the scheme of ``sitemap`` (the URL of the sitemap listing it), and its host for a path
    alone; None when ``url`` does not look like a URL without its scheme."""
    url = url.strip()
    if not schemeless(url):
        return None
    scheme, _, rest = sitemap.partition("://")
    if url.startswith("//"):
        return f"{scheme}:{url}"
    if url.startswith("/"):
        host = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
        return f"{scheme}://{host}{url}"
    return f"{scheme}://{url}"


def directory_of(sitemap: str) -> str:
    """Where a sitemap may list URLs (sitemaps.org): its URL up to the last ``/`` of its path, the query
    left out (``https://example.com/index.php?route=feed/sitemap`` lists under ``https://example.com/``)."""
    parts = urlsplit(sitemap)
    path = parts.path
    return f"{parts.scheme}://{parts.netloc}{path[: path.rfind('/') + 1] or '/'}"


class SitemapLocation:
    """The location rule for one sitemap: the directories it was found at (its URL, and where it redirected
    to), and the host robots.txt vouches for, if it declared the sitemap or one above it."""

    def __init__(self, urls: Iterable[str], *, declared_host: str | None) -> None:
        self.directories = tuple(dict.fromkeys(directory_of(u) for u in urls))
        self.declared_host = declared_host

    def at(self, url: str) -> None:
        """Adds where the sitemap was read from (a redirect's final URL)."""
        directory = directory_of(url)
        if directory not in self.directories:
            self.directories += (directory,)

    def allows(self, url: str) -> bool:
        """Whether the sitemap may list ``url`` (normal form)."""
        if url.startswith(self.directories):
            return True
        return self.declared_host is not None and (urlsplit(url).hostname or "").lower() == self.declared_host
