"""The body of a fetch, read with bounded memory and at most one Content-Encoding undone.

httpx's own decoding inflates a whole network read in one call (a 1 MiB gzip bomb becomes one 64 MiB
chunk), so raw bytes are read and inflated here through :class:`~harvester.inflate.BoundedInflater`, which
never holds more than the limit plus one step. A gzipped document *inside* the encoding (a ``.xml.gz``
sitemap) is handed over still compressed: that layer is the sitemap reader's business.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

import httpx
from msgspec import Struct

from harvester.fetch.errors import ConnectionFailed, DecodingError, FetchError, FetchTimeout
from harvester.inflate import BoundedInflater, DecompressionError
from harvester.words import size

#: Content-Encoding values undone here (what we advertise in Accept-Encoding).
DECODED_ENCODINGS = ("gzip", "x-gzip", "deflate")
ACCEPT_ENCODING = "gzip, deflate"


def compressed_limit(max_bytes: int) -> int:
    """How many encoded bytes may be read for ``max_bytes`` of output.

    Deflate never expands data by more than a fraction of a percent, so this only bites on streams built
    to produce nothing forever (say, endless empty gzip members), which the output limit alone would not stop.
    """
    return max_bytes + max_bytes // 64 + 64 * 1024


def describe_transport_error(exc: httpx.HTTPError) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RawSink(Protocol):
    """Anything the raw body's pieces can be written to (a file, or a spool that digests them too)."""

    def write(self, data: bytes, /) -> object: ...


class Exchange(Struct, frozen=True):
    """One request and the head of its response, as sent and received (a page's, or a redirect's on the way)."""

    url: str
    status: int
    reason: str
    http_version: str
    request_headers: list[tuple[str, str]]
    response_headers: list[tuple[str, str]]

    @classmethod
    def of(cls, response: httpx.Response) -> Exchange:
        return cls(
            url=str(response.url),
            status=response.status_code,
            reason=response.reason_phrase,
            http_version=response.http_version,
            request_headers=_raw(response.request.headers),
            response_headers=_raw(response.headers),
        )


def _raw(headers: httpx.Headers) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.raw]


class FetchResponse:
    """A response whose status and headers have arrived; the body is read with :meth:`iter_bytes`.

    ``redirects`` holds the URLs that redirected, in order (``requested_url`` first when there were any);
    ``url`` is where the response came from. ``truncated`` says why the body was cut (``None`` if it was
    not); ``complete`` is True only once the body was read to its end, uncut and unbroken.
    """

    def __init__(
        self,
        response: httpx.Response,
        *,
        requested_url: str,
        redirects: tuple[str, ...],
        hops: tuple[httpx.Response, ...] = (),
        max_bytes: int,
        deadline: float,
        attempts: int = 1,
    ) -> None:
        self._response = response
        self.requested_url = requested_url
        self.url = str(response.url)
        self.redirects = redirects
        self._hops = hops
        self.status_code = response.status_code
        self.headers = response.headers
        self.max_bytes = max_bytes
        self.attempts = attempts
        self.truncated: str | None = None
        self.complete = False
        self._deadline = deadline
        self._consumed = False
        #: Where the body's pieces also go as they arrive, before any Content-Encoding is undone (a WARC
        #: response record keeps the body as received): set before the body is read.
        self.raw_sink: RawSink | None = None
        media_type, _, params = (response.headers.get("content-type") or "").partition(";")
        self.content_type: str | None = media_type.strip().lower() or None
        self.charset: str | None = _charset(params)

    @property
    def exchange(self) -> Exchange:
        """This response's request and head, as sent and received."""
        return Exchange.of(self._response)

    @property
    def hops(self) -> list[Exchange]:
        """The redirects followed to get here, each as it went over the wire (without its body)."""
        return [Exchange.of(hop) for hop in self._hops]

    def __repr__(self) -> str:
        return f"<FetchResponse {self.status_code} {self.url}>"

    @property
    def content_encoding(self) -> str | None:
        """The one encoding :meth:`iter_bytes` undoes, or None for identity; DecodingError if unsupported."""
        codings = [
            c.strip().lower()
            for c in self.headers.get_list("content-encoding", split_commas=True)
            if c.strip() and c.strip().lower() != "identity"
        ]
        if not codings:
            return None
        if len(codings) == 1 and codings[0] in DECODED_ENCODINGS:
            return codings[0]
        raise DecodingError(
            self.url,
            f"unsupported Content-Encoding {', '.join(codings)!r} (only one of gzip, deflate is undone)",
        )

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """The decoded body, in pieces of at most 64 KiB, stopping at ``max_bytes`` (then ``truncated``).

        Raises FetchTimeout / ConnectionFailed when the body breaks off, DecodingError when it cannot be
        decoded; ``complete`` stays False in all those cases. The body can be read once.
        """
        if self._consumed:
            raise RuntimeError("the body of a FetchResponse can be read only once")
        self._consumed = True
        encoding = self.content_encoding
        if encoding is None:
            async for chunk in self._identity():
                yield chunk
        else:
            async for chunk in self._inflated(encoding):
                yield chunk

    async def read(self) -> bytes:
        """The whole decoded body (up to ``max_bytes``): for small documents such as robots.txt."""
        return b"".join([chunk async for chunk in self.iter_bytes()])

    async def aclose(self) -> None:
        await self._response.aclose()

    async def _identity(self) -> AsyncIterator[bytes]:
        produced = 0
        async for chunk in self._raw(limit=None):
            room = self.max_bytes - produced
            if len(chunk) > room:
                if room:
                    yield chunk[:room]
                self.truncated = f"larger than {size(self.max_bytes)}"
                return
            produced += len(chunk)
            yield chunk
        self.complete = True

    async def _inflated(self, encoding: str) -> AsyncIterator[bytes]:
        inflater = BoundedInflater(encoding, limit=self.max_bytes)
        received = False
        try:
            async for chunk in self._raw(limit=compressed_limit(self.max_bytes)):
                received = True
                for out in inflater.feed(chunk):
                    yield out
                if inflater.limit_reached:
                    self.truncated = f"larger than {size(self.max_bytes)}"
                    return
            if self.truncated is not None:  # the compressed stream itself hit its limit
                return
            for out in inflater.finish():
                yield out
        except DecompressionError as exc:
            raise DecodingError(self.url, f"{encoding} Content-Encoding: {exc}") from None
        if inflater.limit_reached:
            self.truncated = f"larger than {size(self.max_bytes)}"
            return
        # An empty body (204, 304, HEAD-like answers) carries no compressed stream at all.
        self.complete = inflater.complete or not received

    async def _raw(self, *, limit: int | None) -> AsyncIterator[bytes]:
        """Raw (encoded) body pieces, each read within what is left of the total time limit."""
        stream = self._response.aiter_raw()
        read = 0
        try:
            while True:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise FetchTimeout(self.url, "total time limit exceeded while reading the body")
                try:
                    async with asyncio.timeout(remaining):
                        chunk = await anext(stream)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise FetchTimeout(self.url, "total time limit exceeded while reading the body") from None
                except httpx.TimeoutException as exc:
                    raise FetchTimeout(self.url, f"reading the body: {describe_transport_error(exc)}") from None
                except httpx.TransportError as exc:
                    raise ConnectionFailed(self.url, f"body broken off: {describe_transport_error(exc)}") from None
                except httpx.HTTPError as exc:  # pragma: no cover - nothing else is raised while streaming
                    raise FetchError(self.url, describe_transport_error(exc)) from None
                if not chunk:
                    continue
                read += len(chunk)
                if limit is not None and read > limit:
                    self.truncated = f"compressed body larger than {size(limit)}"
                    return
                if self.raw_sink is not None:
                    self.raw_sink.write(chunk)
                yield chunk
        finally:
            await stream.aclose()


def _charset(params: str) -> str | None:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip("\"'").lower() or None
    return None
