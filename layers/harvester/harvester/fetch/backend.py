"""The SSRF guard at connect time, and the connection pool it guards (aiohttp under httpx's API).

Checking a URL's host before handing it to the client is not enough: a redirect goes somewhere else, and a
name can resolve to a public address for the check and to a private one a moment later (DNS rebinding). So
the check sits where the socket is opened. :class:`GuardedBackend` resolves a name itself and hands the pool
only the addresses the :class:`~harvester.fetch.address.AddressPolicy` permits (no DNS cache: every new
connection resolves and is checked again), and it creates every socket, refusing any address it was not
allowed to dial, IP literals included. TLS still verifies the original host name.

The pool is aiohttp's, behind an ``httpx`` transport (:class:`GuardedTransport`): the fetcher keeps httpx's
typed requests, responses and errors, while each request costs less CPU than on httpcore's pool. Bodies
come raw (no automatic decompression): :mod:`harvester.fetch.response` inflates them within its limits.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import yarl

from harvester.fetch.address import AddressPolicy, IPNetwork, denying_network, parse_address
from harvester.fetch.errors import BlockedAddress
from harvester.fetch.policy import ENV_ALLOW_NETWORKS

if TYPE_CHECKING:
    import aiohttp

#: ``(host, port) -> IP address strings``; swapped in tests to play DNS tricks without DNS.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
#: What aiohttp hands a socket factory: ``(family, type, proto, canonname, sockaddr)``.
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]
#: A request's extension: a callable of no arguments, called as the request goes on the wire.
ON_SENT = "harvester.on_sent"


async def system_resolver(host: str, port: int) -> list[str]:
    """getaddrinfo as a socket would do it (in a thread); addresses in the order returned, once each."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in addresses:
            addresses.append(str(sockaddr[0]))
    return addresses


class GuardedBackend:
    """Connects only to addresses the policy permits, and only to the very address it checked."""

    def __init__(
        self,
        allow_networks: Iterable[IPNetwork] = (),
        *,
        resolver: Resolver | None = None,
    ) -> None:
        self.policy = AddressPolicy(tuple(allow_networks))
        self._resolve = resolver or system_resolver

    def open_socket(self, addr_info: AddrInfo) -> socket.socket:
        """The pool's socket factory: the last check, on the exact address about to be dialled.

        A name's addresses were filtered by :meth:`permitted_addresses` already; an IP literal reaches
        only this. BlockedAddress is not an OSError, so the pool does not take it for a failed attempt.
        """
        family, type_, proto, _name, sockaddr = addr_info
        address = str(sockaddr[0])
        reason = self.policy.refusal(parse_address(address))
        if reason is not None:
            raise _blocked(address, [(address, reason)])
        return socket.socket(family=family, type=type_, proto=proto)

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
            raise httpx.ConnectError(f"{host} resolved to no address")
        raise _blocked(host, refusals)

    async def _resolve_name(self, host: str, port: int, timeout: float | None) -> list[str]:
        try:
            with anyio.fail_after(timeout):
                return list(await self._resolve(host, port))
        except TimeoutError:
            raise httpx.ConnectTimeout(f"resolving {host} took longer than {timeout} s") from None
        except (OSError, UnicodeError) as exc:
            raise httpx.ConnectError(f"cannot resolve {host}: {exc}") from exc


def _blocked(host: str, refusals: list[tuple[str, str]]) -> BlockedAddress:
    via = "" if [a for a, _ in refusals] == [host] else f" (resolved from {host})"
    reasons = "; ".join(reason for _, reason in refusals)
    return BlockedAddress(
        host,
        f"refused to connect to {', '.join(a for a, _ in refusals)}{via}: {reasons}. "
        f"Only an allowed network gets through: {_how_to_allow(refusals)}",
        address=refusals[0][0],
    )


def _how_to_allow(refusals: list[tuple[str, str]]) -> str:
    """How each way in (the command, the environment, the Python API) allows the refused addresses'
    networks, named as each takes them; ``CIDR`` where no denied network holds them."""
    networks: list[str] = []
    for address, _ in refusals:
        with contextlib.suppress(ValueError):
            network = denying_network(parse_address(address))
            if network is not None and str(network) not in networks:
                networks.append(str(network))
    if not networks:
        return (
            f"--allow-network CIDR (harvest), {ENV_ALLOW_NETWORKS} (AllowedNetworks on AWS), "
            "allow_networks=[CIDR] (Python)"
        )
    flags = " ".join(f"--allow-network {n}" for n in networks)
    listed = ", ".join(f'"{n}"' for n in networks)
    return (
        f"{flags} (harvest), {ENV_ALLOW_NETWORKS}={','.join(networks)} (AllowedNetworks on AWS), "
        f"allow_networks=[{listed}] (Python)"
    )


@functools.cache
def _aiohttp() -> tuple[Any, Any]:
    """aiohttp, imported by the first transport made, and the request trace every pool shares: a command that
    only reads the state directory (``harvest report``, ``export``, ``jobs``) imports the engine, which imports
    this module, but never fetches, and aiohttp's import is a third of the engine's."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_headers_sent)
    trace.freeze()
    return aiohttp, trace


@functools.cache
def _resolver_class() -> type:
    """aiohttp's resolver hook, answering with the guard's permitted addresses only (a class made on first
    use: its base is aiohttp's)."""
    from aiohttp.abc import AbstractResolver, ResolveResult

    class GuardedResolver(AbstractResolver):
        def __init__(self, backend: GuardedBackend, timeout: float | None) -> None:
            self.backend = backend
            self.timeout = timeout

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            addresses = await self.backend.permitted_addresses(host, port, self.timeout)
            return [
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=port,
                    family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
                for address in addresses
            ]

        async def close(self) -> None:
            pass

    return GuardedResolver


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """The verifying TLS context every transport of the process shares: loading the CA bundle takes tens of
    milliseconds of CPU, and a Lambda invocation or a crawl makes a transport of its own."""
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over one aiohttp pool whose every connection goes through a :class:`GuardedBackend`,
    and never through a proxy. The pool is made on the first request, inside the event loop that uses it."""

    def __init__(
        self,
        backend: GuardedBackend,
        *,
        limits: httpx.Limits,
        connect_timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.backend = backend
        self.limits = limits
        self.connect_timeout = connect_timeout
        self.ssl_context = ssl_context or default_ssl_context()
        self._session: aiohttp.ClientSession | None = None
        _aiohttp()  # (here, as the fetcher is built: at a first request it would delay one whose turn was taken)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            aiohttp, trace = _aiohttp()
            connector = aiohttp.TCPConnector(
                limit=self.limits.max_connections or 0,
                keepalive_timeout=self.limits.keepalive_expiry,
                ssl=self.ssl_context,
                resolver=_resolver_class()(self.backend, self.connect_timeout),
                use_dns_cache=False,  # every new connection is resolved and checked again (DNS rebinding)
                happy_eyeballs_delay=None,  # one address at a time, in the guard's order
                socket_factory=self.backend.open_socket,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # proxy variables must not route fetches around the guard
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
                trace_configs=[trace],
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        aiohttp, _ = _aiohttp()
        timeout = request.extensions.get("timeout", {})
        url = yarl.URL(str(request.url), encoded=True)  # the URL exactly as httpx normalised it
        if _legacy_ipv4(request.url.host):
            # 2130706433, 0x7f.1, 127.1: aiohttp will not dial these, and the guard names what they stand for
            # (a refusal says 127.0.0.1, not "invalid"); one the policy allows is dialled by its canonical form.
            port = request.url.port or (443 if request.url.scheme == "https" else 80)
            addresses = await self.backend.permitted_addresses(request.url.host, port, timeout.get("connect"))
            url = url.with_host(addresses[0])
        with _httpx_errors():
            response = await self.session.request(
                request.method,
                url,
                # (raw: the names as written, User-Agent rather than user-agent; a few servers care)
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
                allow_redirects=False,
                trace_request_ctx=request.extensions.get(ON_SENT),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=_sum(timeout.get("pool"), timeout.get("connect")),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
            )
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_ResponseStream(response),
            request=request,
            extensions={
                "http_version": f"HTTP/{response.version.major}.{response.version.minor}".encode()
                if response.version
                else b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode(),
            },
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _headers_sent(_session: aiohttp.ClientSession, trace: Any, _params: Any) -> None:
    """aiohttp's signal that a request's head is about to be written, its connection made: the request's
    ``ON_SENT`` callable, if it has one, is called."""
    if trace.trace_request_ctx is not None:
        trace.trace_request_ctx()


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        # Back to the pool if the body was read to its end; otherwise the connection is closed.
        self._response.release()


def _legacy_ipv4(host: str) -> bool:
    """A host the C library reads as an IPv4 address though it is not one in dotted-quad form."""
    if not host[:1].isdigit() or ":" in host:
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        try:
            socket.inet_aton(host)
        except OSError:
            return False
        return True
    return False


def _sum(first: float | None, second: float | None) -> float | None:
    """Two timeouts one after the other (None: no limit)."""
    return None if first is None or second is None else first + second


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """aiohttp's errors as the httpx errors they are, so the fetcher reads one vocabulary."""
    aiohttp, _ = _aiohttp()
    try:
        yield
    except aiohttp.SocketTimeoutError as exc:
        raise httpx.ReadTimeout(str(exc) or "no data within the read timeout") from exc
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "no connection within the connect timeout") from exc
    except TimeoutError as exc:
        raise httpx.ReadTimeout(str(exc) or "timed out") from exc
    except aiohttp.NonHttpUrlClientError as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from exc
    except aiohttp.InvalidURL as exc:  # a URL aiohttp will not request (legacy IPv4 forms are resolved before)
        raise httpx.InvalidURL(f"{exc.url} {exc.description}" if exc.description else str(exc)) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(_connector_reason(exc)) from exc
    except aiohttp.ClientPayloadError as exc:
        raise httpx.RemoteProtocolError(str(exc)) from exc
    except aiohttp.ClientResponseError as exc:  # a response aiohttp could not parse
        raise httpx.RemoteProtocolError(exc.message or str(exc)) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
    except aiohttp.ClientError as exc:
        raise httpx.TransportError(str(exc) or type(exc).__name__) from exc


def _connector_reason(exc: aiohttp.ClientConnectorError) -> str:
    return f"cannot connect to {exc.host} port {exc.port}: {exc.os_error}"
