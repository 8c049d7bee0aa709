"""Fixtures for tests/fetch: the asyncio backend for anyio tests, and loopback servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fetch.fetch_helpers import TestServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[TestServer]:
    srv = TestServer("127.0.0.1")
    yield srv
    srv.close()


@pytest.fixture
def server2() -> Iterator[TestServer]:
    """A second server on 127.0.0.2 (Linux routes all of 127/8 to loopback)."""
    try:
        srv = TestServer("127.0.0.2")
    except OSError as exc:  # pragma: no cover - other platforms
        pytest.skip(f"cannot bind 127.0.0.2: {exc}")
    yield srv
    srv.close()
