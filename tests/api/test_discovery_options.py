"""USP's discovery keywords on the Python API (``use_robots``, ``use_known_paths``, ``extra_known_paths``,
``normalize_homepage_url``), against a real server on 127.0.0.1 that logs what it was asked for.

Translated from ultimate-sitemap-parser 1.8's tests/tree/test_opts.py (TestTreeOpts) and tests/cli/test_ls.py
(test_discovery_args): USP checks the URLs its fetcher is called with (mocked); here the server's log of a
real discovery says the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from harvester import aiter_pages, iter_pages, sitemap_tree_for_homepage
from harvester.pipeline.discovery import KNOWN_PATHS
from tests.corpus.server import RouteServer, serving
from tests.discovery_site import DECLARED, EXTRA, FOLDER, FOLDER_EXTRA, KNOWN, discovery_site, requested
from tests.support import LOOPBACK

FAST = {"allow_networks": [LOOPBACK], "rate_limit_delay": 0}
WELL_KNOWN = {f"/{p}" for p in KNOWN_PATHS}


@pytest.fixture(scope="module")
def site() -> Iterator[RouteServer]:
    with serving() as server:
        discovery_site(server)
        yield server


def tree_of(site: RouteServer, path: str, **options: Any) -> tuple[str, list[str], list[str], list[str]]:
    """The tree's URL, the sub-sitemaps it found, the paths of its pages and the paths requested."""
    site.reset_log()
    with sitemap_tree_for_homepage(site.url(path), **FAST, **options) as tree:
        pages = sorted({p.url.removeprefix(site.base) for p in tree.all_pages()})
        found = [s.url.removeprefix(site.base) for s in tree.sub_sitemaps]
        return tree.url, found, pages, requested(site)


def test_extra_known_paths_are_probed_besides_the_well_known_ones(site):
    # USP tests/tree/test_opts.py TestTreeOpts.test_extra_known_paths
    _, found, pages, asked = tree_of(site, "/", extra_known_paths={"custom/extra.xml"})

    assert asked.count("/custom/extra.xml") == 1 and set(asked) >= WELL_KNOWN and "/robots.txt" in asked
    assert found == ["/robots.txt", "/sitemap.xml", "/custom/extra.xml"]
    assert pages == sorted(DECLARED + KNOWN + EXTRA)
    assert "/custom/extra.xml" not in tree_of(site, "/")[3]


def test_the_homepage_is_its_root_unless_normalize_homepage_url_is_off(site):
    # USP tests/tree/test_opts.py TestTreeOpts.test_normalize_homepage_url_default_enabled and _disabled
    url, _, pages, asked = tree_of(site, "/foo/bar")
    assert url == site.url("/") and "/robots.txt" in asked and "/foo/bar/robots.txt" not in asked
    assert pages == sorted(DECLARED + KNOWN)

    url, found, pages, asked = tree_of(site, "/foo/bar", normalize_homepage_url=False)
    assert url == site.url("/foo/bar/")
    assert "/foo/bar/robots.txt" in asked and "/robots.txt" not in asked
    assert all(path.startswith("/foo/bar/") for path in asked)
    assert set(asked) == {"/foo/bar/robots.txt"} | {f"/foo/bar{p}" for p in WELL_KNOWN}
    # USP tree.py: a known path robots.txt declares is not fetched again (its probe is left out).
    assert asked.count("/foo/bar/sitemap.xml") == 1 and found == ["/foo/bar/robots.txt"]
    assert pages == FOLDER


def test_extra_known_paths_go_under_the_homepage_kept(site):
    # USP tests/tree/test_opts.py TestTreeOpts.test_normalize_homepage_url_with_extra_known_paths
    _, found, pages, asked = tree_of(
        site, "/foo/bar", normalize_homepage_url=False, extra_known_paths={"custom_sitemap.xml", "another/path.xml"}
    )

    assert asked.count("/foo/bar/custom_sitemap.xml") == 1 and asked.count("/foo/bar/another/path.xml") == 1
    assert sorted(found) == ["/foo/bar/another/path.xml", "/foo/bar/custom_sitemap.xml", "/foo/bar/robots.txt"]
    assert pages == sorted(FOLDER + FOLDER_EXTRA)


def test_use_robots_off_reads_no_robots_txt_and_probes_the_known_paths_under_the_homepage(site):
    # USP tests/tree/test_opts.py TestTreeOpts.test_skip_robots_txt
    url, found, pages, asked = tree_of(site, "/foo/bar", use_robots=False, normalize_homepage_url=False)

    assert url == site.url("/foo/bar/") and not [p for p in asked if p.endswith("robots.txt")]
    assert set(asked) == {f"/foo/bar{p}" for p in WELL_KNOWN} and found == ["/foo/bar/sitemap.xml"]
    assert pages == FOLDER


def test_each_source_of_sitemaps_can_be_skipped(site):
    # USP tests/cli/test_ls.py test_discovery_args (--no-robots, --no-known: use_robots, use_known_paths)
    site.reset_log()
    pages = sorted(p.url.removeprefix(site.base) for p in iter_pages(site.url("/"), use_known_paths=False, **FAST))
    assert pages == DECLARED and requested(site) == ["/robots.txt", "/declared.xml"]

    async def without_robots() -> list[str]:
        return [p.url.removeprefix(site.base) async for p in aiter_pages(site.url("/"), use_robots=False, **FAST)]

    site.reset_log()
    assert sorted(asyncio.run(without_robots())) == KNOWN
    assert set(requested(site)) == WELL_KNOWN


def test_extra_known_paths_are_known_paths_and_go_with_them(site):
    # USP tree.py: the extra paths are joined to the well-known ones, probed only with use_known_paths.
    site.reset_log()
    pages = list(iter_pages(site.url("/"), use_known_paths=False, extra_known_paths=["custom/extra.xml"], **FAST))

    assert sorted(p.url.removeprefix(site.base) for p in pages) == DECLARED
    assert "/custom/extra.xml" not in requested(site)


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"use_robots": False, "use_known_paths": False}, "no sitemap would be looked for"),
        ({"extra_known_paths": ["/custom/extra.xml"]}, "'/custom/extra.xml': a known path is relative to the site"),
        ({"extra_known_paths": ["https://elsewhere.example/s.xml"]}, "not a URL or an absolute path"),
        ({"extra_known_paths": "custom/extra.xml"}, "a collection of paths, not 'custom/extra.xml'"),
    ],
)
def test_bad_discovery_options_are_refused_at_the_call(options, reason):
    with pytest.raises(ValueError, match="invalid discovery options") as refused:
        iter_pages("https://example.com/", **options)
    assert reason in str(refused.value)
