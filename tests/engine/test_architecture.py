"""The engine is pure: only the AWS adapters import boto3/botocore, only the local adapter sqlite3."""

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


def test_only_the_local_adapter_touches_sqlite():
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "sqlite3" in imports(p) and "adapters/local" not in p.as_posix()
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


#: Who may import whom: a package never reaches *up* (the records know no step, a step knows no engine).
_ABOVE_PIPELINE = {"harvester.engine", "harvester.adapters", "harvester.api", "harvester.cli"}
LAYERS = {
    "model": {"harvester.pipeline", "harvester.crawldb", *_ABOVE_PIPELINE},
    "crawldb": {"harvester.pipeline", *_ABOVE_PIPELINE},
    "sitemap": {"harvester.pipeline", "harvester.crawldb", *_ABOVE_PIPELINE},
    "fetch": {"harvester.pipeline", "harvester.crawldb", *_ABOVE_PIPELINE},
    "pipeline": _ABOVE_PIPELINE,
}


def test_packages_import_only_downwards():
    offenders = []
    for package, forbidden in LAYERS.items():
        for path in (PACKAGE / package).rglob("*.py"):
            bad = {m for m in _harvester_imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
            if bad:
                offenders.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert offenders == []
