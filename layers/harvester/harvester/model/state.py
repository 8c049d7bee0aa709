"""The values the state store's moves take and give: a lease, a page's outcome, what a listing recorded and
a settlement applied, a page sent back, a sitemap's checkpoint and outcome, a job read at one instant."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct, field

from harvester.model.crawl import CrawlRecord, Fetched, SitemapPart
from harvester.model.records import JobCounts, JobRecord, PageRecord, SitemapStatus, SitemapURL, StepDocument


class Lease(Struct, frozen=True):
    """A claim on a record: ``token`` identifies the claimant; the claim lapses at ``until`` (epoch seconds)."""

    token: str
    until: float


class PageOutcome(Struct):
    """The final state of one claimed page, applied together with the job's counters and the URL's crawl
    record as the job's listing and fetch leave it (``crawl``: the listing leaves it to the settlement;
    written only if its stored version is still the one it was computed from: ``crawl.version - 1``)."""

    record: SitemapURL  # the record as it should be stored (status completed or failed)
    crawl: CrawlRecord | None = None
    #: What the fetch came to, kept so that the crawl record can be computed again on a newer version.
    fetched: Fetched | None = None


class Recorded(Struct):
    """What ``record_pages`` did: the pages new to the job, or, when ``stale`` is not empty, nothing for
    the pages of the transaction that met a crawl record another writer had changed (read again, retry)."""

    new: list[PageRecord] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    #: How many of ``new`` each batch written holds, in order (a store that keeps no batches: empty): the
    #: sender sends each batch's tasks as a page message of its own.
    batches: list[int] = field(default_factory=list)
    #: Where each of ``new`` was recorded, by URL, as the store names it for its claims (``PageTask.stored``;
    #: a store that needs no such hint: empty).
    stored: dict[str, str] = field(default_factory=dict)


class Settled(Struct):
    """What ``finish_pages`` did: the URLs applied, and those whose crawl record had moved on (``stale``:
    nothing was written for them; compute their crawl record again on the newer version and retry)."""

    applied: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)


class PageRetry(Struct):
    """A claimed page that goes back to pending, to be tried again after ``not_before``."""

    url: str
    #: The page's retries after this one (None: as they were, for work given back without a try).
    retries: int | None
    error_message: str
    not_before: datetime
    #: No request was sent for it in this delivery (robots.txt could not be read, the host's gate said
    #: later): the try its claim counted is taken back, so ``attempts`` stays the requests sent.
    untried: bool = False
    #: The wait the server asked for (its Retry-After, in seconds), when it asked for one.
    retry_after: float | None = None


class SitemapRelease(Struct, frozen=True):
    """A claimed sitemap given back to pending, to be read again (``StateStore.release_sitemap``)."""

    #: Its error message until its next outcome (a transient failure); None for a reading that goes on.
    error_message: str | None = None
    #: The requests sent for it so far, which replace the claims' count (None: as the claim left it).
    attempts: int | None = None
    #: The document the reading's later steps read, when this release ends a step that kept one; None keeps
    #: what the record notes (``SitemapRecord.step_document``).
    document: StepDocument | None = None


class Checkpoint(Struct, frozen=True):
    """How far a sitemap reading has handed its pages out, and what it counted to get there (see
    ``SitemapRecord.checkpoint_digest``)."""

    enqueued: int
    digest: str | None = None
    probes: int = 0
    #: URLs listed not due although their lastmod advanced (an untrusted host, no probe left).
    held: int = 0
    #: The reading compared its entries with the sitemap's part (``PartDiff``): those it kept for the part are
    #: past the checkpoint without being recorded.
    compared: bool = False
    #: The reading started over after pages were recorded, or was resumed on other bytes
    #: (``SitemapRecord.restarted``).
    restarted: bool = False
    #: The size and SHA-256 of the document's bytes read up to the checkpoint (``DocumentPrefix``).
    prefix_bytes: int = 0
    prefix_digest: str | None = None
    #: The reading replays the document its first step kept (``SitemapRecord.step_document``). A checkpoint a
    #: reading of another document moves clears the note: the note's document is not the one it counts.
    noted: bool = False


class ListedBatch(Struct, frozen=True):
    """Records a listing wrote straight as JSON (``ListedRow``), kept a batch at a time with what their job's
    end takes of them, made with them: the end copies them instead of reading each record again."""

    #: The records as stored (``body_of``), one per line.
    bodies: str
    #: Their change-feed lines (JSON), one per line; empty when none is in the feed.
    feed: bytes
    #: How many records there are of each change kind.
    kinds: dict[str, int]
    #: Their URLs' keys (``url_key``), one per line, where the store keeps them.
    keys: str = ""

    @property
    def count(self) -> int:
        return sum(self.kinds.values())


class AdoptedPart(Struct, frozen=True):
    """A sitemap's part a job adopted (``StateStore.adopt_part``) at ``at``: its URLs are the job's, final,
    their lines the part's with the job's tail (``crawldb.parts``); but for ``excluded``, the URLs of the
    part the job listed one by one or that its sitemap does not list (a part adopted in part)."""

    part: SitemapPart
    at: datetime
    excluded: frozenset[str] = frozenset()
    #: Adopted once the reading had listed the entries it did not keep (``excluded`` may be empty: nothing
    #: of the part changed, but entries were added): the job's end makes the sitemap's next part of it.
    partly: bool = False

    @property
    def urls(self) -> int:
        """How many of the part's URLs the job took from it."""
        return self.part.urls - len(self.excluded)


class OpenPages(Struct, frozen=True):
    """Pages of a job still open (pending, or processing with their leases let go), a batch of its records'
    worth (``StateStore.open_pages``), and the position after that batch, where a resume goes on."""

    pages: list[SitemapURL]
    after: str


class RecordPage(Struct, frozen=True):
    """Records of an ended job, a stored batch's worth (``StateStore.job_record_pages``: what ``job_records``
    yields, in its order), and the position after them, where a pass over the job's records resumes."""

    items: list[str | ListedBatch | AdoptedPart]
    after: str


class EndProgress(Struct, frozen=True):
    """How far the end of a job has got between the invocations that write it (``StateStore.save_end``): the
    orphan pass over the site's URL records is done up to ``orphans_at`` (a ``CrawlDatabase.url_pages``
    position; None: not begun), and the feed lines of the URLs it found no longer listed, ``removed`` of
    them, are in the documents ``removed_lines``, in order.

    Once the orphan pass is over, the pass over the job's records is done up to ``records_at`` (a
    ``StateStore.job_record_pages`` position; None: not begun), what each earlier step of it wrote in the
    documents named by ``pieces`` (``pipeline.records_pass``), in order. Once that pass is over too, in an
    end in steps, the parts of the first ``parts_at`` sitemaps the job may make parts of are made (None: the
    records pass is not over).

    Once the result is written, the collection of the site's crawl database that follows it (``collect``) may
    go on in steps too, from the state a step stored in the document ``collecting``.

    Before all that, a job that keeps WARC has its WARC files swept (``WarcStore.sweep``) up to the file
    ``warc_at`` (None: not begun), until ``warc_swept``."""

    warc_at: str | None = None
    warc_swept: bool = False
    orphans_at: str | None = None
    removed_lines: tuple[str, ...] = ()
    removed: int = 0
    records_at: str | None = None
    pieces: tuple[str, ...] = ()
    parts_at: int | None = None
    collecting: str | None = None


class SitemapOutcome(Struct):
    status: SitemapStatus
    kind: str | None = None
    error_message: str | None = None
    truncated: str | None = None
    final_url: str | None = None
    http_status: int | None = None
    children: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    invalid_children: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)
    document_key: str | None = None
    finished_at: datetime | None = None
    #: Unchanged since the last complete reading (a 304, or the same bytes): replayed, not parsed.
    not_modified: bool = False
    #: Requests sent for the sitemap by the job, when the reading counted them (else the claims' count).
    attempts: int | None = None
    #: The reading started over after pages were recorded, or was resumed on other bytes
    #: (``SitemapRecord.restarted``), whether or not a checkpoint written since says so.
    restarted: bool = False


class JobSnapshot(Struct, frozen=True):
    """A job and its counters read at one instant, so that a completion check cannot see a torn state."""

    job: JobRecord
    counts: JobCounts
    last_update: datetime
