"""Sitemap queue consumer: read one sitemap (or robots.txt) and fan out its child sitemaps and pages."""

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
from harvester.messages import SitemapTask

logger = Logger()
copy_config_to_registered_loggers(source_logger=logger, include={"harvester"})
processor = AsyncBatchProcessor(event_type=EventType.SQS)


async def record_handler(record: SQSRecord) -> None:
    runtime = lambda_runtime.current()
    task = runtime.parse(record, SitemapTask, runtime.resources.sitemap_dlq_url)
    if task is None:
        return
    logger.append_keys(job_id=task.job_id, url=task.url)
    await runtime.engine().process_sitemap(task)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return async_process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
