"""The SSRF guard end to end, against real servers on loopback.

Every refusal here must happen before a connection is made: the servers count what they accept, and the
resolver is spied on so the tests also show what was looked up.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import pytest

from harvester.fetch import (
    BlockedAddress,
    ConnectionFailed,
    Fetcher,
    FetchPolicy,
    GuardedBackend,
    GuardedTransport,
    InvalidURL,
    parse_networks,
    system_resolver,
)
from harvester.fetch.backend import AddrInfo
from tests.fetch.fetch_helpers import Reply, TestServer, local_policy

pytestmark = pytest.mark.anyio


async def get(fetcher: Fetcher, url: str) -> tuple[int, bytes]:
    async with fetcher.open(url, max_bytes=1 << 20) as response:
        return response.status_code, await response.read()


class SpyResolver:
    """Records every name resolved; answers from a table, else from the system."""

    def __init__(self, table: dict[str, list[Sequence[str]]] | None = None) -> None:
        self.table = table or {}
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host in self.table:
            answers = self.table[host]
            return answers.pop(0) if len(answers) > 1 else answers[0]
        return await system_resolver(host, port)


class SpyBackend(GuardedBackend):
    """The real guard, recording every address a socket is opened for (and so dialled)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connected: list[str] = []

    def open_socket(self, addr_info: AddrInfo) -> socket.socket:
        sock = super().open_socket(addr_info)
        self.connected.append(str(addr_info[4][0]))
        return sock


async def test_allowed_network_gets_through(server: TestServer) -> None:
    server.reply("/", 200, b"hello")
    async with Fetcher(local_policy()) as fetcher:
        assert await get(fetcher, server.url("/")) == (200, b"hello")
    async with Fetcher(local_policy(allow_networks=parse_networks(["127.0.0.0/8"]))) as fetcher:
        assert await get(fetcher, server.url("/")) == (200, b"hello")


async def test_loopback_refused_by_default(server: TestServer) -> None:
    server.reply("/", 200, b"secret")
    async with Fetcher(FetchPolicy(retries=0)) as fetcher:
        with pytest.raises(BlockedAddress) as caught:
            await get(fetcher, server.url("/"))
    assert caught.value.address == "127.0.0.1"
    assert "127.0.0.1" in caught.value.reason
    assert "loopback" in caught.value.reason
    assert caught.value.url == server.url("/")
    assert not caught.value.retryable
    assert server.connections == 0
    assert caught.value.reason.endswith(
        "Only an allowed network gets through: --allow-network 127.0.0.0/8 (harvest),"
        ' HARVEST_ALLOW_NETWORKS=127.0.0.0/8 (AllowedNetworks on AWS), allow_networks=["127.0.0.0/8"] (Python)'
    )


async def test_the_ipv6_loopback_is_refused_as_loopback_naming_the_network_to_allow() -> None:
    async with Fetcher(local_policy(allow_networks=parse_networks(["127.0.0.0/8"]))) as fetcher:
        with pytest.raises(BlockedAddress) as caught:
            await get(fetcher, "http://[::1]:9/")
    assert "::1 is in ::1/128 (loopback)" in caught.value.reason and "::/96" not in caught.value.reason
    assert "--allow-network ::1/128 (harvest)" in caught.value.reason


async def test_redirect_to_another_loopback_address_refused_at_the_hop(server: TestServer, server2: TestServer) -> None:
    server.reply("/start", 302, Location=server2.url("/inside"))
    server2.reply("/inside", 200, b"should never be read")
    async with Fetcher(local_policy()) as fetcher:
        with pytest.raises(BlockedAddress) as caught:
            await get(fetcher, server.url("/start"))
    assert caught.value.address == "127.0.0.2"
    assert caught.value.url == server2.url("/inside")
    assert caught.value.redirects == (server.url("/start"),)
    assert server.hits("/start") == 1
    assert server2.connections == 0


async def test_redirect_to_metadata_endpoint_refused(server: TestServer) -> None:
    server.reply("/", 301, Location="http://169.254.169.254/latest/meta-data/")
    backend = SpyBackend(parse_networks(["127.0.0.1/32"]))
    async with Fetcher(local_policy(), network_backend=backend) as fetcher:
        with pytest.raises(BlockedAddress) as caught:
            await get(fetcher, server.url("/"))
    assert caught.value.address == "169.254.169.254"
    assert "metadata" in caught.value.reason
    assert backend.connected == ["127.0.0.1"]  # the first hop only


async def test_localhost_refused_unless_allowed(server: TestServer) -> None:
    server.reply("/", 200, b"dev site")
    async with Fetcher(FetchPolicy(retries=0)) as fetcher:
        with pytest.raises(BlockedAddress, match="resolved from localhost"):
            await get(fetcher, server.url("/", host="localhost"))
    assert server.connections == 0
    allow = parse_networks(["127.0.0.0/8", "::1/128"])
    async with Fetcher(local_policy(allow_networks=allow)) as fetcher:
        assert await get(fetcher, server.url("/", host="localhost")) == (200, b"dev site")


TRICKS = [
    "http://2130706433:{port}/",
    "http://0x7f.0.0.1:{port}/",
    "http://127.1:{port}/",
    "http://017700000001:{port}/",
    "http://169.254.43518:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://user@169.254.169.254:80@evil.com/",
    "http://user@127.0.0.1:{port}@evil.com/",
]


@pytest.mark.parametrize("template", TRICKS)
async def test_hostname_tricks_refused_before_any_connection(server: TestServer, template: str) -> None:
    server.reply("/", 200, b"secret")
    url = template.format(port=server.port)
    resolver = SpyResolver()
    backend = SpyBackend(resolver=resolver)
    async with Fetcher(FetchPolicy(retries=0), network_backend=backend) as fetcher:
        with pytest.raises((BlockedAddress, InvalidURL)) as caught:
            await get(fetcher, url)
    assert backend.connected == []
    assert server.connections == 0
    assert "evil.com" not in resolver.asked
    if isinstance(caught.value, BlockedAddress):
        assert caught.value.address in {"127.0.0.1", "169.254.169.254", "::ffff:127.0.0.1"}
    else:
        assert "ambiguous" in caught.value.reason


async def test_guard_is_the_backend_every_connection_uses(server: TestServer) -> None:
    """Fails if the client ever stops going through the guarded pool (the guard would be silently bypassed)."""
    server.reply("/", 200, b"ok")
    backend = SpyBackend(parse_networks(["127.0.0.1/32"]))
    async with Fetcher(local_policy(), network_backend=backend) as fetcher:
        transport = fetcher._transport
        assert isinstance(transport, GuardedTransport)
        assert transport.backend is backend
        assert await get(fetcher, server.url("/")) == (200, b"ok")
        assert await get(fetcher, server.url("/")) == (200, b"ok")  # the kept-alive connection, not a new one
    assert backend.connected == ["127.0.0.1"]
    # And with nothing allowed, the same server is out of reach: a plain httpx client would get through.
    async with Fetcher(FetchPolicy(retries=0)) as fetcher:
        with pytest.raises(BlockedAddress):
            await get(fetcher, server.url("/"))


async def test_connects_to_exactly_the_checked_address(server: TestServer) -> None:
    """A name that resolves to a denied and a permitted address: only the permitted one is dialled,
    by IP literal, so nothing below resolves the name again (the DNS-rebinding window)."""
    server.reply("/", 200, b"ok")
    resolver = SpyResolver({"mixed.test": [["169.254.169.254", "127.0.0.1"]]})
    backend = SpyBackend(parse_networks(["127.0.0.1/32"]), resolver=resolver)
    async with Fetcher(local_policy(), network_backend=backend) as fetcher:
        assert await get(fetcher, f"http://mixed.test:{server.port}/") == (200, b"ok")
    assert backend.connected == ["127.0.0.1"]
    assert server.requests[0].headers["host"] == f"mixed.test:{server.port}"


async def test_dns_rebinding_checked_on_every_new_connection(server: TestServer) -> None:
    # The first answer is fine; the next one (the attacker's TTL-0 switch) points at the metadata endpoint.
    server.routes["/"] = lambda _seen: Reply(200, b"ok", {"Connection": "close"})
    resolver = SpyResolver({"rebind.test": [["127.0.0.1"], ["169.254.169.254"]]})
    backend = GuardedBackend(parse_networks(["127.0.0.1/32"]), resolver=resolver)
    async with Fetcher(local_policy(), network_backend=backend) as fetcher:
        url = f"http://rebind.test:{server.port}/"
        assert await get(fetcher, url) == (200, b"ok")
        with pytest.raises(BlockedAddress) as caught:
            await get(fetcher, url)
    assert caught.value.address == "169.254.169.254"
    assert server.connections == 1


async def test_proxy_environment_ignored(server: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server.reply("/", 200, b"direct")
    async with Fetcher(local_policy()) as fetcher:
        assert await get(fetcher, server.url("/")) == (200, b"direct")


async def test_unresolvable_name_is_a_retryable_connection_failure() -> None:
    async def fail(host: str, port: int) -> Sequence[str]:
        raise OSError(-2, "Name or service not known")

    backend = GuardedBackend(resolver=fail)
    async with Fetcher(FetchPolicy(retries=0), network_backend=backend) as fetcher:
        with pytest.raises(ConnectionFailed, match=r"cannot resolve nowhere\.test") as caught:
            await get(fetcher, "http://nowhere.test/")
    assert caught.value.retryable


# TLS: the socket goes to the checked IP, the certificate is still checked against the URL's host name.


def _certificates(tmp_path: object) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    crypto = pytest.importorskip("cryptography")
    del crypto
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Harvester test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harvester.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("harvester.test")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    import pathlib

    directory = pathlib.Path(str(tmp_path))
    (directory / "leaf.pem").write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(directory / "leaf.pem")
    client_context = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return server_context, client_context


async def test_tls_verifies_the_original_host_name(tmp_path: object) -> None:
    server_context, client_context = _certificates(tmp_path)
    tls = TestServer("127.0.0.1", ssl_context=server_context)
    try:
        tls.reply("/", 200, b"over tls")
        resolver = SpyResolver({"harvester.test": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
        backend = GuardedBackend(parse_networks(["127.0.0.1/32"]), resolver=resolver)
        async with Fetcher(local_policy(), network_backend=backend, ssl_context=client_context) as fetcher:
            assert await get(fetcher, f"https://harvester.test:{tls.port}/") == (200, b"over tls")
            # Same socket address, wrong name: the certificate does not match, so no response.
            for host in ("other.test", "127.0.0.1"):
                with pytest.raises(ConnectionFailed, match=r"(?i)certificate|hostname|match"):
                    await get(fetcher, f"https://{host}:{tls.port}/")
    finally:
        tls.close()


def test_the_socket_factory_refuses_a_denied_address_itself() -> None:
    """The last line: whatever address reaches the pool's socket factory is checked there again."""
    backend = GuardedBackend(parse_networks(["127.0.0.1/32"]))
    for address in ("169.254.169.254", "127.0.0.2", "::1"):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with pytest.raises(BlockedAddress) as caught:
            backend.open_socket((family, socket.SOCK_STREAM, 0, "", (address, 80)))
        assert caught.value.address == address
    backend.open_socket((socket.AF_INET, socket.SOCK_STREAM, 0, "", ("127.0.0.1", 80))).close()


def test_allow_networks_of_backend_are_the_policy() -> None:
    policy = local_policy()
    fetcher = Fetcher(policy)
    assert fetcher.backend.policy.allow_networks == (ipaddress.ip_network("127.0.0.1/32"),)
