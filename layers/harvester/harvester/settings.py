"""Engine settings: leases, retry bounds and batch sizes, with the environment names the Lambdas use."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from harvester.limits import PAGE_MAX_BYTES


@dataclass(frozen=True, slots=True)
class EngineSettings:
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
    #: Pages registered per atomic write (a DynamoDB transaction holds 100 items: pages + sitemap + counter).
    record_batch: int = 98
    #: A job without progress for this long is resumed by the scheduler.
    stall_after_seconds: float = 900.0
    #: Per-job items expire this long after they were written (DynamoDB TTL); results stay in S3.
    retention_days: int = 30
    #: Failed pages listed in the summary's error_details (all of them are in the JSON Lines records).
    max_error_details: int = 1000

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> EngineSettings:
        """``HARVEST_<FIELD>`` overrides any field (e.g. ``HARVEST_RETENTION_DAYS=7``)."""
        overrides: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(f"HARVEST_{f.name.upper()}")
            if raw:
                kind = int if f.type in ("int", int) else float
                try:
                    overrides[f.name] = kind(raw)
                except ValueError:
                    raise ValueError(f"HARVEST_{f.name.upper()}={raw!r} is not a number") from None
        return replace(cls(), **overrides)
