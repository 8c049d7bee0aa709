"""The robots.txt a job's discovery read, taken by the job's page workers for its rules.

Discovery reads the site's robots.txt as the job's first sitemap, and keeps its body (the sitemap's stored
copy, ``SitemapRecord.document_key``). A page worker that holds no fresh answer for the site's origin takes
that reading instead of asking the host again: no second request to the site, and no turn at its gate,
where a page container would otherwise wait behind the bookings of the pages already queued (a host booked
``GateRules.book_ahead`` seconds ahead makes a single request wait about that long). The reading is good
for what is left of robots.txt's 24 hours from when discovery finished it.

Taken as a fetch of robots.txt would be (``fetch.robots.availability``): a 2xx (or a 304 answered from the
stored copy) with its body, and an unavailable one (a 4xx other than 429: no restrictions). Anything else
(no such reading: the job names its sitemaps; not finished; unreachable, which RFC 9309 answers with
"disallow for now"; the copy gone) leaves the page worker to read robots.txt itself, on a turn at the gate,
as for any other origin.
"""

from __future__ import annotations

import logging

from harvester.fetch.robots import availability
from harvester.model.records import JobRecord
from harvester.pipeline.context import StepContext

log = logging.getLogger(__name__)


def adopt(ctx: StepContext, job: JobRecord) -> bool:
    """Gives ``ctx.robots`` the job's discovery reading of its site's robots.txt, when it holds no fresh
    answer for that origin and the reading is one to take (see the module's docstring). Whether it did."""
    origin = job.request.origin
    if ctx.ephemeral or ctx.robots.knows(origin):
        return False
    record = ctx.store.get_sitemap(job.job_id, f"{origin}/robots.txt")
    if record is None or record.finished_at is None or record.http_status is None:
        return False
    status, age = record.http_status, (ctx.clock() - record.finished_at).total_seconds()
    answer = "rules" if status == 304 else availability(status)  # (a 304: the stored copy, replayed)
    if answer == "unreachable":
        return False
    body = None
    if answer == "rules":
        if record.document_key is None:
            return False
        try:
            body = ctx.documents.get(record.document_key)
        except FileNotFoundError:
            log.info("robots.txt copy gone; reading it again", extra={"job_id": job.job_id, "origin": origin})
            return False
    return ctx.robots.adopt(origin, body, status=status, age=age, cut=record.truncated is not None)
