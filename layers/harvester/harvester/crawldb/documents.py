"""Where a site's documents live: one object per version of a URL's content, named by its signature.

The key holds the content's signature, so a version is stored once however many jobs fetch it (two jobs
of one site storing the same new content write the same object), an unchanged page is never stored
again, and every version a URL has had stays addressable from the records that name it.
"""

from __future__ import annotations

import re

from harvester.model.records import url_key

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


def site_slug(origin: str) -> str:
    """``https://example.com`` → ``https-example.com``; ``http://127.0.0.1:8080`` → ``http-127.0.0.1-8080``."""
    return _UNSAFE.sub("-", origin.replace("://", "-", 1)).strip("-")


def page_key(origin: str, url: str, signature: str) -> str:
    return f"sites/{site_slug(origin)}/pages/{url_key(url)}/{signature[:32]}"


def sitemap_key(origin: str, url: str, signature: str) -> str:
    return f"sites/{site_slug(origin)}/sitemaps/{url_key(url)}/{signature[:32]}"


def site_prefix(origin: str, kind: str = "pages") -> str:
    return f"sites/{site_slug(origin)}/{kind}/"
