"""Harvester: sitemap ingestion on AWS serverless or on one machine, with one engine.

The Python API (no AWS needed) is importable from here: ``sitemap_tree_for_homepage``, ``iter_pages``,
``aiter_pages``, ``Discovery``, ``SitemapTree``, ``SitemapNode``, ``InvalidSitemap``, ``SiteUnreachable``
(raised when no location of a site answered); and the parser: ``SitemapParser``, ``parse_file``,
``parse_bytes``.
They are loaded on first use, so that the Lambda handlers, which import only the engine, stay light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_API = {
    "Discovery": "harvester.api.pages",
    "InvalidSitemap": "harvester.api.tree",
    "SiteUnreachable": "harvester.api.errors",
    "SitemapNode": "harvester.api.tree",
    "SitemapTree": "harvester.api.tree",
    "aiter_pages": "harvester.api.pages",
    "iter_pages": "harvester.api.pages",
    "sitemap_tree_for_homepage": "harvester.api.pages",
    "SitemapParser": "harvester.sitemap",
    "parse_file": "harvester.sitemap",
    "parse_bytes": "harvester.sitemap",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'harvester' has no attribute {name!r}")
