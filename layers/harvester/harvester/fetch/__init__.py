"""Fetching URLs written by strangers, safely: SSRF guard, bounded bodies, redirects, retries, robots.txt.

The rules come from "Fetching safely" (shared/reference/fetching-and-safety.md): the address actually
connected to is checked on every new connection, bodies are inflated in bounded steps, http(s) only, at
most five redirects, no proxy variables, and robots.txt read by RFC 9309.

Modules: ``address`` (deny/allow policy), ``backend`` (the guard and the aiohttp pool it guards, as an httpx transport),
``client`` (Fetcher), ``response`` (FetchResponse), ``robots`` (RobotsRules), ``policy``, ``errors``.
"""

from harvester.fetch.address import DENIED_NETWORKS, AddressPolicy, embedded_ipv4
from harvester.fetch.backend import GuardedBackend, GuardedTransport, Resolver, system_resolver
from harvester.fetch.client import Fetcher, check_url, parse_retry_after
from harvester.fetch.errors import (
    BlockedAddress,
    ConnectionFailed,
    DecodingError,
    FetchError,
    FetchTimeout,
    InvalidURL,
    TooManyRedirects,
    UnsupportedScheme,
)
from harvester.fetch.policy import (
    DEFAULT_USER_AGENT,
    FetchPolicy,
    conditional_headers,
    is_transient,
    parse_networks,
    policy_for,
)
from harvester.fetch.response import FetchResponse
from harvester.fetch.robots import RobotsEntry, RobotsRules

__all__ = [
    "DEFAULT_USER_AGENT",
    "DENIED_NETWORKS",
    "AddressPolicy",
    "BlockedAddress",
    "ConnectionFailed",
    "DecodingError",
    "FetchError",
    "FetchPolicy",
    "FetchResponse",
    "FetchTimeout",
    "Fetcher",
    "GuardedBackend",
    "GuardedTransport",
    "InvalidURL",
    "Resolver",
    "RobotsEntry",
    "RobotsRules",
    "TooManyRedirects",
    "UnsupportedScheme",
    "check_url",
    "conditional_headers",
    "embedded_ipv4",
    "is_transient",
    "parse_networks",
    "parse_retry_after",
    "policy_for",
    "system_resolver",
]
