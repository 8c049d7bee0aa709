"""Job-end queue consumer: write the result of a job that ended (its records, change feed, index and summary,
the orphans, the site's lastmod trust), with the time and memory of a function of its own."""

from __future__ import annotations

import gc

gc.disable()  # until the end of INIT: lambda_runtime.end_of_init

from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from harvester.adapters.aws.lambda_runtime import end_of_init, large_blocks_mapped, sqs_handler
from harvester.model.messages import JobEnd

if TYPE_CHECKING:  # (the engine is imported when the first message builds it, not at INIT)
    from harvester.engine import Engine


async def finish(engine: Engine, end: JobEnd, record: SQSRecord) -> None:
    engine.finish(end.job_id, claim=end.claim)


handler = sqs_handler(JobEnd, finish, dead_letter="job_end")
large_blocks_mapped()
end_of_init()
