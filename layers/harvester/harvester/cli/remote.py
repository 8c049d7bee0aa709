"""``harvest submit`` and ``harvest status``: a deployed stack's job queue and job table."""

from __future__ import annotations

import argparse
import sys

from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.options import job_request
from harvester.cli.progress import job_pace
from harvester.cli.reporting import dump_json
from harvester.model.records import BulkProcessingJob, utcnow


def run_submit(args: argparse.Namespace) -> int:
    from harvester.adapters.aws.stack import StackError, job_queue_url, submit_job

    request = job_request(args)
    try:
        queue_url = args.queue_url or job_queue_url(args.stack, region=args.region)
        job_id = submit_job(request, queue_url, region=args.region)
    except StackError as exc:
        raise UsageError(str(exc)) from None
    print(job_id)
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    from harvester.adapters.aws.stack import StackError, job_status

    try:
        view = job_status(args.job_id, args.stack, region=args.region)
    except StackError as exc:
        raise UsageError(str(exc)) from None
    # BulkProcessingJob as JSON, and its pace (throughput, time left) worded as `harvest crawl`'s line has it.
    pace = job_pace(BulkProcessingJob.model_validate(view), now=utcnow())
    dump_json(view | {"pace": pace.as_json()}, sys.stdout)
    return EXIT_OK
