"""Include / exclude patterns, for pages (``--include`` / ``--exclude``) and for child sitemaps
(``--sitemap-include`` / ``--sitemap-exclude``): a glob on the whole URL, or ``re:`` and a regular
expression searched in it. Refused pages are counted per reason; refused sitemaps are never fetched.
(USP-style callbacks exist only in the Python API, which no command line reaches.)"""

from __future__ import annotations

import pytest

from tests.corpus import sites as s
from tests.corpus.cli import ONLY_127_0_0_1, Tree, harvest
from tests.corpus.server import RouteServer


def read(server: RouteServer, *patterns: str) -> Tree:
    run = harvest(
        "sitemaps",
        server.base + "/",
        "--sitemap",
        server.url(s.FILTER_INDEX),
        "--allow-network",
        ONLY_127_0_0_1,
        "--format",
        "json",
        *patterns,
    )
    assert run.returncode == 0, run.stderr
    return Tree(run.json())


@pytest.fixture(scope="module")
def site(server: RouteServer) -> RouteServer:
    s.filtering_site(server)
    return server


def test_page_patterns_keep_matching_pages_and_count_the_rest(site):
    """``--include '*/blog/*'`` keeps both blog URLs of each sitemap; ``--exclude 're:/draft-'`` then
    drops the draft: one page each, one ``not_included`` and one ``excluded``."""
    tree = read(site, "--include", "*/blog/*", "--exclude", "re:/draft-")
    for child in s.FILTER_CHILDREN:
        node = tree[site.url(child)]
        assert node["pages"] == 1, child
        assert node["dropped"] == {"not_included": 1, "excluded": 1}, child


def test_sitemap_patterns_choose_the_children_that_are_followed(site):
    """``--sitemap-include '*/blog/*'`` and ``--sitemap-exclude 're:2023'``: only blog/2024.xml is read."""
    site.reset_log()
    tree = read(site, "--sitemap-include", "*/blog/*", "--sitemap-exclude", "re:2023")
    index = tree[site.url(s.FILTER_INDEX)]
    assert tree.children_of(site.url(s.FILTER_INDEX)) == [site.url("/filter/blog/2024.xml")]
    assert index["dropped"] == {"sitemap_filtered": 2}
    assert tree[site.url("/filter/blog/2024.xml")]["pages"] == 3
    fetched = {h.path for h in site.hits}
    assert "/filter/blog/2023.xml" not in fetched
    assert "/filter/shop/products.xml" not in fetched
