"""The handlers' CloudWatch metrics: what a page batch or a sitemap came to, as Powertools EMF documents.

Why here and not in the engine: the engine reports what it did (``PageBatch``, the final ``SitemapRecord``)
and knows nothing of CloudWatch; the handlers stay one line longer, and this module turns those results into
metrics. Powertools prints each document as one line of JSON on stdout, which Lambda sends to CloudWatch
Logs, which extracts the metrics: no API call, no latency added to the invocation.

Dimensions, chosen for CloudWatch's bill (every distinct combination of name and dimension values is one
custom metric, billed by the hour it exists):

* every metric has only Powertools' ``service`` dimension (``harvester``): one custom metric per name, the
  whole stack's figure, which the dashboard and the alarms in template.yaml read;
* ``PageFailures`` also has ``Reason``, a class from the bounded set ``FAILURE_CLASSES`` (never the free
  text of an error message): at most 14 custom metrics;
* the job id and the host are *not* dimensions (a metric per job, or per host of a crawl of many sites,
  would be unbounded, and scheduled sites make a new job id every slot). They go into each document as
  metadata properties (``job_id``, ``host``), which CloudWatch Logs Insights can group by, e.g.
  ``stats sum(PagesSucceeded), sum(PagesFailed) by job_id, host``. That is why a page batch is written as
  one document per (job, host) of the batch (usually one), not one per batch.

The figures mirror the job's counters: ``PagesSucceeded``/``PagesFailed``/``PagesExcluded`` count the page
outcomes this invocation settled (each URL once, as the job's ``successful``/``failed``/``excluded``
counts do), ``UrlsListed`` the URLs a sitemap added to its job (their sum is the job's ``total_urls``), and
``SitemapsRead`` the sitemaps read as sitemaps (the job's ``sitemaps_ok``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from harvester.crawldb.crawl_state import FetchResult
from harvester.model.accounting import ROBOTS_KIND
from harvester.model.records import SitemapStatus, UrlStatus
from harvester.urls import host_of

if TYPE_CHECKING:  # (Powertools' metrics are imported when the first document is written, not at init)
    from aws_lambda_powertools.metrics import EphemeralMetrics

    from harvester.model.messages import SitemapTask
    from harvester.model.records import SitemapRecord, SitemapURL
    from harvester.pipeline.page_worker import PageBatch

#: Metric names (the dashboard and alarms in template.yaml may only name these: tests/template checks it).
PAGES_SUCCEEDED = "PagesSucceeded"
PAGES_FAILED = "PagesFailed"
PAGES_EXCLUDED = "PagesExcluded"
PAGES_RETRIED = "PagesRetried"
PAGES_DEFERRED = "PagesDeferred"
PAGES_SKIPPED = "PagesSkipped"
BYTES_FETCHED = "BytesFetched"
FETCH_LATENCY = "FetchLatency"
PAGE_FAILURES = "PageFailures"  # by Reason
SITEMAPS_READ = "SitemapsRead"
SITEMAPS_FAILED = "SitemapsFailed"
URLS_LISTED = "UrlsListed"
METRIC_NAMES = frozenset(
    {
        PAGES_SUCCEEDED,
        PAGES_FAILED,
        PAGES_EXCLUDED,
        PAGES_RETRIED,
        PAGES_DEFERRED,
        PAGES_SKIPPED,
        BYTES_FETCHED,
        FETCH_LATENCY,
        PAGE_FAILURES,
        SITEMAPS_READ,
        SITEMAPS_FAILED,
        URLS_LISTED,
    }
)
#: The one extra dimension (of PageFailures), and its values: a page failed or excluded falls in exactly one.
REASON_DIMENSION = "Reason"
FAILURE_CLASSES = (
    "http_3xx",
    "http_4xx",
    "http_429",
    "http_5xx",
    "timeout",
    "connection",
    "too_large",
    "redirects",
    "decoding",
    "robots_unreachable",
    "lost",  # the URL's tries were spent by deliveries that never reported back
    "robots",  # excluded: robots.txt forbids it
    "address_policy",  # excluded: the SSRF guard refused where it leads
    "other",
)

_HTTP = re.compile(r"HTTP (\d{3})\b")
#: Phrases of the fetch errors' reasons (harvester.fetch), the only trace of their class in a settled record.
_URL = re.compile(r"\S+://\S+")
_BY_PHRASE = (
    ("larger than", "too_large"),
    ("robots.txt unreachable", "robots_unreachable"),
    ("without an outcome", "lost"),
    ("content-encoding", "decoding"),
    ("time limit", "timeout"),
    ("took longer than", "timeout"),
    ("no response data", "timeout"),
    ("no free connection", "timeout"),
    ("timeout", "timeout"),
    ("redirects", "redirects"),
    ("redirect to an invalid location", "redirects"),
    ("cut off", "connection"),
    ("broken off", "connection"),
    ("error", "connection"),  # ConnectError, ReadError, RemoteProtocolError...: httpx's transport errors
)


def failure_class(record: SitemapURL) -> str:
    """The class of a failed or excluded page's reason, one of ``FAILURE_CLASSES``."""
    message = record.error_message or ""
    if record.status is UrlStatus.EXCLUDED:
        return "robots" if "robots.txt" in message else "address_policy"
    answered = _HTTP.match(message)
    if answered:
        code = int(answered.group(1))
        if code == 429:
            return "http_429"
        return f"http_{code // 100}xx" if 300 <= code < 600 else "other"
    lowered = _URL.sub("", message).lower()  # (a URL in the reason, a redirect hop's, says nothing of its class)
    return next((cls for phrase, cls in _BY_PHRASE if phrase in lowered), "other")


def _metrics(job_id: str | None, host: str | None) -> EphemeralMetrics:
    from aws_lambda_powertools.metrics import EphemeralMetrics

    metrics = EphemeralMetrics()  # namespace and service from POWERTOOLS_METRICS_NAMESPACE / _SERVICE_NAME
    if job_id:
        metrics.add_metadata("job_id", job_id)
    if host:
        metrics.add_metadata("host", host)
    return metrics


@contextmanager
def _document(job_id: str | None, host: str | None) -> Iterator[EphemeralMetrics]:
    """One EMF document, printed when the block ends (if anything was added)."""
    metrics = _metrics(job_id, host)
    yield metrics
    if metrics.metric_set:
        metrics.flush_metrics()


def emit_page_batch(batch: PageBatch) -> None:
    """The metrics of one page batch: a document per (job, host) of the batch, and ``PageFailures`` by
    reason class in documents of their own (a document has one set of dimension values)."""
    groups: dict[tuple[str | None, str], _Figures] = defaultdict(_Figures)

    def group(url: str) -> _Figures:
        return groups[(batch.jobs.get(url), host_of(url))]

    for outcome in batch.settled:
        record = outcome.record
        figures = group(record.url)
        if record.status is UrlStatus.COMPLETED:
            figures.counts[PAGES_SUCCEEDED] += 1
        else:
            figures.counts[PAGES_EXCLUDED if record.status is UrlStatus.EXCLUDED else PAGES_FAILED] += 1
            figures.reasons[failure_class(record)] += 1
        fetched = outcome.fetched
        if fetched is not None and fetched.result is FetchResult.SUCCESS and fetched.size:
            figures.counts[BYTES_FETCHED] += fetched.size
    deferred = set(batch.deferred)
    for url in batch.retried:
        group(url).counts[PAGES_DEFERRED if url in deferred else PAGES_RETRIED] += 1
    for url in batch.skipped:
        group(url).counts[PAGES_SKIPPED] += 1
    for url, seconds in batch.latency.items():
        group(url).latencies.append(seconds * 1000.0)

    for (job_id, host), figures in groups.items():
        with _document(job_id, host) as metrics:
            for name, value in figures.counts.items():
                metrics.add_metric(name=name, unit="Bytes" if name == BYTES_FETCHED else "Count", value=value)
            for millis in figures.latencies:
                metrics.add_metric(name=FETCH_LATENCY, unit="Milliseconds", value=millis)
        for reason, count in figures.reasons.items():
            with _document(job_id, host) as metrics:
                metrics.add_dimension(name=REASON_DIMENSION, value=reason)
                metrics.add_metric(name=PAGE_FAILURES, unit="Count", value=count)


def emit_sitemap(task: SitemapTask, record: SitemapRecord | None) -> None:
    """The metrics of one sitemap task: nothing when it ended nothing (claimed elsewhere, already final)."""
    if record is None or not record.status.final:
        return
    with _document(task.job_id, host_of(record.url)) as metrics:
        if record.status is SitemapStatus.COMPLETED and record.kind != ROBOTS_KIND:
            metrics.add_metric(name=SITEMAPS_READ, unit="Count", value=1)
        elif record.status in (SitemapStatus.FAILED, SitemapStatus.INVALID):
            metrics.add_metric(name=SITEMAPS_FAILED, unit="Count", value=1)
        if record.pages_new:
            metrics.add_metric(name=URLS_LISTED, unit="Count", value=record.pages_new)


class _Figures:
    """What one (job, host) of a batch came to."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.reasons: dict[str, int] = defaultdict(int)
        self.latencies: list[float] = []
