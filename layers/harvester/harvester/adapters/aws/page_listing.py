"""Listing a sitemap's pages: a listed batch's items in the job, each URL's pointer in the crawl database.

A chunk of a sitemap's pages is a batch (listed_batch.py). Listing it is three steps: each URL's pointer is
moved to the batch (a conditional write each, side by side: crawl_pointers.py); the batch's job records and
its crawl records' lines are written apart (one BatchWriteItem: a transactional write costs twice the write
units, and these are the listing's large items); then one transaction writes the batch's states item and
its crawl batch item, which say it committed (neither side's readers take the records without them), the
sitemap's checkpoint and a counter shard. The pointer is both the URL's mark in its job (a URL listed by
two sitemaps of a job is counted once, whichever comes first) and the crawl database's index: one write a
URL a job.

A listing first makes sure the other jobs' listings not committed that its pointers name never commit (a
tombstone each), then writes each URL's pointer on the version its lookup read (a URL new to the site: on
none). A pointer that moved meanwhile is read again: one naming this job's committed batch is the job's
already (another sitemap listed it first); one naming this job's batch that never committed is taken over
(by its sitemap's reading, which holds the lease, checked in the takeover's transaction, or by a final
sitemap's: that batch can no longer commit); one another writer moved makes the listing stale (decided
again on what that writer wrote). The transaction then commits the batch and the crawl batch, and writes the
moved marks of the pages still to be settled it moved pointers from (crawl_pointers).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harvester.adapters.aws.crawl_parts import PartAdopters, touches
from harvester.adapters.aws.crawl_pointers import Pointers
from harvester.adapters.aws.job_items import TRANSACTION_ITEMS, JobItems
from harvester.adapters.aws.listed_batch import Listing, as_lines, batch_sk, batched, state_sk
from harvester.adapters.aws.page_batches import stored_at
from harvester.adapters.aws.page_body import pack
from harvester.adapters.aws.pointer_items import (
    Pointer,
    Ref,
    crawl_batch_items,
    listed_lines,
    pointer_key,
    stale_urls,
    urls_role,
)
from harvester.adapters.aws.sitemap_items import SitemapItems
from harvester.adapters.aws.state_table import batch_put, conditional
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model import accounting
from harvester.model.records import CrawlWrite, PageRecord, SitemapURL, body_of, url_key
from harvester.model.state import Checkpoint, Lease, Recorded

#: Pointers written at once (each is a request of its own).
_POINTER_THREADS = 16


class PageListing:
    """The listing of a job's pages (module docstring)."""

    #: Pages a listed batch holds (a call's last may take a remainder along, up to a page message's pages:
    #: ``batched``): its items, the crawl batch, the moved marks it may write, the epochs its URLs' records
    #: move, the sitemap's checkpoint and a counter shard fit a transaction unless many URLs name other
    #: sitemaps; a chunk whose items could pass the limit is halved before anything is written.
    record_batch = (TRANSACTION_ITEMS - 2) // 2
    #: The most pages a batch holds: a remainder of one page goes along with a full batch (``batched``).
    batch_most = record_batch + 1
    #: Pages a reading hands a listing at once: eight batches' worth, recorded a lane at a time in batches as
    #: even as they can be, sent two batches of one lane a page message (the listing's ``paired``), whose
    #: fetches claim and settle them together (a claim, a settlement's fixed writes, a WARC object and its
    #: index, a delivery once a message). A first crawl's window whose pages split 40/60 between the lanes
    #: makes four batches of 39-40 (two lane messages of 78-80) and five of 47 (94, 94 and 47).
    listing_window = 8 * record_batch

    def __init__(self, jobs: JobItems, sitemaps: SitemapItems, pointers: Pointers) -> None:
        self.jobs = jobs
        self.sitemaps = sitemaps
        self.pointers = pointers
        self.client = jobs.client
        self.table = jobs.table
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def record_pages(
        self,
        job_id: str,
        sitemap_url: str,
        pages: Sequence[PageRecord],
        *,
        checkpoint: int,
        lease: Lease,
        site: str | None = None,
        crawl: Mapping[str, CrawlWrite] | None = None,
        enqueued: Checkpoint | None = None,
        lanes: Sequence[bool] | None = None,
    ) -> Recorded:
        writes = crawl if site is not None and crawl else {}
        unique = accounting.first_per_url(pages)
        recorded = Recorded()
        packed = {p.url: pack(body_of(p), job_id) for p in unique}
        lane_of = dict(zip([p.url for p in pages], lanes, strict=True)) if lanes is not None else {}
        chunks: list[list[PageRecord]] = []
        for lane in (True, False):  # (the priority lane's first: its tasks go first)
            laned = [p for p in unique if lane_of.get(p.url, False) is lane]
            chunks += batched(laned, [len(packed[p.url]) for p in laned], self.record_batch, self.batch_most)
        chunks = chunks or [[]]
        sitemap_key = url_key(sitemap_url)  # (a pointer names its sitemap by its record's key)
        n = 0
        while chunks:
            chunk = chunks.pop(0)
            sitemap = self.sitemaps.leased_sitemap(job_id, sitemap_url, lease)
            last = not chunks
            # The recorded checkpoint moves past the whole window with its first batch: a delivery that stops
            # before the last (a busy store, a crash) leaves the next one to record the window again and send
            # every task of it again (SitemapRecord: up to ``pages_recorded``, sent again), its batches
            # written meanwhile included, whose pages are the job's already (and so not new to it then).
            target = checkpoint
            bid = uuid.uuid4().hex[:16]  # (random: a listing decided again, or after a crash, is a batch of its own)
            first = n == 0 and not sitemap.pages_recorded
            listing = self._list(job_id, bid, sitemap_key, chunk, lease, site=site, writes=writes, first=first)
            if listing.split:
                half = len(chunk) // 2
                chunks[:0] = [chunk[:half], chunk[half:]]
                continue
            n += 1
            if listing.stale:
                recorded.stale = listing.stale
                return recorded
            mine = listing.mine
            moved = accounting.recorded_sitemap(sitemap, target, len(mine), enqueued if last else None)
            items: list[dict[str, Any]] = []
            roles: list[tuple[str, str]] = []
            if mine:  # (the records and crawl lines written apart, first: the transaction's items commit them)
                records = self.jobs.apart_item(job_id, batch_sk(bid), as_lines([packed[p.url] for p in mine]))
                batch_put(self.client, self.table, [records, *listing.apart])
                items.append(self.jobs.new_item(job_id, state_sk(bid), "{}", version=1))
                roles.append(("batch", bid))
            items += listing.items
            roles += listing.roles
            failed = self.sitemaps.commit_listing(job_id, sitemap_url, lease, items, roles, moved, mine)
            stale = stale_urls(failed)
            if stale:  # (nothing written: the pointers are taken over by the listing decided again)
                recorded.stale = stale
                return recorded
            if failed:
                raise RuntimeError(f"batch {bid} of job {job_id} was written already: {failed}")
            recorded.new.extend(mine)
            if mine:
                recorded.batches.append(len(mine))
                recorded.stored.update((p.url, stored_at(bid, i)) for i, p in enumerate(mine))
        return recorded

    def _list(
        self,
        job_id: str,
        bid: str,
        sitemap_key: str,
        chunk: Sequence[PageRecord],
        lease: Lease,
        *,
        site: str | None,
        writes: Mapping[str, CrawlWrite],
        first: bool = False,
    ) -> Listing:
        """Which pages of ``chunk`` are batch ``bid``'s (their pointers moved to it), and the items its
        transaction writes beside the batch's: the crawl batch, the guards of the pointers it moved, and the
        moves of the epochs of the sitemaps its records name (crawl_parts.py) when one of its URLs had a
        record, or it is the reading's ``first`` chunk (which marks when the job first wrote the sitemap's
        records). A chunk of URLs new to the site moves none: no part holds them, and a job that lists one
        later finds its pointer and moves the epoch then."""
        if not chunk:
            return Listing([])
        site = self.jobs.site_of(job_id, site)
        listed: dict[str, tuple[str, bool]] = {}
        expected: dict[str, int | None] = {}
        for p in chunk:
            write = writes.get(p.url) or (p.known if isinstance(p, SitemapURL) else None)
            final = p.status.final  # (a page the listing made final: no settlement will move its record)
            if write is not None:
                listed[p.url], expected[p.url] = (body_of(write), final), write.version - 1
            else:  # (a job record with no crawl record: the pointer marks it, on whatever version it is)
                listed[p.url], expected[p.url] = ("", final), None
        bases, stale = self._bases(site, list(expected), expected)
        named = {url: _named(p, sitemap_key) for url, p in bases.items()}
        others = {key for keys in named.values() for key in keys}
        adopters = self.pointers.parts.adopters(site, others, job_id, self.jobs.job_over) if others else {}
        adopted = {key: a.mine for key, a in adopters.items() if a.mine is not None}
        if adopted:  # (the job's already: in a part it adopted, or one listed since it did, conservatively)
            chunk = [p for p in chunk if not _taken(p.url, named.get(p.url, ()), adopted)]
            if not chunk:
                return Listing([])
        if len(chunk) > 1 and _most_items(chunk, bases, named) > TRANSACTION_ITEMS:
            return Listing([], split=True)
        stale += self._bury(site, job_id, [bases[p.url] for p in chunk if p.url in bases])
        if stale:
            return Listing([], stale=stale)
        ref = Ref(job_id, bid)
        holders = _holders(chunk, bases, adopters)
        landed = list(
            self._pool_map(
                lambda p: self.put_pointer(site, ref, sitemap_key, p.url, bases.get(p.url), holders.get(p.url, ())),
                chunk,
            )
        )
        moved_from = [bases[p.url] for p, ok in zip(chunk, landed, strict=True) if ok and p.url in bases]
        missed = [p.url for p, ok in zip(chunk, landed, strict=True) if not ok]
        lost: set[str] = set()
        if missed:
            stale, lost, taken = self._missed(site, job_id, ref, sitemap_key, missed, lease, bases, holders)
            if stale:
                return Listing([], stale=stale)
            moved_from += taken  # (their records came from where the job's dead listing found them)
        listing = Listing([p for p in chunk if p.url not in lost])
        if not listing.mine:
            return listing
        lines, put = crawl_batch_items(self.table, site, ref, listed_lines([listed[p.url] for p in listing.mine]))
        listing.apart.append(lines)
        listing.items.append(put)
        # (a crawl batch found written is a tombstone another job's listing left: stale, decided again)
        listing.roles.append(("crawl", listing.mine[0].url))
        for guard, url in self.pointers.guards(site, moved_from, mover=job_id, tombstones=False):
            listing.items.append(guard)
            listing.roles.append(("crawl", url))
        if not first and not any(p.url in bases for p in listing.mine):
            return listing
        by_sitemap: dict[str, list[str]] = {sitemap_key: []}
        for p in listing.mine:
            for key in named.get(p.url, ()):
                by_sitemap.setdefault(key, []).append(p.url)
        moves = touches(
            self.table, site, by_sitemap, job_id, unless_adopted_by=job_id, own=sitemap_key, urls=by_sitemap,
            latest={key: a.latest for key, a in adopters.items()},
            refs={key: a.mine_ref for key, a in adopters.items() if a.mine_ref is not None},
        )  # fmt: skip
        for move, key in moves:
            listing.items.append(move)
            listing.roles.append(("crawl", urls_role(by_sitemap[key])) if key != sitemap_key else ("touch", key))
        return listing

    def _pool_map(self, fn: Any, items: Sequence[Any]) -> Iterator[Any]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=_POINTER_THREADS, thread_name_prefix="pointers")
        return self._pool.map(fn, items)

    def _bases(
        self, site: str, urls: Sequence[str], expected: dict[str, int | None]
    ) -> tuple[dict[str, Pointer], list[str]]:
        """The pointers the listing's records were computed on: as its lookup read them (remembered); else
        read now, unless a page they name was still to be settled (the record may predate its settlement:
        stale, looked up again). A URL whose record has no version given is written on the version it has.
        Also the URLs found stale."""
        bases: dict[str, Pointer] = {}
        stale: list[str] = []
        missing = []
        for url in urls:
            version = expected[url]
            known = self.pointers.remembered(site, url, version) if version is not None else None
            if known is not None:
                bases[url] = known
            elif version != 0:  # (a URL new to the site, as a first crawl lists without lookup: none to read)
                missing.append(url)
        read = self.pointers.read(site, missing) if missing else {}
        for url in missing:
            pointer = read.get(url)
            if pointer is None:
                if expected[url] is None:
                    expected[url] = 0
                else:
                    stale.append(url)
            elif expected[url] is None or (expected[url] == pointer.version and not pointer.open):
                bases[url] = pointer
            else:
                stale.append(url)
        for url, pointer in bases.items():
            expected[url] = pointer.version
        return bases, stale

    def put_pointer(
        self, site: str, ref: Ref, sitemap_key: str, url: str, base: Pointer | None, holders: Iterable[str] = ()
    ) -> bool:
        """The URL's pointer moved to ``ref``, on the version of ``base`` (none: a URL new to the site), with
        the job among those that listed it (less those over, and a listing it makes sure never commits), and
        ``holders``, the other running jobs whose adopted part holds it (``_holders``)."""
        if base is not None and ref.job in base.jobs:
            return False  # (the job's already, or its listing's under way: see _missed)
        victim = base.cur if base is not None and not base.cur_committed else None  # (buried: _bury)
        jobs = {ref.job, *holders} | {
            job
            for job in (base.jobs if base is not None else ())
            if not self.jobs.job_over(job) and (victim is None or job != victim.job)
        }
        values: dict[str, Any] = {
            ":cur": _s(str(ref)),
            ":sm": _s(sitemap_key),
            ":u": _s(url),
            ":next": _n((base.version if base is not None else 0) + 1),
            ":jobs": {"SS": sorted(jobs)},
        }
        update = "SET cur = :cur, sm = :sm, u = :u, version = :next, jobs = :jobs"
        if base is not None and base.basis is not None:
            values[":prev"] = _s(str(base.basis))
            update += ", prev = :prev REMOVE body, w"
        elif base is not None:
            update += " REMOVE prev, w"
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": pointer_key(site, url),
            "UpdateExpression": update,
            "ExpressionAttributeValues": values,
        }
        if base is None:
            request["ConditionExpression"] = "attribute_not_exists(pk)"
        else:  # (and not the job's already: a URL is once in its job)
            request["ConditionExpression"] = (
                "version = :seen AND NOT begins_with(cur, :job) AND NOT begins_with(prev, :job)"
            )
            values[":seen"] = _n(base.version)
            values[":job"] = _s(f"{ref.job}/")
        return conditional(lambda: self.client.update_item(**request))

    def _bury(self, site: str, job_id: str, bases: Iterable[Pointer]) -> list[str]:
        """Makes sure the other jobs' listings not committed that the pointers name never commit, before they
        are moved (a tombstone each: a listing committing after a move would be named by no pointer); the
        URLs of those found committed meanwhile (stale: read again)."""
        victims: dict[Ref, list[str]] = {}
        for p in bases:
            if p.cur is not None and not p.cur_committed and p.cur.job != job_id:
                victims.setdefault(p.cur, []).append(p.url)
        stale: list[str] = []
        for victim, urls in victims.items():
            put = self.pointers.tombstone(site, victim)["Put"]
            if not conditional(lambda put=put: self.client.put_item(**put)):
                stale += urls
        return stale

    def _missed(
        self,
        site: str,
        job_id: str,
        ref: Ref,
        sitemap_key: str,
        urls: Sequence[str],
        lease: Lease,
        bases: Mapping[str, Pointer],
        holders: Mapping[str, set[str]],
    ) -> tuple[list[str], set[str], list[Pointer]]:
        """The pointers that had moved: (URLs another writer moved: the listing is stale; URLs not the
        batch's: the job's already, or another sitemap's still being read; the pointers taken over from the
        job's batches that never committed, as they were)."""
        pointers = self.pointers.read(site, urls)
        stale: list[str] = []
        lost: set[str] = set()
        takeable: dict[str, Pointer] = {}
        for url in urls:
            p = pointers.get(url)
            mine = p.of_job(job_id) if p is not None else None
            if p is not None and mine is None and job_id in p.jobs:
                lost.add(url)  # (the job's already: its batch, committed, since moved out by two others)
            elif p is None or mine is None:
                stale.append(url)  # (another job, or the orphan pass, wrote it since the lookup)
            elif mine != p.cur or p.cur_committed:
                lost.add(url)  # (the job's already)
            elif (bases[url].version != p.version) if url in bases else p.record is not None:
                stale.append(url)  # (written since the record was computed: decided again)
            else:
                takeable[url] = p
        taken: list[Pointer] = []
        if takeable and not stale:
            others = {p.sitemap for p in takeable.values() if p.sitemap not in (None, sitemap_key)}
            done = self.sitemaps.final_sitemaps(job_id, {s for s in others if s is not None}) if others else set()
            for url, p in takeable.items():
                if (p.sitemap == sitemap_key or p.sitemap in done) and self._take_pointer(
                    site, p, ref, sitemap_key, job_id, lease, holders.get(url, ())
                ):
                    taken.append(bases.get(url, p))  # (guarded as the record's reading found it)
                else:
                    lost.add(url)
        return stale, lost, taken

    def _take_pointer(
        self,
        site: str,
        p: Pointer,
        ref: Ref,
        sitemap_key: str,
        job_id: str,
        lease: Lease,
        holders: Iterable[str] = (),
    ) -> bool:
        """Moves a pointer from the job's batch that never committed to ``ref``, our sitemap's lease checked
        (SitemapItems.with_lease), adding ``holders`` to its jobs (as ``put_pointer`` does: a listing decided
        again may find an adoption its first attempt did not); its record stays where it was read from."""
        values = {":cur": _s(str(ref)), ":sm": _s(sitemap_key), ":next": _n(p.version + 1), ":seen": _n(p.version)}
        expression = "SET cur = :cur, sm = :sm, version = :next" + (" REMOVE w, prev" if p.whole else "")
        if holders:
            expression += " ADD jobs :holders"
            values[":holders"] = {"SS": sorted(holders)}
        update = {
            "TableName": self.table,
            "Key": pointer_key(site, p.url),
            "UpdateExpression": expression,
            "ConditionExpression": "version = :seen",
            "ExpressionAttributeValues": values,
        }
        return self.sitemaps.with_lease(job_id, sitemap_key, lease, update)


def _most_items(chunk: Sequence[PageRecord], bases: Mapping[str, Pointer], named: Mapping[str, set[str]]) -> int:
    """The most items a chunk's transaction can hold: the job's batch states, the crawl batch, a moved
    mark for each batch with a page still to be settled its pointers move from (one more for a batch of the
    job's own a dead listing left), a move of its own sitemap's epoch and of each other sitemap they named,
    the sitemap's checkpoint and a counter shard."""
    opened = {base.basis for p in chunk if (base := bases.get(p.url)) is not None and base.open and base.basis}
    others = {key for p in chunk for key in named.get(p.url, ())}
    return 1 + 1 + len(opened) + 1 + 1 + len(others) + 2


def _named(pointer: Pointer, own: str) -> set[str]:
    """The sitemaps (by record key) other than ``own`` whose epochs moving the pointer moves: the one its
    last listing named and the one its record names."""
    keys = {pointer.sitemap} if pointer.sitemap else set()
    if pointer.record is not None and pointer.record.sitemap:
        keys.add(url_key(pointer.record.sitemap))
    keys.discard(own)
    return keys


def _holders(
    chunk: Sequence[PageRecord], bases: Mapping[str, Pointer], adopters: Mapping[str, PartAdopters]
) -> dict[str, set[str]]:
    """The other running jobs whose adopted part holds each URL (its record names the part's sitemap, and is
    one the part holds): moving its pointer away from that sitemap, the listing keeps them among the jobs
    that have the URL, so that a listing of theirs through another sitemap finds it theirs already rather
    than counting it a second time."""
    holders = {}
    for p in chunk:
        base = bases.get(p.url)
        record = base.record if base is not None else None
        if record is not None and record.sitemap:
            part = adopters.get(url_key(record.sitemap))
            jobs = part.holds_for(base.listed_by, p.url, whole=base.whole) if part is not None else set()
            if jobs:
                holders[p.url] = jobs
    return holders


def _taken(url: str, sitemaps: Iterable[str], adopted: Mapping[str, frozenset[str]]) -> bool:
    """Whether the URL is the job's already through a part it adopted of one of the sitemaps its pointer
    named (and did not leave out of it)."""
    return any(key in adopted and url_key(url) not in adopted[key] for key in sitemaps)
