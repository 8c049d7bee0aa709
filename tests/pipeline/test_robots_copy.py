"""The page workers take the robots.txt the job's discovery read (pipeline/robots_copy.py): a crawl asks the
host for it once, its rules hold for every page; a reading discovery could not make is made by the page
workers, on their turn. `harvest crawl` against a site on 127.0.0.1 that logs its requests."""

from __future__ import annotations

from tests.corpus.server import Hit, Route, RouteServer, serving
from tests.politeness.support import crawl, site


def paths(server: RouteServer, prefix: str) -> list[str]:
    return [hit.path for hit in server.hits if hit.path.startswith(prefix)]


def test_a_crawl_asks_the_host_for_robots_txt_once_and_its_rules_hold_for_every_page(tmp_path):
    with serving("127.0.0.1") as server:
        urls = site(server, 12, robots="Disallow: /p/1")  # (/p/1, /p/10, /p/11)
        done = crawl(server, tmp_path, delay=0.01)
        assert done.run.returncode == 0, done.run.stderr
        assert paths(server, "/robots.txt") == ["/robots.txt"]
        barred = {u for u in urls if u.startswith(server.url("/p/1"))}
        assert sorted(map(server.url, paths(server, "/p/"))) == sorted(set(urls) - barred)
        assert {done.records[u]["status"] for u in barred} != {"completed"}


def test_a_robots_txt_discovery_could_not_read_is_read_by_the_page_workers(tmp_path):
    """Discovery meets a 503 each time (RFC 9309: nothing may be fetched for now), finds the sitemap at its
    well-known path; by then robots.txt answers, and the page workers read it on their own: its rules hold."""
    with serving("127.0.0.1") as server:
        urls = site(server, 12, robots="Disallow: /p/1")
        discovering = [True]

        def outage(hit: Hit) -> Route | None:
            if hit.path == "/sitemap.xml":
                discovering[0] = False
            if hit.path == "/robots.txt" and discovering[0]:
                return Route("down", status=503, content_type="text/plain")
            return None

        server.override = outage
        done = crawl(server, tmp_path, delay=0.01)
        assert done.run.returncode == 0, done.run.stderr
        robots = paths(server, "/robots.txt")
        assert len(robots) >= 2, robots  # (discovery's tries, then the page workers' reading)
        barred = {u for u in urls if u.startswith(server.url("/p/1"))}
        assert sorted(map(server.url, paths(server, "/p/"))) == sorted(set(urls) - barred)
