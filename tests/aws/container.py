"""One Lambda container in its own process: a LambdaPoller polling one function's queue (see
tests/aws/concurrent.py), against moto served over HTTP (``AWS_ENDPOINT_URL``), until the stop file exists.

    python -m tests.aws.container STACK_JSON FUNCTION STOP_FILE LOG_FILE

The container makes its cold start, then writes LOG_FILE's ``.ready`` file and polls only once the stop
file's folder holds a ``go`` file: every container of a run starts polling at once, as Lambda's pollers are
already polling when messages arrive (otherwise the first to finish its imports takes the work waiting,
whatever its queue). Each invocation is appended to LOG_FILE as a line of JSON (start, duration, records,
the traceback if the handler raised), for the test to check what ran when.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.aws.deployed import stack_from_json
from tests.aws.poller import LambdaPoller
from tests.shared_loader import share_data_loader

_IDLE = 0.05


def main(stack_json: str, function_logical_id: str, stop_file: str, log_file: str) -> None:
    share_data_loader()
    stack = stack_from_json(json.loads(Path(stack_json).read_text()))
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
                    "records": len(invocation.message_ids),
                    "returned": len(invocation.returned_ids),
                    "error": invocation.traceback,
                }
                log.write(json.dumps(entry) + "\n")
            log.flush()
            written = len(poller.invocations)
            if not delivered:
                time.sleep(_IDLE)


if __name__ == "__main__":
    main(*sys.argv[1:5])
