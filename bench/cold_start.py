"""Cold start of the Lambda handlers: import + init time of each ``functions/*/app.py``, against a bare boto3 handler.

Why: issue 11 ("The operator's view") holds a handler's cold start to at most 1.3 times that of a bare boto3
handler that creates the same clients (it measured 0.49-0.61 s against 0.39 s). What Lambda bills and a
first message waits for is the INIT phase (the handler module's imports) plus what the first invocation
builds before it can do anything (here: the boto3 session and clients of ``lambda_runtime.current()``). This
script measures exactly that, and nothing of the work a message then does.

    python bench/cold_start.py [--runs 7] [--importtime FUNCTION] [--ready] [--layer]

How: each figure is one fresh interpreter (``python -c``), with the function's CodeUri directory and the
layer's directory first on ``sys.path`` (where Lambda puts ``/var/task`` and ``/opt/python``), the
function's environment as template.yaml sets it (fake queue URLs, table and bucket names), timed from the
first statement to the clients being built: ``import app`` then ``lambda_runtime.current()`` (the
scheduler's likewise). Interpreter start-up itself is outside the timing, for both sides. The named baseline
"bare boto3 handler" imports boto3 and creates the same clients with the same configuration (an SQS, a
DynamoDB and an S3 client from one session), the least any handler of this stack does. Each figure is the
median of ``--runs`` runs; runs alternate between the handlers and the baseline, so that a busy machine
slows both alike (in a shuffled order each round).

The package is imported from the repository, whose bytecode Python caches after the first run: what a
layer built with its bytecode loads. ``--layer`` builds the layer as ``sam build`` does
(layers/harvester/Makefile, its requirements installed as Lambda's wheels into a temporary folder) and times
each handler on it, read-only as Lambda mounts a layer, with its bytecode and without (as ``BuildMethod:
python3.11`` shipped it, when every cold start compiled the whole layer again).

Making imports lazy moves work out of INIT into the first invocation; so that this is not mistaken for a
saving, ``--ready`` also times init + ``runtime.engine()`` (the engine, its fetcher and their imports: all the
first message needs before its own work) against the same baseline. ``--importtime FUNCTION`` prints the
25 slowest imports (``python -X importtime``) of one handler, cumulative: the profile to start from before
making anything lazy.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = REPO / "layers" / "harvester"
FUNCTIONS = ("job", "sitemap", "page", "scheduler")
TARGET_RATIO = 1.3
#: The layer as ``BuildMethod: python3.11`` shipped it (``--layer``).
WITHOUT_BYTECODE = "layer without bytecode (python3.11 build)"

#: What template.yaml sets in every function's environment (values of a fake stack: nothing is reached).
ENVIRONMENT = {
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_CONFIG_FILE": "/dev/null",
    "POWERTOOLS_SERVICE_NAME": "harvester",
    "POWERTOOLS_METRICS_NAMESPACE": "Harvester",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "HARVEST_JOB_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
    "HARVEST_SITEMAP_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/sitemaps",
    "HARVEST_PAGE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/pages",
    "HARVEST_PAGE_PRIORITY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/priority",
    "HARVEST_JOB_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq",
    "HARVEST_SITEMAP_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/sitemaps-dlq",
    "HARVEST_PAGE_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/pages-dlq",
    "HARVEST_STATE_TABLE": "state",
    "HARVEST_DOCUMENT_BUCKET": "documents",
    "HARVEST_ALLOW_NETWORKS": "",
    "HARVEST_RETENTION_DAYS": "30",
    "HARVEST_HOST_MAX_IN_FLIGHT": "8",
    "HARVEST_PAGE_BATCH_SIZE": "50",
}

_TIMED = """
import time
started, cpu = time.perf_counter(), time.process_time()
{body}
print(time.perf_counter() - started, time.process_time() - cpu)
"""

HANDLER = """
import sys
sys.path[:0] = [{code!r}, {layer!r}]
import app
from harvester.adapters.aws import lambda_runtime
runtime = lambda_runtime.current()
{ready}
"""

#: The named baseline: the same three clients, the same botocore Config, from one session.
BARE_BOTO3 = """
import boto3
from botocore.config import Config
config = Config(retries={"max_attempts": 8, "mode": "standard"}, max_pool_connections=50)
session = boto3.session.Session()
clients = [session.client(name, config=config) for name in ("sqs", "dynamodb", "s3")]
"""
#: The second reference: the libraries a handler's INIT imports, as it imports them (the collector off),
#: and the same clients, built as INIT builds them (the collector still off: lambda_runtime.end_of_init),
#: but no line of Harvester: the floor any handler built on them starts from. A handler's figure less this
#: one is Harvester's own INIT.
LIBRARIES = (
    """
import gc
gc.disable()
import sys
sys.path[:0] = [{layer!r}]
import aws_lambda_powertools.utilities.batch
import asyncio, msgspec, orjson, warcio.warcwriter
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
Logger()
"""
    + BARE_BOTO3.replace("{", "{{").replace("}", "}}")
    + "gc.freeze()\ngc.enable()\n"
)
#: What the libraries alone figure is called (printed beside the baseline, not judged).
FLOOR = "libraries alone (no Harvester)"


def _environment() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "SYSTEMROOT")}
    return keep | ENVIRONMENT | {"PYTHONDONTWRITEBYTECODE": "0"}


def handler_body(function: str, *, ready: bool = False, layer: Path = LAYER) -> str:
    ready_step = "runtime.engine()" if ready else ""
    return HANDLER.format(code=str(REPO / "functions" / function), layer=str(layer), ready=ready_step)


def built_layers(into: Path) -> dict[str, Path]:
    """The layer as template.yaml's build makes it (layers/harvester/Makefile: compiled to bytecode), and the
    same files as ``BuildMethod: python3.11`` made them (no bytecode): their python/ folders by name."""
    compiled = into / "bytecode"
    build = ["make", "-s", "-C", str(LAYER), "build-HarvesterLayer", f"ARTIFACTS_DIR={compiled}"]
    subprocess.run([*build, f"PYTHON={sys.executable}"], check=True)
    source = into / "source"
    shutil.copytree(compiled, source, ignore=shutil.ignore_patterns("__pycache__"))
    return {"layer with bytecode": compiled / "python", WITHOUT_BYTECODE: source / "python"}


def time_once(body: str, *, read_only: bool = False) -> tuple[float, float]:
    """Seconds from the first statement to the end of ``body``, in a fresh interpreter: wall clock, and the
    CPU time the interpreter used meanwhile (INIT is CPU-bound: on a busy machine, CPU time shows the
    difference a change made when wall-clock medians move 20-40 % between runs)."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMED.format(body=body)],
        env=_environment() | ({"PYTHONDONTWRITEBYTECODE": "1"} if read_only else {}),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"a timed run failed:\n{done.stderr}")
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def import_profile(function: str, top: int = 25) -> list[tuple[int, str]]:
    """The slowest imports of one handler's cold start, cumulative microseconds (``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", handler_body(function)],
        env=_environment(),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:top]


def measure(runs: int, *, ready: bool = False, layers: dict[str, Path] | None = None) -> dict[str, tuple[float, float]]:
    """Median seconds (wall clock, CPU) per named figure, runs interleaved across handlers and the baseline.
    ``layers``: each handler with each of these as its layer, read-only as Lambda mounts one (no bytecode
    written), instead of the package in the repository."""
    # (on a built layer, the libraries are the layer's: its first folder, with bytecode)
    floor_layer = LAYER if layers is None else next(iter(layers.values()))
    bodies = {"bare boto3 handler": BARE_BOTO3, FLOOR: LIBRARIES.format(layer=str(floor_layer))}
    if layers is None:
        bodies |= {f"functions/{f}/app.py": handler_body(f, ready=ready) for f in FUNCTIONS}
    else:
        bodies |= {
            f"{f}, {name}": handler_body(f, ready=ready, layer=path) for f in FUNCTIONS for name, path in layers.items()
        }
    read_only = layers is not None
    for body in bodies.values():  # once each, untimed: the .pyc files are written before any timing
        time_once(body, read_only=read_only)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in bodies}
    order = list(bodies)
    for _ in range(runs):
        random.shuffle(order)  # (no figure always first or last in a round: the machine's drift spread over all)
        for name in order:
            samples[name].append(time_once(bodies[name], read_only=read_only))
    return {
        name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
        for name, values in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per figure (median)")
    parser.add_argument("--importtime", choices=FUNCTIONS, help="print one handler's slowest imports and stop")
    parser.add_argument("--ready", action="store_true", help="also build the engine (what a first message waits for)")
    parser.add_argument(
        "--layer",
        action="store_true",
        help="build the layer as `sam build` does (layers/harvester/Makefile; installs its requirements into a"
        " temporary folder) and time each handler on it, with its bytecode and without (as BuildMethod"
        " python3.11 shipped it), read-only",
    )
    args = parser.parse_args(argv)
    if args.importtime:
        for micros, name in import_profile(args.importtime):
            print(f"{micros / 1000:8.1f} ms  {name}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        layers = built_layers(Path(scratch)) if args.layer else None
        figures = measure(args.runs, ready=args.ready, layers=layers)
    baseline, baseline_cpu = figures.pop("bare boto3 handler")
    floor, floor_cpu = figures.pop(FLOOR)
    what = "import + clients + engine" if args.ready else "import + clients"
    print(f"cold start ({what}), median of {args.runs} fresh interpreters: wall clock (what Lambda bills), CPU")
    width = max(len(FLOOR), *(len(name) for name in figures))
    print(f"  {'bare boto3 handler':<{width}} {baseline * 1000:7.1f} ms  (baseline)  {baseline_cpu * 1000:7.1f} ms")
    floor_figure = f"{floor * 1000:7.1f} ms  {floor / baseline:4.2f}x floor  {floor_cpu * 1000:7.1f} ms"
    print(f"  {FLOOR:<{width}} {floor_figure}  {floor_cpu / baseline_cpu:4.2f}x")
    worst = worst_cpu = own = 0.0
    for name, (seconds, cpu) in figures.items():
        ratio, cpu_ratio = seconds / baseline, cpu / baseline_cpu
        cpu_figure = f"{cpu * 1000:7.1f} ms  {cpu_ratio:4.2f}x"
        print(f"  {name:<{width}} {seconds * 1000:7.1f} ms  {ratio:4.2f}x        {cpu_figure}")
        if name.endswith(WITHOUT_BYTECODE):
            continue  # (what the template no longer deploys: shown, not judged)
        worst, worst_cpu = max(worst, ratio), max(worst_cpu, cpu_ratio)
        own = max(own, (seconds - floor) * 1000)
    verdict = "within" if worst <= TARGET_RATIO else "above"
    target = f"the target of {TARGET_RATIO}x" if not args.ready else f"{TARGET_RATIO}x (the target is for INIT only)"
    print(f"worst ratio {worst:.2f}x (CPU {worst_cpu:.2f}x): {verdict} {target}")
    if not args.ready:  # (the engine's imports, its HTTP stack among them, are not in the floor)
        print(f"Harvester's own part of INIT (a handler less the libraries alone): at most {own:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
