"""The sites the politeness tests crawl, on a RouteServer that logs when each request starts."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.corpus import fixtures as f
from tests.corpus.cli import FAST_RETRIES, Run, harvest
from tests.corpus.server import HTML, Hit, Route, RouteServer

#: A request start is logged by the server thread that reads it, a few milliseconds after it was sent: gaps
#: are compared with the delay less this. A gate that did not pace would give gaps of about nothing.
JITTER = 0.02


def site(
    server: RouteServer, pages: int, *, robots: str = "", page: Route | None = None, priority: str | None = None
) -> list[str]:
    """``pages`` pages under /p/, listed by /sitemap.xml (each with ``priority`` if given), declared by
    robots.txt."""
    urls = [server.url(f"/p/{i}") for i in range(pages)]
    server.add(
        "/robots.txt",
        Route(f"User-agent: *\n{robots}\nSitemap: {server.url('/sitemap.xml')}\n", content_type="text/plain"),
    )
    entries = (f.url(u, priority=priority) if priority else f.url(u) for u in urls)
    server.add("/sitemap.xml", Route(f.urlset(*entries)))
    server.add_prefix("/p/", page or Route("<html>a page</html>", content_type=HTML))
    return urls


def storm(seconds: float) -> Callable[[Hit], Route | None]:
    """A server override: 429 to every page request in the ``seconds`` after the first one."""
    began: list[float] = []

    def throttle(hit: Hit) -> Route | None:
        if not hit.path.startswith("/p/"):
            return None
        began[:] = began or [hit.at]
        if hit.at - began[0] <= seconds:
            return Route("busy", status=429, content_type="text/plain")
        return None

    return throttle


def arrived(hits: list[Hit]) -> list[Hit]:
    """The requests in the order they arrived (a server thread may log them in another)."""
    return sorted(hits, key=lambda h: h.at)


def gaps(hits: list[Hit]) -> list[float]:
    """Between request starts, in the order they arrived."""
    return [b.at - a.at for a, b in itertools.pairwise(arrived(hits))]


def timeline(hits: list[Hit]) -> str:
    """The requests in order with the gap before each, for a failure's message: which requests came close
    together, and whether the one before was late (a long gap then a short one) or two turns overlapped."""
    ordered = arrived(hits)
    return ", ".join(f"{hit.path} +{gap:.3f}" for hit, gap in zip(ordered[1:], gaps(ordered), strict=True))


#: The workers of a `harvest crawl` the politeness tests run.
WORKERS = "16"


@dataclass
class Crawl:
    run: Run
    records: dict[str, dict[str, Any]]
    hits: list[Hit]  # the page requests the server saw, in order
    max_in_flight: int

    def starts(self) -> list[float]:
        return [h.at for h in self.hits]

    def gaps(self) -> list[float]:
        return gaps(self.hits)


def crawl(
    server: RouteServer, state: Path, *, delay: float, env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
) -> Crawl:
    """`harvest crawl` of the server's site with WORKERS workers, its log reset first: the run, its records
    by URL, the page requests (under /p/) the server saw."""
    server.reset_log()
    run = harvest(
        "crawl",
        server.base + "/",
        "--allow-network",
        f"{server.host}/32",
        "--state-dir",
        str(state),
        "--json",
        "--quiet",
        "--rate-limit-delay",
        str(delay),
        "--concurrency",
        WORKERS,
        *extra,
        env={**FAST_RETRIES, **(env or {})},
        timeout=180,
    )
    assert run.returncode in (0, 1), run.stderr
    result = run.json()
    records = {}
    for line in Path(result["processed_urls"]).read_text().splitlines():
        record = json.loads(line)
        records[record["url"]] = record
    hits = [h for h in server.hits if h.path.startswith("/p/")]
    return Crawl(run=run, records=records, hits=hits, max_in_flight=server.max_in_flight)
