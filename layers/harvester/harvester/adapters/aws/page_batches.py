"""The state store's pages kept a listed batch at a time: one item for a batch's job records, one for their
states, one per settlement for their outcomes, and a small mark per URL that keeps it once in its job.

Why: with an item per URL, a fetched page made three writes of its own item (listed, claimed, settled),
two of them in transactions that bill each write twice: 5 of the 7.35 DynamoDB write units a fetched page
cost (bench/aws_cost.py; its crawl record, written in the settlement, was 2 more), $4.7 of the $5.3 a
million pages cost. A batch's pages are listed together, claimed together and settled together (a page
batch is one message), so each of those writes can be one item's for the whole batch; only the mark stays
per URL, a plain conditional put of ~100 bytes (one unit), because a URL listed by two sitemaps of a job
must be counted once, whichever comes first. Kept this way, a fetched page costs 3.7 units ($2.9 a million).

Layout (``pk`` ``JOB#<id>``; the job's other items are DynamoStateStore's):

* ``MARK#<url key>``: the URL is the job's, listed in batch ``bid`` by the sitemap ``sm`` (its record's key);
* ``BATCH#<bid>``: the batch's job records as listed (packed: page_body.py), one a line, deflated;
* ``BATCH#<bid>#O#<version>#<part>``: the final records of the pages a settlement settled, by position in
  the batch (a part per 256 KB);
* ``BATCH#<bid>#S``: the pages' states since listing (status, attempts, retries, error, lease), by
  position, with the item's ``version``; it is written with the records, so it is what says the batch was
  committed.

A page's record is its outcome when it has one, else its listed record with its state applied. The items of
a batch sort together (records, outcomes, states), so a reading of the job folds them a batch at a time.

Listing is two steps: the marks (conditional puts, side by side), then one transaction with the records,
the states, the sitemap's checkpoint and a counter shard. A mark whose batch never committed and never will
is taken over by the listing that meets it: one of the same sitemap's (a crash, or a listing whose crawl
records had moved, decided again; the taker holds the sitemap's lease, checked in the takeover's own
transaction, so the batch that wrote the mark can no longer commit), or one of a sitemap that is final. A
mark of another sitemap still being read is left to that reading. (A URL marked by a reading that died, and
dropped by its sitemap's next reading, is not recorded if another sitemap listed it meanwhile: the one loss
this layout can make; it needs a crash and the sitemap changing in between.)

A claim reads the marks (eventually consistent: see ``_place``) and the batches, then writes each batch's
states once; the settlement and the retries that follow write on the version the claim left (``_held``),
reading it again only when another worker moved it.

Jobs keep the layout they were created with (``layout`` on the job's item): a job created before this
layout, or with ``HARVEST_STATE_LAYOUT=items``, keeps an item per URL (DynamoStateStore).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import orjson
from msgspec import Struct, field

from harvester.adapters.aws.crawl import url_put
from harvester.adapters.aws.crawl_pointers import stale_urls
from harvester.adapters.aws.dynamodb import _TRANSACTION_ITEMS, DynamoStateStore
from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.page_body import pack, unpack
from harvester.adapters.aws.state_table import TransactionFailed, batch_get, conditional, conflict_pause, created
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model import accounting
from harvester.model.records import (
    CrawlWrite,
    JobCounts,
    PageRecord,
    SitemapStatus,
    SitemapURL,
    UrlStatus,
    body_of,
    url_key,
)
from harvester.ports import Checkpoint, Lease, PageOutcome, PageRetry, Recorded, Settled

#: The layouts of a job's pages (``layout`` on the job's item; absent: items).
ITEMS = "items"
BATCHES = "batches"
#: (page_pointers: the batch layout with pointers for marks)
POINTERS = "pointers"
LAYOUTS = (ITEMS, BATCHES)

#: Marks written at once (each is a request of its own).
_MARK_THREADS = 16
#: Leases whose claims a store keeps in memory for their settlement (see ``_leases``).
_LEASES_KEPT = 64
#: Tries of a write to a batch's states that other workers of the batch keep moving.
_STATE_RETRIES = 25


#: Where a states item's read gives the positions whose pointer another writer moved since the listing (the
#: item's ``moved`` set: crawl_pointers), beside the positions' states; never written into the body.
MOVED = "x"


def _batch_sk(bid: str) -> str:
    return f"BATCH#{bid}"


def _state_sk(bid: str) -> str:
    return f"BATCH#{bid}#S"


def _outcome_sk(bid: str, version: int, part: int) -> str:
    return f"BATCH#{bid}#O#{version:06d}#{part}"


#: The most bytes of packed records one item holds, before deflate (an item holds 400 KB): a batch of pages
#: with large extensions (an image sitemap's hundreds of images a page) is split into smaller batches.
ITEM_BYTES = 256 * 1024


def _sized(items: Sequence[Any], sizes: Sequence[int], most: int) -> list[list[Any]]:
    """``items`` in runs of at most ``most`` items and ITEM_BYTES (a larger item is a run of its own)."""
    runs: list[list[Any]] = []
    run: list[Any] = []
    size = 0
    for item, n in zip(items, sizes, strict=True):
        if run and (len(run) == most or size + n > ITEM_BYTES):
            runs.append(run)
            run, size = [], 0
        run.append(item)
        size += n
    if run:
        runs.append(run)
    return runs


class Listing(Struct):
    """A listed chunk's pages that are its batch's, the items its transaction writes beside the batch's (each
    with its role and URL: a failed ``crawl`` role makes its URL stale), or, before any, the URLs found stale."""

    mine: list[PageRecord]
    items: list[dict[str, Any]] = field(default_factory=list)
    roles: list[tuple[str, str]] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    #: What the transaction must guard beside its items, for a whole transaction at once (see ``_guards``).
    guarded: list[Any] = field(default_factory=list)


class _Batch(Struct):
    """A batch as read: its listed records (packed bodies, in order), the states and final records (packed) of
    the pages that moved since, by position, and its states' version."""

    bid: str
    records: list[str]
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    version: int = 0
    #: The settlements whose outcome items were read.
    read: set[int] = field(default_factory=set)
    _positions: dict[str, int] | None = None

    def position(self, url: str) -> int | None:
        if self._positions is None:
            self._positions = {orjson.loads(body)["url"]: i for i, body in enumerate(self.records)}
        return self._positions.get(url)

    def status(self, i: int) -> str:
        key = str(i)
        if key in self.outcomes:  # (an outcome is final, whatever states were read beside it)
            return str(orjson.loads(self.outcomes[key])["status"])
        state = self.states.get(key)
        if state is not None:
            return str(state["s"])
        return str(orjson.loads(self.records[i]).get("status", "pending"))

    def settled_by(self) -> set[int]:
        """The settlements (states' versions) whose outcome items the states name."""
        return {int(state["o"]) for i, state in self.states.items() if i != MOVED and "o" in state}

    def body(self, i: int, job_id: str) -> str:
        """The page's record as ``body_of`` writes it."""
        key = str(i)
        if key in self.outcomes:
            return unpack(self.outcomes[key], job_id)
        if key not in self.states:
            return unpack(self.records[i], job_id)
        return body_of(self.record(i, job_id))

    def record(self, i: int, job_id: str) -> SitemapURL:
        key = str(i)
        if key in self.outcomes:
            return SitemapURL.model_validate_json(unpack(self.outcomes[key], job_id))
        listed = SitemapURL.model_validate_json(unpack(self.records[i], job_id))
        state = self.states.get(key)
        return listed if state is None else _applied(listed, state)

    def add_outcomes(self, text: str, sk: str) -> None:
        """An outcome item's records (``sk``: its sort key, ``BATCH#<bid>#O#<version>#<part>``)."""
        self.read.add(int(sk.split("#O#")[1].split("#")[0]))
        for line in text.split("\n"):
            i, _, body = line.partition("\t")
            self.outcomes[i] = body


def _states_of(item: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], int]:
    """A states item's pages' states and its version (with, under ``MOVED``, its positions other writers
    moved: an attribute of their own, which those writers add to)."""
    states = json.loads(body_text(item))
    if "moved" in item:
        states[MOVED] = sorted(item["moved"]["SS"], key=int)
    return states, int(item["version"]["N"])


def _lines(bodies: Sequence[str]) -> str:
    """Bodies one a line (JSON holds no raw newline), so that reading splits rather than parses them."""
    return "\n".join(bodies)


def _applied(record: SitemapURL, state: Mapping[str, Any]) -> SitemapURL:
    when = state.get("n")
    return record.model_copy(
        update={
            "status": UrlStatus(state["s"]),
            "attempts": int(state.get("a", 0)),
            "retries": int(state.get("r", 0)),
            "error_message": state.get("e"),
            "next_fetch_time": datetime.fromisoformat(when) if when else None,
        }
    )


def _holds(states: Mapping[str, Any], lease: Lease, positions: Iterable[int]) -> bool:
    """Whether ``lease`` holds the pages at ``positions`` of a batch's states (a claim that landed)."""
    return all(states.get(str(i), {}).get("t") == lease.token for i in positions)


def _state_of(record: SitemapURL, lease: Lease | None = None) -> dict[str, Any]:
    """What a page's state keeps of its record (what claims and retries change), and its lease."""
    state: dict[str, Any] = {"s": record.status.value, "a": record.attempts}
    if record.retries:
        state["r"] = record.retries
    if record.error_message is not None:
        state["e"] = record.error_message
    if record.next_fetch_time is not None:
        state["n"] = record.next_fetch_time.isoformat()
    if lease is not None:
        state["t"], state["u"] = lease.token, lease.until
    return state


class DynamoBatchStateStore(DynamoStateStore):
    """DynamoStateStore with the pages of new jobs kept a listed batch at a time (module docstring)."""

    #: The layouts it can create jobs in.
    layouts: tuple[str, ...] = LAYOUTS

    def __init__(self, client: Any, table: str, *, retention_days: int = 30, layout: str = BATCHES) -> None:
        super().__init__(client, table, retention_days=retention_days)
        if layout not in self.layouts:
            raise ValueError(f"state layout {layout!r} is not one of {', '.join(self.layouts)}")
        self.layout = layout
        self._layouts: dict[str, str] = {}
        #: Where the pages a lease claimed are (url -> batch id, position), for their settlement.
        self._placed: dict[tuple[str, str], tuple[str, int]] = {}
        #: The batches a lease claimed in, as its last write left them (lease token, batch id): its
        #: settlement and retries write on that version without reading it again (a conflict reads it).
        self._held: dict[tuple[str, str], _Batch] = {}
        #: The leases those are kept for, oldest first: a lease that never settled (its delivery failed) is
        #: let go once _LEASES_KEPT newer ones came (a container takes one message at a time).
        self._leases: dict[str, None] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # layout ---------------------------------------------------------------------------------------

    def _job_attributes(self) -> dict[str, Any]:
        return {"layout": _s(self.layout)}

    def layout_of(self, job_id: str) -> str:
        """The layout the job keeps its pages in (read once per job: a job never changes it)."""
        known = self._layouts.get(job_id)
        if known is None:
            item = self._get(job_id, "JOB")
            if item is None:
                return ITEMS
            known = self._layouts[job_id] = str(item.get("layout", {}).get("S", ITEMS))
        return known

    def batched(self, job_id: str) -> bool:
        """Whether the job keeps its pages a batch at a time."""
        return self.layout_of(job_id) != ITEMS

    # listing --------------------------------------------------------------------------------------

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
        keys: Sequence[int] | None = None,
    ) -> Recorded:
        if not self.batched(job_id):
            return super().record_pages(
                job_id,
                sitemap_url,
                pages,
                checkpoint=checkpoint,
                lease=lease,
                site=site,
                crawl=crawl,
                enqueued=enqueued,
                keys=keys,
            )
        writes = crawl if site is not None and crawl else {}
        unique = accounting.first_per_url(pages)
        recorded = Recorded()
        packed = {p.url: pack(body_of(p), job_id) for p in unique}
        chunks = _sized(unique, [len(packed[p.url]) for p in unique], self.record_batch) or [[]]
        sitemap_key = url_key(sitemap_url)  # (a mark names its sitemap by its record's key)
        for n, chunk in enumerate(chunks):
            sitemap = self._leased_sitemap(job_id, sitemap_url, lease)
            last = n == len(chunks) - 1
            # The checkpoint moves with the last chunk only: until then, a crash must record the batch again.
            target = checkpoint if last else sitemap.pages_recorded
            bid = uuid.uuid4().hex[:16]  # (random: a listing decided again, or after a crash, is a batch of its own)
            listing = self._list(job_id, bid, sitemap_key, chunk, lease, site=site, writes=writes)
            if listing.stale:
                recorded.stale = listing.stale
                return recorded
            mine = listing.mine
            moved = accounting.recorded_sitemap(sitemap, target, len(mine), enqueued if last else None)
            items: list[dict[str, Any]] = []
            roles: list[tuple[str, str]] = []
            if mine:
                records = _lines([packed[p.url] for p in mine])
                items.append(self._new_item(job_id, _batch_sk(bid), records, version=None))
                items.append(self._new_item(job_id, _state_sk(bid), "{}", version=1))
                roles += [("batch", bid), ("batch", bid)]
            items += listing.items
            roles += listing.roles
            failed = self._commit_listing(job_id, sitemap_url, lease, items, roles, moved, mine)
            stale = stale_urls(failed)
            if stale:  # (nothing written: the marks are taken over by the listing decided again)
                recorded.stale = stale
                return recorded
            if failed:
                raise RuntimeError(f"batch {bid} of job {job_id} was written already: {failed}")
            recorded.new.extend(mine)
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
    ) -> Listing:
        """Which pages of ``chunk`` are batch ``bid``'s (marked), and the crawl records its transaction writes."""
        listing = Listing(self._mark(job_id, bid, sitemap_key, chunk, lease))
        for p in listing.mine:
            if p.url in writes:
                listing.items.append(url_put(self.table, str(site), writes[p.url]))
                listing.roles.append(("crawl", p.url))
        return listing

    def _new_item(self, job_id: str, sk: str, body: str, *, version: int | None) -> dict[str, Any]:
        item = {**self._key(job_id, sk), "body": stored_body(body), "expires_at": self._expires()}
        if version is not None:
            item["version"] = _n(version)
        return created(self.table, item)

    def _mark(
        self, job_id: str, bid: str, sitemap_key: str, chunk: Sequence[PageRecord], lease: Lease
    ) -> list[PageRecord]:
        """The pages of ``chunk`` that are this batch's: marked now, or marked by a batch that never committed
        and never will (taken over): one of this sitemap's (its listing decided again, or a reading that died;
        this one holds the sitemap's lease now), or one of a sitemap that is final. The others are the job's
        already, or another sitemap's, still being read."""
        if not chunk:
            return []
        landed = list(self._pool_map(lambda p: self._put_mark(job_id, p.key, bid, sitemap_key), chunk))
        taken = [p for p, ok in zip(chunk, landed, strict=True) if not ok]
        if not taken:
            return list(chunk)
        marks = self._marks(job_id, [p.url for p in taken])
        others = {sm for other, sm in marks.values() if sm != sitemap_key}
        done = self._final_sitemaps(job_id, others) if others else set()
        candidates = {
            url: other for url, (other, sm) in marks.items() if other != bid and (sm == sitemap_key or sm in done)
        }
        committed = self._committed(job_id, set(candidates.values()))
        lost = {p.url for p in taken}
        for url, other in candidates.items():
            if other not in committed and self._take_mark(job_id, url_key(url), other, bid, sitemap_key, lease):
                lost.discard(url)
        return [p for p in chunk if p.url not in lost]

    def _final_sitemaps(self, job_id: str, keys: set[str]) -> set[str]:
        """Which of the sitemaps (by record key) are final: their readings will commit nothing more."""
        items = batch_get(self.client, self.table, [self._key(job_id, f"SITEMAP#{key}") for key in keys])
        return {i["sk"]["S"].removeprefix("SITEMAP#") for i in items if SitemapStatus(i["status"]["S"]).final}

    def _pool_map(self, fn: Any, items: Sequence[Any]) -> Iterator[Any]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=_MARK_THREADS, thread_name_prefix="marks")
        return self._pool.map(fn, items)

    def _put_mark(self, job_id: str, key: str, bid: str, sitemap_key: str) -> bool:
        item = {
            **self._key(job_id, f"MARK#{key}"),
            "bid": _s(bid),
            "sm": _s(sitemap_key),
            "expires_at": self._expires(),
        }
        return conditional(
            lambda: self.client.put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        )

    def _take_mark(self, job_id: str, key: str, old: str, bid: str, sitemap_key: str, lease: Lease) -> bool:
        """Moves a mark from batch ``old`` to ours (see ``_with_lease``)."""
        update = {
            "TableName": self.table,
            "Key": self._key(job_id, f"MARK#{key}"),
            "UpdateExpression": "SET bid = :bid, sm = :sm",
            "ConditionExpression": "bid = :old",
            "ExpressionAttributeValues": {":bid": _s(bid), ":sm": _s(sitemap_key), ":old": _s(old)},
        }
        return self._with_lease(job_id, sitemap_key, lease, update)

    def _with_lease(self, job_id: str, sitemap_key: str, lease: Lease, update: dict[str, Any]) -> bool:
        """A takeover's update, in one transaction with a check that our sitemap is still ours: a reading whose
        lease lapsed meanwhile must not take back marks from the one holding it now (their batch would commit
        with no mark naming it: counted, never claimable). False when either condition failed."""
        condition, values = self._leased(lease)
        try:
            self._transact(
                [
                    {"Update": update},
                    {
                        "ConditionCheck": {
                            "TableName": self.table,
                            "Key": self._key(job_id, f"SITEMAP#{sitemap_key}"),
                            "ConditionExpression": condition,
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": values,
                        }
                    },
                ]
            )
        except TransactionFailed as exc:
            if exc.failed_conditions(2):
                return False
            raise
        return True

    def _marks(self, job_id: str, urls: Sequence[str], *, consistent: bool = True) -> dict[str, tuple[str, str]]:
        """Each URL's batch and its sitemap's record key, for the URLs the job has."""
        by_key = {url_key(url): url for url in urls}
        keys = [self._key(job_id, f"MARK#{key}") for key in by_key]
        marks: dict[str, tuple[str, str]] = {}
        for item in batch_get(self.client, self.table, keys, consistent=consistent):
            url = by_key[item["sk"]["S"].removeprefix("MARK#")]
            marks[url] = (item["bid"]["S"], item["sm"]["S"])
        return marks

    def _committed(self, job_id: str, bids: set[str]) -> set[str]:
        items = batch_get(self.client, self.table, [self._key(job_id, _state_sk(bid)) for bid in bids])
        return {item["sk"]["S"].removeprefix("BATCH#").removesuffix("#S") for item in items}

    # reading batches ------------------------------------------------------------------------------

    def _batches(self, job_id: str, bids: set[str], *, outcomes: bool) -> dict[str, _Batch]:
        """The batches ``bids`` (records and states; with ``outcomes``, their outcomes too)."""
        keys = [self._key(job_id, sk) for bid in bids for sk in (_batch_sk(bid), _state_sk(bid))]
        items = {item["sk"]["S"]: item for item in batch_get(self.client, self.table, keys)}
        batches: dict[str, _Batch] = {}
        for bid in bids:
            records, states = items.get(_batch_sk(bid)), items.get(_state_sk(bid))
            if records is None or states is None:
                continue  # (never committed)
            batch = _Batch(bid, body_text(records).split("\n"))
            batch.states, batch.version = _states_of(states)
            batches[bid] = batch
        if outcomes:
            for batch in batches.values():
                self._read_outcomes(job_id, batch)
        return batches

    def _read_outcomes(self, job_id: str, batch: _Batch) -> None:
        for item in self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(f"JOB#{job_id}"), ":prefix": _s(f"BATCH#{batch.bid}#O#")},
            ConsistentRead=True,
        ):
            batch.add_outcomes(body_text(item), item["sk"]["S"])

    def _state(self, job_id: str, bid: str) -> tuple[dict[str, dict[str, Any]], int] | None:
        item = self._get(job_id, _state_sk(bid))
        return None if item is None else _states_of(item)

    def _state_update(
        self, job_id: str, bid: str, states: Mapping[str, Any], version: int, *, settles: bool = False
    ) -> dict[str, Any]:
        """The states' write on the version read (``settles``: a settlement's, which the pointer layout counts)."""
        body = {i: state for i, state in states.items() if i != MOVED}
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": self._key(job_id, _state_sk(bid)),
            "UpdateExpression": "SET body = :body, version = :next",
            "ConditionExpression": "version = :seen",
            "ExpressionAttributeValues": {
                ":body": stored_body(json.dumps(body, separators=(",", ":"))),
                ":next": _n(version + 1),
                ":seen": _n(version),
            },
        }
        if settles and self.layout_of(job_id) == POINTERS:
            update["UpdateExpression"] += ", settled = :next"
        return {"Update": update}

    def _place(self, job_id: str, urls: Sequence[str]) -> tuple[dict[str, tuple[str, int]], dict[str, _Batch]]:
        """Each URL's batch and position, and those batches (records and states) as read now.

        A mark is read eventually consistent (half a read unit) first: it is written before its batch commits
        and changed only when that batch never did, so one read too early, or before a takeover, names no
        committed batch, and only such URLs are read again, consistently."""
        placed: dict[str, tuple[str, int]] = {}
        batches: dict[str, _Batch] = {}
        missing = list(urls)
        for consistent in (False, True):
            marks = self._marks(job_id, missing, consistent=consistent)
            batches |= self._batches(job_id, {bid for bid, _ in marks.values()} - set(batches), outcomes=False)
            for url, (bid, _) in marks.items():
                batch = batches.get(bid)
                i = batch.position(url) if batch is not None else None
                if i is not None:
                    placed[url] = (bid, i)
            missing = [url for url in missing if url not in placed]
            if not missing:
                break
        return placed, batches

    # pages ----------------------------------------------------------------------------------------

    def claim_pages(self, job_id: str, urls: Sequence[str], lease: Lease, *, now: float) -> list[SitemapURL]:
        """Each batch's pages claimed with one conditional write of its states (on the version read)."""
        if not self.batched(job_id):
            return super().claim_pages(job_id, urls, lease, now=now)
        wanted = list(dict.fromkeys(urls))
        placed, batches = self._place(job_id, wanted)
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
                    states[str(i)] = _state_of(record, lease)
                    mine[url] = record
                if not mine:
                    break
                landed = self._conditional(self._state_update(job_id, bid, states, batch.version))
                fresh = None if landed else self._state(job_id, bid)
                if landed or (fresh is not None and _holds(fresh[0], lease, (placed[url][1] for url in mine))):
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

    def _holding(self, job_id: str, bid: str, lease: Lease, *, records: bool) -> _Batch | None:
        """The batch as the lease's last write left it (taken: a write that fails reads it again), else read
        now (its states; with ``records``, its records too)."""
        with self._lock:
            held = self._held.pop((lease.token, bid), None)
        if held is not None and (held.records or not records):
            return held
        if records:
            return self._batches(job_id, {bid}, outcomes=False).get(bid)
        read = self._state(job_id, bid)
        if read is None:
            return None
        batch = _Batch(bid, [])
        batch.states, batch.version = read
        return batch

    def _hold(self, lease: Lease, batch: _Batch, states: dict[str, dict[str, Any]], *, moved: bool = True) -> None:
        """Keeps the batch as the lease's write left it (``moved``: the write moved its version on)."""
        batch.states, batch.version = states, batch.version + (1 if moved else 0)
        with self._lock:
            self._held[(lease.token, batch.bid)] = batch

    def finish_pages(
        self, job_id: str, outcomes: Sequence[PageOutcome], lease: Lease, *, site: str | None = None
    ) -> Settled:
        """Each batch's settled pages: its states and an outcome item, in one transaction with the pages'
        crawl records and a counter shard (a settlement of several batches: one transaction for them all
        while it holds them)."""
        if not self.batched(job_id):
            return super().finish_pages(job_id, outcomes, lease, site=site)
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
            applied: list[PageOutcome] = []
            held: list[tuple[_Batch, dict[str, dict[str, Any]]]] = []
            guarded: list[Any] = []
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
                    finals[i] = f"{i}\t{pack(body_of(o.record), job_id)}"
                    mine.append(o)
                if not finals:
                    continue  # (nothing of ours: the batch is read again by whatever comes next)
                lines = list(finals.values())
                parts = _sized(lines, [len(line) for line in lines], len(lines))
                crawled = self._settle_crawl(job_id, batch, version + 1, placed, mine, site=site)
                size = len(items) + 1 + len(parts) + len(crawled.items) + len(guarded) + len(crawled.guarded) + 1
                if items and size > _TRANSACTION_ITEMS:
                    self._hold(lease, batch, batch.states, moved=False)
                    break  # (the next round takes the rest)
                held.append((batch, states))
                applied.extend(mine)
                items.append(self._state_update(job_id, bid, states, version, settles=True))
                roles.append(("state", bid))
                for part, run in enumerate(parts):
                    items.append(self._new_item(job_id, _outcome_sk(bid, version + 1, part), _lines(run), version=None))
                    roles.append(("outcome", bid))
                items += crawled.items
                roles += crawled.roles
                guarded += crawled.guarded
            if not items:
                break
            for guard, url in self._guards(job_id, guarded, site=site):
                items.append(guard)
                roles.append(("crawl", url))
            items.append(
                self._counter_update(job_id, accounting.total(accounting.page_done(o.record) for o in applied))
            )
            try:
                self._transact(items)
            except TransactionFailed as exc:
                failed = [roles[i] for i in exc.failed_conditions(len(roles))]
                if not failed:
                    raise
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
        """The crawl records a settlement of ``batch`` (as its ``version``) writes for ``outcomes`` (a failed
        ``crawl`` role makes its URL stale): here, each its own versioned item."""
        crawled = Listing([])
        for o in outcomes:
            if site is not None and o.crawl is not None:
                crawled.items.append(url_put(self.table, site, o.crawl))
                crawled.roles.append(("crawl", o.record.url))
        return crawled

    def _guards(self, job_id: str, guarded: Sequence[Any], *, site: str | None) -> list[tuple[dict[str, Any], str]]:
        """What a settlement's writes of ``guarded`` (Listing.guarded of its batches) need beside them, each
        with its URL: here nothing."""
        return []

    def retry_pages(self, job_id: str, retries: Sequence[PageRetry], lease: Lease) -> list[str]:
        if not self.batched(job_id):
            return super().retry_pages(job_id, retries, lease)
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
                    states[str(i)] = _state_of(accounting.retried_page(batch.record(i, job_id), retry))
                    moved.append(retry.url)
                if not moved:
                    break
                try:
                    self._transact(
                        [
                            self._state_update(job_id, bid, states, batch.version),
                            self._counter_update(job_id, JobCounts()),
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

    def _folded(self, job_id: str) -> Iterator[tuple[_Batch, int]]:
        """Every page of the job, a batch at a time (its items come together: the query's order)."""
        batch: _Batch | None = None
        for item in self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(f"JOB#{job_id}"), ":prefix": _s("BATCH#")},
            ConsistentRead=True,
        ):
            bid, _, rest = item["sk"]["S"].removeprefix("BATCH#").partition("#")
            if not rest:
                batch = _Batch(bid, body_text(item).split("\n"))
            elif batch is None or batch.bid != bid:
                continue  # (outcomes or states of a batch whose records are not there: never committed)
            elif rest.startswith("O#"):
                batch.add_outcomes(body_text(item), item["sk"]["S"])
            elif rest == "S":
                batch.states, batch.version = _states_of(item)
                if not batch.settled_by() <= batch.read:
                    # A settlement committed between the query's reading of the outcomes and of the states (a
                    # query is no snapshot of a transaction): its outcomes are read now.
                    self._read_outcomes(job_id, batch)
                yield from ((batch, i) for i in range(len(batch.records)))
                batch = None

    def pages(self, job_id: str, *, status: UrlStatus | None = None) -> Iterator[SitemapURL]:
        if not self.batched(job_id):
            yield from super().pages(job_id, status=status)
            return
        for batch, i in self._folded(job_id):
            if status is None or batch.status(i) == status.value:
                yield batch.record(i, job_id)

    def page_bodies(self, job_id: str) -> Iterator[str]:
        if not self.batched(job_id):
            yield from super().page_bodies(job_id)
            return
        for batch, i in self._folded(job_id):
            yield batch.body(i, job_id)

    def get_page(self, job_id: str, url: str) -> SitemapURL | None:
        if not self.batched(job_id):
            return super().get_page(job_id, url)
        marks = self._marks(job_id, [url])
        if url not in marks:
            return None
        bid = marks[url][0]
        batch = self._batches(job_id, {bid}, outcomes=True).get(bid)
        i = batch.position(url) if batch is not None else None
        return batch.record(i, job_id) if batch is not None and i is not None else None

    def release_leases(self, job_id: str) -> int:
        released = super().release_leases(job_id)
        if not self.batched(job_id):
            return released
        for item in self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(f"JOB#{job_id}"), ":prefix": _s("BATCH#")},
            ConsistentRead=True,
        ):
            if not item["sk"]["S"].endswith("#S"):
                continue
            bid = item["sk"]["S"].removeprefix("BATCH#").removesuffix("#S")
            read: tuple[dict[str, dict[str, Any]], int] | None = _states_of(item)
            for attempt in range(_STATE_RETRIES):
                if read is None:
                    break
                states, version = read
                leased = [
                    i
                    for i, s in states.items()
                    if i != MOVED and s.get("s") == "processing" and float(s.get("u", 0)) > 0
                ]
                if not leased:
                    break
                for i in leased:
                    states[i] = {**states[i], "u": 0}
                if self._conditional(self._state_update(job_id, bid, states, version)):
                    released += len(leased)
                    break
                conflict_pause(min(attempt, 4))
                read = self._state(job_id, bid)
        return released
