"""What a job's fetches came to, as its result keeps it (``SitemapIngestionResult.fetches``): the HTTP statuses
its requests were answered with, the distributions of their latency and of the pages' sizes, and its failures
by reason with a few of their URLs. The job's end counts them in its pass over the records
(``pipeline.fetch_tally``); the crawl report shows them (``harvester.report``)."""

from __future__ import annotations

from bisect import bisect_left

from msgspec import field

from harvester.model.base import Model, NonNegative, invalid

#: The latency buckets (milliseconds from the request to the response's headers), and the size buckets
#: (bytes of a page's body): fixed, so that every job's distributions compare.
LATENCY_BOUNDS_MS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
SIZE_BOUNDS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
#: The HTTP status of a request that got no answer (a refused connection, a timeout, robots.txt unreachable).
NO_ANSWER = "none"


class Histogram(Model, kw_only=True):
    """How many values were at or under each of ``bounds`` (and over the one before); the last of ``counts``
    is those over every bound, so there is one count more than bounds."""

    bounds: list[int]
    counts: list[NonNegative]
    #: The sum of the values and the largest one.
    total: NonNegative = 0
    largest: NonNegative = 0

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds) + 1:
            raise invalid("counts", "must have one count more than bounds")

    @classmethod
    def over(cls, bounds: tuple[int, ...]) -> Histogram:
        return cls(bounds=list(bounds), counts=[0] * (len(bounds) + 1))

    def add(self, value: int) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.largest = max(self.largest, value)

    @property
    def count(self) -> int:
        return sum(self.counts)


def _latency() -> Histogram:
    return Histogram.over(LATENCY_BOUNDS_MS)


def _sizes() -> Histogram:
    return Histogram.over(SIZE_BOUNDS)


class FetchStats(Model, kw_only=True):
    """The fetches of one job: those of the URLs it asked for (not those it listed without fetching)."""

    #: URLs the job set out to fetch (its fetch reason is neither ``not_due`` nor ``listed``; not excluded).
    fetched: NonNegative = 0
    #: Those URLs by the HTTP status of their last answer (``none``: no answer).
    http_statuses: dict[str, int] = {}
    #: Milliseconds from a request to its response's headers, for the URLs that got an answer.
    latency_ms: Histogram = field(default_factory=_latency)
    #: Bytes of the body of each URL fetched whole (a 304's: the stored version's).
    size_bytes: Histogram = field(default_factory=_sizes)
    #: The job's failed URLs by reason (at most 50 reasons; past them, ``other``), and up to 3 URLs of each.
    failures: dict[str, int] = {}
    failure_samples: dict[str, list[str]] = {}
