"""A job's pages kept a listed batch at a time (listed_batch.py): claimed, settled and sent back a batch at a
time (and read a batch at a time: batch_reads.py).

Why: a batch's pages are listed together, claimed together and settled together (a page batch is one
message), so each of those writes is one item's for the whole batch, not one a page.

A claim reads the pages' pointers (crawl_pointers.py: eventually consistent first, see ``_place``) and their
batches, then writes each batch's states once; the settlement and the retries that follow write on the
version the claim left (``_held``), reading it again only when another worker moved it. A settlement writes
its pages' outcome item and their crawl records' item apart (under names of its own: listed_batch.py,
crawl_pointers.py), then one transaction: its pages' states naming both, the crawl batch naming the second,
and the records of pages another writer moved meanwhile (their batch's moved list), written whole on their
pointer, on the version their record was computed from.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from harvester.adapters.aws.batch_reads import folded_batches, read_batches
from harvester.adapters.aws.crawl_parts import touches
from harvester.adapters.aws.crawl_pointers import Pointers
from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.job_items import TRANSACTION_ITEMS, JobItems
from harvester.adapters.aws.listed_batch import (
    MOVED,
    OUTCOME_NAMES,
    Listing,
    StoredBatch,
    as_lines,
    holds,
    outcome_sk,
    settlement_names,
    settlement_tag,
    sized,
    state_of,
    state_sk,
    states_of,
)
from harvester.adapters.aws.page_body import pack_settled
from harvester.adapters.aws.pointer_items import (
    Ref,
    crawl_outcome_names,
    naming,
    outcome_key,
    stale_check,
    stale_urls,
    whole_write,
)
from harvester.adapters.aws.state_table import TransactionFailed, batch_put, conflict_pause
from harvester.adapters.aws.state_table import n as _n
from harvester.model import accounting
from harvester.model.records import JobCounts, SitemapURL, body_of, url_key
from harvester.model.state import Lease, OpenPages, PageOutcome, PageRetry, Settled

#: Leases whose claims a store keeps in memory for their settlement (see ``_leases``).
_LEASES_KEPT = 64
#: Tries of a write to a batch's states that other workers of the batch keep moving.
_STATE_RETRIES = 25


#: The statuses a resume sends a page's task again for.
_OPEN = frozenset({"pending", "processing"})


class PageBatches:
    """The claims, settlements, retries and readings of a job's pages (module docstring)."""

    def __init__(self, jobs: JobItems, pointers: Pointers, *, snapshot_refs: bool = True) -> None:
        self.jobs = jobs
        self.pointers = pointers
        #: Whether a settled record whose snapshot is its listed record's stores it as that (page_body.py:
        #: ``pack_settled``), which a container of a version before its reader (2026-11-30) cannot read: a
        #: stack upgraded from one turns it off (``HARVEST_SNAPSHOT_REFS=0``) until none runs.
        self.snapshot_refs = snapshot_refs
        self.client = jobs.client
        self.table = jobs.table
        #: Where the pages a lease claimed are (url -> batch id, position), for their settlement.
        self._placed: dict[tuple[str, str], tuple[str, int]] = {}
        #: The batches a lease claimed in, as its last write left them (lease token, batch id): its
        #: settlement and retries write on that version without reading it again (a conflict reads it).
        self._held: dict[tuple[str, str], StoredBatch] = {}
        #: The leases those are kept for, oldest first: a lease that never settled (its delivery failed) is
        #: let go once _LEASES_KEPT newer ones came (a container takes one message at a time).
        self._leases: dict[str, None] = {}
        self._lock = threading.Lock()

    # where pages are ------------------------------------------------------------------------------

    def _pointed(self, job_id: str, urls: Sequence[str], *, consistent: bool = True) -> dict[str, tuple[str, str]]:
        """Each URL's batch of the job and its sitemap's record key, as its pointer names them."""
        pointed: dict[str, tuple[str, str]] = {}
        for p in self.pointers.fetch(self.jobs.site_of(job_id), urls, consistent=consistent).values():
            ref = p.of_job(job_id)
            if ref is not None:
                pointed[p.url] = (ref.bid, p.sitemap or "")
        return pointed

    # a batch's states ----------------------------------------------------------------------------

    def _state(self, job_id: str, bid: str) -> tuple[dict[str, dict[str, Any]], int] | None:
        item = self.jobs.get(job_id, state_sk(bid))
        return None if item is None else states_of(item)

    def _state_update(
        self,
        job_id: str,
        bid: str,
        states: Mapping[str, Any],
        version: int,
        *,
        settles: Sequence[str] | None = None,
        crawl_outcomes: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The states' write on the version read (``settles``: a settlement's, the names of the outcome items
        it wrote apart, which it adds to ``jo``; ``settled`` counts it for the moves of pointers that guard
        it, and it adds ``crawl_outcomes`` to ``co``: crawl_pointers)."""
        body = {i: state for i, state in states.items() if i != MOVED}
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": self.jobs.key(job_id, state_sk(bid)),
            "UpdateExpression": "SET body = :body, version = :next",
            "ConditionExpression": "version = :seen",
            "ExpressionAttributeValues": {
                ":body": stored_body(json.dumps(body, separators=(",", ":"))),
                ":next": _n(version + 1),
                ":seen": _n(version),
            },
        }
        if settles is not None:
            update["UpdateExpression"] += f", settled = :next ADD co :co, {OUTCOME_NAMES} :jo"
            update["ExpressionAttributeValues"][":co"] = {"SS": list(crawl_outcomes)}
            update["ExpressionAttributeValues"][":jo"] = {"SS": list(settles)}
        return {"Update": update}

    def _place(
        self, job_id: str, urls: Sequence[str], stored: Mapping[str, str] | None = None
    ) -> tuple[dict[str, tuple[str, int]], dict[str, StoredBatch]]:
        """Each URL's batch and position, and those batches (records and states) as read now.

        A URL whose task names the job's batch and position its listing stored it at (``stored``) is found
        there when that batch holds it there, with no read of its pointer (a URL is in one committed batch of
        a job: the listing's; a batch read that does not hold it, or never committed, falls back to the
        pointer).

        A pointer is read eventually consistent (half a read unit) first: it names a batch before the batch
        commits and moves from it only when it never did, or when another job listed the URL, so one read
        too early, or before a takeover, names no committed batch of the job, and only such URLs are read
        again, consistently. A page whose pointer no longer names the job's batch (two other jobs of the site
        listed the URL since, while this one still had it to fetch) is looked for in the job's batches (a
        query of the job's records, rare)."""
        placed: dict[str, tuple[str, int]] = {}
        batches: dict[str, StoredBatch] = {}
        hinted = {url: where for url in urls if (where := _stored_at(stored.get(url) if stored else None))}
        if hinted:
            batches |= read_batches(self.jobs, job_id, {bid for bid, _ in hinted.values()}, outcomes=False)
            for url, (bid, i) in hinted.items():
                batch = batches.get(bid)
                if batch is not None and batch.position(url) == i:
                    placed[url] = (bid, i)
        missing = [url for url in urls if url not in placed]
        if not missing:
            return placed, batches
        for consistent in (False, True):
            pointed = self._pointed(job_id, missing, consistent=consistent)
            batches |= read_batches(
                self.jobs, job_id, {bid for bid, _ in pointed.values()} - set(batches), outcomes=False
            )
            for url, (bid, _) in pointed.items():
                batch = batches.get(bid)
                i = batch.position(url) if batch is not None else None
                if i is not None:
                    placed[url] = (bid, i)
            missing = [url for url in missing if url not in placed]
            if not missing:
                return placed, batches
        found: dict[str, tuple[str, int]] = {}
        unfound = set(missing)
        listed: StoredBatch | None = None
        for item in self.jobs.partition(job_id, "BATCH#"):
            bid, _, rest = item["sk"]["S"].removeprefix("BATCH#").partition("#")
            if not rest:
                listed = StoredBatch(bid, body_text(item).split("\n"))
                continue
            if rest != "S" or listed is None or listed.bid != bid:
                continue  # (outcomes; records without their states item: a listing that did not commit)
            for url in unfound - set(found):
                i = listed.position(url)
                if i is not None:
                    found[url] = (bid, i)
            if len(found) == len(unfound):
                break
        batches |= read_batches(self.jobs, job_id, {bid for bid, _ in found.values()} - set(batches), outcomes=False)
        placed |= {url: place for url, place in found.items() if place[0] in batches}
        return placed, batches

    # pages ----------------------------------------------------------------------------------------

    def claim_pages(
        self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float, stored: Mapping[str, str] | None = None
    ) -> list[SitemapURL]:
        """Each batch's pages claimed with one conditional write of its states (on the version read); a URL
        whose task says where the listing stored it (``stored``: ``stored_at``) is looked for there first."""
        wanted = list(dict.fromkeys(urls))
        placed, batches = self._place(job_id, wanted, stored)
        claimed: dict[str, SitemapURL] = {}
        by_batch: dict[str, list[str]] = {}
        for url in wanted:
            if url in placed:
                by_batch.setdefault(placed[url][0], []).append(url)
        for bid, batch_urls in by_batch.items():
            batch = batches[bid]
            for attempt in range(_STATE_RETRIES):
                states = dict(batch.states)
                mine: dict[str, SitemapURL] = {}
                for url in batch_urls:
                    i = placed[url][1]
                    state = states.get(str(i))
                    until = float(state.get("u", 0)) if state is not None else 0.0
                    if not accounting.claimable(batch.status(i), until, now):
                        continue
                    record = accounting.claimed(batch.record(i, job_id))
                    states[str(i)] = state_of(record, lease)
                    mine[url] = record
                if not mine:
                    break
                landed = self.jobs.conditional(self._state_update(job_id, bid, states, batch.version))
                fresh = None if landed else self._state(job_id, bid)
                if landed or (fresh is not None and holds(fresh[0], lease, (placed[url][1] for url in mine))):
                    # (a write whose answer was lost, sent again by botocore, fails its condition on itself:
                    # the states the lease holds say it landed)
                    claimed.update(mine)
                    batch.states, batch.version = (states, batch.version + 1) if landed else fresh  # type: ignore[misc]
                    with self._lock:
                        for url in mine:
                            self._placed[(lease.token, url)] = placed[url]
                        self._held[(lease.token, bid)] = batch
                        self._keep(lease.token)
                    break
                conflict_pause(min(attempt, 4))
                if fresh is None:
                    break
                batch.states, batch.version = fresh
        return [claimed[url] for url in wanted if url in claimed]

    def _locate(self, job_id: str, urls: Sequence[str], lease: Lease) -> dict[str, tuple[str, int]]:
        with self._lock:
            known = {url: self._placed[(lease.token, url)] for url in urls if (lease.token, url) in self._placed}
        missing = [url for url in urls if url not in known]
        if missing:
            known.update(self._place(job_id, missing)[0])
        return known

    def _keep(self, token: str) -> None:
        """Notes the lease as the newest, letting go of what the oldest beyond _LEASES_KEPT hold (the lock held)."""
        self._leases.pop(token, None)
        self._leases[token] = None
        while len(self._leases) > _LEASES_KEPT:
            old = next(iter(self._leases))
            del self._leases[old]
            for key in [key for key in self._placed if key[0] == old]:
                del self._placed[key]
            for key in [key for key in self._held if key[0] == old]:
                del self._held[key]

    def _forget(self, lease: Lease, urls: Sequence[str]) -> None:
        """Lets go of what the lease holds of ``urls`` (settled or sent back), and of the batches it holds no
        other page of."""
        with self._lock:
            for url in urls:
                self._placed.pop((lease.token, url), None)
            still = {bid for (token, _), (bid, _) in self._placed.items() if token == lease.token}
            for key in [key for key in self._held if key[0] == lease.token and key[1] not in still]:
                del self._held[key]

    def _holding(self, job_id: str, bid: str, lease: Lease, *, records: bool) -> StoredBatch | None:
        """The batch as the lease's last write left it (taken: a write that fails reads it again), else read
        now (its states; with ``records``, its records too)."""
        with self._lock:
            held = self._held.pop((lease.token, bid), None)
        if held is not None and (held.records or not records):
            return held
        if records:
            return read_batches(self.jobs, job_id, {bid}, outcomes=False).get(bid)
        read = self._state(job_id, bid)
        if read is None:
            return None
        batch = StoredBatch(bid, [])
        batch.states, batch.version = read
        return batch

    def _hold(self, lease: Lease, batch: StoredBatch, states: dict[str, dict[str, Any]], *, moved: bool = True) -> None:
        """Keeps the batch as the lease's write left it (``moved``: the write moved its version on)."""
        batch.states, batch.version = states, batch.version + (1 if moved else 0)
        with self._lock:
            self._held[(lease.token, batch.bid)] = batch

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        """Each batch's settled pages: an outcome item and a crawl outcome item written apart, then one
        transaction of its states naming them, its crawl batch naming the second and a counter shard (a
        settlement of several batches: one transaction for them all while it holds them)."""
        first: dict[str, PageOutcome] = {}
        for outcome in outcomes:
            if outcome.record.status.final:
                first.setdefault(outcome.record.url, outcome)
        placed = self._locate(job_id, list(first), lease)
        settled = Settled()
        pending = {url: o for url, o in first.items() if url in placed}
        for _ in range(_STATE_RETRIES):
            if not pending:
                break
            by_batch: dict[str, list[PageOutcome]] = {}
            for url, o in pending.items():
                by_batch.setdefault(placed[url][0], []).append(o)
            items: list[dict[str, Any]] = []
            roles: list[tuple[str, str]] = []
            apart: list[dict[str, Any]] = []
            tag = settlement_tag()
            applied: list[PageOutcome] = []
            held: list[tuple[StoredBatch, dict[str, dict[str, Any]]]] = []
            guarded: list[Any] = []
            touched: set[str] = set()  # (the sitemaps whose epochs the records written whole move)
            for bid, batch_outcomes in by_batch.items():
                batch = self._holding(job_id, bid, lease, records=False)
                if batch is None:
                    for o in batch_outcomes:
                        pending.pop(o.record.url)
                    continue
                states, version = dict(batch.states), batch.version
                finals: dict[str, str] = {}
                mine: list[PageOutcome] = []
                for o in batch_outcomes:
                    i = str(placed[o.record.url][1])
                    state = states.get(i)
                    if state is None or state.get("s") != "processing" or state.get("t") != lease.token:
                        pending.pop(o.record.url)  # (no longer ours)
                        self._forget(lease, [o.record.url])
                        continue
                    states[i] = {"s": o.record.status.value, "o": version + 1}
                    listed = batch.records[int(i)] if batch.records and self.snapshot_refs else None
                    finals[i] = f"{i}\t{pack_settled(body_of(o.record), listed, job_id)}"
                    mine.append(o)
                if not finals:
                    continue  # (nothing of ours: the batch is read again by whatever comes next)
                lines = list(finals.values())
                parts = sized(lines, [len(line) for line in lines], len(lines))
                crawled, crawl_outcomes = self._settle_crawl(
                    job_id, batch, version + 1, placed, mine, site=site, tag=tag
                )
                size = len(items) + 1 + len(crawled.items) + len(guarded) + len(crawled.guarded) + 1
                size += len(touched | crawled.touched)
                if items and size > TRANSACTION_ITEMS:
                    self._hold(lease, batch, batch.states, moved=False)
                    break  # (the next round takes the rest)
                held.append((batch, states))
                applied.extend(mine)
                names = settlement_names(version + 1, len(parts), tag)
                items.append(
                    self._state_update(job_id, bid, states, version, settles=names, crawl_outcomes=crawl_outcomes)
                )
                roles.append(("state", bid))
                for name, run in zip(names, parts, strict=True):
                    apart.append(self.jobs.apart_item(job_id, outcome_sk(bid, name), as_lines(run)))
                items += crawled.items
                roles += crawled.roles
                apart += crawled.apart
                guarded += crawled.guarded
                touched |= crawled.touched
            if not items:
                break
            for move, key in touches(self.table, self.jobs.site_of(job_id, site), touched, job_id):
                items.append(move)
                roles.append(("touch", key))
            for guard, url in self._guards(job_id, guarded, site=site):
                items.append(guard)
                roles.append(("crawl", url))
            items.append(
                self.jobs.counter_update(job_id, accounting.total(accounting.page_done(o.record) for o in applied))
            )
            batch_put(self.client, self.table, apart)
            try:
                self.jobs.transact(items)
            except TransactionFailed as exc:
                failed = [roles[i] for i in exc.failed_conditions(len(roles))]
                if not failed:
                    raise
                if gone := [bid for role, bid in failed if role == "named"]:
                    missing = f"crawl batch {gone[0]} of job {job_id} is not there to name its records"
                    raise RuntimeError(missing) from exc
                stale = stale_urls(failed)
                settled.stale.extend(stale)
                for url in stale:
                    pending.pop(url, None)
                conflict_pause(0)
                continue  # (states moved: read again; a stale crawl record's page is held back)
            for batch, states in held:
                self._hold(lease, batch, states)
            done = [o.record.url for o in applied]
            settled.applied.extend(done)
            for url in done:
                pending.pop(url, None)
            self._forget(lease, done)
        return settled

    # settling -----------------------------------------------------------------------------------------

    def _settle_crawl(
        self,
        job_id: str,
        batch: StoredBatch,
        version: int,
        placed: Mapping[str, tuple[str, int]],
        outcomes: Sequence[PageOutcome],
        *,
        site: str | None,
        tag: str,
    ) -> tuple[Listing, list[str]]:
        """The crawl records the settlement writes: its batch's, in crawl outcome items written apart (``apart``)
        that an update of the crawl batch item names in the transaction; a moved page's, written whole. With
        what ``co`` is to name (``crawl_outcome_names``)."""
        site = self.jobs.site_of(job_id, site)
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
        runs = sized(lines, [len(line) for line in lines], len(lines))
        names = crawl_outcome_names(version, len(runs), tag)
        if runs:
            for name, run in zip(names, runs, strict=True):
                crawled.apart.append({**outcome_key(site, ref, name), "body": stored_body("\n".join(run))})
            crawled.items.append(naming(self.table, site, ref, names))
            crawled.roles.append(("named", batch.bid))
        for o in whole:
            assert o.crawl is not None
            pointer = self.pointers.mover_base(site, o.crawl)
            crawled.items.append(
                whole_write(self.table, site, o.crawl)
                if pointer is not False
                else stale_check(self.table, site, o.crawl)
            )
            crawled.roles.append(("crawl", o.record.url))
            if o.crawl.sitemap:
                crawled.touched.add(url_key(o.crawl.sitemap))
            if pointer:
                crawled.guarded.append(pointer)
                if pointer.sitemap:
                    crawled.touched.add(pointer.sitemap)
        return crawled, names

    def _guards(self, job_id: str, guarded: Sequence[Any], *, site: str | None) -> list[tuple[dict[str, Any], str]]:
        """The guards of the pointers a settlement writes whole, for all its batches at once (two of its pages
        may guard one batch: one write of it)."""
        if not guarded:
            return []
        return self.pointers.guards(self.jobs.site_of(job_id, site), guarded, mover=job_id)

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        firsts = {r.url: r for r in reversed(retries)}  # (the first retry of a URL)
        placed = self._locate(job_id, list(firsts), lease)
        by_batch: dict[str, list[PageRetry]] = {}
        for url, retry in firsts.items():
            if url in placed:
                by_batch.setdefault(placed[url][0], []).append(retry)
        applied: set[str] = set()
        for bid, batch_retries in by_batch.items():
            for attempt in range(_STATE_RETRIES):
                batch = self._holding(job_id, bid, lease, records=True)
                if batch is None:
                    break
                states = dict(batch.states)
                moved: list[str] = []
                for retry in batch_retries:
                    i = placed[retry.url][1]
                    state = states.get(str(i))
                    if state is None or state.get("s") != "processing" or state.get("t") != lease.token:
                        continue
                    states[str(i)] = state_of(accounting.retried_page(batch.record(i, job_id), retry))
                    moved.append(retry.url)
                if not moved:
                    break
                try:
                    self.jobs.transact(
                        [
                            self._state_update(job_id, bid, states, batch.version),
                            self.jobs.counter_update(job_id, JobCounts()),
                        ]
                    )
                except TransactionFailed as exc:
                    if not exc.failed_conditions(1):
                        raise
                    conflict_pause(min(attempt, 4))
                    continue
                applied.update(moved)
                self._hold(lease, batch, states)
                break
        self._forget(lease, list(applied))
        return [url for url in dict.fromkeys(r.url for r in retries) if url in applied]

    def get_page(self, job_id: str, url: str) -> SitemapURL | None:
        pointed = self._pointed(job_id, [url])
        if url not in pointed:
            return None
        bid = pointed[url][0]
        batch = read_batches(self.jobs, job_id, {bid}, outcomes=True).get(bid)
        i = batch.position(url) if batch is not None else None
        return batch.record(i, job_id) if batch is not None and i is not None else None

    def release_leases(self, job_id: str) -> int:
        """Lets the leases of the job's processing pages lapse now (a resume); how many."""
        released = 0
        for item in self.jobs.partition(job_id, "BATCH#"):
            if item["sk"]["S"].endswith("#S"):
                bid = item["sk"]["S"].removeprefix("BATCH#").removesuffix("#S")
                released += self._let_go(job_id, bid, states_of(item))
        return released

    def open_pages(self, job_id: str, *, after: str | None = None, until: str | None = None) -> Iterator[OpenPages]:
        """The job's pending and processing pages a batch at a time, in the order of the batches' ids (all of
        one length), each batch's leases let go; the position after a batch is its id."""
        for batch in folded_batches(self.jobs, job_id, after=after):
            if until is not None and batch.bid > until:
                return
            self._let_go(job_id, batch.bid, (batch.states, batch.version))
            pages = [batch.record(i, job_id) for i in range(len(batch.records)) if batch.status(i) in _OPEN]
            yield OpenPages(pages, batch.bid)

    def _let_go(self, job_id: str, bid: str, read: tuple[dict[str, dict[str, Any]], int] | None) -> int:
        """Lets the leases of the batch's processing pages (its states as ``read``) lapse; how many."""
        for attempt in range(_STATE_RETRIES):
            if read is None:
                return 0
            states, version = read
            leased = [
                i for i, s in states.items() if i != MOVED and s.get("s") == "processing" and float(s.get("u", 0)) > 0
            ]
            if not leased:
                return 0
            released = {**states, **{i: {**states[i], "u": 0} for i in leased}}
            if self.jobs.conditional(self._state_update(job_id, bid, released, version)):
                return len(leased)
            conflict_pause(min(attempt, 4))
            read = self._state(job_id, bid)
        return 0


def stored_at(bid: str, i: int) -> str:
    """Where a listing stored a page, as its task carries it (``PageTask.stored``): its batch and position."""
    return f"{bid}/{i}"


def _stored_at(text: str | None) -> tuple[str, int] | None:
    """``stored_at`` read back; None for anything else (a task of another store or version: looked up)."""
    bid, _, i = (text or "").partition("/")
    return (bid, int(i)) if bid and i.isdigit() else None
