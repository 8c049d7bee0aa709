"""How a :class:`~harvester.fetch.client.Fetcher` behaves: identity, reach, time limits and retries.

One frozen value, so a worker's fetch behaviour is decided once (from the environment in AWS, from flags on
the CLI) and cannot drift between fetches.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import Struct
from msgspec.structs import force_setattr, replace

from harvester import __version__
from harvester.fetch.address import IPNetwork
from harvester.limits import MAX_REDIRECTS

DEFAULT_USER_AGENT = f"Harvester/{__version__} (+https://github.com/harvester-crawler/harvester)"

#: Environment variables read by :meth:`FetchPolicy.from_env` (also the AWS template parameters' targets).
ENV_ALLOW_NETWORKS = "HARVEST_ALLOW_NETWORKS"
ENV_USER_AGENT = "HARVEST_USER_AGENT"
#: Time limits (seconds) read from the environment: the Lambda functions' settings, and the CLI's.
ENV_TIMEOUTS = {
    "connect_timeout": "HARVEST_CONNECT_TIMEOUT",
    "read_timeout": "HARVEST_READ_TIMEOUT",
    "total_timeout": "HARVEST_TOTAL_TIMEOUT",
}

_SEPARATORS = re.compile(r"[\s,]+")


def is_transient(status_code: int) -> bool:
    """Whether trying again soon could change the answer: 408, 429 and every 5xx.

    Any other 4xx is final for the job (fetching-and-safety.md), 403 included; the crawl-state machine
    still gives a 403 Nutch's ``retry`` so that a later crawl asks again.
    """
    return status_code in (408, 429) or 500 <= status_code <= 599


def conditional_headers(etag: str | None, last_modified: str | None) -> dict[str, str]:
    """The headers of a conditional GET from the validators a stored copy came with (a 304 then costs no
    body); none without validators."""
    headers: dict[str, str] = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDRs (or bare addresses) to networks; each value may itself hold several, comma or space separated.

    Strict about host bits (``10.0.0.5/8`` is an error, not silently ``10.0.0.0/8``): this list opens
    holes in the SSRF guard, so a typo must stop the program rather than allow more than was meant.
    """
    networks: list[IPNetwork] = []
    for value in values:
        for item in _SEPARATORS.split(value.strip()):
            if not item:
                continue
            try:
                network = ipaddress.ip_network(item, strict=True)
            except ValueError as exc:
                raise ValueError(f"invalid network {item!r} in the allow list: {exc}") from None
            if network not in networks:
                networks.append(network)
    return tuple(networks)


class FetchPolicy(Struct, frozen=True):
    """Fetch settings. Timeouts are in seconds; ``retries`` are extra attempts after the first one.

    Retries cover 408, 429, 5xx, timeouts and connection errors, with exponential back-off and full jitter
    (``uniform(0, min(backoff_max, backoff_base * 2**attempt))``). A ``Retry-After`` up to ``backoff_max``
    is waited for exactly; a longer one is not waited for at all: the response is handed over as it is,
    and the crawl schedules the retry (a Lambda must not sleep for minutes).
    """

    user_agent: str = DEFAULT_USER_AGENT
    allow_networks: tuple[IPNetwork, ...] = ()
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    total_timeout: float = 120.0
    max_redirects: int = MAX_REDIRECTS
    retries: int = 2
    backoff_base: float = 0.5
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if not self.user_agent.strip():
            raise ValueError("the User-Agent must not be empty")
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("max_redirects", "retries"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)!r}")
        if self.backoff_base < 0 or self.backoff_max < 0:
            raise ValueError("back-off times must not be negative")
        # Accept any iterable of networks or strings, so callers can pass a list from argparse.
        nets = self.allow_networks
        if not isinstance(nets, tuple) or not all(
            isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network) for n in nets
        ):
            force_setattr(self, "allow_networks", _coerce_networks(nets))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> FetchPolicy:
        """The policy set by ``HARVEST_ALLOW_NETWORKS``, ``HARVEST_USER_AGENT`` and the time limits
        (``HARVEST_CONNECT_TIMEOUT``, ``HARVEST_READ_TIMEOUT``, ``HARVEST_TOTAL_TIMEOUT``), then ``overrides``."""
        values: dict[str, Any] = {}
        networks = environ.get(ENV_ALLOW_NETWORKS, "").strip()
        if networks:
            try:
                values["allow_networks"] = parse_networks([networks])
            except ValueError as exc:
                raise ValueError(f"{ENV_ALLOW_NETWORKS}: {exc}") from None
        user_agent = environ.get(ENV_USER_AGENT, "").strip()
        if user_agent:
            values["user_agent"] = user_agent
        for name, variable in ENV_TIMEOUTS.items():
            raw = environ.get(variable, "").strip()
            if raw:
                try:
                    values[name] = float(raw)
                except ValueError:
                    raise ValueError(f"{variable}={raw!r} is not a number of seconds") from None
        values.update(overrides)
        return cls(**values)


def policy_for(allow_networks: Iterable[str] = (), user_agent: str | None = None) -> FetchPolicy:
    """The environment's policy (``HARVEST_*``), plus the networks and the User-Agent a caller asks for:
    what `harvest` flags and the Python API's options mean."""
    policy = FetchPolicy.from_env()
    extra = parse_networks(allow_networks)
    return replace(policy, allow_networks=policy.allow_networks + extra, user_agent=user_agent or policy.user_agent)


def _coerce_networks(values: Iterable[IPNetwork | str]) -> tuple[IPNetwork, ...]:
    networks: list[IPNetwork] = []
    for value in values:
        if isinstance(value, str):
            networks.extend(parse_networks([value]))
        else:
            networks.append(value)
    return tuple(networks)
