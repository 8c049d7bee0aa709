"""The SSRF guard at connect time: an httpcore network backend that resolves, checks, then connects.

Checking a URL's host before handing it to httpx is not enough: a redirect goes somewhere else, and a name
can resolve to a public address for the check and to a private one a moment later (DNS rebinding). So the
check sits where the socket is opened. :class:`GuardedBackend` resolves the host itself, drops every
address the :class:`~harvester.fetch.address.AddressPolicy` refuses, and connects to exactly one of the
addresses it checked, by IP literal, so nothing resolves the name a second time. TLS still verifies the
original host name: httpcore passes ``server_hostname`` from the request's origin, not from the socket.

httpx does not let a caller choose the network backend, so :class:`GuardedTransport` is an
``httpx.AsyncHTTPTransport`` whose connection pool is rebuilt with the guarded backend. Every new
connection, on every redirect hop and every retry, goes through :meth:`GuardedBackend.connect_tcp`.
"""

from __future__ import annotations

import socket
import ssl
import typing
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
import httpcore
import httpx

from harvester.fetch.address import AddressPolicy, IPNetwork, parse_address
from harvester.fetch.errors import BlockedAddress
from harvester.fetch.policy import ENV_ALLOW_NETWORKS

#: ``(host, port) -> IP address strings``; swapped in tests to play DNS tricks without DNS.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """getaddrinfo as a socket would do it (in a thread); addresses in the order returned, once each."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in addresses:
            addresses.append(str(sockaddr[0]))
    return addresses


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the policy permits, and only to the very address it checked."""

    def __init__(
        self,
        allow_networks: Iterable[IPNetwork] = (),
        *,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.policy = AddressPolicy(tuple(allow_networks))
        self._resolve = resolver or system_resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        deadline = None if timeout is None else anyio.current_time() + timeout
        addresses = await self.permitted_addresses(host, port, timeout)
        last_error: Exception | None = None
        for address in addresses:
            remaining = None if deadline is None else deadline - anyio.current_time()
            if remaining is not None and remaining <= 0:
                raise httpcore.ConnectTimeout(f"connecting to {host} took longer than {timeout} s")
            try:
                return await self._inner.connect_tcp(
                    address,  # the checked IP literal: the inner backend cannot resolve anything else
                    port,
                    timeout=remaining,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                last_error = httpcore.ConnectError(f"cannot connect to {address} port {port}: {exc}")
        assert last_error is not None  # permitted_addresses never returns an empty list
        raise last_error

    async def permitted_addresses(self, host: str, port: int, timeout: float | None = None) -> list[str]:
        """The addresses of ``host`` that may be connected to, in resolver order; BlockedAddress if none."""
        host = host.strip("[]")
        try:
            parse_address(host)
        except ValueError:
            addresses = await self._resolve_name(host, port, timeout)
        else:
            addresses = [host]  # an IP literal in canonical form: nothing to resolve
        permitted: list[str] = []
        refusals: list[tuple[str, str]] = []
        for address in addresses:
            try:
                ip = parse_address(address)
            except ValueError:
                refusals.append((address, f"{address!r} is not an IP address"))
                continue
            reason = self.policy.refusal(ip)
            if reason is None:
                permitted.append(address)
            else:
                refusals.append((address, reason))
        if permitted:
            return permitted
        if not refusals:
            raise httpcore.ConnectError(f"{host} resolved to no address")
        via = "" if [a for a, _ in refusals] == [host] else f" (resolved from {host})"
        reasons = "; ".join(reason for _, reason in refusals)
        raise BlockedAddress(
            host,
            f"refused to connect to {', '.join(a for a, _ in refusals)}{via}: {reasons}. "
            f"Only an allowed network gets through (FetchPolicy.allow_networks, {ENV_ALLOW_NETWORKS})",
            address=refusals[0][0],
        )

    async def _resolve_name(self, host: str, port: int, timeout: float | None) -> list[str]:
        try:
            with anyio.fail_after(timeout):
                return list(await self._resolve(host, port))
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} took longer than {timeout} s") from None
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddress(f"unix:{path}", "unix sockets are never connected to")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` whose pool connects through a :class:`GuardedBackend`, and no proxy.

    httpx builds its pool without a ``network_backend`` argument; the pool is replaced right after
    construction by an identical one with the guard. The test suite fails if this ever stops taking effect.
    """

    def __init__(
        self,
        backend: GuardedBackend,
        *,
        limits: httpx.Limits,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        ssl_context = ssl_context or httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        if not isinstance(getattr(self, "_pool", None), httpcore.AsyncConnectionPool):  # pragma: no cover
            raise RuntimeError("httpx.AsyncHTTPTransport no longer keeps its pool in _pool: review the guard")
        self.backend = backend
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )

    @property
    def pool(self) -> httpcore.AsyncConnectionPool:
        return typing.cast(httpcore.AsyncConnectionPool, self._pool)
