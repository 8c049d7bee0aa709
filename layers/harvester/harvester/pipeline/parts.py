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

import hashlib
import logging
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import orjson

from harvester.archive.index import RowMaker
from harvester.archive.results import PARQUET_TYPE, with_later_kinds
from harvester.crawldb import parts
from harvester.crawldb.documents import site_slug
from harvester.crawldb.schedule import lastmod_advanced
from harvester.model.crawl import ChangeKind, CrawlRecord, SitemapPart
from harvester.model.messages import JobRequest
from harvester.model.records import JobRecord, SitemapRecord, SitemapStatus, SitemapURL, body_of, key_of, url_key
from harvester.model.state import AdoptedPart, ListedBatch
from harvester.patience import Busy
from harvester.pipeline.context import StepContext
from harvester.pipeline.listed_rows import unfetched
from harvester.ports import DocumentStore, StateStore

log = logging.getLogger(__name__)

#: The time a part's re-rendered lines are made with: their tail is cut off, so it is never seen.
_ANY_TIME = datetime.fromisoformat("2000-01-01T00:00:00+00:00")
#: The documents of a part (``part_key``'s kinds).
_PART_DOCUMENTS = ("lines", "parquet")
#: Lines of a sitemap held back before they are written to the spool at once.
_PENDING_LINES = 1000
#: URLs whose crawl records are read at once to write their lines.
_READ_BATCH = 500


def part_folder(origin: str, sitemap: str) -> str:
    """Where a sitemap's parts' documents are: ``sites/<site>/parts/<sitemap key>/``."""
    return f"sites/{site_slug(origin)}/parts/{url_key(sitemap)}/"


def part_key(origin: str, sitemap: str, job_id: str, kind: str) -> str:
    """A part's document: ``<part_folder>/<job>.<kind>``."""
    return f"{part_folder(origin, sitemap)}{job_id}.{kind}"


def parts_index_key(origin: str, rows: Iterable[str]) -> str:
    """Where the sorted index of exactly these parts' rows (their documents) is kept for the site."""
    digest = hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:32]
    return f"sites/{site_slug(origin)}/parts/index-{digest}.parquet"


def keep_parts_index(documents: DocumentStore, origin: str, key: str, built: Path) -> None:
    """Keeps a job's index made of parts only as the site's (the one kept before is let go)."""
    with built.open("rb") as body:
        documents.put(key, body, content_type=PARQUET_TYPE)
    for older in documents.keys(f"sites/{site_slug(origin)}/parts/index-"):
        if older != key:
            documents.delete(older)


class PartRows(NamedTuple):
    """The index rows of a part a job adopted, as its index takes them: the part's Parquet document, the
    ``change`` its records have in the job, and the URLs the job did not take from it."""

    key: str
    change: str
    excluded: frozenset[str] = frozenset()


def adopted_lines(
    documents: DocumentStore, request: JobRequest, adopted: AdoptedPart, extras: dict[str, dict[str, Any]]
) -> bytes:
    """The job's record lines of a part it adopted (each ending with a newline), with what later listings
    of a URL added to its extensions."""
    stripped = documents.get(adopted.part.lines)
    if adopted.excluded:
        left_out = adopted.excluded
        urls = parts.block_urls(stripped)
        kept = (line for line, url in zip(stripped.splitlines(keepends=True), urls, strict=True) if url not in left_out)
        stripped = b"".join(kept)
    lines = parts.render(stripped, adopted.at, parts.reason_of(request))
    if not extras:
        return lines
    out = []
    for line in lines.splitlines():
        record = orjson.loads(line)
        more = extras.get(record["url"])
        if more:
            record["extensions"] = with_later_kinds(record.get("extensions") or {}, more)
            line = orjson.dumps(record)
        out.append(line + b"\n")
    return b"".join(out)


def job_pages(store: StateStore, documents: DocumentStore, job: JobRecord) -> Iterator[SitemapURL]:
    """Every URL record of the job, those of the parts it adopted included (``harvest report``, ``export``)."""
    for item in store.job_records(job.job_id):
        if isinstance(item, AdoptedPart):
            for line in adopted_lines(documents, job.request, item, {}).splitlines():
                yield SitemapURL.model_validate_json(line)
        elif isinstance(item, ListedBatch):
            for body in item.bodies.split("\n"):
                yield SitemapURL.model_validate_json(body)
        else:
            yield SitemapURL.model_validate_json(item)


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
        self.listing = parts.listing_of(job.request)
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
        self.spool = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish)
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
        self._row_files: dict[str, Path] = {}  # (``rows_file``'s)
        self._pending: dict[str, tuple[list[bytes], list[bytes]]] = {}  # per sitemap: lines and keys to keep
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
        self._keep(self.lines, sitemap, block.replace(tail + b"\n", b"\n")[: -len(tail)])
        self._count(sitemap, count)
        self._keep(self.keys, sitemap, keys.encode())
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
        if len(pending[0]) >= _PENDING_LINES:
            self._flush(sitemap)
        self._due(sitemap, record.get("next_fetch_time"))

    def _flush(self, sitemap: str | None = None) -> None:
        """Writes the lines (and keys) held back, of one sitemap or of all."""
        for url in [sitemap] if sitemap else list(self._pending):
            lines, keys = self._pending.pop(url, ([], []))
            if lines:
                self._keep(self.lines, url, b"\n".join(lines))
                self._keep(self.keys, url, b"\n".join(keys))

    def fetched_line(self, line: bytes, record: Mapping[str, Any]) -> None:
        """A line of a URL the job fetched (or tried to): its part line is written from its crawl record at
        the end."""
        sitemap = record.get("sitemap")
        if self._wanted(sitemap):
            self._keep(self.fetched, sitemap, line)
            self._count(sitemap, 1)

    def finish(self) -> list[SitemapPart]:
        """Stores each sitemap's part; returns those stored."""
        made: list[SitemapPart] = []
        self._flush()
        rows = RowMaker(self.folder)
        try:
            least = self.ctx.settings.sitemap_part_min_urls
            wanted = [url for url in self.sitemaps if url not in self.refused and self.counts.get(url, 0) >= least]
            split = {url: n for n, url in enumerate(wanted) if url not in self.fetched}
            job_rows = self.job_rows if self.job_rows.exists() else None
            kept = self._kept_rows(split, listed_rows=job_rows is not None)
            if split and (job_rows is not None or kept):
                rows.split(job_rows, split, self.folder / "split", kept=kept)
            for url in wanted:
                try:
                    part = self._make(self.sitemaps[url], rows, self.folder / f"split/part={split.get(url)}")
                    if part is not None:
                        made.append(part)
                except Busy:
                    raise
                except Exception:  # (a part is a saving for the next jobs, never the job's outcome)
                    log.exception("sitemap part not made", extra={"job_id": self.job.job_id, "sitemap": url})
        finally:
            rows.close()
            self.close()
        return made

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

    def _make(self, sitemap: SitemapRecord, rows: RowMaker, split: Path) -> SitemapPart | None:
        """Stores the sitemap's part (``split``: the folder of its rows split from the job's, if any)."""
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
        lines = b"".join([*self._read(self.lines.get(url, ())), *(line for line, _ in fetched)])
        keys = self._keys(url) + [key for _, key in fetched]
        key = part_key(self.site, url, self.job.job_id, "lines")
        self.ctx.documents.put(key, lines, content_type="application/x-ndjson")
        # Its index rows: the job's rows of its URLs (with those of the part it inherits that it kept), or
        # made now from its lines closed where their tail was (the job's own columns empty either way).
        made = split / "data_0.parquet"
        if not made.exists():
            records, made = self.folder / "lines.jsonl", self.folder / "rows.parquet"
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
        return [key.decode() for run in self._read(self.keys.get(sitemap, ())) for key in run[:-1].split(b"\n")]

    def _settle(self, before: SitemapPart, keys: Iterable[str]) -> bool:
        """Writes the records of the URLs ``before`` (the part this job's replaces) holds and the job did not
        list, as they read now: a record a part's maker listed reads as listed by the job that last adopted
        the part only while that part is the sitemap's (``parts.Adoptions``), so it is written so before the
        part is replaced. (A record the job's orphan pass wrote, or one that reads as stored, is written as
        it is: one write more.) False when one of them moved meanwhile: no part is made, ``before`` stays."""
        listed = set(keys)
        fetched = self._read(self.fetched.get(before.sitemap, ()), newline=False)
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
        for key in list(self.ctx.documents.keys(part_folder(self.site, sitemap))):
            if key not in kept:
                self.ctx.documents.delete(key)

    @property
    def listed_only(self) -> bool:
        """Whether every line the job's end was given is one of a URL listed and not fetched."""
        return not self.fetched and not self.refused

    def _fetched_lines(self, sitemap: str) -> Iterator[tuple[bytes, str] | None]:
        pending: list[SitemapURL] = []
        for body in self._read(self.fetched.get(sitemap, ()), newline=False):
            pending.append(SitemapURL.model_validate_json(body))
            if len(pending) >= _READ_BATCH:
                yield from self._rendered(sitemap, pending)
                pending = []
        yield from self._rendered(sitemap, pending)

    def _rendered(self, sitemap: str, pages: list[SitemapURL]) -> Iterator[tuple[bytes, str] | None]:
        """Each page's part line (with its newline) and key, or None where it is not this part's to hold."""
        if not pages:
            return
        records = self.ctx.crawldb.job_urls(self.site, self.job.job_id, [p.url for p in pages])
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

    def _keep(self, runs: dict[str, list[tuple[int, int]]], sitemap: str, data: bytes) -> None:
        data += b"\n"
        runs.setdefault(sitemap, []).append((self.spool.tell(), len(data)))
        self.spool.write(data)

    def _read(self, runs: Iterable[tuple[int, int]], *, newline: bool = True) -> Iterator[bytes]:
        end = self.spool.tell()
        try:
            for offset, length in runs:
                self.spool.seek(offset)
                data = self.spool.read(length)
                yield data if newline else data[:-1]
        finally:
            self.spool.seek(end)

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
