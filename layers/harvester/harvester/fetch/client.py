"""Fetcher: one keep-alive HTTP client per worker that follows redirects and retries by Harvester's rules.

Redirects are followed here rather than by httpx so that every hop is checked the same way as the first
request (http/https only, a bounded count, the chain recorded for the crawl state), while the SSRF guard
itself sits below, in the network backend, where each new connection is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from types import TracebackType
from urllib.parse import urlsplit

import httpx

from harvester.fetch.backend import ON_SENT, GuardedBackend, GuardedTransport
from harvester.fetch.errors import (
    BlockedAddress,
    ConnectionFailed,
    FetchError,
    FetchTimeout,
    InvalidURL,
    TooManyRedirects,
    UnsupportedScheme,
)
from harvester.fetch.policy import FetchPolicy, is_transient
from harvester.fetch.response import ACCEPT_ENCODING, FetchResponse, describe_transport_error
from harvester.urls import origin_of, refusal

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: Headers that must not follow a redirect to another origin.
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
#: A redirect or retried response body up to this size is read off so its connection can be reused.
_DRAIN_MAX = 64 * 1024


class Fetcher:
    """One per worker: a pooled, guarded httpx client. Use as ``async with Fetcher(policy) as fetcher``."""

    def __init__(
        self,
        policy: FetchPolicy | None = None,
        *,
        max_connections: int = 100,
        network_backend: GuardedBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``network_backend`` replaces the default guard (same policy, say with another resolver);
        ``ssl_context`` the default certificate verification (certifi, hostname checked)."""
        self.policy = policy or FetchPolicy()
        self.backend = network_backend or GuardedBackend(self.policy.allow_networks)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._transport = GuardedTransport(
            self.backend, limits=limits, connect_timeout=self.policy.connect_timeout, ssl_context=ssl_context
        )
        # Requests go straight to the transport: httpx's client would add cookie handling (a crawler keeps
        # none), auth and redirect machinery (redirects are followed below), CPU spent on every page.
        self._headers = {
            "User-Agent": self.policy.user_agent,
            "Accept": "*/*",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        self._timeouts = {
            "connect": self.policy.connect_timeout,
            "read": self.policy.read_timeout,
            "write": self.policy.read_timeout,
            "pool": self.policy.connect_timeout,
        }
        self._random = random.Random()

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    def open(
        self,
        url: str,
        *,
        max_bytes: int,
        headers: Mapping[str, str] | None = None,
        retries: int | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> AbstractAsyncContextManager[FetchResponse]:
        """GET ``url``: redirects followed, retries done; the body is read from the yielded response.

        Raises a FetchError subclass when no response could be had. A 4xx/5xx is a response, not an error
        (after retries for 408, 429 and 5xx); so is a 3xx that is not followed (300, 304, 305, no Location).
        ``retries`` overrides the policy's for this fetch: a page is tried once per delivery (0), because
        its retries go through the queue, past the host's gate, on the URL's one retry budget.
        ``on_sent`` is called as each request (each try, each redirect hop) goes on the wire, its connection
        made: a host's pace is kept between requests as the host receives them, and a new connection (a TLS
        handshake) can take longer than a pace's step.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        if retries is not None and retries < 0:
            raise ValueError("retries must not be negative")
        retries = self.policy.retries if retries is None else retries
        return self._open(url, max_bytes, dict(headers or {}), retries, on_sent)

    @asynccontextmanager
    async def _open(
        self, url: str, max_bytes: int, headers: dict[str, str], retries: int, on_sent: Callable[[], None] | None
    ) -> AsyncIterator[FetchResponse]:
        check_url(url)
        extensions = {"timeout": self._timeouts, ON_SENT: on_sent}
        deadline = time.monotonic() + self.policy.total_timeout
        attempt = 0
        while True:
            try:
                response, hops = await self._follow(url, headers, deadline, extensions)
            except FetchError as exc:
                exc.attempts = attempt + 1
                if not exc.retryable or attempt >= retries:
                    raise
                if not await self._pause(self._backoff(attempt), deadline):
                    raise
                attempt += 1
                continue
            status = response.status_code
            if attempt < retries and is_transient(status):
                delay = self._retry_delay(response, attempt)
                if delay is not None and time.monotonic() + delay < deadline:
                    await _discard(response)
                    await asyncio.sleep(delay)
                    attempt += 1
                    continue
            break
        fetched = FetchResponse(
            response,
            requested_url=url,
            redirects=tuple(str(hop.url) for hop in hops),
            hops=hops,
            max_bytes=max_bytes,
            deadline=deadline,
            attempts=attempt + 1,
        )
        try:
            yield fetched
        finally:
            await response.aclose()

    async def _follow(
        self, url: str, headers: dict[str, str], deadline: float, extensions: dict[str, object]
    ) -> tuple[httpx.Response, tuple[httpx.Response, ...]]:
        """The final response, and the redirects on the way (their bodies discarded, their heads kept: an
        archive keeps each hop as an exchange of its own)."""
        redirects: list[str] = []
        hops: list[httpx.Response] = []
        current = url
        while True:
            response = await self._send(current, headers, deadline, tuple(redirects), extensions)
            location = (response.headers.get("location") or "").strip()
            if response.status_code not in REDIRECT_STATUSES or not location:
                return response, tuple(hops)
            redirects.append(current)
            hops.append(response)
            try:
                target = str(httpx.URL(current).join(location).copy_with(fragment=None))
            except (httpx.InvalidURL, ValueError) as exc:
                await response.aclose()
                raise InvalidURL(
                    current,
                    f"redirect to an invalid Location {location!r}: {exc}",
                    redirects=tuple(redirects),
                ) from None
            await _discard(response)
            check_url(target, tuple(redirects))
            if len(redirects) > self.policy.max_redirects:
                raise TooManyRedirects(
                    target, f"more than {self.policy.max_redirects} redirects", redirects=tuple(redirects)
                )
            if origin_of(target) != origin_of(current):
                headers = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
            current = target

    async def _send(
        self,
        url: str,
        headers: dict[str, str],
        deadline: float,
        redirects: tuple[str, ...],
        extensions: dict[str, object],
    ) -> httpx.Response:
        remaining = deadline - time.monotonic()
        total = f"total time limit of {self.policy.total_timeout} s exceeded"
        if remaining <= 0:
            raise FetchTimeout(url, total, redirects=redirects)
        try:
            # (Two spellings of one name, "Accept" and a caller's "accept", leave the caller's alone on the
            # wire: the pool merges headers by name; tests/fetch/test_client.py holds it to that.)
            request = httpx.Request("GET", url, headers={**self._headers, **headers}, extensions=extensions)
            async with asyncio.timeout(remaining):
                return await self._transport.handle_async_request(request)
        except TimeoutError:
            raise FetchTimeout(url, total, redirects=redirects) from None
        except BlockedAddress as exc:  # raised by the backend, which only knew the host
            raise BlockedAddress(url, exc.reason, address=exc.address, redirects=redirects) from None
        except httpx.TimeoutException as exc:
            raise FetchTimeout(url, self._timeout_reason(exc), redirects=redirects) from None
        except httpx.UnsupportedProtocol as exc:
            raise UnsupportedScheme(url, describe_transport_error(exc), redirects=redirects) from None
        except httpx.LocalProtocolError as exc:  # a request we could not send as asked (bad header value)
            raise FetchError(url, describe_transport_error(exc), redirects=redirects) from None
        except httpx.TransportError as exc:
            raise ConnectionFailed(url, describe_transport_error(exc), redirects=redirects) from None
        except httpx.InvalidURL as exc:
            raise InvalidURL(url, str(exc), redirects=redirects) from None

    def _timeout_reason(self, exc: httpx.TimeoutException) -> str:
        if isinstance(exc, httpx.ConnectTimeout):
            return f"connecting took longer than {self.policy.connect_timeout} s ({exc})"
        if isinstance(exc, httpx.ReadTimeout):
            return f"no response data for {self.policy.read_timeout} s"
        if isinstance(exc, httpx.WriteTimeout):
            return f"sending the request took longer than {self.policy.read_timeout} s"
        return f"no free connection within {self.policy.connect_timeout} s"

    def _backoff(self, attempt: int) -> float:
        """Exponential back-off with full jitter: spreads the retries of many workers hitting one host."""
        ceiling = min(self.policy.backoff_max, self.policy.backoff_base * 2**attempt)
        return self._random.uniform(0, ceiling)

    def _retry_delay(self, response: httpx.Response, attempt: int) -> float | None:
        """How long to wait before retrying ``response``; None when Retry-After asks for too long."""
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is None:
            return self._backoff(attempt)
        if retry_after > self.policy.backoff_max:
            return None
        return retry_after

    @staticmethod
    async def _pause(delay: float, deadline: float) -> bool:
        if time.monotonic() + delay >= deadline:
            return False
        await asyncio.sleep(delay)
        return True


def check_url(url: str, redirects: tuple[str, ...] = ()) -> None:
    """Refuses what must not be requested at all: other schemes, malformed URLs, ambiguous authorities."""
    scheme = url.partition(":")[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        shown = f"scheme {scheme!r}" if scheme else "a URL without a scheme"
        raise UnsupportedScheme(url, f"{shown} is not fetched: http and https only", redirects=redirects)
    reason = refusal(url)
    if reason is not None:
        text = {
            "too_long": "longer than 2048 characters",
            "not_http": "not an absolute http(s) URL",
            "no_host": "no host",
        }.get(reason, "malformed URL")
        raise InvalidURL(url, text, redirects=redirects)
    if urlsplit(url).netloc.count("@") > 1:
        # user@169.254.169.254:80@evil.com: parsers disagree on which part is the host; refuse to guess.
        raise InvalidURL(url, "ambiguous authority: more than one '@'", redirects=redirects)
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidURL(url, str(exc), redirects=redirects) from None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Retry-After as seconds from now (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


async def _discard(response: httpx.Response) -> None:
    """Closes a response we will not use, reading a small body off first so the connection is reused."""
    try:
        length = int(response.headers.get("content-length", ""))
    except ValueError:
        length = _DRAIN_MAX + 1
    if length <= _DRAIN_MAX and not response.is_stream_consumed:
        with contextlib.suppress(TimeoutError, httpx.HTTPError):
            async with asyncio.timeout(1.0):
                async for _ in response.aiter_raw():
                    pass
    await response.aclose()
