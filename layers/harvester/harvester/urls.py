"""URL hygiene: which URLs a job accepts, how they are compared, and the include/exclude patterns.

Sitemaps are written by strangers, so every URL is checked here before it becomes a task: http(s) only,
at most 2,048 characters, in scope for the site, and allowed by the job's patterns. Each refusal has a
reason string, because a sitemap's dropped entries are counted per reason and shown to the user.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

from msgspec import Struct

from harvester.limits import URL_MAX_LENGTH

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Any character ``str.isspace`` calls whitespace (``\s`` of a str pattern is the same class), found in C.
_WHITESPACE = re.compile(r"\s")


class InvalidURL(ValueError):
    """A URL that Harvester will not fetch; the message names the URL and the reason."""


#: URL refusals (``refusal``, ``screen``) in words, for a person who gave the URL.
REFUSAL_WORDS = {
    "not_http": "not an http(s) URL: give it whole, with its scheme (https://example.com/)",
    "no_host": "no host name",
    "malformed": "not a well-formed URL",
    "too_long": f"longer than {URL_MAX_LENGTH} characters",
}


def require_http_url(url: str) -> str:
    """Validator for URLs a user gives (job requests, CLI): http(s), a host, not too long. The error says
    why in words (``REFUSAL_WORDS``), after the URL as given."""
    url = url.strip()
    reason = refusal(url)
    if reason is not None:
        raise InvalidURL(f"{url!r}: {REFUSAL_WORDS.get(reason, reason)}")
    return url


#: The URLs nearly every sitemap lists (lower-case http(s), a plain host name, no userinfo): one match tells
#: that they are acceptable and already in normal form; anything else takes the general path. Proved the
#: same as the general path by tests/engine/test_urls.py.
_PLAIN = re.compile(r"https?://((?:[a-z0-9-]+\.)*[a-z0-9-]*[a-z0-9])(?::([0-9]{1,5}))?(/[^\s?#]*(?:\?[^\s#]+)?)?")


def refusal(url: str) -> str | None:
    """Why ``url`` cannot be fetched, or None when it can. Cheap: runs on every sitemap entry."""
    if len(url) <= URL_MAX_LENGTH and (plain := _PLAIN.fullmatch(url)) and int(plain[2] or 0) <= 65535:
        return None
    return _refusal(url)


def screen(url: str) -> tuple[str, str] | str:
    """An acceptable URL's normal form and host, or the reason it is refused: what a sitemap entry needs,
    from one match for the URLs nearly every sitemap lists (the general path for the rest)."""
    plain = _plain_normal(url)
    if plain is not None:
        return url, plain[1]
    reason = _refusal(url)
    if reason is not None:
        return reason
    url = _normalize(url)
    if len(url) > URL_MAX_LENGTH:  # (a path-less URL gets its "/")
        return "too_long"
    return url, host_of(url)


def _plain_normal(url: str) -> re.Match[str] | None:
    """The match of a plain URL already in normal form (a path, no default or zero-padded port), or None."""
    if len(url) > URL_MAX_LENGTH or not (plain := _PLAIN.fullmatch(url)) or not plain[3]:
        return None
    port = plain[2]
    if port is None:
        return plain
    number = int(port)
    if port == str(number) and number <= 65535 and number != (443 if url.startswith("https") else 80):
        return plain
    return None


def _refusal(url: str) -> str | None:
    if len(url) > URL_MAX_LENGTH:
        return "too_long"
    scheme, _, rest = url.partition(":")
    if scheme.lower() not in _DEFAULT_PORTS or not rest.startswith("//"):
        return "not_http"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return "malformed"
    if not host:
        return "no_host"
    if _WHITESPACE.search(url):
        return "malformed"
    if ":" not in host and "" in host.removesuffix(".").split("."):
        return "malformed"  # an empty label (http://.example.org, a..b): no name a resolver would answer
    return None


def normalize(url: str) -> str:
    """The form URLs are compared and stored in: lower-case scheme and host, no default port, no fragment.

    Path and query are kept byte for byte: servers may treat case and parameter order as significant.
    """
    if _plain_normal(url) is not None:
        return url  # already normal: a path, no default port, no fragment, no empty query
    return _normalize(url)


def _normalize(url: str) -> str:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host
    if parts.port is not None and parts.port != _DEFAULT_PORTS.get(scheme):
        netloc = f"{host}:{parts.port}"
    if parts.username or parts.password:
        userinfo = parts.username or ""
        if parts.password:
            userinfo += f":{parts.password}"
        netloc = f"{userinfo}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def origin_of(url: str) -> str:
    """scheme://host[:port], the unit robots.txt applies to."""
    parts = urlsplit(normalize(url))
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def in_scope(url: str, site: str, scope: str) -> bool:
    """Scope of a page URL relative to the site: ``same-host``, ``same-domain`` (subdomains too) or ``any``.

    ``same-domain`` treats the site's host without a leading ``www.`` as the domain, so that
    ``www.example.com`` admits ``blog.example.com``; it needs no public-suffix list.
    """
    return host_in_scope(host_of(url), host_of(site), scope)


def host_in_scope(host: str, site_host: str, scope: str) -> bool:
    """:func:`in_scope` on host names already split off (the per-entry path splits each URL once)."""
    if scope == "any":
        return True
    if scope == "same-host":
        return host == site_host
    domain = site_host.removeprefix("www.")
    return host == domain or host.endswith("." + domain)


# Patterns: a glob on the whole URL (``*`` crosses ``/``), or a regular expression searched in the URL when
# written ``re:...``. Globs are what people type; regexes are there for the rest.


def validate_pattern(pattern: str) -> str:
    _compile(pattern)
    return pattern


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    if not pattern:
        raise ValueError("empty URL pattern")
    if pattern.startswith("re:"):
        try:
            return re.compile(pattern[3:])
        except re.error as exc:
            raise ValueError(f"URL pattern {pattern!r} is not a valid regular expression: {exc}") from None
    return re.compile(fnmatch.translate(pattern))


class UrlFilter(Struct, frozen=True):
    """Include/exclude patterns: a URL passes when it matches an include (or there are none) and no exclude."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(cls, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> UrlFilter:
        return cls(tuple(include), tuple(exclude))

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def refusal(self, url: str) -> str | None:
        if self.include and not any(_match(p, url) for p in self.include):
            return "not_included"
        if any(_match(p, url) for p in self.exclude):
            return "excluded"
        return None


def _match(pattern: str, url: str) -> bool:
    compiled = _compile(pattern)
    if pattern.startswith("re:"):
        return compiled.search(url) is not None
    return compiled.match(url) is not None
