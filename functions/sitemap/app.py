"""Sitemap queue consumer: read one sitemap (or robots.txt) and fan out its child sitemaps and pages."""

from __future__ import annotations

import gc

gc.disable()  # until the end of INIT: lambda_runtime.end_of_init

from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from harvester.adapters.aws import metrics
from harvester.adapters.aws.lambda_runtime import end_of_init, sqs_handler
from harvester.model.messages import SitemapTask

if TYPE_CHECKING:  # (the engine is imported when the first message builds it, not at INIT)
    from harvester.engine import Engine


async def read_sitemap(engine: Engine, task: SitemapTask, record: SQSRecord) -> None:
    metrics.emit_sitemap(task, await engine.process_sitemap(task))


handler = sqs_handler(SitemapTask, read_sitemap, dead_letter="sitemap")
end_of_init()
