"""Fixtures shared by the whole suite: generated sites served over real HTTP on 127.0.0.1, and the CLI."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from harvester.demo import BuiltSite, SiteSpec, build_site, serve
from tests.shared_loader import share_data_loader

share_data_loader()


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


#: The modules that run longest (seconds of a worker's time in `make test` on a 2-core machine, roughly):
#: `make test` hands whole modules to its workers in collection order, so these start first and the workers
#: end together.
LONGEST_MODULES = {
    "tests/engine/test_faults.py": 120,
    "tests/aws/test_end_to_end.py": 100,
    "tests/recrawl/test_local_recrawl.py": 90,
    "tests/aws/test_cost_bench.py": 65,
    "tests/cli/test_cli.py": 55,
    "tests/local/test_crawl.py": 55,
    "tests/aws/test_page_batches_faults.py": 45,
    "tests/politeness/test_local_politeness.py": 35,
    "tests/recrawl/test_aws_recrawl.py": 35,
    "tests/sitemap/test_sitemap_plain_blocks.py": 28,
    "tests/politeness/test_fairness.py": 27,
    "tests/cli/test_warc_export.py": 25,
    "tests/corpus/test_fetching.py": 23,
    "tests/aws/test_harness.py": 22,
    "tests/contract/test_state_store.py": 22,
    "tests/aws/test_page_pointers.py": 22,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def expected(item: pytest.Item) -> int:
        return LONGEST_MODULES.get(item.nodeid.split("::", 1)[0], 0)

    items.sort(key=expected, reverse=True)  # (stable: a module's tests keep their order)
