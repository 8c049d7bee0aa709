"""How a job reads its sitemaps beyond the defaults: the job request's ``reading`` section.

Three rules are opt-in, after crawler-commons' ``SiteMapParser``: repairing a URL written without its scheme
(``repair_urls``), the sitemaps.org location rule (``strict_location``), and documents with a DOCTYPE
(``allow_doctype``). The fourth, ``warn_size``, is on by default, as Scrapy's ``DOWNLOAD_WARNSIZE``: a
sitemap that inflates past it is reported with a warning before ``SITEMAP_MAX_BYTES`` cuts it.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from harvester.limits import SITEMAP_MAX_BYTES, MiB
from harvester.model.base import Model, invalid

#: Scrapy's ``DOWNLOAD_WARNSIZE``. Under the 50 MiB cut (``SITEMAP_MAX_BYTES``, sitemaps.org's own limit) it
#: is about two thirds of the way: a sitemap that warns can grow by half again before it is cut, time enough
#: for its site to split it, while a sitemap of 50,000 ordinary URLs (10 to 20 MiB) never warns.
DEFAULT_WARN_SIZE = 32 * MiB


class ReadingRules(Model, kw_only=True, frozen=True):
    """How a job reads its sitemaps (None in a job request: the defaults, every rule off, ``warn_size`` 32 MiB).

    * ``repair_urls``: a page URL written without its scheme (``www.example.com/page``, ``//example.com/page``,
      ``/page``) takes the sitemap's scheme (and, for a path alone, its host) instead of being dropped as
      ``not_http``; counted as ``url_repaired`` among the sitemap's warnings.
    * ``strict_location``: sitemaps.org's location rule: a sitemap lists only URLs under its own directory
      (same scheme and host), unless robots.txt declared it (or an index robots.txt declared), in which case
      it may list any URL of robots.txt's host; the others are dropped as ``outside_sitemap_directory``.
    * ``allow_doctype``: a document with a DOCTYPE is read whatever its declarations but entities: an
      external DTD is named and never fetched, an external entity is never read (its references read as
      nothing), and a document declaring an internal or parameter entity is refused as without the rule.
    * ``warn_size``: the uncompressed size past which a sitemap is reported (``over_warn_size``); 0: never.
    """

    repair_urls: bool = False
    strict_location: bool = False
    allow_doctype: bool = False
    warn_size: Annotated[int, Meta(ge=0)] = DEFAULT_WARN_SIZE

    def __post_init__(self) -> None:
        if self.warn_size >= SITEMAP_MAX_BYTES:
            reason = f"must be below {SITEMAP_MAX_BYTES}, the bytes at which a sitemap is cut (0: no warning)"
            raise invalid("warn_size", f"{self.warn_size}: {reason}")

    def listing(self) -> list[str]:
        """The rules that change which URLs a reading of a document lists (``crawldb.parts.listing_of``):
        repairing and the location rule change its URLs, the DOCTYPE rule whether it is read at all."""
        return [name for name in ("repair_urls", "strict_location", "allow_doctype") if getattr(self, name)]


#: What a job request without a ``reading`` section reads with.
DEFAULTS = ReadingRules()


def rules_of(reading: ReadingRules | None) -> ReadingRules:
    return DEFAULTS if reading is None else reading


def reading_section(
    *, repair_urls: bool, strict_location: bool, allow_doctype: bool, warn_size: int | None
) -> dict[str, Any] | None:
    """The ``reading`` section of a job request for these choices (the command line's flags, the Python API's
    keywords), to be validated with the request; None when every choice is the default's (``warn_size``
    None), so that such a request has no section and keeps its fingerprint."""
    rules = {"repair_urls": repair_urls, "strict_location": strict_location, "allow_doctype": allow_doctype}
    section: dict[str, Any] = {name: True for name, on in rules.items() if on}
    if warn_size is not None:
        section["warn_size"] = warn_size
    return section or None
