"""robots.txt as RFC 9309 reads it, end to end in ``harvest crawl``: the group for Harvester's product
token, longest match, Allow on a tie, percent-encoded paths, wildcards; 4xx means no restrictions, 5xx
and 429 mean nothing may be fetched for now; redirects are followed; and requests to one host are paced.

The site's sitemap lists pages on four origins of 127.0.0.1 (all in scope: same host): the site itself,
and three whose robots.txt answers 503, 429 and 404; and one page on 127.0.0.2, out of scope. The crawl
may reach all of 127.0.0.0/8, so only the scope keeps it from that page.
"""

from __future__ import annotations

import itertools
import json
from contextlib import ExitStack
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest
from harvester.model.crawl import CrawlState
from harvester.words import size
from tests.corpus import sites as s
from tests.corpus.cli import FAST_RETRIES, ONLY_127_0_0_1, Run, Tree, harvest
from tests.corpus.server import Hit, RouteServer, serving
from tests.support import LOOPBACK

PACING = 0.15


@dataclass
class RobotsCrawl:
    run: Run
    records: dict[str, dict[str, Any]]
    site: RouteServer
    unreachable: RouteServer
    throttled: RouteServer
    missing: RouteServer
    elsewhere: RouteServer
    state: Path

    def record(self, server: RouteServer, path: str) -> dict[str, Any]:
        return self.records[server.url(path)]

    def page_hits(self) -> list[Hit]:
        """Page requests to the host 127.0.0.1, over all its origins, in time order."""
        hits = [h for h in self.site.hits if h.path.split("?")[0] in {p.split("?")[0] for p in s.RULED_PAGES}]
        hits += [h for h in self.missing.hits if h.path in s.OTHER_PAGES]
        return sorted((h for h in hits if h.path != "/robots.txt"), key=lambda h: h.at)


@pytest.fixture(scope="module")
def crawl(server: RouteServer, second_server: RouteServer, tmp_path_factory) -> RobotsCrawl:
    with ExitStack() as stack:
        unreachable, throttled, missing = (stack.enter_context(serving()) for _ in range(3))
        s.robots_site(server, unreachable, throttled, missing, second_server)
        state = tmp_path_factory.mktemp("state")
        run = harvest(
            "crawl",
            server.base + "/",
            "--allow-network",
            LOOPBACK,
            "--state-dir",
            str(state),
            "--json",
            "--quiet",
            "--rate-limit-delay",
            str(PACING),
            env={**FAST_RETRIES, "HARVEST_PAGE_MAX_BYTES": str(s.SMALL_PAGE_LIMIT)},
        )
        result = run.json()
        records = {}
        for line in Path(result["processed_urls"]).read_text().splitlines():
            record = json.loads(line)
            records[record["url"]] = record
        return RobotsCrawl(run, records, server, unreachable, throttled, missing, second_server, state)


def test_the_crawl_completes(crawl):
    assert crawl.run.returncode == 0, crawl.run.stderr
    assert crawl.run.json()["total_urls"] == len(s.RULED_PAGES) + 3 * len(s.OTHER_PAGES) + 1


def test_the_page_size_limit_is_configurable(crawl):
    """HARVEST_PAGE_MAX_BYTES=1000: a 2 KB page fails naming the limit."""
    record = crawl.record(crawl.site, s.OVER_PAGE_LIMIT)
    assert record["status"] == "failed"
    assert f"larger than {size(s.SMALL_PAGE_LIMIT)}" in record["error_message"]


def test_a_page_out_of_scope_is_neither_recorded_nor_fetched(crawl):
    """127.0.0.2 is reachable for this crawl (127.0.0.0/8 is allowed) but not the site's host."""
    assert crawl.elsewhere.url("/out-of-scope") not in crawl.records
    assert crawl.elsewhere.hits == []


@pytest.mark.parametrize(("path", "allowed"), list(s.RULED_PAGES.items()))
def test_the_harvester_group_decides_by_longest_match_with_allow_winning_a_tie(crawl, path, allowed):
    """The ``User-agent: *`` group disallows everything; Harvester's own group is the one that applies."""
    record = crawl.record(crawl.site, path)
    if allowed:
        assert (record["status"], record["http_status"]) == ("completed", 200)
    else:
        # Excluded by rule, not failed; no fetch moves its crawl state (a later job asks robots.txt again).
        assert (record["status"], record["error_message"]) == ("excluded", "forbidden by robots.txt")
        assert (record["crawl_state"], record["attempts"]) == ("unfetched", 0)
        assert not any(h.path == path for h in crawl.site.hits), "a forbidden page was fetched"


def test_every_listed_url_is_in_the_crawl_database_as_listed_by_the_job_fetched_or_not(crawl):
    """A listing leaves the crawl record of a URL it hands to a fetch to the fetch's settlement (one write
    for both): a page robots.txt forbids, or one given up without a request, still has it written."""
    job_id = crawl.run.json()["job_id"]
    in_scope = {url: r for url, r in crawl.records.items() if url.startswith("http://127.0.0.1")}
    forbidden = [url for url, r in in_scope.items() if r["status"] == "excluded"]
    untried = [url for url, r in in_scope.items() if r["status"] == "failed" and r.get("attempts", 0) == 0]
    assert forbidden and untried
    with LocalHarvest.open(crawl.state) as harvest:
        known = {
            r.url: r
            for origin in {server.base for server in (crawl.site, crawl.unreachable, crawl.throttled, crawl.missing)}
            for r in harvest.crawldb.site_urls(origin)
        }
    for url in in_scope:
        assert url in known, url
        assert known[url].last_listed_job == job_id
    for url in forbidden:
        assert (known[url].state, known[url].last_fetch_time) == (CrawlState.UNFETCHED, None)


def test_pages_robots_txt_forbids_are_counted_as_excluded_not_as_failures(crawl):
    result = crawl.run.json()
    forbidden = sum(1 for allowed in s.RULED_PAGES.values() if not allowed)
    assert forbidden and result["excluded_processing"] == forbidden
    assert result["exclusions"] == {"forbidden by robots.txt": forbidden}
    assert not any(e["error"] == "forbidden by robots.txt" for e in result["error_details"])
    statuses = [r["status"] for r in crawl.records.values()]
    assert result["failed_processing"] == statuses.count("failed")
    assert result["total_urls"] == result["successful_processing"] + result["failed_processing"] + forbidden


def test_robots_txt_is_found_through_redirects(crawl):
    """/robots.txt -> /r/robots.txt -> /real/robots.txt: its rules and its Sitemap line both apply."""
    assert crawl.record(crawl.site, "/robots.txt")["final_url"] == crawl.site.url(s.RULES)
    assert any(h.path == s.RULES_SITEMAP for h in crawl.site.hits)


def test_robots_txt_is_read_once_per_origin_for_its_rules(crawl):
    """Once as the discovery's robots.txt node, once for the rules, once as a page the sitemap lists."""
    assert sum(1 for h in crawl.site.hits if h.path == s.RULES) <= 3
    assert sum(1 for h in crawl.missing.hits if h.path == "/robots.txt") == 1


@pytest.mark.parametrize(("which", "status"), [("unreachable", "503"), ("throttled", "429")])
def test_an_unreachable_robots_txt_forbids_everything_for_now_then_gives_up(crawl, which, status):
    """5xx (and 429): complete disallow, retried later a bounded number of times; no page is fetched."""
    server = getattr(crawl, which)
    for path in s.OTHER_PAGES:
        record = crawl.record(server, path)
        assert record["status"] == "failed"
        assert record["error_message"].startswith(f"robots.txt unreachable ({status})")
        assert record["error_message"].endswith("(gave up after 3 deliveries)")
        assert record["attempts"] == 0  # no request was sent for the page itself
    assert {h.path for h in server.hits} == {"/robots.txt"}
    assert len(server.hits) <= 3 * 3


def test_a_missing_robots_txt_means_no_restrictions(crawl):
    for path in s.OTHER_PAGES:
        assert crawl.record(crawl.missing, path)["status"] == "completed"


def test_requests_to_one_host_are_paced_across_its_origins(crawl):
    """``--rate-limit-delay 0.15``: page requests to 127.0.0.1 start at least that far apart."""
    starts = [h.at for h in crawl.page_hits()]
    assert len(starts) >= 6
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= PACING * 0.7, gaps  # arrival times jitter a little; unpaced, they are ~1 ms apart


def test_protego_is_the_robots_txt_parser_at_a_safe_version():
    """0.7.0 or newer (never below 0.6.2, a regular-expression denial-of-service fix)."""
    assert tuple(int(part) for part in version("protego").split(".")[:2]) >= (0, 7)


def test_robots_txt_redirected_to_another_name_still_declares_its_sitemaps():
    with serving() as site:
        s.robots_at_another_name_site(site)
        run = harvest("sitemaps", site.base + "/", "--allow-network", ONLY_127_0_0_1, "--format", "json")
        tree = Tree(run.json())
    robots = tree[site.url("/robots.txt")]
    assert robots["final_url"] == site.url(s.ROBOTS_ELSEWHERE)
    assert robots["kind"] == "robots"
    assert tree.children_of(site.url("/robots.txt")) == [site.url(s.GOOD)]


def test_crawl_delay_is_honoured(tmp_path):
    with serving() as site:
        s.crawl_delay_site(site)
        run = harvest(
            "crawl",
            site.base + "/",
            "--allow-network",
            ONLY_127_0_0_1,
            "--state-dir",
            str(tmp_path),
            "--json",
            "--quiet",
            "--rate-limit-delay",
            "0.0001",
        )
        starts = sorted(h.at for h in site.hits if h.path.startswith("/p/"))
    assert run.returncode == 0, run.stderr
    assert len(starts) == 3
    assert min(b - a for a, b in itertools.pairwise(starts)) >= s.CRAWL_DELAY * 0.9
