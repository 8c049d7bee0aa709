"""Job queue consumer: validate a job request, then start the job (once per job id)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from harvester.adapters.aws import lambda_runtime
from harvester.messages import JobRequest, job_id_from

logger = Logger()
copy_config_to_registered_loggers(source_logger=logger, include={"harvester"})
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    runtime = lambda_runtime.current()
    request = runtime.parse(record, JobRequest, runtime.resources.job_dlq_url)
    if request is None:
        return
    # Without a job id, the message id names the job: a duplicate delivery is the same job.
    job_id = request.job_id or job_id_from(record.message_id)
    logger.append_keys(job_id=job_id)
    runtime.engine().start_job(request, job_id=job_id)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
