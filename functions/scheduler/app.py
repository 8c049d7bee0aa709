"""Scheduled by an EventBridge rule: start the jobs of the scheduled sites that are due (the registry in the
state table: ``harvest schedule``), resume or finish stalled jobs."""

from __future__ import annotations

import gc

gc.disable()  # until the end of INIT: lambda_runtime.end_of_init

from typing import Any

from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from harvester.adapters.aws import lambda_runtime

logger = lambda_runtime.structured_logger()


@logger.inject_lambda_context
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    from harvester.pipeline.scheduler import tick

    runtime = lambda_runtime.current()
    with lambda_runtime.patient(context):
        report = tick(
            runtime.engine(),
            runtime.adapters.scheduled_sites,
            time_left=lambda: context.get_remaining_time_in_millis() / 1000,
        )
    summary = {
        "started": report.started,
        "more_due": report.more_due,
        "resumed": [r.job_id for r in report.resumed],
        "not_looked_at": report.not_looked_at,
        "errors": report.errors,
    }
    logger.info("schedule tick", extra=summary | {"event_time": event.time})
    return summary


lambda_runtime.end_of_init()
