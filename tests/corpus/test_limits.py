"""Documents built to cost memory or time: gzip bombs, 51 MiB of XML, 50,001 entries, billion laughs and
a robots.txt past its 512 KiB. Each must stop at its limit, quickly, keep what came before, say why, and
leave the rest of the job alone; the peak memory of the real command is measured while it happens."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from harvester.words import size
from tests.corpus import sites as s
from tests.corpus.cli import ONLY_127_0_0_1, Run, Tree, harvest
from tests.corpus.server import Hit, RouteServer

#: The command's own peak (VmHWM): about 42 MiB idle, 50-70 MiB through the bombs and the 50,000-page parse;
#: a bomb inflated in one piece would take a gibibyte.
MEMORY_CEILING_MIB = 128
SITEMAP_MAX_BYTES = 50 * 1024 * 1024
ROBOTS_MAX_BYTES = 512 * 1024


@dataclass
class LimitsRun:
    base: str
    run: Run
    tree: Tree
    hits: list[Hit]

    def node(self, path: str) -> dict:
        return self.tree[self.base + path]


@pytest.fixture(scope="module")
def bombs(server: RouteServer) -> LimitsRun:
    s.limits_site(server)
    server.reset_log()
    run = harvest("sitemaps", server.base + "/", "--allow-network", ONLY_127_0_0_1, "--format", "json")
    hits = list(server.hits)
    return LimitsRun(server.base, run, Tree(run.json()), hits)


@pytest.fixture(scope="module")
def big(server: RouteServer) -> LimitsRun:
    s.big_site(server)
    server.reset_log()
    run = harvest(
        "sitemaps",
        server.base + "/",
        "--sitemap",
        server.url(s.BIG),
        "--sitemap",
        server.url(s.GOOD),
        "--allow-network",
        ONLY_127_0_0_1,
        "--format",
        "json",
    )
    return LimitsRun(server.base, run, Tree(run.json()), list(server.hits))


# gzip bombs ----------------------------------------------------------------------------------------


def test_the_bombs_are_read_in_bounded_memory(bombs):
    """Four gibibyte bombs (about 1 MiB each on the wire) and 51 MiB of XML in one run."""
    assert bombs.run.returncode == 0, bombs.run.stderr
    assert bombs.run.peak_rss_mib < MEMORY_CEILING_MIB


def test_a_gzip_bomb_is_inflated_only_up_to_the_limit_and_keeps_what_came_before(bombs):
    """Two pages, then a gibibyte of blanks: the two pages are kept, the rest is never inflated."""
    node = bombs.node(s.BOMB)
    assert (node["status"], node["kind"], node["pages"]) == ("completed", "urlset", 2)
    assert node["truncated"] == "larger than 50 MiB uncompressed"


def test_a_gzip_bomb_of_zeros_ends_with_a_reason_and_no_pages(bombs):
    """A gibibyte of NUL bytes behind a .xml name: not a sitemap at all, and never inflated past 50 MiB."""
    node = bombs.node(s.BOMB_OF_ZEROS)
    assert node["status"] in ("invalid", "completed")
    assert node["pages"] == 0
    assert node.get("error") or node.get("truncated")
    assert "50 MiB" in (node.get("truncated") or "") or node["status"] == "invalid"


def test_a_content_encoding_bomb_keeps_what_came_before_it(bombs):
    node = bombs.node(s.CE_BOMB)
    assert (node["kind"], node["pages"]) == ("urlset", 2)
    assert node["truncated"]


def test_a_gzip_bomb_inside_content_encoding_gzip_is_bounded_too(bombs):
    """One Content-Encoding layer, then the gzipped body: each inflated in bounded steps."""
    node = bombs.node(s.CE_AROUND_BOMB)
    assert (node["kind"], node["pages"]) == ("urlset", 2)
    assert node["truncated"] == "larger than 50 MiB uncompressed"


# 50 MiB, 50,000 entries ------------------------------------------------------------------------------


def test_a_sitemap_over_50_mib_keeps_the_entries_before_the_limit(bombs):
    node = bombs.node(s.HUGE)
    assert (node["status"], node["pages"]) == ("completed", 3)  # the page after 51 MiB is never read
    assert node["truncated"]


@pytest.mark.parametrize(
    ("path", "limit"),
    [(s.HUGE, SITEMAP_MAX_BYTES), (s.CE_BOMB, SITEMAP_MAX_BYTES), ("/robots.txt", ROBOTS_MAX_BYTES)],
)
def test_the_truncated_reason_names_the_size_limit(bombs, path, limit):
    """A sitemap cut by a limit and one cut by a dropped connection are different stories; the reason
    should tell which (the gzipped bombs above do: "larger than 50 MiB uncompressed")."""
    assert f"larger than {size(limit)}" in bombs.node(path)["truncated"]


def test_a_sitemap_of_50001_entries_keeps_the_first_50000_and_says_why(big):
    """The 50,001st entry is out of scope: had it been read, it would show in ``dropped``."""
    assert big.run.returncode == 0, big.run.stderr
    node = big.node(s.BIG)
    assert (node["status"], node["pages"]) == ("completed", 50_000)
    assert node["truncated"] == "more than 50,000 entries"
    assert "dropped" not in node
    assert big.node(s.GOOD)["pages"] == 2
    assert big.run.peak_rss_mib < MEMORY_CEILING_MIB


# XML hardening -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [s.LAUGHS, s.EXTERNAL_ENTITY])
def test_a_doctype_with_entities_is_an_invalid_sitemap_with_a_reason(bombs, path):
    """Billion laughs and an external entity: refused at their first entity declaration, before anything expands."""
    node = bombs.node(path)
    assert (node["status"], node["pages"]) == ("invalid", 0)
    assert "it declares an entity" in node["error"] or "external DTD" in node["error"]


# robots.txt ----------------------------------------------------------------------------------------


def test_robots_txt_is_read_up_to_512_kib(bombs):
    """Sitemap lines before the limit are declared; one after 600 KiB of comments is not."""
    robots = bombs.node("/robots.txt")
    assert robots["kind"] == "robots"
    assert robots["truncated"]
    declared = bombs.tree.children_of(bombs.base + "/robots.txt")
    assert bombs.base + s.GOOD in declared
    assert bombs.base + s.LATE not in declared
    assert not any(h.path == s.LATE for h in bombs.hits)


def test_the_good_sitemap_next_to_the_bombs_is_whole(bombs):
    node = bombs.node(s.GOOD)
    assert (node["status"], node["pages"]) == ("completed", 2)
