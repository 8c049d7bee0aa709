"""Bounded inflation: never more than the limit plus one step, whatever the input."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest

from harvester.inflate import BoundedInflater, DecompressionError

DATA = os.urandom(50_000) + b"a" * 150_000


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def inflate(
    encoding: str, body: bytes, *, limit: int = 10**9, chunk: int | None = None
) -> tuple[bytes, BoundedInflater]:
    inflater = BoundedInflater(encoding, limit=limit, step=4096)
    out = []
    pieces = [body] if chunk is None else [body[i : i + chunk] for i in range(0, len(body), chunk)]
    for piece in pieces:
        out.extend(inflater.feed(piece))
    out.extend(inflater.finish())
    return b"".join(out), inflater


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(DATA)),
        ("x-gzip", gzip.compress(DATA)),
        ("deflate", zlib.compress(DATA)),  # RFC 9110's deflate: zlib-wrapped
        ("deflate", raw_deflate(DATA)),  # what some servers send under that name
        ("gzip", gzip.compress(DATA[:100_000]) + gzip.compress(DATA[100_000:])),  # two members
    ],
)
@pytest.mark.parametrize("chunk", [None, 1, 1000])
def test_every_wrapping_inflates_whatever_the_chunks(encoding, body, chunk):
    out, inflater = inflate(encoding, body, chunk=chunk)
    assert out == DATA and inflater.complete and not inflater.limit_reached


def test_the_limit_is_exact():
    body = gzip.compress(b"x" * 1000)
    assert inflate("gzip", body, limit=1000)[1].limit_reached is False
    out, inflater = inflate("gzip", body, limit=999)
    assert len(out) == 999 and inflater.limit_reached


def test_a_bomb_stops_at_the_limit_in_bounded_steps():
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    inflater = BoundedInflater("gzip", limit=1024 * 1024, step=64 * 1024)
    sizes = [len(piece) for piece in inflater.feed(bomb)]
    assert sum(sizes) == 1024 * 1024 and max(sizes) <= 64 * 1024 and inflater.limit_reached


def test_a_cut_stream_is_not_complete():
    out, inflater = inflate("gzip", gzip.compress(DATA)[:-20])
    assert DATA.startswith(out) and not inflater.complete


@pytest.mark.parametrize("body", [b"\x1f\x8bnot really gzip at all", b"x"])
def test_corrupt_input_is_an_error_with_a_reason(body):
    with pytest.raises(DecompressionError, match="corrupt compressed data"):
        inflate("gzip" if body[:1] == b"\x1f" else "deflate", body)
