"""robots.txt by RFC 9309, parsed by protego, fetched once per origin and cached.

protego is used rather than ``urllib.robotparser``, which on Python 3.11 has no longest match, no wildcards
and no Allow-wins-a-tie rule. What the RFC leaves to the crawler is decided here: how long an answer is
kept (24 h at most), what an unreachable robots.txt means (nothing may be fetched for now, asked again
after a few minutes) and what a missing one means (everything may be fetched).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
from msgspec import Struct
from protego import Protego

from harvester.fetch.client import Fetcher
from harvester.fetch.errors import FetchError
from harvester.limits import ROBOTS_MAX_BYTES
from harvester.urls import origin_of

#: RFC 9309 2.4: a cached robots.txt should not be used for more than 24 hours.
ROBOTS_TTL = 24 * 3600.0
#: How soon an unreachable robots.txt (5xx, 429, network error) is asked for again.
ROBOTS_ERROR_TTL = 300.0
#: Characters left as they are when percent-encoding a path for matching ("%" keeps existing escapes).
_PATH_SAFE = "/%:@!$&'()*+,;=~"


def availability(status: int) -> Literal["rules", "unavailable", "unreachable"]:
    """What robots.txt's final HTTP status says (RFC 9309 2.3.1): its rules are in the body (2xx); it is
    unavailable, so nothing is restricted (4xx but 429, an unfollowed 3xx); or it is unreachable for now
    (429, 5xx)."""
    if 200 <= status <= 299:
        return "rules"
    if status == 429 or 500 <= status <= 599:
        return "unreachable"
    return "unavailable"


class RobotsEntry(Struct, frozen=True):
    """What one origin's robots.txt says, and until when that answer is good.

    ``rules`` is None when there is nothing to match (a missing robots.txt, or an unreachable one); then
    ``disallow_all`` decides. ``status`` is the HTTP status, or the error, that produced the entry.
    """

    rules: Protego | None
    disallow_all: bool
    expires: float
    status: str

    def allows(self, url: str, user_agent: str) -> bool:
        if self.disallow_all:
            return False
        return self.rules is None or self.rules.can_fetch(matching_form(url), user_agent)


class RobotsRules:
    """Per-origin robots.txt answers for one product token, shared by all fetches of a worker.

    Concurrent questions about one origin wait for a single fetch of its robots.txt.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        user_agent_token: str = "Harvester",
        *,
        ttl: float = ROBOTS_TTL,
        error_ttl: float = ROBOTS_ERROR_TTL,
        max_origins: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetcher = fetcher
        self.user_agent_token = user_agent_token
        self._ttl = min(ttl, ROBOTS_TTL)
        self._error_ttl = error_ttl
        self._max_origins = max_origins
        self._clock = clock
        self._cache: OrderedDict[str, RobotsEntry] = OrderedDict()
        self._locks: dict[str, anyio.Lock] = {}
        #: Wrapped around each fetch of a robots.txt (given its URL): the caller's turn at the host's gate,
        #: since reading robots.txt is a request to the host like any other.
        self.turn: Callable[[str], AbstractAsyncContextManager[object]] | None = None

    def rebound(self, fetcher: Fetcher) -> RobotsRules:
        """The same answers for a new fetcher (a new event loop): a Lambda container runs each invocation
        on a loop of its own, and robots.txt is not asked again for each of them while its copy is fresh."""
        rules = RobotsRules(fetcher, self.user_agent_token, error_ttl=self._error_ttl, clock=self._clock)
        rules._ttl, rules._max_origins, rules._cache = self._ttl, self._max_origins, self._cache
        rules.turn = self.turn
        return rules

    async def allowed(self, url: str) -> bool:
        """Whether ``url`` may be fetched. ``/robots.txt`` itself always may."""
        if (urlsplit(url).path or "/") == "/robots.txt":
            return True
        entry = await self.entry(url)
        return entry.allows(url, self.user_agent_token)

    async def crawl_delay(self, url: str) -> float | None:
        """The Crawl-delay, in seconds, the origin of ``url`` asks of this product token, if any."""
        entry = await self.entry(url)
        if entry.rules is None:
            return None
        return entry.rules.crawl_delay(self.user_agent_token)

    async def sitemaps(self, url: str) -> tuple[str, ...]:
        """The ``Sitemap:`` lines of the robots.txt of the origin of ``url`` (read from the same cache)."""
        entry = await self.entry(url)
        return tuple(entry.rules.sitemaps) if entry.rules is not None else ()

    async def entry(self, url: str) -> RobotsEntry:
        """The cached answer for the origin of ``url``; robots.txt is fetched if none or an old one."""
        origin = origin_of(url)
        entry = self._fresh(origin)
        if entry is not None:
            return entry
        lock = self._locks.setdefault(origin, anyio.Lock())
        async with lock:
            entry = self._fresh(origin)  # another task may have fetched it while we waited
            if entry is None:
                entry = await self._load(origin, self._cache.get(origin))
                self._store(origin, entry)
        return entry

    def knows(self, origin: str) -> bool:
        """Whether a fresh answer for ``origin`` is held (nothing would be fetched to answer for it)."""
        return self._fresh(origin) is not None

    def adopt(self, origin: str, body: bytes | None, *, status: int, age: float, cut: bool = False) -> bool:
        """Takes a reading of the origin's robots.txt made elsewhere ``age`` seconds ago (the job's discovery
        read it): ``body`` as received when it had rules (``availability``), None when it was unavailable (no
        restrictions). Kept for what is left of the TTL; a fresh answer held already is kept instead. Whether
        it was taken."""
        left = self._ttl - max(0.0, age)
        if left <= 0 or self._fresh(origin) is not None:
            return False
        expires = self._clock() + left
        if body is None:
            entry = RobotsEntry(None, False, expires, str(status))
        else:
            entry = self._parsed(body, cut=cut, status=str(status), expires=expires)
        self._store(origin, entry)
        return True

    def _fresh(self, origin: str) -> RobotsEntry | None:
        entry = self._cache.get(origin)
        if entry is None or entry.expires <= self._clock():
            return None
        self._cache.move_to_end(origin)
        return entry

    def _store(self, origin: str, entry: RobotsEntry) -> None:
        self._cache[origin] = entry
        self._cache.move_to_end(origin)
        while len(self._cache) > self._max_origins:
            evicted, _ = self._cache.popitem(last=False)
            lock = self._locks.get(evicted)
            if lock is not None and not lock.locked():
                del self._locks[evicted]

    async def _load(self, origin: str, previous: RobotsEntry | None) -> RobotsEntry:
        url = f"{origin}/robots.txt"
        async with self.turn(url) if self.turn is not None else nullcontext():
            return await self._read(url, previous)

    async def _read(self, url: str, previous: RobotsEntry | None) -> RobotsEntry:
        try:
            async with self._fetcher.open(url, max_bytes=ROBOTS_MAX_BYTES) as response:
                status = response.status_code
                if availability(status) == "rules":
                    body = await response.read()
                    return self._parsed(body, cut=response.truncated is not None, status=str(status))
        except FetchError as exc:
            if exc.retryable:
                return self._unreachable(previous, f"{type(exc).__name__}: {exc.reason}")
            # Refused outright (blocked address, too many redirects, bad encoding): RFC 9309 treats a
            # robots.txt that cannot be had for good as unavailable. The pages themselves meet the same
            # refusal when fetched, with the real reason.
            return RobotsEntry(None, False, self._clock() + self._ttl, f"{type(exc).__name__}: {exc.reason}")
        if availability(status) == "unreachable":
            return self._unreachable(previous, str(status))
        return RobotsEntry(None, False, self._clock() + self._ttl, str(status))  # (unavailable: no restrictions)

    def _parsed(self, body: bytes, *, cut: bool, status: str, expires: float | None = None) -> RobotsEntry:
        if cut:
            body = body[: body.rfind(b"\n") + 1]  # a rule cut in half must not be read as a shorter rule
        text = body.decode("utf-8", errors="replace").removeprefix("\ufeff")
        try:
            rules = Protego.parse(text)
        except Exception:  # protego is lenient; should it ever choke, the file is as good as unparseable
            rules = None
        return RobotsEntry(rules, False, self._clock() + self._ttl if expires is None else expires, status)

    def _unreachable(self, previous: RobotsEntry | None, status: str) -> RobotsEntry:
        """RFC 9309 2.3.1.4: assume complete disallow, unless an earlier good copy can stand in."""
        expires = self._clock() + self._error_ttl
        if previous is not None and previous.rules is not None:
            return RobotsEntry(previous.rules, False, expires, f"{status} (using the previous copy)")
        return RobotsEntry(None, True, expires, status)


def matching_form(url: str) -> str:
    """``url`` with its path and query percent-encoded as robots.txt rules are (UTF-8, escapes kept)."""
    parts = urlsplit(url)
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    query = quote(parts.query, safe=_PATH_SAFE + "?")
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))
