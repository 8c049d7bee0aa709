"""A handler's INIT builds its SDK clients, runs with the garbage collector off and leaves what it made
frozen: the collector's full collections walked INIT's long-lived objects again and again while they were
being made (25-64 ms of CPU a handler, bench/cold_start.py), and would walk them again in every later full
collection. And it imports neither pydantic nor Powertools' parser models, and defines no dataclass. Timings are
bench/'s; this checks the mechanisms, in a fresh interpreter per handler as Lambda starts one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from cold_start import ENVIRONMENT, FUNCTIONS, LAYER  # noqa: E402

PROBE = """
import dataclasses, gc, json, py_compile, sys
sys.path[:0] = [{code!r}, {layer!r}]
py_compile.compile({code!r} + "/app.py")  # (compiling app.py itself comes before its first statement)

def defined_dataclasses():
    return sorted(
        f"{{name}}.{{obj.__qualname__}}"
        for name, module in list(sys.modules.items()) if name.split(".")[0] in ("harvester", "app")
        for obj in vars(module).values()
        if isinstance(obj, type) and obj.__module__ == name and dataclasses.is_dataclass(obj)
    )

before = [g["collections"] for g in gc.get_stats()]
import app
after = [g["collections"] for g in gc.get_stats()]
init = {{
    "collections": [a - b for a, b in zip(after, before)],
    "enabled": gc.isenabled(),
    "frozen": gc.get_freeze_count(),
    "parser models": "aws_lambda_powertools.utilities.parser.models" in sys.modules,
    "pydantic": "pydantic" in sys.modules,
    "dataclasses": defined_dataclasses(),
}}
from harvester.adapters.aws import lambda_runtime
init["runtime built"] = getattr(lambda_runtime._local, "runtime", None) is not None
lambda_runtime.current().engine()  # (what the first message imports)
print(json.dumps(init | {{"engine dataclasses": defined_dataclasses(), "engine pydantic": "pydantic" in sys.modules}}))
"""


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_handlers_init_builds_its_clients_with_no_collection_no_pydantic_and_no_dataclass(function):
    code = REPO / "functions" / function
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=str(code), layer=str(LAYER))],
        env={"PATH": "/usr/bin:/bin", **ENVIRONMENT},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    # The container's runtime (its SDK clients) is built at INIT, the collector still off.
    assert probe["runtime built"]
    assert probe["collections"] == [0, 0, 0]
    assert probe["enabled"]
    assert probe["frozen"] > 50_000  # (INIT's objects: modules, classes, validators)
    # Powertools' parser models (every AWS event's, built with pydantic) are not needed, so not imported;
    # nor is pydantic (~46 ms of CPU to import): the records and messages are msgspec Structs
    # (harvester.model.base), and nothing the first message builds imports it either.
    assert not probe["parser models"]
    assert not probe["pydantic"] and not probe["engine pydantic"]
    # Python 3.11 compiles a dataclass's methods when it is defined (0.3-1 ms a class): the values INIT
    # imports are msgspec Structs, made in C (40 dataclasses were 20 ms of every handler's INIT), and so
    # are those of the engine the first message builds, but for the engine itself and its context (their
    # fields made in __post_init__ are init=False fields, which a Struct has not).
    assert probe["dataclasses"] == []
    assert probe["engine dataclasses"] == ["harvester.engine.Engine", "harvester.pipeline.context.StepContext"]
