"""Fixtures for the re-crawl tests: live sites on 127.0.0.1 that change between crawls and log every request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from harvester.demo.live import LiveSite
from tests.aws.conftest import _stacks, aws_credentials, deployed_stack, stack_parameters  # noqa: F401 - fixtures


@pytest.fixture
def live_site() -> Iterator[Callable[..., LiveSite]]:
    """``live_site(pages=40, sitemaps=2, ...)``: a started LiveSite, stopped after the test."""
    with ExitStack() as stack:

        def make(**options: object) -> LiveSite:
            return stack.enter_context(LiveSite(**options).serving())  # type: ignore[arg-type]

        yield make
