"""Fixtures for the sitemap parser tests."""

from __future__ import annotations

import pytest

from harvester.sitemap import Entry, ParseReport, parse_bytes

from .helpers import feed_in_pieces


@pytest.fixture
def parse():
    """parse(url, data, **limits) for a whole document, checked against byte-at-a-time feeding."""

    def run(url: str, data: bytes, **limits: int) -> tuple[list[Entry], ParseReport]:
        entries, report = parse_bytes(url, data, **limits)
        if len(data) <= 20_000:
            assert feed_in_pieces(url, data, 1, **limits) == (entries, report)
        return entries, report

    return run
