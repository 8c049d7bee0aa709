"""Servers for the corpus sites: one on 127.0.0.1, one on 127.0.0.2 (a different address that the SSRF
guard must keep out unless it is allowed), started once per test module, since each module serves one
site and runs the real command over it a few times."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.corpus.server import RouteServer, serving


@pytest.fixture(scope="module")
def server() -> Iterator[RouteServer]:
    """The site under test, on 127.0.0.1; ``server.base`` is its ``http://127.0.0.1:port``."""
    with serving("127.0.0.1") as running:
        yield running


@pytest.fixture(scope="module")
def second_server() -> Iterator[RouteServer]:
    """Another server, on 127.0.0.2: a target that must never be reached, or a second site."""
    with serving("127.0.0.2") as running:
        yield running
