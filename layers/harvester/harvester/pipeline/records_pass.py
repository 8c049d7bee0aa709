"""The records pass of a job's end: each of the job's records becomes its line in ``urls.jsonl`` (with a
copy for the Parquet index), its line in the change feed, and its share of the summary's counts, the site's
lastmod evidence and the sitemap parts made for the next jobs (``PartMaker``).

The pass reads the records a stored batch at a time (``StateStore.job_record_pages``) and can stop after any
batch when its step's time is up or it has read ``end_piece_urls`` URLs: what it wrote so far is stored as a
*piece* (its lines, feed lines, its index file, the part maker's spool, and its tallies, under
``steps/<job>/piece-<n>-<claim>``), and the position after the batch is where the end's next step goes on.
The last step takes in the pieces, in order, before its own records: the outputs are joined from the pieces'
documents (``DocumentStore.join``: S3 copies them), the index is the pieces' files and its own
(``job_index``), and the tallies and the maker's state are summed, so that an end in steps writes what an end
in one step writes (the index in as many files as steps).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
from msgspec import Struct, field

from harvester.archive.index import IndexLines, Tee
from harvester.archive.lines import LineWriter, json_bytes
from harvester.archive.results import PARQUET_TYPE, enriched_block, enriched_line, record_line, stored_record
from harvester.crawldb import parts
from harvester.crawldb.changes import ChangeTally, feed_line, kind_of
from harvester.crawldb.trust import UNFETCHED, Evidence, EvidenceTally
from harvester.model.fetch_stats import FetchStats
from harvester.model.records import ErrorDetail, JobRecord, SitemapURL, UrlStatus
from harvester.model.state import AdoptedPart, ListedBatch
from harvester.pipeline.context import StepContext
from harvester.pipeline.fetch_tally import FetchTally
from harvester.pipeline.job_index import build_step_index
from harvester.pipeline.part_documents import PartRows, adopted_lines
from harvester.pipeline.parts import MakerState, PartMaker

log = logging.getLogger(__name__)

_FINAL = frozenset(s.value for s in UrlStatus if s.final)
#: The statuses of a URL listed and not fetched: completed, or failed when known gone or failing.
_LISTED_FINAL = frozenset({UrlStatus.COMPLETED.value, UrlStatus.FAILED.value})
#: Distinct reasons a tally keeps; past them, the rest are counted under ``other`` (reasons that name an
#: address or a URL could be many).
REASONS_KEPT = 50
#: The counts of a ``RecordsTally`` that the pieces' add up.
_SUMMED = ("succeeded", "failed", "excluded", "omitted", "listed", "adopted", "known_failed", "adopted_failed")
#: A failed record's status as its stored line writes it (a raw sequence no JSON string can hold).
_FAILED_FIELD = b'"status":"failed"'
#: The documents of a piece, by kind: ``<stem>.<kind>``.
RECORDS, FEED, INDEX, SPOOL, TALLY = "records.jsonl", "feed.jsonl", "index.parquet", "spool", "tally.json"


class ReasonTally:
    """Counts by reason for the job's result, at most ``REASONS_KEPT`` reasons."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, reason: str, count: int = 1) -> None:
        if reason not in self.counts and len(self.counts) >= REASONS_KEPT:
            reason = "other"
        self.counts[reason] = self.counts.get(reason, 0) + count

    def add_counts(self, counts: dict[str, int]) -> None:
        for reason, count in counts.items():
            self.add(reason, count)


class RecordsTally(Struct, kw_only=True):
    """What a step of the records pass counted, as its piece keeps it (``tally.json``): its own counts, errors,
    changes and evidence, the exclusions and fetches of every step up to it (``carry_on``)."""

    succeeded: int = 0
    failed: int = 0
    excluded: int = 0
    omitted: int = 0
    listed: int = 0
    adopted: int = 0
    #: Of ``failed``: URLs the job did not fetch (not due) that the crawl database knows gone or failing
    #: (``crawl_state.known_failure``); and those of them in adopted parts, which the listing counted as
    #: succeeded (an adoption counts a part's URLs without reading its lines).
    known_failed: int = 0
    adopted_failed: int = 0
    exclusions: dict[str, int] = field(default_factory=dict)
    errors: list[ErrorDetail] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, Evidence] = field(default_factory=dict)
    fetches: FetchStats | None = None
    #: Whether the piece's index file was built (``INDEX``).
    indexed: bool = False
    maker: MakerState | None = None


class RecordsPass:
    """One step's share of the records pass: its lines in temporary files until the step stores them (as the
    job's outputs, or as a piece), its tallies in memory."""

    def __init__(
        self, ctx: StepContext, job: JobRecord, *, extras: dict[str, dict[str, Any]], maker: PartMaker | None
    ) -> None:
        self.ctx, self.job, self.extras, self.maker = ctx, job, extras, maker
        self.records: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close)
        self.feed: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.copy = IndexLines()
        self.out, self.changed = LineWriter(Tee(self.records, self.copy)), LineWriter(self.feed)  # type: ignore[arg-type]
        self.counts = RecordsTally()
        self.exclusions = ReasonTally()
        self.fetches = FetchTally()
        self.changes, self.evidence = ChangeTally(), EvidenceTally()
        self.made_rows: list[PartRows] = []  # the adopted parts' index rows
        self._carried: dict[str, RecordsTally] = {}  # (the last piece's tally, read by ``carry_on``)
        #: The index files of the pieces taken in (``take_in``), in order: their documents' keys, None for one
        #: that could not be built.
        self.index_files: list[str | None] = []

    # reading ----------------------------------------------------------------------------------------

    def read(self, items: Iterable[str | ListedBatch | AdoptedPart]) -> None:
        """Writes and counts the records of a page of the job's records."""
        for item in items:
            if isinstance(item, AdoptedPart):
                self._adopted(item)
            elif isinstance(item, ListedBatch):
                self._listed(item)
            else:
                self._record(item)

    def _adopted(self, item: AdoptedPart) -> None:
        """A sitemap's part: its lines with the job's tail."""
        counts, documents, extras = self.counts, self.ctx.documents, self.extras
        count, kind = item.urls, parts.reason_of(self.job.request)
        block = adopted_lines(documents, self.job.request, item, extras) if count else b""
        failed = block.count(_FAILED_FIELD)
        counts.listed += count
        counts.adopted += count
        counts.succeeded += count - failed
        counts.failed += failed
        counts.known_failed += failed
        counts.adopted_failed += failed
        if failed:
            self._failures(block)
        self.changes.add_counts({kind.value: count})
        rows = item.part.index if not extras else None  # (else its index rows made with the job's)
        if self.maker is not None:
            self.maker.adopted(item, block, rows=rows)
        if not count:
            return
        if rows is None:
            self.out.add_block(block[:-1])
        else:  # (its index rows are the part's, but the excluded URLs': the lines go to the records only)
            self.out.flush()
            self.records.write(block)
            self.made_rows.append(PartRows(rows, kind.value, item.excluded))

    def _listed(self, item: ListedBatch) -> None:
        """Records written straight as JSON a batch at a time, summarised then: copied now."""
        count, counts = item.count, self.counts
        failed = item.bodies.count(_FAILED_FIELD.decode())
        counts.listed += count
        counts.succeeded += count - failed
        counts.failed += failed
        counts.known_failed += failed
        if failed:
            self._failures(item.bodies.encode())
        self.changes.add_counts(item.kinds)
        block = enriched_block(item.bodies, self.extras) if self.extras else item.bodies.encode()
        self.out.add_block(block)
        if self.maker is not None:
            self.maker.listed_block(block, item.keys)
        if item.feed:
            self.changed.add_block(item.feed)

    def _record(self, body: str) -> None:
        counts = self.counts
        stored = stored_record(body)
        counts.listed += 1
        more = self.extras.get(stored["url"]) if self.extras else None
        line = enriched_line(record_line(body), more) if more else record_line(body)
        self.out.add(line)
        if self.maker is not None:
            if stored.get("fetch_reason") in UNFETCHED and stored.get("status") in _LISTED_FINAL:
                self.maker.listed_line(line, stored)
            else:
                self.maker.fetched_line(line, stored)
        status = stored.get("status")
        if status not in _FINAL:
            log.error("job ended with an open URL", extra={"job_id": self.job.job_id, "url": stored.get("url")})
            return
        self.fetches.add(stored)
        if status == UrlStatus.COMPLETED.value:
            counts.succeeded += 1
        elif status == UrlStatus.EXCLUDED.value:
            counts.excluded += 1
            self.exclusions.add(stored.get("error_message") or "unknown")
        else:
            counts.failed += 1
            counts.known_failed += stored.get("fetch_reason") == "not_due"
            self._error(stored)
        kind = kind_of(stored)
        self.changes.add(kind)
        reason = stored.get("fetch_reason")
        if reason is not None and reason not in UNFETCHED:  # (a URL the job did not fetch is no evidence)
            self.evidence.add(SitemapURL.model_validate_json(body))
        line = feed_line(stored, kind)
        if line is not None:
            self.changed.add(json_bytes(line))

    def _failures(self, block: bytes) -> None:
        """The errors of a block's failed lines (URLs known gone or failing), as a record's are kept."""
        for line in block.splitlines():
            if _FAILED_FIELD in line:
                self._error(msgspec.json.decode(line))

    def _error(self, stored: dict[str, Any]) -> None:
        counts = self.counts
        if len(counts.errors) < self.ctx.settings.max_error_details:
            error = stored.get("error_message") or "unknown"
            counts.errors.append(ErrorDetail(url=stored["url"], kind="page", error=error))
        else:
            counts.omitted += 1

    def flush(self) -> None:
        self.out.flush()
        self.changed.flush()

    # pieces -----------------------------------------------------------------------------------------

    def tally(self) -> RecordsTally:
        """What this step counted, with the part maker's places (its spool's lines are stored apart)."""
        counts = self.counts
        counts.exclusions = self.exclusions.counts
        counts.changes = self.changes.counts
        counts.evidence = self.evidence.hosts
        counts.fetches = self.fetches.stats
        return counts

    def store_piece(self, stem: str) -> None:
        """Stores what this step wrote as the piece ``stem``: its lines, its index file (built now), the part
        maker's spool and the tally (the last document: a piece whose tally is there is whole)."""
        self.flush()
        put = self.ctx.documents.put
        for kind, body in ((RECORDS, self.records), (FEED, self.feed)):
            body.seek(0)
            put(f"{stem}.{kind}", body, content_type="application/x-ndjson")
        tally = self.tally()
        built = self.build_index()
        if built is not None:
            with built.open("rb") as body:
                put(f"{stem}.{INDEX}", body, content_type=PARQUET_TYPE)
            tally.indexed = True
        if self.maker is not None:
            tally.maker, spool = self.maker.pause()
            put(f"{stem}.{SPOOL}", spool, content_type="application/octet-stream")
        put(f"{stem}.{TALLY}", msgspec.json.encode(tally), content_type="application/json")

    def build_index(self, *, keep: Path | None = None, site: str | None = None) -> Path | None:
        """This step's index file (``job_index.build_step_index``): its records' rows and its adopted parts'."""
        fetch = self.maker.rows_file if self.maker is not None else None
        return build_step_index(self.ctx, self.job.job_id, self.copy, self.made_rows, keep=keep, site=site, fetch=fetch)

    def carry_on(self, stems: Sequence[str]) -> None:
        """Goes on counting the exclusions and the fetches from the last of the pieces earlier steps stored
        (``stems``), as one tally would: which reasons it names and which go under ``other`` depends on what
        came before. ``FileNotFoundError`` when that piece's tally is gone."""
        if stems:
            self._carried = {stems[-1]: self._tally_of(stems[-1])}
            self.exclusions.counts = dict(self._carried[stems[-1]].exclusions)
            self.fetches.resume(self._carried[stems[-1]].fetches)

    def _tally_of(self, stem: str) -> RecordsTally:
        """A piece's tally (read once a step)."""
        if stem in self._carried:
            return self._carried[stem]
        return msgspec.json.decode(self.ctx.documents.get(f"{stem}.{TALLY}"), type=RecordsTally)

    def take_in(self, stems: Sequence[str]) -> None:
        """Takes in the pieces earlier steps stored (``stems``, in order) as if this step had read their records
        before its own: their tallies and part maker's state (their lines are joined with this step's at the
        end: ``join``; their index files are the index's: ``index_files``). Called once this step has read its
        records. ``FileNotFoundError`` when a document of a piece is gone."""
        if not stems:
            return
        tallies = [self._tally_of(stem) for stem in stems]
        pairs = list(zip(stems, tallies, strict=True))
        self.index_files = [f"{stem}.{INDEX}" if tally.indexed else None for stem, tally in pairs]
        if self.maker is not None and any(tally.maker is None for tally in tallies):
            self.maker.forgo("a step of the job's end kept no part maker's state")  # (its lines are not in one)
        elif self.maker is not None:  # (each goes before what the maker holds: the last piece first)
            for stem, tally in reversed(pairs):
                assert tally.maker is not None
                self.maker.resume(tally.maker, f"{stem}.{SPOOL}")
        merged, changes, evidence = RecordsTally(), ChangeTally(), EvidenceTally()
        errors: list[ErrorDetail] = []
        for tally in [*tallies, self.tally()]:
            for name in _SUMMED:
                setattr(merged, name, getattr(merged, name) + getattr(tally, name))
            errors += tally.errors
            changes.add_counts(tally.changes)
            for host, found in tally.evidence.items():
                held = evidence.hosts.setdefault(host, Evidence())
                held.confirmed += found.confirmed
                held.refuted += found.refuted
        kept = self.ctx.settings.max_error_details
        merged.errors, merged.omitted = errors[:kept], merged.omitted + len(errors[kept:])
        self.counts, self.changes, self.evidence = merged, changes, evidence  # (exclusions, fetches carried on)

    def join(self, key: str, kind: str, own: IO[bytes], stems: Iterable[str], stem: str, *, content_type: str) -> None:
        """Stores the output ``key``: the pieces' documents of ``kind``, then ``own`` (this step's), at once when
        there are no pieces, else stored as this step's piece ``stem`` and joined."""
        own.seek(0)
        parts_of = [f"{s}.{kind}" for s in stems]
        if not parts_of:
            self.ctx.documents.put(key, own, content_type=content_type)
            return
        self.ctx.documents.put(f"{stem}.{kind}", own, content_type=content_type)
        self.ctx.documents.join(key, [*parts_of, f"{stem}.{kind}"], content_type=content_type)

    def close(self) -> None:
        self.records.close()
        self.feed.close()
        self.copy.close()

    def __enter__(self) -> RecordsPass:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def piece_documents(stem: str) -> list[str]:
    """The documents a piece may have."""
    return [f"{stem}.{kind}" for kind in (RECORDS, FEED, INDEX, SPOOL, TALLY)]
