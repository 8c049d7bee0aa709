"""Bounded decompression shared by fetching (Content-Encoding) and sitemap reading (gzipped bodies).

httpx's automatic decoding inflates a whole network read in one call, so a 1 MiB gzip bomb becomes one
64 MiB chunk before anyone can count it. Everything that inflates in Harvester goes through
:class:`BoundedInflater`, which never produces more than ``step`` bytes per call and stops for good once
``limit`` bytes have come out.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_STEP = 64 * 1024

# zlib wbits: 16 + MAX_WBITS reads a gzip wrapper, 32 + MAX_WBITS detects gzip or zlib, -MAX_WBITS raw deflate.
# "deflate" is decided on the first two bytes: RFC 9110 means zlib-wrapped, but servers (old IIS among them)
# send raw deflate under that name, and browsers accept both.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": None}
_RAW_DEFLATE = -zlib.MAX_WBITS


class DecompressionError(ValueError):
    """The compressed stream is corrupt; the message says where it broke."""


class BoundedInflater:
    """Inflates a gzip or deflate stream in steps of at most ``step`` bytes, up to ``limit`` bytes in all.

    ``limit_reached`` tells the caller that the output was cut: the rest of the input must not be read.
    Concatenated gzip members (allowed by RFC 1952 and produced by ``cat a.gz b.gz``) are followed.
    """

    def __init__(self, encoding: str = "gzip", *, limit: int, step: int = DEFAULT_STEP) -> None:
        if encoding not in _WBITS:
            raise ValueError(f"unsupported compression {encoding!r}")
        self._wbits = _WBITS[encoding]
        self._head = b""  # the first bytes of a "deflate" stream, until its wrapper is known
        self._inflater = zlib.decompressobj(self._wbits) if self._wbits is not None else None
        self._limit = limit
        self._step = step
        self.produced = 0
        self.limit_reached = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Yields the inflated bytes of ``data``; stops (setting ``limit_reached``) at the limit."""
        if self._inflater is None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = self._head, b""
            self._wbits = 32 + zlib.MAX_WBITS if _is_zlib_or_gzip(data) else _RAW_DEFLATE
            self._inflater = zlib.decompressobj(self._wbits)
        while data and not self.limit_reached:
            room = self._limit - self.produced
            try:
                # At the limit, ask for one byte: getting one proves the document is too big, while a
                # document of exactly ``limit`` bytes still reads its gzip trailer without being flagged.
                out = self._inflater.decompress(data, min(self._step, room) if room > 0 else 1)
            except zlib.error as exc:
                raise DecompressionError(f"corrupt compressed data after {self.produced} bytes: {exc}") from exc
            if out and room <= 0:
                self.limit_reached = True
                return
            if out:
                self.produced += len(out)
                yield out
            if self._inflater.eof:
                data = self._inflater.unused_data
                if not data.strip(b"\x00"):
                    return
                self._inflater = zlib.decompressobj(self._wbits)  # the next gzip member
            else:
                data = self._inflater.unconsumed_tail

    def finish(self) -> Iterator[bytes]:
        """Flushes what zlib still holds; an unfinished stream is left as is (the caller decides)."""
        if self._inflater is None:
            if self._head:  # a one-byte "deflate" body: not a stream at all
                raise DecompressionError("corrupt compressed data: the stream ends after one byte")
            return
        if self.limit_reached:
            return
        room = self._limit - self.produced
        out = self._inflater.flush()
        if len(out) > room:
            out, self.limit_reached = out[:room], True
        if out:
            self.produced += len(out)
            yield out

    @property
    def complete(self) -> bool:
        """Whether the compressed stream ended properly (a cut download leaves this False)."""
        return self._inflater is not None and self._inflater.eof


def _is_zlib_or_gzip(prefix: bytes) -> bool:
    if is_gzip(prefix):
        return True
    cmf, flg = prefix[0], prefix[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0


def is_gzip(prefix: bytes) -> bool:
    return prefix[:2] == GZIP_MAGIC


def inflated(data: bytes, *, limit: int) -> bytes | None:
    """``data`` as a sitemap reader reads it: inflated if gzipped, as it is if not; None when it is larger
    than ``limit`` bytes that way, or its gzip stream is broken or cut short."""
    if not is_gzip(data[:2]):
        return data if len(data) <= limit else None
    inflater = BoundedInflater(limit=limit)
    try:
        out = b"".join([*inflater.feed(data), *inflater.finish()])
    except DecompressionError:
        return None
    return out if inflater.complete and not inflater.limit_reached else None
