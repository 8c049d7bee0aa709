"""Page queue consumer: the pages of a message (a page batch, or a page task) together, fetched concurrently
and stored, each outcome recorded once; their claims, their turns at the host's gate and their settlement
are written a batch at a time."""

from __future__ import annotations

import gc

gc.disable()  # until the end of INIT: lambda_runtime.end_of_init

from typing import TYPE_CHECKING

from harvester.adapters.aws import metrics
from harvester.adapters.aws.lambda_runtime import LambdaRuntime, end_of_init, sqs_batch_handler
from harvester.model.messages import PageTask

if TYPE_CHECKING:  # (the engine is imported when the first message builds it, not at INIT)
    from harvester.engine import Engine


async def fetch_pages(engine: Engine, tasks: list[PageTask]) -> None:
    metrics.emit_page_batch(await engine.process_pages(tasks))


handler = sqs_batch_handler(LambdaRuntime.page_tasks, fetch_pages, dead_letter="page")
end_of_init()
