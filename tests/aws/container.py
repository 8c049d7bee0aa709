"""One Lambda container in its own process: a LambdaPoller polling one function's queue (see
tests/aws/concurrent.py), against moto served over HTTP (``AWS_ENDPOINT_URL``), until the stop file exists.

Containers are forked from a process that imported their code once (multiprocessing's forkserver, with
this module preloaded, :func:`start`): a Lambda container's cold start is its own, but the tests start
hundreds, and importing boto3, Powertools and the engine again in each was most of a container's CPU. The
child then takes the environment it is given, as a fresh process would, before it makes a client.

The container makes its cold start (its function's ``app.py``, its runtime and clients), then writes
LOG_FILE's ``.ready`` file and polls only once the stop file's folder holds a ``go`` file: every container
of a run starts polling at once, as Lambda's pollers are already polling when messages arrive (otherwise the
first to finish its cold start takes the work waiting, whatever its queue). Each invocation is appended to
LOG_FILE as a line of JSON (start, duration, records, the traceback if the handler raised), for the test to
check what ran when.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Mapping
from multiprocessing.process import BaseProcess
from pathlib import Path

import boto3
from botocore.config import Config

# (imported once, in the forkserver)
import harvester.adapters.aws
import harvester.engine
from tests.aws.deployed import stack_from_json
from tests.aws.poller import AWS_WAIT, LambdaPoller
from tests.shared_loader import share_data_loader

_IDLE = 0.05
#: The services a container's clients talk to (the engine's adapters, the poller): their models are read
#: once, in the forkserver.
_SERVICES = ("sqs", "dynamodb", "s3")

share_data_loader()
for _service in _SERVICES:
    boto3.session.Session(region_name="us-east-1").client(_service)
_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload([__name__])


def start(
    stack_json: Path, function_logical_id: str, stop_file: Path, log_file: Path, output: Path, env: Mapping[str, str]
) -> BaseProcess:
    """A container of ``function_logical_id``, started: its output goes to ``output``, its environment is
    ``env`` and nothing else."""
    # (the SDK's User-Agent names the function: what a request meter at moto's server books it to)
    env = {**env, "AWS_SDK_UA_APP_ID": function_logical_id}
    process = _FORKSERVER.Process(
        target=_contained,
        args=(str(stack_json), function_logical_id, str(stop_file), str(log_file), str(output), env),
        daemon=True,
    )
    process.start()
    return process


def _contained(
    stack_json: str, function_logical_id: str, stop_file: str, log_file: str, output: str, env: dict[str, str]
) -> None:
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.clear()
    os.environ.update(env)
    main(stack_json, function_logical_id, stop_file, log_file)


def main(stack_json: str, function_logical_id: str, stop_file: str, log_file: str) -> None:
    stack = stack_from_json(json.loads(Path(stack_json).read_text()))
    AWS_WAIT.install()
    # The engine's requests name the function too (``fn/<function>`` after ``app/harvester``), as the
    # poller's do by the environment (``app/<function>``): what bench/aws_concurrent.py books them to.
    aws = harvester.adapters.aws
    aws.BOTO_CONFIG = aws.BOTO_CONFIG.merge(Config(user_agent_extra=f"fn/{function_logical_id}"))
    poller = LambdaPoller(stack)
    poller.handler(function_logical_id)  # the cold start
    stop = Path(stop_file)
    Path(log_file + ".ready").touch()
    while not (stop.parent / "go").exists() and not stop.exists():
        time.sleep(0.005)
    written = 0
    with open(log_file, "a") as log:
        while not stop.exists():
            delivered = poller.poll_once(function_logical_id)
            for invocation in poller.invocations[written:]:
                entry = {
                    "started_at": invocation.started_at,
                    "duration": invocation.duration,
                    "cpu_wait": invocation.cpu_wait,
                    "cpu": invocation.cpu,
                    "peak_mib": invocation.peak_mib,
                    "aws_wait": invocation.aws_wait,
                    "aws_model_wait": invocation.aws_model_wait,
                    "records": len(invocation.message_ids),
                    "returned": len(invocation.returned_ids),
                    "error": invocation.traceback,
                }
                log.write(json.dumps(entry) + "\n")
            log.flush()
            written = len(poller.invocations)
            if not delivered:
                time.sleep(_IDLE)
