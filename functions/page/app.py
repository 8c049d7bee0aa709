"""Page queue consumer: fetch the pages of a batch concurrently, store them, record each outcome once."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from harvester.adapters.aws import lambda_runtime
from harvester.messages import PageTask

logger = Logger()
copy_config_to_registered_loggers(source_logger=logger, include={"harvester"})
# The async processor runs the record handlers of a batch concurrently: the fetches overlap.
processor = AsyncBatchProcessor(event_type=EventType.SQS)


async def record_handler(record: SQSRecord) -> None:
    runtime = lambda_runtime.current()
    task = runtime.parse(record, PageTask, runtime.resources.page_dlq_url)
    if task is None:
        return
    await runtime.engine().process_pages([task])


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return async_process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
