"""The Lambda layer as `sam build` makes it (template.yaml: BuildMethod makefile, layers/harvester/Makefile):
the package compiled to bytecode that is checked against nothing, so that a read-only layer's modules load
without being compiled at every cold start (bench/cold_start.py --layer: 2.3-2.5 times a bare boto3 handler's
INIT without it, 1.4 with it). Built here without its requirements (installing them needs the network);
the package's imports come from the test environment."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYER_SOURCE = REPO / "layers" / "harvester"

#: Imports a handler's INIT and the engine in a fresh interpreter that may write no bytecode (a layer is
#: read-only), and prints the layer's modules that had to be compiled from their source.
PROBE = """
import importlib._bootstrap_external as external, json, sys
compiled = []
source_to_code = external.SourceLoader.source_to_code
def spy(self, data, path, *args, **kwargs):
    compiled.append(path)
    return source_to_code(self, data, path, *args, **kwargs)
external.SourceLoader.source_to_code = spy
sys.path.insert(0, {layer!r})
import harvester.adapters.aws.lambda_runtime, harvester.engine
assert harvester.__file__.startswith({layer!r}), harvester.__file__
print(json.dumps([path for path in compiled if path.startswith({layer!r})]))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("layer")
    requirements = into / "requirements.txt"
    requirements.write_text("")
    subprocess.run(
        [
            "make", "-s", "-C", str(LAYER_SOURCE), "build-HarvesterLayer",
            f"ARTIFACTS_DIR={into / 'artifacts'}", f"PYTHON={sys.executable}", f"REQUIREMENTS={requirements}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return into / "artifacts" / "python"


def compiled_from_source(layer: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(layer=str(layer))],
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_module_of_the_layer_is_bytecode_checked_against_nothing(built: Path) -> None:
    sources = sorted((built / "harvester").rglob("*.py"))
    assert len(sources) > 50
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        header = cached.read_bytes()[:8]
        assert header[:4] == importlib.util.MAGIC_NUMBER, source
        assert int.from_bytes(header[4:8], "little") == 0b01, source  # (hash-based, source never checked)
    assert not list(built.glob("*.egg-info")) and not (built / "bin").exists()


def test_a_read_only_layer_loads_its_modules_without_compiling_them(built: Path, tmp_path: Path) -> None:
    assert compiled_from_source(built) == []
    # The same files without their bytecode, as BuildMethod python3.11 shipped them: every module compiled.
    bare = tmp_path / "python"
    shutil.copytree(built, bare, ignore=shutil.ignore_patterns("__pycache__"))
    compiled = compiled_from_source(bare)
    assert len(compiled) > 50 and any(path.endswith("lambda_runtime.py") for path in compiled)
