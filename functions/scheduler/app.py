"""Scheduled by an EventBridge rule: start the recurring jobs that are due, resume or finish stalled jobs."""

from __future__ import annotations

import gc

gc.disable()  # until the end of INIT: lambda_runtime.end_of_init

import os
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from harvester.adapters.aws import lambda_runtime

if TYPE_CHECKING:  # (the engine's modules are imported by the first tick, not at INIT)
    from harvester.pipeline.recurring import RecurringJob

logger = lambda_runtime.structured_logger()


@logger.inject_lambda_context
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    from harvester.pipeline.recurring import parse_recurring, tick

    runtime = lambda_runtime.current()
    errors: list[str] = []
    recurring: list[RecurringJob] = []
    try:
        recurring = parse_recurring(os.environ.get("HARVEST_RECURRING_JOBS", "[]"))
    except ValueError as exc:
        # A bad configuration must not stop the scheduler from looking after running jobs.
        logger.error("recurring jobs not started", extra={"reason": str(exc)})
        errors.append(str(exc))
    with lambda_runtime.patient(context):
        report = tick(runtime.engine(), recurring)
    summary = {
        "started": report.started,
        "resumed": [r.job_id for r in report.resumed],
        "errors": errors + report.errors,
    }
    logger.info("schedule tick", extra=summary | {"event_time": event.time})
    return summary


lambda_runtime.end_of_init()
