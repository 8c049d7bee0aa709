"""robots.txt (RFC 9309) through RobotsRules, against a real server."""

from __future__ import annotations

import anyio
import pytest

from harvester.fetch import Fetcher, RobotsRules
from harvester.fetch.robots import matching_form
from harvester.limits import ROBOTS_MAX_BYTES
from tests.fetch.fetch_helpers import Reply, TestServer, local_policy

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def robots(server: TestServer, text: str, status: int = 200) -> None:
    server.reply("/robots.txt", status, text.encode(), Content_Type="text/plain")


async def test_longest_match_wins(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /shop\nAllow: /shop/public\nDisallow: /shop/public/secret\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert await rules.allowed(server.url("/"))
        assert not await rules.allowed(server.url("/shop/cart"))
        assert await rules.allowed(server.url("/shop/public/page"))
        assert not await rules.allowed(server.url("/shop/public/secret/x"))


async def test_allow_wins_a_tie(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /page\nAllow: /page\nDisallow: /*.pdf$\nAllow: /*.pdf$\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert await rules.allowed(server.url("/page"))
        assert await rules.allowed(server.url("/doc.pdf"))


async def test_wildcards_and_our_own_group(server: TestServer) -> None:
    robots(
        server,
        "User-agent: *\nDisallow: /\n\nUser-agent: harvester\nDisallow: /*?session=\nCrawl-delay: 2.5\n"
        "Sitemap: https://example.com/sitemap.xml\n",
    )
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert await rules.allowed(server.url("/anything"))
        assert not await rules.allowed(server.url("/list?session=42"))
        assert await rules.crawl_delay(server.url("/")) == 2.5
        assert await rules.sitemaps(server.url("/")) == ("https://example.com/sitemap.xml",)
        other = RobotsRules(fetcher, "SomeOtherBot")
        assert not await other.allowed(server.url("/anything"))
        assert await other.crawl_delay(server.url("/")) is None


async def test_robots_txt_itself_always_allowed(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert await rules.allowed(server.url("/robots.txt"))
        assert not await rules.allowed(server.url("/robots.txt.bak"))


async def test_paths_are_percent_encoded_before_matching(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /caf%C3%A9\nDisallow: /a b\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert not await rules.allowed(server.url("/café/menu"))
        assert not await rules.allowed(server.url("/caf%c3%a9/menu"))
        assert not await rules.allowed(server.url("/a%20b"))
        assert await rules.allowed(server.url("/cafe"))
    assert matching_form("http://h/caf\u00e9?q=\u00fc") == "http://h/caf%C3%A9?q=%C3%BC"
    assert matching_form("http://h/a%2Fb") == "http://h/a%2Fb"


@pytest.mark.parametrize("status", [404, 401, 403, 410])
async def test_4xx_means_no_restrictions(server: TestServer, status: int) -> None:
    robots(server, "User-agent: *\nDisallow: /\n", status=status)
    async with Fetcher(local_policy()) as fetcher:
        assert await RobotsRules(fetcher).allowed(server.url("/page"))


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_unreachable_disallows_then_is_asked_again(server: TestServer, status: int) -> None:
    server.sequence(
        "/robots.txt",
        Reply(status, b"User-agent: *\nAllow: /\n"),
        Reply(200, b"User-agent: *\nDisallow: /x\n"),
    )
    clock = Clock()
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher, clock=clock)
        assert not await rules.allowed(server.url("/page"))
        assert not await rules.allowed(server.url("/other"))
        assert server.hits("/robots.txt") == 1
        clock.now += 299
        assert not await rules.allowed(server.url("/page"))
        assert server.hits("/robots.txt") == 1
        clock.now += 2  # past the five minutes
        assert await rules.allowed(server.url("/page"))
        assert not await rules.allowed(server.url("/x"))
    assert server.hits("/robots.txt") == 2


async def test_network_error_disallows() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert not await rules.allowed(f"http://127.0.0.1:{port}/page")
        entry = await rules.entry(f"http://127.0.0.1:{port}/")
    assert entry.disallow_all
    assert "ConnectionFailed" in entry.status


async def test_outage_falls_back_on_the_previous_copy(server: TestServer) -> None:
    server.sequence("/robots.txt", Reply(200, b"User-agent: *\nDisallow: /private\n"), Reply(503, b"down"))
    clock = Clock()
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher, clock=clock)
        assert await rules.allowed(server.url("/page"))
        clock.now += 24 * 3600 + 1  # the copy is too old to be used as it is
        assert await rules.allowed(server.url("/page"))
        assert not await rules.allowed(server.url("/private"))
    assert server.hits("/robots.txt") == 2


async def test_cached_for_a_day_at_most(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /x\n")
    clock = Clock()
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher, clock=clock, ttl=7 * 24 * 3600)  # asking for longer is capped
        await rules.allowed(server.url("/a"))
        clock.now += 24 * 3600 - 1
        await rules.allowed(server.url("/a"))
        assert server.hits("/robots.txt") == 1
        clock.now += 2
        await rules.allowed(server.url("/a"))
    assert server.hits("/robots.txt") == 2


async def test_fetched_once_for_many_urls(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /private\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        verdicts = [await rules.allowed(server.url(f"/page/{i}")) for i in range(20)]
        results: dict[int, bool] = {}

        async def ask(i: int) -> None:
            results[i] = await rules.allowed(server.url(f"/private/{i}"))

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(ask, i)
    assert all(verdicts)
    assert not any(results.values())
    assert server.hits("/robots.txt") == 1


async def test_one_fetch_for_concurrent_first_questions(server: TestServer) -> None:
    server.routes["/robots.txt"] = lambda _s: Reply(200, b"User-agent: *\nDisallow: /p\n", delay=0.2)
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        async with anyio.create_task_group() as group:
            for i in range(10):
                group.start_soon(rules.allowed, server.url(f"/p{i}"))
    assert server.hits("/robots.txt") == 1


async def test_read_up_to_512_kib(server: TestServer) -> None:
    head = b"User-agent: *\nDisallow: /early\n"
    rule = b"Disallow: /late\n"
    cut_at = ROBOTS_MAX_BYTES - len(b"Disallow: /la")  # the limit falls inside the rule
    body = head + b"#" * (cut_at - len(head) - 1) + b"\n" + rule + (b"# more\n" * 50_000)
    assert body[:ROBOTS_MAX_BYTES].endswith(b"\nDisallow: /la")
    server.reply("/robots.txt", 200, body)
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert not await rules.allowed(server.url("/early"))
        assert await rules.allowed(server.url("/late"))
        assert await rules.allowed(server.url("/la"))  # half a rule is no rule


async def test_redirected_robots_txt_is_followed(server: TestServer) -> None:
    server.reply("/robots.txt", 301, Location="/real-robots.txt")
    server.reply("/real-robots.txt", 200, b"User-agent: *\nDisallow: /x\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert not await rules.allowed(server.url("/x"))


async def test_robots_txt_redirect_loop_means_unavailable(server: TestServer) -> None:
    server.reply("/robots.txt", 302, Location="/robots.txt")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert await rules.allowed(server.url("/x"))
        assert "TooManyRedirects" in (await rules.entry(server.url("/"))).status


async def test_origins_are_separate(server: TestServer) -> None:
    robots(server, "User-agent: *\nDisallow: /\n")

    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        assert not await rules.allowed(server.url("/a"))
        # Another scheme is another origin; https here fails to connect (retryable): disallowed for now.
        assert not await rules.allowed(f"https://127.0.0.1:{server.port}/a")
    assert server.hits("/robots.txt") == 1


async def test_answers_outlive_the_fetcher_when_rebound_to_a_new_one(server: TestServer) -> None:
    """A Lambda container runs each invocation on a new event loop, with a new fetcher."""
    robots(server, "User-agent: *\nDisallow: /private\n")
    clock = Clock()
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher, clock=clock)
        assert not await rules.allowed(server.url("/private/a"))
    async with Fetcher(local_policy()) as fetcher:
        again = rules.rebound(fetcher)
        assert not await again.allowed(server.url("/private/b")) and await again.allowed(server.url("/public"))
        assert server.hits("/robots.txt") == 1
        clock.now += 86_400 + 1  # a stale copy is fetched again, through the new fetcher
        assert not await again.allowed(server.url("/private/c"))
    assert server.hits("/robots.txt") == 2


async def test_a_reading_made_elsewhere_answers_for_what_is_left_of_its_day(server: TestServer) -> None:
    """``adopt``: the job's discovery read robots.txt an hour ago; its rules answer without a request until
    the day since that reading is over, then robots.txt is read again."""
    robots(server, "User-agent: *\nAllow: /\n")  # (what the host says now: not what was adopted)
    clock = Clock()
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher, clock=clock)
        origin = server.url("/").rstrip("/")
        assert rules.adopt(origin, b"User-agent: *\nDisallow: /private\nCrawl-delay: 1.5\n", status=200, age=3600)
        assert rules.knows(origin)
        assert not await rules.allowed(server.url("/private/1"))
        assert await rules.allowed(server.url("/public"))
        assert await rules.crawl_delay(server.url("/")) == 1.5
        assert server.hits("/robots.txt") == 0
        clock.now += 23 * 3600 - 1
        assert not await rules.allowed(server.url("/private/1"))
        assert server.hits("/robots.txt") == 0
        clock.now += 2
        assert await rules.allowed(server.url("/private/1"))
    assert server.hits("/robots.txt") == 1


async def test_a_reading_made_elsewhere_is_not_taken_when_a_day_old_or_when_a_fresh_answer_is_held(
    server: TestServer,
) -> None:
    robots(server, "User-agent: *\nDisallow: /held\n")
    async with Fetcher(local_policy()) as fetcher:
        rules = RobotsRules(fetcher)
        origin = server.url("/").rstrip("/")
        assert not rules.adopt(origin, b"User-agent: *\nDisallow: /\n", status=200, age=24 * 3600 + 1)
        assert not rules.knows(origin)
        assert await rules.allowed(server.url("/page"))  # (read now: only /held is disallowed)
        assert not rules.adopt(origin, b"User-agent: *\nDisallow: /\n", status=200, age=0)
        assert await rules.allowed(server.url("/page"))
        assert not await rules.allowed(server.url("/held"))
    assert server.hits("/robots.txt") == 1


async def test_a_4xx_read_elsewhere_means_no_restrictions_and_a_cut_body_loses_its_last_line(
    server: TestServer,
) -> None:
    robots(server, "User-agent: *\nDisallow: /\n")
    async with Fetcher(local_policy()) as fetcher:
        gone, cut = RobotsRules(fetcher), RobotsRules(fetcher)
        origin = server.url("/").rstrip("/")
        assert gone.adopt(origin, None, status=404, age=10)
        assert await gone.allowed(server.url("/anything"))
        # A body cut at the size limit: the rule cut in half ("Disallow: /p" of "/private") is not read.
        assert cut.adopt(origin, b"User-agent: *\nDisallow: /a\nDisallow: /p", status=200, age=10, cut=True)
        assert not await cut.allowed(server.url("/a/1"))
        assert await cut.allowed(server.url("/page"))
    assert server.hits("/robots.txt") == 0
