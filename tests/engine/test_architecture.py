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
