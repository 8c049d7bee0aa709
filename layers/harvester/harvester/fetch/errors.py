"""Why a fetch failed, in a form the crawl-state machine can act on.

Every failure carries the URL it happened at, a reason a person can read (it ends up in job reports), and
``retryable``: whether trying again later could succeed (timeouts, refused connections) or not (a denied
address, a redirect loop). The engine maps retryable failures to the ``retry`` fetch result and the others
to ``gone``.
"""

from __future__ import annotations


class FetchError(Exception):
    """A fetch that produced no usable response.

    ``url`` is the URL being fetched when it failed (a redirect hop, not necessarily the one asked for);
    ``redirects`` the URLs that redirected before it, in order.
    """

    retryable_by_default = False

    def __init__(
        self,
        url: str,
        reason: str,
        *,
        retryable: bool | None = None,
        redirects: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.retryable = self.retryable_by_default if retryable is None else retryable
        self.redirects = redirects
        #: Tries the fetcher made before giving up (each one request, plus the redirects it followed).
        self.attempts = 1

    def explain(self, requested: str) -> str:
        """The reason for a report about ``requested``: naming the redirect hop it failed at, if another."""
        if not self.redirects or self.url == requested:
            return self.reason
        return f"{self.reason} (at {self.url}, reached by redirect)"


class BlockedAddress(FetchError):
    """Refused by the address policy (the SSRF guard). ``address`` is the first refused IP, if any."""

    def __init__(
        self,
        url: str,
        reason: str,
        *,
        address: str | None = None,
        retryable: bool | None = None,
        redirects: tuple[str, ...] = (),
    ) -> None:
        super().__init__(url, reason, retryable=retryable, redirects=redirects)
        self.address = address


class TooManyRedirects(FetchError):
    """More redirects than the policy allows (a loop, or a chain too long to be honest)."""


class UnsupportedScheme(FetchError):
    """Only http and https are fetched, on the first request and on every redirect hop."""


class InvalidURL(FetchError):
    """A URL that cannot be fetched safely as written (malformed, ambiguous authority, too long)."""


class FetchTimeout(FetchError):
    """Connect, read or total time limit exceeded."""

    retryable_by_default = True


class ConnectionFailed(FetchError):
    """The connection could not be made or broke off (refused, reset, name not resolved, bad TLS)."""

    retryable_by_default = True


class DecodingError(FetchError):
    """The Content-Encoding could not be undone: an encoding we do not speak, or corrupt compressed data."""
