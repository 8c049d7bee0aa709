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


#: The modules that run longest (seconds of a worker's time in `make test` on a 2-core machine, measured with
#: `--durations=0`: setup, call and teardown summed by module):
#: `make test` hands whole modules to its workers in collection order, so these start first and the workers
#: end together.
LONGEST_MODULES = {
    "tests/engine/test_faults.py": 116,
    "tests/recrawl/test_aws_sitemap_parts.py": 115,
    "tests/corpus/test_fetching.py": 110,
    "tests/recrawl/test_shared_urls.py": 99,
    "tests/recrawl/test_local_recrawl.py": 84,
    "tests/aws/test_end_to_end.py": 81,
    "tests/recrawl/test_sitemap_parts.py": 70,
    "tests/cli/test_cli.py": 67,
    "tests/local/test_crawl.py": 64,
    "tests/cli/test_schedule.py": 62,
    "tests/aws/test_page_batches_faults.py": 61,
    "tests/aws/test_job_end_steps.py": 59,
    "tests/aws/test_sitemap_steps.py": 54,
    "tests/aws/test_cost_bench.py": 43,
    "tests/pipeline/test_robots_copy.py": 37,
    "tests/recrawl/test_aws_recrawl.py": 34,
    "tests/aws/test_page_pointers.py": 23,
    "tests/aws/test_job_end.py": 23,
    "tests/sitemap/test_sitemap_plain_blocks.py": 22,
    "tests/aws/test_scheduler.py": 21,
    "tests/cli/test_warc_export.py": 21,
    "tests/api/test_tree.py": 21,
    "tests/cli/test_jobs.py": 21,
    "tests/cli/test_output_fields.py": 18,
    "tests/aws/test_crawl_collection.py": 18,
    "tests/recrawl/test_records_pass_steps.py": 18,
    "tests/contract/test_state_store.py": 17,
    "tests/aws/test_listing_lanes.py": 16,
    "tests/aws/test_warc_output.py": 15,
    "tests/contract/test_crawl_database.py": 15,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def expected(item: pytest.Item) -> int:
        return LONGEST_MODULES.get(item.nodeid.split("::", 1)[0], 0)

    items.sort(key=expected, reverse=True)  # (stable: a module's tests keep their order)
