"""Page queue consumer: fetch the pages of a batch concurrently, store them, record each outcome once."""

from __future__ import annotations

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from harvester.adapters.aws.lambda_runtime import sqs_handler
from harvester.engine import Engine
from harvester.model.messages import PageTask


async def fetch_page(engine: Engine, task: PageTask, record: SQSRecord) -> None:
    await engine.process_pages([task])


handler = sqs_handler(PageTask, fetch_page, dead_letter="page")
