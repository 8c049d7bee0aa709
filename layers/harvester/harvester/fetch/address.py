"""Which IP addresses Harvester may connect to: the deny list, the allow list and embedded IPv4.

Sitemaps and redirects are written by strangers and Harvester runs inside AWS, where the metadata endpoint
(169.254.169.254), the Lambda runtime API (loopback) and private subnets are reachable. So every address a
connection is about to be made to is checked here, by :class:`~harvester.fetch.backend.GuardedBackend`.

The deny list is explicit rather than ``ipaddress.is_global``, which is wrong for several IPv6 forms on
Python 3.11; and IPv4 addresses embedded in IPv6 ones (IPv4-mapped, IPv4-compatible, 6to4, NAT64, Teredo)
are decoded and checked too, so the reason names the IPv4 address the packet would really reach.
The only way through the deny list is an explicit allow list of networks (a local dev site, an intranet).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from msgspec import Struct

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), label) for cidr, label in pairs)


#: Networks never connected to unless allowed explicitly, with what they are (shown in refusals).
DENIED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = _nets(
    [
        ("0.0.0.0/8", "'this' network"),
        ("10.0.0.0/8", "private network"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local, cloud metadata"),
        ("172.16.0.0/12", "private network"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("192.168.0.0/16", "private network"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/96", "IPv4-compatible / unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/32", "Teredo"),
        ("2001:db8::/32", "documentation"),
        ("2002::/16", "6to4"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
    ]
)

_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (and would deliver to), if it is one of the known forms."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # (server, client): the client is where traffic ends up
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def parse_address(text: str) -> IPAddress:
    """An address as getaddrinfo reports it; an IPv6 zone (``fe80::1%eth0``) does not change the verdict."""
    return ipaddress.ip_address(text.partition("%")[0])


def show(address: IPAddress) -> str:
    """An address as people write it (Python 3.11 prints ``::ffff:127.0.0.1`` as ``::ffff:7f00:1``)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return f"::ffff:{address.ipv4_mapped}"
    return str(address)


def _denied_by(address: IPAddress) -> tuple[IPNetwork, str] | None:
    """The narrowest denied network holding ``address`` (``::1`` is loopback, not the ``::/96`` around it)."""
    found: tuple[IPNetwork, str] | None = None
    for network, label in DENIED_NETWORKS:
        held = address.version == network.version and address in network
        if held and (found is None or network.prefixlen > found[0].prefixlen):
            found = network, label
    return found


def denying_network(address: IPAddress) -> IPNetwork | None:
    """The denied network ``address`` is in: the one an allow list would name to reach it (None for an
    address denied only for the IPv4 address it embeds, or not denied at all)."""
    denied = _denied_by(address)
    return None if denied is None else denied[0]


class AddressPolicy(Struct, frozen=True):
    """The deny list with the caller's allow list punched through it."""

    allow_networks: tuple[IPNetwork, ...] = ()

    def refusal(self, address: IPAddress) -> str | None:
        """Why connecting to ``address`` is refused, or None when it is permitted.

        An address inside an allowed network is permitted as it is, whatever it embeds: allowing is an
        explicit decision by the operator about exactly these addresses.
        """
        if any(address.version == net.version and address in net for net in self.allow_networks):
            return None
        denied = _denied_by(address)
        if denied is not None:
            network, label = denied
            reason = f"{show(address)} is in {network} ({label})"
            inner = embedded_ipv4(address)
            if inner is not None:
                inner_denied = _denied_by(inner)
                reason += f" and embeds the IPv4 address {inner}"
                if inner_denied is not None:
                    reason += f" in {inner_denied[0]} ({inner_denied[1]})"
            return reason
        inner = embedded_ipv4(address)
        if inner is not None and (inner_denied := _denied_by(inner)) is not None:
            network, label = inner_denied
            return f"{show(address)} embeds the IPv4 address {inner}, which is in {network} ({label})"
        return None

    def permits(self, address: IPAddress) -> bool:
        return self.refusal(address) is None
