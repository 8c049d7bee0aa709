"""Crawl records stored under their old names, read under the seed data model's.

Under the old names a crawl record calls the sitemap's values ``lastmod`` / ``fetched_lastmod`` /
``changefreq`` and the page's HTTP ``Last-Modified`` header ``last_modified``: the name that holds the
sitemap's value under the data model's. Both state stores keep a record as its JSON, so a SQLite file or a
DynamoDB table written under the old names holds such bodies until each record is written again (and a job
record's ``known`` snapshot holds one too).

A plain alias cannot say which ``last_modified`` a body means; its neighbours and its value can. A body
with any of the old sitemap names is old; without them, an old body's ``last_modified`` is the header as
the server sent it (an HTTP date, ``Wed, 01 May 2024 ...``), a new one's is a time as ``body_of`` writes
it (``2024-05-01T...``). The one body this cannot tell is an old one whose sitemap gave neither lastmod
nor changefreq and whose server sent its Last-Modified in ISO form: it reads that time as the sitemap's
(the next listing replaces it) and sends no If-Modified-Since until the next fetch renews the header.

Looking at a body's text first keeps today's records on msgspec's own JSON decoder: reading through Python
values is slower, and a re-crawl reads every record of the site. The look is two searches for what only the
old sitemap names contain (``lastmod"``, ``changefreq"``) and one for ``"last_modified":"``.
"""

from __future__ import annotations

import re
from typing import Any

#: The sitemap's values of a crawl record under their old names, and today's.
OLD_SITEMAP_NAMES = {
    "lastmod": "last_modified",
    "fetched_lastmod": "fetched_last_modified",
    "changefreq": "change_frequency",
}
_LAST_MODIFIED = '"last_modified":"'
_AFTER = len(_LAST_MODIFIED)
#: How every time ``body_of`` writes starts (orjson's and msgspec's ISO 8601); an HTTP date never does.
_WRITTEN_TIME = re.compile(r"\d{4}-\d\d-\d\dT")


def may_be_old_crawl_body(body: str | bytes | bytearray) -> bool:
    """Whether a stored crawl record's JSON may use the old names (False: it certainly does not)."""
    text = body if isinstance(body, str) else bytes(body).decode("utf-8", "replace")
    if 'lastmod"' in text or 'changefreq"' in text:  # ("lastmod", "fetched_lastmod"; "changefreq")
        return True
    at = text.find(_LAST_MODIFIED)
    return at >= 0 and _WRITTEN_TIME.match(text, at + _AFTER) is None


def renamed(values: Any, old: str, new: str) -> Any:
    """A stored record's values with a field stored under its ``old`` name under its ``new`` one (``values``
    itself when it has none; the new name's value wins where a body has both)."""
    if not isinstance(values, dict) or old not in values:
        return values
    before = {name: value for name, value in values.items() if name != old}
    return {new: values[old]} | before


def crawl_record_values(values: Any) -> Any:
    """A stored crawl record's values under today's names (``values`` itself when they have them)."""
    if not isinstance(values, dict):
        return values
    header = values.get("last_modified")
    old = any(name in values for name in OLD_SITEMAP_NAMES) or (
        isinstance(header, str) and _WRITTEN_TIME.match(header) is None
    )
    if not old:
        return values
    renamed = {
        name: value for name, value in values.items() if name != "last_modified" and name not in OLD_SITEMAP_NAMES
    }
    if header is not None:
        renamed["http_last_modified"] = header
    for before, now in OLD_SITEMAP_NAMES.items():
        if before in values:
            renamed[now] = values[before]
    return renamed
