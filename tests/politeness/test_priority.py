"""Priority: page tasks are served by rank (the sitemap's priority, new URLs before re-fetches, an optional
boost by lastmod recency), highest first, FIFO within a rank."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from harvester.pipeline.ranking import rank
from harvester.settings import EngineSettings
from tests.corpus import fixtures as f
from tests.corpus.cli import harvest
from tests.corpus.server import HTML, Route, RouteServer, serving

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
DEFAULTS = EngineSettings()


def test_every_new_url_comes_before_every_refetch_and_the_sitemaps_priority_orders_each():
    ranks = {
        (new, priority): rank(priority, new=new, lastmod=None, now=NOW, settings=DEFAULTS)
        for new in (True, False)
        for priority in (0.0, 0.5, 1.0)
    }
    assert min(r for (new, _), r in ranks.items() if new) >= max(r for (new, _), r in ranks.items() if not new)
    assert ranks[(True, 0.0)] < ranks[(True, 0.5)] < ranks[(True, 1.0)]
    assert ranks[(False, 0.0)] < ranks[(False, 0.5)] < ranks[(False, 1.0)]


def test_a_recent_lastmod_is_boosted_only_when_asked_and_less_as_it_ages():
    boosted = EngineSettings(lastmod_boost=1.0, lastmod_boost_window=86400.0)
    fresh, day_old, stale = NOW, NOW - timedelta(hours=12), NOW - timedelta(days=2)
    assert rank(0.5, new=False, lastmod=fresh, now=NOW, settings=DEFAULTS) == 0.5  # off by default
    assert rank(0.5, new=False, lastmod=fresh, now=NOW, settings=boosted) == 1.5
    assert rank(0.5, new=False, lastmod=day_old, now=NOW, settings=boosted) == 1.0
    assert rank(0.5, new=False, lastmod=stale, now=NOW, settings=boosted) == 0.5
    assert rank(0.5, new=False, lastmod=NOW + timedelta(days=1), now=NOW, settings=boosted) == 1.5  # (future: now)


@pytest.fixture
def host() -> Iterator[RouteServer]:
    with serving("127.0.0.1") as running:
        yield running


@pytest.mark.parametrize("per_host", ["16", "2"])
def test_the_priority_1_tenth_of_a_site_is_fetched_in_the_first_fifth_of_its_fetches(host, tmp_path, per_host):
    """With as many requests to the host at once as there are workers, and with a per-host limit that
    binds (the dispatcher hands a host no more pages than it may have in flight, so none is sent back to
    wait behind lower ranks)."""
    # (400 pages: the first fifth, 80 fetches, is well beyond the pages handed out at once, 16 workers and
    # the dispatcher's few per host, whose requests start in any order among themselves.)
    urls = [host.url(f"/p/{i}") for i in range(400)]
    high = set(urls[5::10])  # scattered through the sitemap
    entries = [f.url(u, priority="1.0" if u in high else "0.5") for u in urls]
    host.add("/robots.txt", Route(f"Sitemap: {host.url('/sitemap.xml')}\n", content_type="text/plain"))
    host.add("/sitemap.xml", Route(f.urlset(*entries)))
    host.add_prefix("/p/", Route("<html>a page</html>", content_type=HTML))
    run = harvest(
        "crawl", host.base + "/", "--allow-network", "127.0.0.1/32", "--state-dir", str(tmp_path / "s"),
        "--json", "--quiet", "--rate-limit-delay", "0.001", "--concurrency", "16", "--per-host", per_host,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.json()["successful_processing"] == len(urls)
    fetched = [host.url(h.path) for h in host.hits if h.path.startswith("/p/")]
    assert sorted(fetched) == sorted(urls)
    first_fifth = set(fetched[: len(urls) // 5])
    assert high <= first_fifth, sorted(high - first_fifth)
