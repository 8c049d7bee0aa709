"""Fixtures shared by the whole suite: generated sites served over real HTTP on 127.0.0.1, and the CLI."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from harvester.demo import BuiltSite, SiteSpec, build_site, serve


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests decide their own allow list and settings; nothing leaks in from the developer's shell."""
    for name in list(os.environ):
        if name.startswith("HARVEST_"):
            monkeypatch.delenv(name)


@pytest.fixture
def site_factory(tmp_path: Path) -> Iterator[Callable[..., BuiltSite]]:
    """Builds a demo-style site (robots.txt, index, urlsets, one gzipped) and serves it on 127.0.0.1."""
    with ExitStack() as stack:
        counter = 0

        def make(**spec: object) -> BuiltSite:
            nonlocal counter
            counter += 1
            root = tmp_path / f"site-{counter}"
            root.mkdir()
            base = stack.enter_context(serve(root))
            return build_site(root, base, SiteSpec(**spec))  # type: ignore[arg-type]

        yield make


@pytest.fixture
def served_dir(tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """Serves a hand-written directory on 127.0.0.1 and returns its base URL."""
    with ExitStack() as stack:

        def make(root: Path) -> str:
            return stack.enter_context(serve(root))

        yield make
