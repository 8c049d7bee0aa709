"""Engine settings: leases, retry bounds and batch sizes, with the environment names the Lambdas use."""

from __future__ import annotations

import os
from collections.abc import Mapping

from msgspec import Struct
from msgspec.structs import fields, replace

from harvester.crawldb.schedule import Schedule
from harvester.limits import PAGE_MAX_BYTES
from harvester.patience import BACKOFF_BASE, BACKOFF_MAX
from harvester.politeness.gate import GateRules


class EngineSettings(Struct, frozen=True):
    #: How long a claimed sitemap / page stays ours: twice the function's timeout, so a live invocation is
    #: never overtaken, and shorter than the queue's visibility timeout (6 x the function's timeout), so
    #: the redelivery of a crashed invocation's message finds the lease lapsed and takes the work over.
    sitemap_lease_seconds: float = 600.0
    page_lease_seconds: float = 240.0
    #: Deliveries of one task before its record is failed for good ("nothing is retried for ever").
    max_attempts: int = 5
    #: Crawl-state retries of a transient fetch failure (429, 5xx, timeouts) before the URL is gone.
    retry_max: int = 3
    retry_backoff_seconds: float = 30.0
    retry_backoff_max_seconds: float = 900.0  # SQS DelaySeconds cannot exceed 900
    page_max_bytes: int = PAGE_MAX_BYTES
    #: The most of a robots.txt ``Crawl-delay`` honoured: ten pages of one host fit one page invocation.
    crawl_delay_max: float = 10.0
    #: Requests to one host in flight at once, across every worker and job (see harvester.politeness).
    host_max_in_flight: int = 8
    #: The longest a worker waits for its turn at a host; a later turn is deferred through the queue.
    host_wait_max: float = 2.0
    #: The most a 429 / 503 slow-down spaces one host's requests, and the longest Retry-After honoured for
    #: the whole host.
    host_slowdown_max: float = 60.0
    host_retry_after_max: float = 600.0
    #: Turns booked past the wait (``host_wait_max``) for a batch sent back to the queue to wait for them,
    #: at most this far ahead (seconds; see ``GateRules.book_ahead``).
    host_book_ahead: float = 30.0
    #: The soonest a batch's first turn is granted after it asks: its pages' claim comes between (a few
    #: DynamoDB requests on AWS, where template.yaml sets it; a local write takes a millisecond).
    claim_lead_seconds: float = 0.0
    #: Pages registered per atomic write; 0 lets the state store choose (see ``StateStore.record_batch``).
    record_batch: int = 0
    #: The URLs a sitemap reading lists in one delivery (0: no bound), and the seconds it runs (0: none),
    #: before it goes on in a delivery of its own from its checkpoint (``sitemap_step.listing``): on AWS a
    #: 50,000-URL urlset is several invocations, each bounded whatever the sitemap (template.yaml sets them in
    #: Globals; SitemapFunction is the one that reads sitemaps). Each step downloads the sitemap again and
    #: skips what the steps before it listed.
    sitemap_step_urls: int = 0
    sitemap_step_seconds: float = 0.0
    #: Sitemaps one process reads (downloads and parses) at once; the others wait before their bodies.
    #: Parsing is CPU work in one thread, so more readers at once read no faster: they only hold more
    #: batches, de-duplication sets and buffers in memory.
    sitemaps_read_at_once: int = 2
    #: A job without progress for this long is resumed by the scheduler.
    stall_after_seconds: float = 900.0
    #: Batches of a job's records (50 pages each on AWS, 1,000 rows locally) a resume reads at most to send
    #: its open pages again (0: all): a resume of a job of any size is bounded, and the job's next stall
    #: goes on from where it stopped.
    resume_batches: int = 2000
    #: The back-off of a request our own infrastructure refused (throttled, a conflicting transaction,
    #: SlowDown): the first wait's bound and the longest wait, full jitter between (harvester.patience).
    busy_backoff_base: float = BACKOFF_BASE
    busy_backoff_max: float = BACKOFF_MAX
    #: Work a step gave back because our own infrastructure stayed busy comes back within this many seconds.
    busy_give_back_seconds: float = 30.0
    #: A job that ended this long ago without its result is the next step's to write: the longest a
    #: function that can end a job runs (template.yaml: SitemapFunction's and SchedulerFunction's Timeout).
    result_grace_seconds: float = 300.0
    #: A job's end sent apart (on AWS to the job-end function, whose Timeout is 900 s) that has not written
    #: the result this long after the job ended is sent again (by the next step or the scheduler's tick): it
    #: is lost or failed, not still running.
    end_apart_grace_seconds: float = 1000.0
    #: The time a step of a job's end gives its orphan pass (a pass over the site's URL records) before the
    #: pass goes on in a step of its own (on AWS a JobEnd message to the job-end function, whose 900 s leave
    #: the rest of the end 600 s); 0 passes one page of records a step.
    end_step_seconds: float = 300.0
    #: The URLs a step of a job's end reads in its records pass before it stores what it wrote as a piece and
    #: the pass goes on in a step of its own, whatever time is left: a step's index file (sorted in DuckDB
    #: after the pass) and its /tmp stay bounded by it (about 15 s and 1 GB at 2,000,000).
    end_piece_urls: int = 2_000_000
    #: Per-job items expire this long after they were written (DynamoDB TTL); results stay in S3. Locally, a
    #: crawl drops the URL and sitemap records of closed jobs older than this (results and jobs stay).
    retention_days: int = 30
    #: A job's end deletes the site's crawl batches no URL's pointer names (DynamoDB) of the jobs that ended
    #: at least this long before: no invocation of theirs is still running (Lambda's longest is 15 minutes).
    collect_after_seconds: float = 900.0
    #: Failed pages listed in the summary's error_details (all of them are in the JSON Lines records).
    max_error_details: int = 1000
    # The re-crawl schedule (seconds; see crawldb.schedule): the interval a URL starts at without a
    # changefreq, its bounds, and Nutch's adaptive rates (shrink on a change, grow when unchanged).
    fetch_interval_default: float = 30 * 86400.0
    fetch_interval_min: float = 60.0
    fetch_interval_max: float = 365 * 86400.0
    fetch_interval_shrink: float = 0.2
    fetch_interval_grow: float = 0.4
    #: How long after a transient failure a later crawl asks again (doubling; gone after ``retry_max``).
    retry_interval: float = 86400.0
    #: A host is trusted while its lastmod score (1 = always right) is at least this.
    lastmod_trust_threshold: float = 0.5
    #: URLs per sitemap whose advanced lastmod is fetched anyway on an untrusted host, to test it again.
    lastmod_probes: int = 5
    #: Keep each sitemap's part of a job's records, and adopt it whole when the sitemap did not change
    #: (``SitemapPart``); off, every reading lists its URLs one by one (the tests compare the two).
    sitemap_parts: bool = True
    #: The fewest URLs a sitemap's part holds: a smaller sitemap is listed again faster than its part is made
    #: (its index rows, its documents) and adopted.
    sitemap_part_min_urls: int = 100
    #: Rank added to a page task whose lastmod is now, falling to nothing over the window (seconds): the
    #: freshest pages first (0: off; see pipeline.ranking).
    lastmod_boost: float = 0.0
    lastmod_boost_window: float = 7 * 86400.0

    @property
    def gate(self) -> GateRules:
        """The host gate's rules; a grant lapses with the page lease (its worker is gone by then)."""
        return GateRules(
            max_in_flight=self.host_max_in_flight,
            horizon=self.host_wait_max,
            slot_seconds=self.page_lease_seconds,
            slowdown_max=self.host_slowdown_max,
            retry_after_max=self.host_retry_after_max,
            book_ahead=self.host_book_ahead,
        )

    @property
    def schedule(self) -> Schedule:
        return Schedule(
            default_interval=self.fetch_interval_default,
            min_interval=self.fetch_interval_min,
            max_interval=self.fetch_interval_max,
            shrink=self.fetch_interval_shrink,
            grow=self.fetch_interval_grow,
            retry_max=self.retry_max,
            retry_interval=self.retry_interval,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> EngineSettings:
        """``HARVEST_<FIELD>`` overrides any field (e.g. ``HARVEST_RETENTION_DAYS=7``)."""
        overrides: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(f"HARVEST_{f.name.upper()}")
            if raw:
                kind = {int: int, bool: _flag}.get(f.type, float)  # type: ignore[call-overload]
                try:
                    overrides[f.name] = kind(raw)
                except ValueError:
                    raise ValueError(
                        f"HARVEST_{f.name.upper()}={raw!r} is not a {_WANTED.get(f.type, 'number')}"
                    ) from None
        return replace(cls(), **overrides)


_WANTED = {bool: "yes or no (1/0, true/false)"}


def _flag(raw: str) -> bool:
    """An environment variable's yes or no (``1``/``0``, ``true``/``false``, ``yes``/``no``)."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)
