"""The engine is pure: only the AWS adapters import boto3/botocore, only the adapters sqlite3 (the local
backend's state file; the AWS crawl database's scratch copy of a job's records in /tmp)."""

from __future__ import annotations

import ast
from pathlib import Path

import harvester

PACKAGE = Path(harvester.__file__).parent


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_aws_adapters_touch_aws():
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if imports(p) & {"boto3", "botocore", "aws_lambda_powertools"} and "adapters/aws" not in p.as_posix()
    ]
    assert offenders == []


def test_only_the_adapters_touch_sqlite():
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "sqlite3" in imports(p) and "adapters/" not in p.as_posix()
    ]
    assert offenders == []


def test_the_handlers_are_thin():
    for app in (PACKAGE.parents[2] / "functions").glob("*/app.py"):
        assert len(app.read_text().splitlines()) < 60, f"{app} holds logic that belongs in the engine"


def _harvester_imports(path: Path) -> set[str]:
    """The harvester modules a file imports, as dotted names (``harvester.pipeline.jobs``)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("harvester")}
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("harvester")
        ):
            names.add(node.module)
    return names


#: The package's parts from the bottom up: a part imports only from its own tier and those below (the
#: records know no step, a step knows no engine, no concern knows the ports it is reached through).
TIERS = [
    {"limits", "urls", "url_rules", "languages", "inflate", "patience", "keyset", "words"},
    {"sitemap", "fetch"},
    {"model"},
    {"crawldb", "politeness", "archive"},
    {"report"},
    {"settings", "ports"},
    {"pipeline"},
    {"engine"},
    {"adapters"},
    {"api", "demo"},
    {"cli", "__main__"},
]


def _part(module: str) -> str:
    """The part of the package a dotted name is in (``harvester.pipeline.jobs`` -> ``pipeline``)."""
    return module.split(".")[1] if "." in module else "__init__"


def test_every_part_is_in_a_tier():
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert parts == set().union(*TIERS)


def test_packages_import_only_downwards():
    tier = {part: n for n, parts in enumerate(TIERS) for part in parts}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if part == "__init__":
            continue
        above = {m for m in _harvester_imports(path) if m != "harvester" and tier[_part(m)] > tier[part]}
        if above:
            offenders.append(f"{path.relative_to(PACKAGE)} imports {sorted(above)}")
    assert offenders == []
