"""Demo sites on 127.0.0.1, and ``make demo`` (``python -m harvester.demo``).

:mod:`~harvester.demo.site` writes a static site to a folder (what most end-to-end tests crawl);
:mod:`~harvester.demo.live` serves a site from memory whose pages change between crawls and that logs every
request (the re-crawl tests, the re-crawl benchmark and the demo).
"""

from harvester.demo.live import Hit, LivePage, LiveSite
from harvester.demo.site import BuiltSite, SiteSpec, build_site, serve

__all__ = ["BuiltSite", "Hit", "LivePage", "LiveSite", "SiteSpec", "build_site", "serve"]
