"""Sitemap queue consumer: read one sitemap (or robots.txt) and fan out its child sitemaps and pages."""

from __future__ import annotations

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from harvester.adapters.aws import metrics
from harvester.adapters.aws.lambda_runtime import sqs_handler
from harvester.engine import Engine
from harvester.model.messages import SitemapTask


async def read_sitemap(engine: Engine, task: SitemapTask, record: SQSRecord) -> None:
    metrics.emit_sitemap(task, await engine.process_sitemap(task))


handler = sqs_handler(SitemapTask, read_sitemap, dead_letter="sitemap")
