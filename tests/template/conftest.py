"""Shared fixtures: template.yaml loaded once, and a way to translate a mutated copy.

Why: each check must be shown to fail on the mistake it exists for; mutating the SAM source (not the
translation) proves the check sees the mistake through samtranslator, as `make lint` does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tools.check_template import run_checks
from tests.tools.translate import load_template, package_local_uris, placeholder_uploader, translate

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"

Mutation = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="session")
def source_template() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)


@pytest.fixture(scope="session")
def translated_template(source_template: dict[str, Any]) -> dict[str, Any]:
    return translate_source(source_template)


def translate_source(source: dict[str, Any]) -> dict[str, Any]:
    return translate(package_local_uris(source, TEMPLATE_PATH.parent, placeholder_uploader()))


@pytest.fixture
def problems_after(source_template: dict[str, Any]) -> Callable[[Mutation], list[str]]:
    """problems_after(mutate) -> the check messages for template.yaml with ``mutate`` applied."""

    def run(mutate: Mutation) -> list[str]:
        source = copy.deepcopy(source_template)
        mutate(source)
        return run_checks(translate_source(source))

    return run
