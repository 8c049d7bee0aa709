"""robots.txt as a sitemap index: every ``Sitemap:`` line names a child sitemap.

Only the ``Sitemap`` directive matters here (the fetcher reads the rules with Protego). Real files spell
it in any case, sometimes ``Site-map``, with or without spaces around the colon, with relative URLs and
trailing comments, and repeat lines; the first occurrence of each URL is kept, in order.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin

from harvester.sitemap.entries import ChildSitemap, ParseReport
from harvester.sitemap.sink import Sink
from harvester.sitemap.text import LineParser

# "Sitemap: URL", "sitemap:URL", "Site-map : URL # comment"; the URL is the first blank-free token (a URL
# has no blanks, so whatever follows one is a comment or junk).
_SITEMAP_LINE = re.compile(r"\s*site-?map\s*:\s*(\S+)", re.IGNORECASE)


class RobotsParser(LineParser):
    def __init__(self, url: str, sink: Sink, report: ParseReport, encoding: str) -> None:
        super().__init__(sink, report, encoding)
        self._base = url
        self._seen: set[str] = set()

    def _line(self, line: str) -> None:
        match = _SITEMAP_LINE.match(line.lstrip("\ufeff"))
        if match is None:
            return
        value = match.group(1)
        try:
            url = urljoin(self._base, value)
        except ValueError:
            url = value
        if url in self._seen:
            return
        self._seen.add(url)
        self._sink.emit(ChildSitemap(url))
