"""The batch layout with each URL's mark being its pointer in the crawl database (``StateLayout=pointers``).

Why: the batch layout (page_batches) wrote two items per fetched URL: its mark in the job, at listing, and
its crawl record, in the settlement's transaction (three write units). Here the listing's one conditional
write of the URL's pointer (crawl_pointers) is both, and the crawl records go a batch at a time: the
listing's in an item of the batch, written in its transaction; a settlement's in an item beside its outcome.

A listing first makes sure the other jobs' listings not committed that its pointers name never commit (a
tombstone each), then writes each URL's pointer on the version its lookup read (a URL new to the site: on
none). A pointer that moved meanwhile is read again: one naming this job's committed batch is the job's already
(another sitemap listed it first); one naming this job's batch that never committed is taken over as marks
are (its sitemap's reading, holding the lease, or a final sitemap's); one another writer moved makes the
listing stale (decided again on what that writer wrote). The transaction then writes the job's batch items,
the crawl batch, and the moved marks of the pages still to be settled it moved pointers from
(crawl_pointers).

A settlement writes its pages' crawl records into one item of the crawl batch, except those of pages another
writer moved meanwhile (their batch's moved list): written whole on their pointer, on the version their
record was computed from.

Jobs of the other layouts are served by page_batches and dynamodb, as each job says.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from harvester.adapters.aws.crawl_pointers import (
    Pointer,
    Pointers,
    Ref,
    batch_key,
    listed_lines,
    outcome_key,
    pointer_key,
    stale_check,
    whole_write,
)
from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.page_batches import (
    BATCHES,
    ITEMS,
    MOVED,
    POINTERS,
    DynamoBatchStateStore,
    Listing,
    _Batch,
    _sized,
)
from harvester.adapters.aws.state_table import conditional, created
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model.records import CrawlWrite, PageRecord, SitemapURL, body_of
from harvester.ports import Lease, PageOutcome
from harvester.urls import origin_of


class DynamoPointerStateStore(DynamoBatchStateStore):
    """DynamoBatchStateStore that can also keep a job's pages as pointers (module docstring)."""

    layouts = (ITEMS, BATCHES, POINTERS)

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_days: int = 30,
        layout: str = POINTERS,
        pointers: Pointers | None = None,
    ) -> None:
        super().__init__(client, table, retention_days=retention_days, layout=layout)
        self.pointers = pointers or Pointers(client, table)
        self._origins: dict[str, str] = {}
        self._ended: dict[str, tuple[bool, float]] = {}

    def pointed(self, job_id: str) -> bool:
        return self.layout_of(job_id) == POINTERS

    def _job_over(self, job_id: str) -> bool:
        """Whether the job has ended (or is gone): a pointer need not keep it among those that listed it.
        Known ends are kept; a running job is asked again after a minute."""
        over, asked = self._ended.get(job_id, (False, 0.0))
        now = time.monotonic()
        if over or now - asked < 60:
            return over
        job = self.get_job(job_id)
        over = job is None or job.status.final
        self._ended[job_id] = (over, now)
        return over

    def _site(self, job_id: str, site: str | None = None) -> str:
        """The job's site as the crawl database knows it: as its steps name it (they name it the same), else
        its request's origin (read once per job)."""
        if site is not None:
            self._origins[job_id] = site
            return site
        origin = self._origins.get(job_id)
        if origin is None:
            item = self._get(job_id, "JOB")
            if item is None:
                raise KeyError(f"job {job_id} is gone")
            origin = self._origins[job_id] = origin_of(orjson.loads(body_text(item))["request"]["site"])
        return origin

    # listing ------------------------------------------------------------------------------------------

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
    ) -> Listing:
        if not self.pointed(job_id) or not chunk:
            return super()._list(job_id, bid, sitemap_key, chunk, lease, site=site, writes=writes)
        site = self._site(job_id, site)
        lines: dict[str, tuple[str, bool]] = {}
        expected: dict[str, int | None] = {}
        for p in chunk:
            write = writes.get(p.url) or (p.known if isinstance(p, SitemapURL) else None)
            final = p.status.final  # (a page the listing made final: no settlement will move its record)
            if write is not None:
                lines[p.url], expected[p.url] = (body_of(write), final), write.version - 1
            else:  # (a job record with no crawl record: the pointer marks it, on whatever version it is)
                lines[p.url], expected[p.url] = ("", final), None
        bases, stale = self._bases(site, list(expected), expected)
        stale += self._bury(site, job_id, bases.values())
        if stale:
            return Listing([], stale=stale)
        ref = Ref(job_id, bid)
        landed = list(
            self._pool_map(lambda p: self._put_pointer(site, ref, sitemap_key, p.url, bases.get(p.url)), chunk)
        )
        moved_from = [bases[p.url] for p, ok in zip(chunk, landed, strict=True) if ok and p.url in bases]
        missed = [p.url for p, ok in zip(chunk, landed, strict=True) if not ok]
        lost: set[str] = set()
        if missed:
            stale, lost, taken = self._missed(site, job_id, ref, sitemap_key, missed, lease, bases)
            if stale:
                return Listing([], stale=stale)
            moved_from += taken  # (their records came from where the job's dead listing found them)
        listing = Listing([p for p in chunk if p.url not in lost])
        if not listing.mine:
            return listing
        body = listed_lines([lines[p.url] for p in listing.mine])
        listing.items.append(self._crawl_item(batch_key(site, ref), body))
        # (a crawl batch found written is a tombstone another job's listing left: stale, decided again)
        listing.roles.append(("crawl", listing.mine[0].url))
        for guard, url in self.pointers.guards(site, moved_from, mover=job_id, tombstones=False):
            listing.items.append(guard)
            listing.roles.append(("crawl", url))
        return listing

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

    def _put_pointer(self, site: str, ref: Ref, sitemap_key: str, url: str, base: Pointer | None) -> bool:
        """The URL's pointer moved to ``ref``, on the version of ``base`` (none: a URL new to the site), with
        the job among those that listed it (less those over, and a listing it makes sure never commits)."""
        if base is not None and ref.job in base.jobs:
            return False  # (the job's already, or its listing's under way: see _missed)
        victim = base.cur if base is not None and not base.cur_committed else None  # (buried: _bury)
        jobs = {ref.job} | {
            job
            for job in (base.jobs if base is not None else ())
            if not self._job_over(job) and (victim is None or job != victim.job)
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
            done = self._final_sitemaps(job_id, {s for s in others if s is not None}) if others else set()
            for url, p in takeable.items():
                if (p.sitemap == sitemap_key or p.sitemap in done) and self._take_pointer(
                    site, p, ref, sitemap_key, job_id, lease
                ):
                    taken.append(bases.get(url, p))  # (guarded as the record's reading found it)
                else:
                    lost.add(url)
        return stale, lost, taken

    def _take_pointer(self, site: str, p: Pointer, ref: Ref, sitemap_key: str, job_id: str, lease: Lease) -> bool:
        """Moves a pointer from the job's batch that never committed to ``ref``, our sitemap's lease checked
        (page_batches ``_with_lease``); its record stays where it was read from."""
        update = {
            "TableName": self.table,
            "Key": pointer_key(site, p.url),
            "UpdateExpression": "SET cur = :cur, sm = :sm, version = :next" + (" REMOVE w, prev" if p.whole else ""),
            "ConditionExpression": "version = :seen",
            "ExpressionAttributeValues": {
                ":cur": _s(str(ref)),
                ":sm": _s(sitemap_key),
                ":next": _n(p.version + 1),
                ":seen": _n(p.version),
            },
        }
        return self._with_lease(job_id, sitemap_key, lease, update)

    def _crawl_item(self, key: dict[str, Any], body: str) -> dict[str, Any]:
        """A new item of a crawl batch (no ``expires_at``: the crawl database outlives jobs)."""
        return created(self.table, {**key, "body": stored_body(body)})

    def _marks(self, job_id: str, urls: Sequence[str], *, consistent: bool = True) -> dict[str, tuple[str, str]]:
        if not self.pointed(job_id):
            return super()._marks(job_id, urls, consistent=consistent)
        marks: dict[str, tuple[str, str]] = {}
        for p in self.pointers.fetch(self._site(job_id), urls, consistent=consistent).values():
            ref = p.of_job(job_id)
            if ref is not None:
                marks[p.url] = (ref.bid, p.sitemap or "")
        return marks

    def _place(self, job_id: str, urls: Sequence[str]) -> tuple[dict[str, tuple[str, int]], dict[str, _Batch]]:
        """As the batch layout places pages, by their pointers; a page whose pointer no longer names the job's
        batch (two other jobs of the site listed the URL since, while this one still had it to fetch) is
        looked for in the job's batches (a query of the job's records, rare)."""
        placed, batches = super()._place(job_id, urls)
        missing = {url for url in urls if url not in placed}
        if not missing or not self.pointed(job_id):
            return placed, batches
        found: dict[str, tuple[str, int]] = {}
        for item in self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(f"JOB#{job_id}"), ":prefix": _s("BATCH#")},
            ConsistentRead=True,
        ):
            bid, _, rest = item["sk"]["S"].removeprefix("BATCH#").partition("#")
            if rest:
                continue  # (states and outcomes)
            batch = _Batch(bid, body_text(item).split("\n"))
            for url in missing - set(found):
                i = batch.position(url)
                if i is not None:
                    found[url] = (bid, i)
            if len(found) == len(missing):
                break
        batches |= self._batches(job_id, {bid for bid, _ in found.values()} - set(batches), outcomes=False)
        placed |= {url: place for url, place in found.items() if place[0] in batches}
        return placed, batches

    # settling -----------------------------------------------------------------------------------------

    def _settle_crawl(
        self,
        job_id: str,
        batch: _Batch,
        version: int,
        placed: Mapping[str, tuple[str, int]],
        outcomes: Sequence[PageOutcome],
        *,
        site: str | None,
    ) -> Listing:
        if not self.pointed(job_id):
            return super()._settle_crawl(job_id, batch, version, placed, outcomes, site=site)
        site = self._site(job_id, site)
        ref = Ref(job_id, batch.bid)
        moved = set(batch.states.get(MOVED, []))
        lines: list[str] = []
        whole: list[PageOutcome] = []
        for o in outcomes:
            if o.crawl is None:
                continue
            i = placed[o.record.url][1]
            if str(i) in moved:
                whole.append(o)
            else:
                lines.append(f"{i}\t{body_of(o.crawl)}")
        crawled = Listing([])
        for part, run in enumerate(_sized(lines, [len(line) for line in lines], len(lines) or 1)):
            crawled.items.append(self._crawl_item(outcome_key(site, ref, version, part), "\n".join(run)))
            crawled.roles.append(("outcome", batch.bid))
        for o in whole:
            assert o.crawl is not None
            pointer = self.pointers.mover_base(site, o.crawl)
            crawled.items.append(
                whole_write(self.table, site, o.crawl)
                if pointer is not False
                else stale_check(self.table, site, o.crawl)
            )
            crawled.roles.append(("crawl", o.record.url))
            if pointer:
                crawled.guarded.append(pointer)
        return crawled

    def _guards(self, job_id: str, guarded: Sequence[Any], *, site: str | None) -> list[tuple[dict[str, Any], str]]:
        """The guards of the pointers a settlement writes whole, for all its batches at once (two of its pages
        may guard one batch: one write of it)."""
        if not guarded:
            return []
        return self.pointers.guards(self._site(job_id, site), guarded, mover=job_id)
