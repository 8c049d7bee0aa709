"""Job queue consumer: validate a job request, then start the job (once per job id)."""

from __future__ import annotations

import gc

gc.disable()  # until the end of INIT: lambda_runtime.end_of_init

from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from harvester.adapters.aws.lambda_runtime import end_of_init, sqs_handler
from harvester.model.messages import JobRequest, job_id_from

if TYPE_CHECKING:  # (the engine is imported when the first message builds it, not at INIT)
    from harvester.engine import Engine


async def start_job(engine: Engine, request: JobRequest, record: SQSRecord) -> None:
    # Without a job id, the message id names the job: a duplicate delivery is the same job.
    engine.start_job(request, job_id=request.job_id or job_id_from(record.message_id))


handler = sqs_handler(JobRequest, start_job, dead_letter="job")
end_of_init()
