"""Sitemap parts at a job's end: the parts the job adopted written out as its records, and the parts of the
sitemaps it listed one by one made for the next jobs (see ``SitemapPart`` and ``crawldb.parts``).

A part is made of what the job's end writes anyway: each record line of a URL the job listed and did not
fetch is already the line a next job would write, but for its tail; a URL the job fetched, or that failed,
is written as a next job that does not fetch it would write it, from its crawl record as the job left it
(read once, at the end, a batch at a time). The lines go to a spool as the records go by (a run per block),
and each sitemap's part is then written whole from its runs: memory holds the runs' places, not the lines.

A sitemap gets a part only when the part is the whole truth of its listing: read completely and without
children (a urlset, a feed, a text file) by this job in one request, every URL's line in the shape above;
and only when it lists enough URLs (``sitemap_part_min_urls``) that listing them again one by one costs more
than making and adopting a part.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeGuard

import orjson
from msgspec import Struct

from harvester.archive.index import RowMaker
from harvester.archive.results import PARQUET_TYPE
from harvester.crawldb import parts
from harvester.crawldb.schedule import lastmod_advanced
from harvester.model.crawl import ChangeKind, CrawlRecord, SitemapPart
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus, SitemapURL, body_of, key_of, url_key
from harvester.model.state import AdoptedPart
from harvester.patience import Busy
from harvester.pipeline.context import StepContext
from harvester.pipeline.listed_rows import unfetched
from harvester.pipeline.part_documents import part_folder, part_key
from harvester.pipeline.part_spool import PartSpool

log = logging.getLogger(__name__)

#: The time a part's re-rendered lines are made with: their tail is cut off, so it is never seen.
_ANY_TIME = datetime.fromisoformat("2000-01-01T00:00:00+00:00")
#: The documents of a part (``part_key``'s kinds).
_PART_DOCUMENTS = ("lines", "parquet")
#: Lines of a sitemap held back before they are written to the spool at once, and lines of all sitemaps.
_PENDING_LINES = 1000
_PENDING_ALL = 20_000
#: URLs whose crawl records are read at once to write their lines.
_READ_BATCH = 500
#: Sitemaps whose parts take their index rows from the parts they inherit in one split, when the job's own
#: rows are not there to be split at once (an end in steps).
_SPLIT_GROUP = 20


class MakerState(Struct):
    """What a ``PartMaker`` took in but its spool's lines (``PartMaker.pause``): the places of each sitemap's
    lines, keys and fetched lines in its spool, and its tallies."""

    lines: dict[str, list[tuple[int, int]]]
    keys: dict[str, list[tuple[int, int]]]
    fetched: dict[str, list[tuple[int, int]]]
    due: dict[str, datetime]
    held: dict[str, int]
    counts: dict[str, int]
    refused: list[str]
    inheriting: dict[str, AdoptedPart]
    rows_taken: list[str]
    kept_lines: dict[str, int]
    taken: list[str]


class PartMaker:
    """The parts of the sitemaps a job listed one by one, made from its record lines as its end writes them
    (``listed_block`` and ``listed_line`` for lines of URLs listed and not fetched, ``fetched_line`` for any
    other), then stored (``finish``)."""

    def __init__(
        self, ctx: StepContext, job: JobRecord, sitemaps: Iterable[SitemapRecord], *, verbatim: bool = False
    ) -> None:
        self.ctx = ctx
        self.job = job
        self.verbatim = verbatim  # (``SitemapPart.verbatim``, for the parts made of the job's lines alone)
        self.site = job.request.origin
        self.listing = parts.listing_of(job.request, job.start_time)
        self.sitemaps = {
            s.url: s
            for s in sitemaps
            if s.status is SitemapStatus.COMPLETED
            and not s.truncated
            and s.kind in parts.PAGE_KINDS
            and not s.children
            and not s.invalid_children
            # (a reading that started over after recording pages, on a document changed under a resumed
            # reading: the job keeps the records its first delivery listed, which that document need not list;
            # one resumed from its checkpoint on the same document lists what one reading lists)
            and not s.restarted
            # A part holds the URLs whose records name its sitemap, so a reading that listed a URL another
            # sitemap of the job listed first (a URL of two urlsets) gets none: its part would lack that
            # URL, which a job adopting it whole without reading the other sitemap must still list. Such a
            # sitemap is read entry by entry.
            and s.pages_new >= s.pages_recorded
        }
        self.spool = PartSpool(ctx.documents)
        #: Per sitemap, the places in the spool of its lines (without their tail) and their URLs' keys, and
        #: of the lines of its URLs the job fetched, each: (offset, length).
        self.lines: dict[str, list[tuple[int, int]]] = {}
        self.keys: dict[str, list[tuple[int, int]]] = {}
        self.fetched: dict[str, list[tuple[int, int]]] = {}
        self.due: dict[str, datetime] = {}
        self.held: dict[str, int] = {}  # per sitemap: fetched URLs whose lastmod advanced past their fetch
        self.counts: dict[str, int] = {}  # per sitemap: its URLs
        self.refused: set[str] = set()
        self.inheriting: dict[str, AdoptedPart] = {}  # per sitemap: the part the job adopted in part
        self.rows_taken: set[str] = set()  # sitemaps whose part, adopted in part, gave the job's index its rows
        self.kept_lines: dict[str, int] = {}  # per sitemap: the lines it kept of that part
        self.taken: set[str] = set()  # sitemaps whose part the job adopted whole: it stays theirs
        self._row_files: dict[str, Path] = {}  # (``rows_file``'s)
        self._pending: dict[str, tuple[list[bytes], list[bytes]]] = {}  # per sitemap: lines and keys to keep
        self._held = 0  # (lines in ``_pending``)
        self._tail = b""
        self.folder = Path(tempfile.mkdtemp(prefix="harvest-parts-"))
        #: Where the job's index leaves its records' rows (``build_index``'s ``keep``): the parts' rows of
        #: URLs the job did not fetch are those rows, split by sitemap.
        self.job_rows = self.folder / "job-rows.parquet"

    def adopted(self, adopted: AdoptedPart, block: bytes, *, rows: str | None) -> None:
        """The job adopted the sitemap's part (``block``: its lines, as the job's end writes them; ``rows``:
        the part's index rows when the job's index takes them, not rows made of ``block``). Taken whole, it
        stays the sitemap's; in part, its lines are the job's listed lines, and the part made of them
        inherits it (``parts.Lineage``) and its index rows."""
        sitemap = adopted.part.sitemap
        if not adopted.partly:
            self.sitemaps.pop(sitemap, None)
            self.taken.add(sitemap)
            return
        self.inheriting[sitemap] = adopted
        if rows is not None:
            self.rows_taken.add(sitemap)
        if not block:
            return
        self.kept_lines[sitemap] = block.count(b"\n")
        stored = self.ctx.crawldb.part_keys(self.site, adopted.part)
        left_out = {url_key(url) for url in adopted.excluded}
        keys = [key for key in stored or () if key not in left_out]  # (the part's, but the excluded URLs')
        if len(keys) != block.count(b"\n"):  # (not kept beside the part: made of its lines)
            keys = [key_of(url) for url in parts.block_urls(block)]
        self.listed_block(block[:-1], "\n".join(keys))
        self._due(sitemap, parts.block_due(block))  # (each line has a next fetch of its own: listed apart)

    def listed_block(self, block: bytes, keys: str) -> None:
        """A batch of lines (joined, without the last newline) one listing wrote straight as JSON, and their
        URLs' keys: one sitemap's, listed at one time, so one tail."""
        first = block[: block.find(b"\n")] if b"\n" in block else block
        record = orjson.loads(first)
        sitemap = record.get("sitemap")
        if not self._wanted(sitemap):
            return
        stripped = parts.strip(first)
        count = block.count(b"\n") + 1
        tail = first[len(stripped) :] if stripped is not None else b""
        if not tail or block.count(tail + b"\n") != count - 1 or not block.endswith(tail) or not keys:
            for line in block.split(b"\n"):  # (not one tail: line by line)
                self.listed_line(line, orjson.loads(line))
            return
        self._flush(sitemap)  # (the sitemap's lines in the order the job's records give them)
        self.spool.keep(self.lines, sitemap, block.replace(tail + b"\n", b"\n")[: -len(tail)])
        self._count(sitemap, count)
        self.spool.keep(self.keys, sitemap, keys.encode())
        self._due(sitemap, record.get("next_fetch_time"))

    def listed_line(self, line: bytes, record: Mapping[str, Any]) -> None:
        """A line of a URL listed and not fetched (``record``: its values)."""
        sitemap = record.get("sitemap")
        if not self._wanted(sitemap):
            return
        tail = self._tail  # (a batch's lines share theirs: the last one's is tried first)
        if tail and line.endswith(tail):
            stripped: bytes | None = line[: -len(tail)]
        else:
            stripped = parts.strip(line)
            if stripped is None:
                self.refused.add(sitemap)
                return
            self._tail = line[len(stripped) :]
        pending = self._pending.setdefault(sitemap, ([], []))
        pending[0].append(stripped)  # type: ignore[arg-type]
        self._count(sitemap, 1)
        pending[1].append(url_key(record["url"]).encode())
        self._held += 1
        if len(pending[0]) >= _PENDING_LINES:
            self._flush(sitemap)
        elif self._held >= _PENDING_ALL:  # (many sitemaps, each with few lines held: all of them written)
            self._flush()
        self._due(sitemap, record.get("next_fetch_time"))

    def _flush(self, sitemap: str | None = None) -> None:
        """Writes the lines (and keys) held back, of one sitemap or of all."""
        for url in [sitemap] if sitemap else list(self._pending):
            lines, keys = self._pending.pop(url, ([], []))
            self._held -= len(lines)
            if lines:
                self.spool.keep(self.lines, url, b"\n".join(lines))
                self.spool.keep(self.keys, url, b"\n".join(keys))

    def fetched_line(self, line: bytes, record: Mapping[str, Any]) -> None:
        """A line of a URL the job fetched (or tried to): its part line is written from its crawl record at
        the end."""
        sitemap = record.get("sitemap")
        if self._wanted(sitemap):
            self.spool.keep(self.fetched, sitemap, line)
            self._count(sitemap, 1)

    def finish(
        self, *, start: int = 0, pause: Callable[[], bool] | None = None, most: int = 0
    ) -> tuple[list[SitemapPart], int | None]:
        """Stores the part of each sitemap it may make, from the ``start``-th; returns those stored, and where
        the next step goes on when ``pause`` said, after a part, that this step's time is up, or once it has
        looked at ``most`` sitemaps (0: no bound) (None: all are made). The maker is closed either way."""
        made: list[SitemapPart] = []
        self._flush()
        rows = RowMaker(self.folder)
        try:
            wanted = self.wanted
            job_rows = self.job_rows if self.job_rows.exists() else None
            # (the job's rows split at once for them all; else the inherited parts' rows, a few sitemaps at once)
            size = len(wanted) if job_rows is not None else _SPLIT_GROUP
            at = start
            while at < len(wanted):
                group = wanted[at : at + size]
                split = {url: n for n, url in enumerate(group) if url not in self.fetched}
                kept = self._kept_rows(split, listed_rows=job_rows is not None)
                grouped = None
                if split and (job_rows is not None or kept):
                    try:
                        grouped = rows.split(job_rows, split, self.folder / f"split-{at}.parquet", kept=kept)
                    except Exception:  # (the parts' rows are then made of their lines)
                        log.exception("index rows not split by sitemap", extra={"job_id": self.job.job_id})
                for url in group:
                    try:
                        taken = (grouped, split[url]) if grouped is not None and url in split else None
                        part = self._make(self.sitemaps[url], rows, taken)
                        if part is not None:
                            made.append(part)
                    except Busy:
                        raise
                    except Exception:  # (a part is a saving for the next jobs, never the job's outcome)
                        log.exception("sitemap part not made", extra={"job_id": self.job.job_id, "sitemap": url})
                    at += 1
                    if pause is not None and at < len(wanted) and (pause() or at - start == most):
                        return made, at
                if grouped is not None:
                    grouped.unlink(missing_ok=True)
            return made, None
        finally:
            rows.close()
            self.close()
            self.ctx.crawldb.release_job_urls()

    @property
    def wanted(self) -> list[str]:
        """The sitemaps it makes a part of (``finish``), in order."""
        least = self.ctx.settings.sitemap_part_min_urls
        return [url for url in self.sitemaps if url not in self.refused and self.counts.get(url, 0) >= least]

    def forgo(self, reason: str) -> None:
        """Makes no part (it was not given every line of the job's records: a part would lack some)."""
        if self.sitemaps:
            log.warning("no sitemap part made", extra={"job_id": self.job.job_id, "reason": reason})
        self.sitemaps.clear()

    def _kept_rows(self, split: dict[str, int], *, listed_rows: bool) -> dict[int, tuple[Path, frozenset[str]]]:
        """The index rows of the parts the job adopted in part and whose rows its index took, for the sitemaps
        whose rows are split from the job's (``split``, by their number there): each part's file, and the URLs
        whose rows it leaves out. A sitemap whose part's rows cannot be read, or that has lines of its own
        when the job's rows are not there (``listed_rows``: its index was not built), is taken out of
        ``split``: its rows are made of its lines."""
        kept = {}
        for url, n in list(split.items()):
            if url not in self.rows_taken:
                continue
            held = self.inheriting[url]
            assert held.part.index is not None  # (its rows were taken)
            if not listed_rows and self.counts.get(url, 0) != self.kept_lines.get(url, 0):
                del split[url]
                continue
            try:
                path = self.rows_file(held.part.index)
            except Busy:
                raise
            except Exception:
                del split[url]
                continue
            kept[n] = (path, held.excluded)
        return kept

    def pause(self) -> tuple[MakerState, IO[bytes]]:
        """What the maker took in, for the step of a job's end that makes the parts (``resume``): its places and
        tallies, and its spool, rewound, each sitemap's lines, keys and fetched lines in a run each, one after
        the other (a later step reads a sitemap's with a request or three)."""
        self._flush()
        self.lines, self.keys, self.fetched = self.spool.grouped((self.lines, self.keys, self.fetched))
        state = MakerState(
            lines=self.lines,
            keys=self.keys,
            fetched=self.fetched,
            due=self.due,
            held=self.held,
            counts=self.counts,
            refused=sorted(self.refused),
            inheriting=self.inheriting,
            rows_taken=sorted(self.rows_taken),
            kept_lines=self.kept_lines,
            taken=sorted(self.taken),
        )
        return state, self.spool.rewound()

    def resume(self, state: MakerState, spool: str) -> None:
        """Takes in what the maker of an earlier step of the job's end took in (``pause``: its ``state``, and
        its spool, stored as the document ``spool`` and read from there a sitemap's runs at a time) as if it
        had been given those lines before its own: the earlier steps' makers resumed from the last to the
        first, this one holds what one maker of all the lines holds."""
        self._flush()
        base = self.spool.add_stored(spool)
        for mine, theirs in ((self.lines, state.lines), (self.keys, state.keys), (self.fetched, state.fetched)):
            for sitemap, runs in theirs.items():
                mine[sitemap] = [(offset + base, length) for offset, length in runs] + mine.get(sitemap, [])
        for sitemap, when in state.due.items():
            self._due(sitemap, when)
        for sitemap, count in state.held.items():
            self.held[sitemap] = self.held.get(sitemap, 0) + count
        for sitemap, count in state.counts.items():
            self._count(sitemap, count)
        self.refused.update(state.refused)
        self.inheriting.update(state.inheriting)
        self.rows_taken.update(state.rows_taken)
        self.kept_lines.update(state.kept_lines)
        for sitemap in state.taken:
            self.sitemaps.pop(sitemap, None)
            self.taken.add(sitemap)

    def rows_file(self, key: str) -> Path:
        """A part's index rows (its document ``key``) as a file of the maker's, read once for the job's index
        and the part made of it."""
        path = self._row_files.get(key)
        if path is None:
            path = self.folder / f"rows-{len(self._row_files)}.parquet"
            path.write_bytes(self.ctx.documents.get(key))
            self._row_files[key] = path
        return path

    def close(self) -> None:
        self.spool.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PartMaker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _count(self, sitemap: str, urls: int) -> None:
        self.counts[sitemap] = self.counts.get(sitemap, 0) + urls

    def _wanted(self, sitemap: str | None) -> TypeGuard[str]:
        return sitemap in self.sitemaps and sitemap not in self.refused

    def _make(self, sitemap: SitemapRecord, rows: RowMaker, split: tuple[Path, int] | None) -> SitemapPart | None:
        """Stores the sitemap's part (``split``: the file of the rows split from the job's and its group there,
        if any)."""
        url = sitemap.url
        known = self.ctx.crawldb.get_sitemap(self.site, url)
        if known is None or known.document_key != sitemap.document_key:
            return None  # (the crawl database remembers another reading of it: a later job's)
        before, epoch = self.ctx.crawldb.sitemap_part(self.site, url)  # (before the records are read)
        inherited = self.inheriting.get(url)
        if inherited is not None:
            if before is None or before.job_id != inherited.part.job_id:
                return None  # (replaced since: another job's part)
        elif before is not None and before.job_id != self.job.job_id:
            if not self._settle(before, self._keys(url)):
                return None
            before, epoch = self.ctx.crawldb.sitemap_part(self.site, url)
        fetched: list[tuple[bytes, str]] = []
        for rendered in self._fetched_lines(url):
            if rendered is None:
                return None
            fetched.append(rendered)
        lines = b"".join([*self.spool.read(self.lines.get(url, ())), *(line for line, _ in fetched)])
        keys = self._keys(url) + [key for _, key in fetched]
        key = part_key(self.site, url, self.job.job_id, "lines")
        self.ctx.documents.put(key, lines, content_type="application/x-ndjson")
        # Its index rows: the job's rows of its URLs (with those of the part it inherits that it kept), or
        # made now from its lines closed where their tail was (the job's own columns empty either way).
        made = self.folder / "rows.parquet"
        if split is None or not rows.take(*split, made):
            records = self.folder / "lines.jsonl"
            records.write_bytes(lines.replace(b"\n", b"}\n"))
            rows.make(records, made)
        index = part_key(self.site, url, self.job.job_id, "parquet")
        with made.open("rb") as body:
            self.ctx.documents.put(index, body, content_type=PARQUET_TYPE)
        part = SitemapPart(
            sitemap=url,
            kind=sitemap.kind or "",
            signature=known.signature,
            listing=self.listing,
            job_id=self.job.job_id,
            made_at=self.ctx.clock(),
            epoch=epoch,
            urls=len(keys),
            lines=key,
            index=index,
            due_at=self.due.get(url),
            held=sitemap.lastmods_held + self.held.get(url, 0),
            dropped=sitemap.dropped,
            warnings=sitemap.warnings,
            # (a line it inherits was compared with its entry, or kept by an element of a verbatim part)
            verbatim=self.verbatim,
        )
        if inherited is not None:
            part = _inheriting(part, inherited, set(keys))
        if not self.ctx.crawldb.put_part(self.site, part, keys):
            return None
        if before is not None and before.job_id != part.job_id:  # (not this job's end written again)
            self._let_go(url, keep={part.job_id, before.job_id})
        return part

    def _keys(self, sitemap: str) -> list[str]:
        """The keys of the sitemap's URLs the job listed and did not fetch."""
        return [key.decode() for key in self.spool.lines(self.keys.get(sitemap, ()))]

    def _settle(self, before: SitemapPart, keys: Iterable[str]) -> bool:
        """Writes the records of the URLs ``before`` (the part this job's replaces) holds and the job did not
        list, as they read now: a record a part's maker listed reads as listed by the job that last adopted
        the part only while that part is the sitemap's (``parts.Adoptions``), so it is written so before the
        part is replaced. (A record the job's orphan pass wrote, or one that reads as stored, is written as
        it is: one write more.) False when one of them moved meanwhile: no part is made, ``before`` stays."""
        listed = set(keys)
        fetched = self.spool.lines(self.fetched.get(before.sitemap, ()))
        listed.update(url_key(parts.line_url(body)) for body in fetched)
        held = parts.block_urls(self.ctx.documents.get(before.lines))
        gone = [url for url in held if url_key(url) not in listed]
        settled = []
        for start in range(0, len(gone), _READ_BATCH):
            for record in self.ctx.crawldb.get_urls(self.site, gone[start : start + _READ_BATCH]).values():
                if record.sitemap != before.sitemap:
                    continue  # (another sitemap's now)
                if record.last_listed_job == before.job_id and not before.inherits:
                    continue  # (read as its maker listed it: as stored)
                if record.orphaned_job == self.job.job_id:
                    continue  # (written by this job's orphan pass as it reads)
                settled.append(record.model_copy(update={"version": record.version + 1}))
        return not settled or not self.ctx.crawldb.put_urls(self.site, settled, writer=self.job.job_id)

    def _let_go(self, sitemap: str, *, keep: set[str]) -> None:
        """Deletes the sitemap's part documents but those of the part made now and of the one it replaced
        (a job that adopted that one may still be writing its records from them)."""
        kept = {part_key(self.site, sitemap, job, kind) for job in keep for kind in _PART_DOCUMENTS}
        folder = part_folder(self.site, sitemap)
        self.ctx.documents.delete(*[key for key in self.ctx.documents.keys(folder) if key not in kept])

    @property
    def listed_only(self) -> bool:
        """Whether every line the job's end was given is one of a URL listed and not fetched."""
        return not self.fetched and not self.refused

    def _fetched_lines(self, sitemap: str) -> Iterator[tuple[bytes, str] | None]:
        pending: list[SitemapURL] = []
        for body in self.spool.lines(self.fetched.get(sitemap, ())):
            pending.append(SitemapURL.model_validate_json(body))
            if len(pending) >= _READ_BATCH:
                yield from self._rendered(sitemap, pending)
                pending = []
        yield from self._rendered(sitemap, pending)

    def _rendered(self, sitemap: str, pages: list[SitemapURL]) -> Iterator[tuple[bytes, str] | None]:
        """Each page's part line (with its newline) and key, or None where it is not this part's to hold."""
        if not pages:
            return
        urls = [p.url for p in pages]  # (in an end in steps, a step reads its parts' records, not the job's)
        records = self.ctx.crawldb.job_urls(self.site, self.job.job_id, urls, by_key=bool(self.spool.stored))
        kind = parts.reason_of(self.job.request)
        for page in pages:
            crawl = records.get(page.url)
            if crawl is None or crawl.sitemap != sitemap:
                yield None  # (another sitemap's now)
                continue
            stripped = parts.strip(body_of(_as_unfetched(page, crawl, kind)).encode())
            self._due(sitemap, crawl.next_fetch_time)
            if lastmod_advanced(crawl, page.last_modified):  # (not fetched whole: a next job would fetch it)
                self.held[sitemap] = self.held.get(sitemap, 0) + 1
            yield None if stripped is None else (stripped + b"\n", page.key)

    def _due(self, sitemap: str, when: str | datetime | None) -> None:
        if when is None:
            return
        moment = datetime.fromisoformat(when) if isinstance(when, str) else when
        earliest = self.due.get(sitemap)
        if earliest is None or moment < earliest:
            self.due[sitemap] = moment


def _inheriting(part: SitemapPart, adopted: AdoptedPart, keys: set[str]) -> SitemapPart:
    """``part``, made by a job that adopted the part before it in part: it holds the records of that part's
    makers it kept, and knows the URLs whose records name them and that it does not hold."""
    before = adopted.part
    left_out = sorted(u for u in {*before.excluded, *adopted.excluded} if url_key(u) not in keys)
    return part.model_copy(
        update={
            "inherits": sorted({*before.inherits, before.job_id}),
            "inherited_at": adopted.at,
            "excluded": left_out,
        }
    )


def _as_unfetched(page: SitemapURL, crawl: CrawlRecord, kind: ChangeKind) -> SitemapURL:
    """The record a job that lists the page again, and does not fetch it, writes (``listed_rows.unfetched``)."""
    base = {
        "url": page.url,
        "last_modified": page.last_modified,
        "change_frequency": page.change_frequency,
        "priority": page.priority,
        "sitemap": page.sitemap,
        "extensions": page.extensions,
        "discovered_at": _ANY_TIME,
    }
    return unfetched(base, crawl, _ANY_TIME, kind.value, kind)
