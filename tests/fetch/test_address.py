"""The address policy on its own: deny list, embedded IPv4, allow list, and the policy's configuration."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvester.fetch import DENIED_NETWORKS, AddressPolicy, FetchPolicy, embedded_ipv4, parse_networks
from harvester.fetch.address import parse_address

DENY = AddressPolicy()

DENIED = [
    "0.0.0.0",
    "10.1.2.3",
    "100.64.0.1",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.169.254",
    "172.16.0.1",
    "172.31.255.255",
    "192.0.0.170",
    "192.0.2.1",
    "192.168.1.1",
    "198.18.0.1",
    "198.19.255.255",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.251",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "::127.0.0.1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:8.8.8.8",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::1",
    "100::1",
    "2001::1",
    "2001:db8::1",
    "2002:7f00:1::1",
    "2002:0808:0808::1",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "fe80::1%eth0",
    "ff02::1",
]

PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "172.32.0.1", "2606:4700::1111", "2a00::1"]


@pytest.mark.parametrize("text", DENIED)
def test_denied(text: str) -> None:
    assert DENY.refusal(parse_address(text)) is not None


@pytest.mark.parametrize("text", PUBLIC)
def test_public_permitted(text: str) -> None:
    assert DENY.refusal(parse_address(text)) is None


def test_every_listed_network_is_in_the_requirements() -> None:
    # The list in shared/reference/fetching-and-safety.md, verbatim.
    required = [
        "0/8",
        "10/8",
        "100.64/10",
        "127/8",
        "169.254/16",
        "172.16/12",
        "192.0.0/24",
        "192.0.2/24",
        "192.168/16",
        "198.18/15",
        "198.51.100/24",
        "203.0.113/24",
        "224/4",
        "240/4",
    ]
    expanded = set()
    for item in required:
        prefix, length = item.split("/")
        octets = prefix.split(".") + ["0"] * (4 - len(prefix.split(".")))
        expanded.add(ipaddress.ip_network(f"{'.'.join(octets)}/{length}"))
    expanded |= {
        ipaddress.ip_network(n)
        for n in [
            "::/96",
            "::1/128",
            "::ffff:0:0/96",
            "64:ff9b::/96",
            "64:ff9b:1::/48",
            "100::/64",
            "2001::/32",
            "2001:db8::/32",
            "2002::/16",
            "fc00::/7",
            "fe80::/10",
            "ff00::/8",
        ]
    }
    assert {net for net, _ in DENIED_NETWORKS} == expanded


@pytest.mark.parametrize(
    ("text", "inner"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1"),  # IPv4-mapped
        ("::169.254.169.254", "169.254.169.254"),  # IPv4-compatible
        ("2002:a9fe:a9fe::", "169.254.169.254"),  # 6to4
        ("64:ff9b::10.0.0.1", "10.0.0.1"),  # NAT64
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"),  # Teredo (RFC 4380 example)
        ("2606:4700::1111", None),
        ("127.0.0.1", None),
    ],
)
def test_embedded_ipv4(text: str, inner: str | None) -> None:
    found = embedded_ipv4(parse_address(text))
    assert (str(found) if found else None) == inner


def test_reason_names_the_address_and_what_it_embeds() -> None:
    reason = DENY.refusal(parse_address("::ffff:169.254.169.254"))
    assert reason is not None
    assert "::ffff:169.254.169.254" in reason
    assert "169.254.0.0/16" in reason
    assert "metadata" in reason


def test_is_global_is_not_what_decides() -> None:
    # Python 3.11 calls some of these global; the explicit list refuses them all.
    for text in ("::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "2001:db8::1"):
        assert DENY.refusal(parse_address(text)) is not None


def test_allow_list_punches_through_exactly() -> None:
    policy = AddressPolicy(parse_networks(["127.0.0.1/32", "10.0.0.0/8"]))
    assert policy.permits(parse_address("127.0.0.1"))
    assert policy.permits(parse_address("10.200.0.1"))
    assert not policy.permits(parse_address("127.0.0.2"))
    assert not policy.permits(parse_address("169.254.169.254"))
    # An IPv6 form of an allowed IPv4 address is a different address: it needs its own entry.
    assert not policy.permits(parse_address("::ffff:127.0.0.1"))
    assert AddressPolicy(parse_networks(["::ffff:127.0.0.0/104"])).permits(parse_address("::ffff:127.0.0.1"))


def _ipv4_in(network: str) -> st.SearchStrategy[ipaddress.IPv4Address]:
    net = ipaddress.IPv4Network(network)
    return st.integers(int(net.network_address), int(net.broadcast_address)).map(ipaddress.IPv4Address)


DENIED_V4 = st.one_of(*[_ipv4_in(str(n)) for n, _ in DENIED_NETWORKS if n.version == 4])
ANY_V4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)


@given(DENIED_V4)
def test_denied_ipv4_refused_in_every_ipv6_disguise(v4: ipaddress.IPv4Address) -> None:
    assert DENY.refusal(v4) is not None
    packed = int(v4)
    disguises = [
        ipaddress.IPv6Address(0xFFFF << 32 | packed),  # ::ffff:a.b.c.d
        ipaddress.IPv6Address(packed),  # ::a.b.c.d (IPv4-compatible)
        ipaddress.IPv6Address(0x2002 << 112 | packed << 80),  # 6to4
        ipaddress.IPv6Address(0x64FF9B << 96 | packed),  # NAT64
    ]
    for address in disguises:
        assert DENY.refusal(address) is not None, address


@given(ANY_V4)
def test_verdict_on_ipv4_matches_the_list(v4: ipaddress.IPv4Address) -> None:
    listed = any(v4 in net for net, _ in DENIED_NETWORKS if net.version == 4)
    assert (DENY.refusal(v4) is not None) == listed


def test_parse_networks() -> None:
    nets = parse_networks(["127.0.0.1/32, 10.0.0.0/8", "::1 fd00::/8", "192.168.1.1"])
    assert [str(n) for n in nets] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128", "fd00::/8", "192.168.1.1/32"]


@pytest.mark.parametrize("bad", ["10.0.0.5/8", "300.0.0.0/8", "localhost", "10.0.0.0/33"])
def test_parse_networks_names_the_bad_one(bad: str) -> None:
    with pytest.raises(ValueError, match=f"invalid network '{bad}'"):
        parse_networks(["127.0.0.1/32", bad])


def test_policy_from_env() -> None:
    policy = FetchPolicy.from_env(
        {"HARVEST_ALLOW_NETWORKS": "127.0.0.1/32, 10.0.0.0/8", "HARVEST_USER_AGENT": "Bot/1 (+x)"}, retries=5
    )
    assert [str(n) for n in policy.allow_networks] == ["127.0.0.1/32", "10.0.0.0/8"]
    assert policy.user_agent == "Bot/1 (+x)"
    assert policy.retries == 5
    default = FetchPolicy.from_env({})
    assert default.allow_networks == ()
    assert default.user_agent.startswith("Harvester/")
    assert "https://github.com/harvester-crawler/harvester" in default.user_agent
    with pytest.raises(ValueError, match="HARVEST_ALLOW_NETWORKS: invalid network 'nope'"):
        FetchPolicy.from_env({"HARVEST_ALLOW_NETWORKS": "nope"})


def test_policy_accepts_strings_and_validates() -> None:
    assert FetchPolicy(allow_networks=["127.0.0.1/32"]).allow_networks == parse_networks(["127.0.0.1"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries"):
        FetchPolicy(retries=-1)
    with pytest.raises(ValueError, match="read_timeout"):
        FetchPolicy(read_timeout=0)
