"""Page queue consumer: the pages of a batch together, fetched concurrently and stored, each outcome recorded
once; their claims, their turns at the host's gate and their settlement are written a batch at a time."""

from __future__ import annotations

from harvester.adapters.aws import metrics
from harvester.adapters.aws.lambda_runtime import sqs_batch_handler
from harvester.engine import Engine
from harvester.model.messages import PageTask


async def fetch_pages(engine: Engine, tasks: list[PageTask]) -> None:
    metrics.emit_page_batch(await engine.process_pages(tasks))


handler = sqs_batch_handler(PageTask, fetch_pages, dead_letter="page")
