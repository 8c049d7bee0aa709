"""A site's URL records kept as pointers into the listed batches that hold them.

A URL's item is written once per job, at listing, and is both the job's mark (what keeps a URL once in its
job) and the crawl database's index. The records themselves are written a listed batch at a time, beside the
job's batch items but in the site's partitions (no TTL: the crawl database outlives jobs):

* ``CRAWL#<site>#<h>`` / ``URL#<url key>``: the URL's **pointer**: ``version``; ``u``, the URL; ``cur``, the
  batch of the last listing (``<job>/<bid>``) and ``sm``, its sitemap's record key; ``prev``, the batch the
  record came from when that listing was made (the last committed one); ``jobs`` (below); or ``body`` and
  ``w``, a record written whole since (by the orphan pass, or a settlement after a move).
* ``CRAWL#<site>#<bid[0]>`` / ``CB#<job>#<bid>``: a listed batch's crawl records, one a line, in the order of
  its job records: ``f\\t<record>`` for a URL its listing made final (not due, listed only), ``p\\t<record>`` for
  one handed to a fetch (the record the fetch works on). Written in the listing's transaction, so that it
  is what says the batch was committed; ``apart`` instead of ``body``: its lines are the item
  ``CB#<job>#<bid>#L``, written just before the transaction (a transactional write costs twice the write
  units; a lines item without its batch's item is a listing's that never committed, and is not read);
  ``tomb``: a batch another writer made sure never commits (below).
* ``CB#<job>#<bid>#O#<version>#<part>#<tag>``: the crawl records a settlement of the batch wrote,
  ``<pos>\\t<record>``, apart, just before its transaction; the transaction names them (``co``) on the job's
  states item of the batch and on the crawl batch item, so that a reader of many batches reads their
  outcomes by key, a hundred at a time (a query of each batch's otherwise: its job gone, or a settlement its
  pages' states show that ``co`` does not name), and an item no ``co`` names (its settlement lost a race or
  died) is never read as the batch's (``listed_batch.counts``); it goes when the batch is collected.

A URL's record is read from its pointer: the batch ``cur`` when committed, else ``prev`` (a listing between
its pointer's write and its transaction, or one that died there, is not seen), else ``body``; in that batch,
the settlement's record of the URL when there is one, else its listed one. Its ``version`` is the pointer's.

Concurrent writers (jobs of one site, the orphan pass): whoever moves a pointer away from another job's
batch makes that batch know it, each on the reading its record was computed on (``remembered``):

* from a batch not committed: a tombstone in its place, before the move (a listing: ``_bury`` in
  page_listing.py) or in the same transaction (a record written whole): its listing can no longer commit,
  and is decided again on what it finds then;
* from a committed batch whose page is still to be settled: the page's position is added to its states
  item's ``moved`` set in the transaction that makes the move seen, on the batch's settlements as read
  (``settled``: one since makes the move stale), moving the states' version on: the settlement of a moved
  page writes its crawl record whole, on the pointer's version (stale if that moved: computed again on the
  newer record), instead of into the batch's outcome; a settlement that meets the version moved reads the
  set again.

The pointer also keeps ``jobs``, the jobs whose listing of the URL committed or is under way (ended ones
left out when met): a URL stays once in its job however many other jobs listed it since.

A crawl batch no pointer names any more (its URLs were listed twice since, or its listing never committed)
is deleted by the collection a job's end runs for its site once its result is written, for the batches of
jobs that ended a while before (a listing of a running job writes its pointers before its batch, and a
mover names the batch it moves from as ``prev``: crawl_collect.py). The items' keys and shapes are in
pointer_items.py.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import orjson

from harvester.adapters.aws.crawl_parts import PartItems
from harvester.adapters.aws.item_body import body_text
from harvester.adapters.aws.listed_batch import counts, settlements
from harvester.adapters.aws.pointer_items import (
    APART,
    LINES,
    NO_CRAWL_OUTCOME,
    CrawlBatch,
    Pointer,
    Ref,
    batch_key,
    final_state,
    job_states_key,
    lines_key,
    lines_of,
    named_by,
    outcome_key,
    parse_pointer,
    pointer_key,
    shard_pages,
    site_items,
    url_shard,
    urls_role,
)
from harvester.adapters.aws.state_table import batch_get, query
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.crawldb.parts import Adoptions
from harvester.model.crawl import CrawlRecord

#: Pointers a container remembers as read (for the listing that follows its lookup: a chunk of 49 at a time).
_REMEMBERED = 4_096
#: Crawl batches a reading of a whole site keeps at once (each is read by many of its URLs).
_BATCHES_KEPT = 512


class Pointers:
    """Reads pointers and resolves their records (module docstring); shared by the crawl database and the
    state store, so that a listing's lookup is remembered for the writes that follow it."""

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table
        self._remembered: OrderedDict[tuple[str, str], Pointer] = OrderedDict()
        #: The site's sitemap parts: their adoptions make the records their makers listed read as listed by
        #: the jobs that adopted them (crawl_parts.py).
        self.parts = PartItems(client, table)

    # reading ------------------------------------------------------------------------------------------

    def read(self, site: str, urls: Sequence[str], *, consistent: bool = True) -> dict[str, Pointer]:
        """The pointers of the URLs that have one, their records resolved."""
        pointers = self.fetch(site, urls, consistent=consistent)
        self.resolve(site, pointers.values(), {})
        return pointers

    def fetch(self, site: str, urls: Sequence[str], *, consistent: bool = True) -> dict[str, Pointer]:
        """The pointers of the URLs that have one, as stored (their records not resolved: no batch read)."""
        keys = [pointer_key(site, url) for url in dict.fromkeys(urls)]
        pointers = (parse_pointer(item) for item in batch_get(self.client, self.table, keys, consistent=consistent))
        return {p.url: p for p in pointers}

    def resolve(
        self, site: str, pointers: Iterable[Pointer], batches: dict[Ref, CrawlBatch], adoptions: Adoptions | None = None
    ) -> None:
        """Resolves each pointer's record, reading the batches it needs that ``batches`` lacks (and adding them),
        as listed by the job that adopted its part if one did (``adoptions``: read now if not given)."""
        pointers = list(pointers)
        wanted = {p.cur for p in pointers if p.cur is not None}
        wanted |= {p.prev for p in pointers if p.prev is not None and not p.whole}
        self._read_batches(site, wanted - set(batches), batches)
        for p in pointers:
            cur = batches.get(p.cur) if p.cur is not None else None
            p.cur_committed = cur is not None and cur.committed
            p.basis = None if p.whole else p.cur if p.cur_committed else p.prev
        self._read_outcomes(site, {p.basis for p in pointers if p.basis is not None}, batches)
        for p in pointers:
            self._resolve_one(p, batches)
        self._read_open(site, [p for p in pointers if p.open], batches)
        for p in pointers:
            p.listed_by = p.record.last_listed_job if p.record is not None else None
        if any(p.record is not None for p in pointers):
            adoptions = adoptions if adoptions is not None else self.parts.adoptions(site)
            if adoptions:
                for p in pointers:
                    if p.record is not None:
                        p.record = adoptions.resolve(p.record)
        for p in pointers:
            self._remember(site, p)

    def _read_open(self, site: str, pointers: Sequence[Pointer], batches: dict[Ref, CrawlBatch]) -> None:
        """For pointers whose page was still to be settled: their batches' settlements now (``seen_settled``),
        read after their outcomes; a page found settled since (its state final) is resolved again on its
        outcome; one whose job is gone is no longer open."""

        refs = {p.basis for p in pointers if p.basis is not None}
        if not refs:
            return
        states: dict[Ref, Mapping[str, Any]] = {}
        for item in batch_get(self.client, self.table, [job_states_key(ref) for ref in refs]):
            states[_states_ref(item)] = item
        again: set[Ref] = set()
        for p in pointers:
            assert p.basis is not None
            item = states.get(p.basis)
            if item is None:
                p.open = False  # (the job is gone: nothing will settle its page)
                continue
            page = orjson.loads(body_text(item)).get(str(p.position))
            if final_state(page):
                again.add(p.basis)
            p.seen_settled = int(item["settled"]["N"]) if "settled" in item else 0
        if again:
            for ref in again:
                batches[ref].outcomes = None
            self._read_outcomes(site, again, batches)
            for p in pointers:
                if p.basis in again:
                    self._resolve_one(p, batches)

    def _resolve_one(self, p: Pointer, batches: Mapping[Ref, CrawlBatch]) -> None:
        text: str | None = None
        batch = batches.get(p.basis) if p.basis is not None else None
        if batch is not None and batch.committed:
            p.position = batch.position(p.url)
            if p.position is not None:
                text, p.open = batch.record(p.position)
                p.closed = batch.outcomes is not None and p.position in batch.outcomes
        if text is None:
            p.basis, p.position, p.open = None, None, False
            text = p.body
        if text:
            record = CrawlRecord.model_validate_json(text)
            p.record = record if record.version == p.version else record.model_copy(update={"version": p.version})

    def _read_batches(self, site: str, refs: set[Ref], batches: dict[Ref, CrawlBatch]) -> None:

        if not refs:
            return
        keys = [key for ref in refs for key in (batch_key(site, ref), lines_key(site, ref))]
        items = {item["sk"]["S"]: item for item in batch_get(self.client, self.table, keys)}
        for ref in refs:
            sk = batch_key(site, ref)["sk"]["S"]
            item, lines = items.get(sk), items.get(sk + LINES)
            # (no item: not committed, and a lines item is a listing's that never was; an item whose lines are
            # gone: collected as it was read, as an item read after its collection is not there)
            if item is not None and (lines is not None or APART not in item):
                batches[ref] = CrawlBatch(ref, lines_of(item, lines), named=named_by(item))

    def _read_outcomes(self, site: str, refs: set[Ref], batches: dict[Ref, CrawlBatch]) -> None:
        """The settlements' records of the committed batches ``refs`` whose outcomes are not read yet: by key,
        as their states items name them (``co``: a hundred batches a read), else (a job gone, or a settlement
        the states show that ``co`` does not name: one made by a version that did not name them) by a query
        of the batch's outcome items."""
        wanted = [ref for ref in refs if (b := batches.get(ref)) is not None and b.committed and b.outcomes is None]
        if not wanted:
            return
        states: dict[Ref, Mapping[str, Any]] = {}
        for item in batch_get(
            self.client, self.table, [job_states_key(ref) for ref in wanted], projection="pk, sk, body, settled, co"
        ):
            states[_states_ref(item)] = item
        keys: list[dict[str, Any]] = []
        for ref in wanted:
            batches[ref].outcomes = {}
            item = states.get(ref)
            named = _named_outcomes(item) if item is not None else None
            if named is not None:
                keys += [outcome_key(site, ref, name) for name in named]
            elif item is None or "settled" in item:
                self._query_outcomes(site, ref, batches)
        found = sorted(batch_get(self.client, self.table, keys), key=lambda item: item["sk"]["S"])
        for item in found:  # (in the order of their versions: the last one wins)
            job, bid = item["sk"]["S"].split("#")[1:3]
            _add_outcomes(batches[Ref(job, bid)].outcomes, item)

    def _query_outcomes(self, site: str, ref: Ref, batches: dict[Ref, CrawlBatch]) -> None:
        for item in query(
            self.client,
            self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": url_shard(site, ref.bid),
                ":prefix": _s(f"CB#{ref.job}#{ref.bid}#O#"),
            },
            ConsistentRead=True,
        ):
            if counts(item["sk"]["S"], batches[ref].named):
                _add_outcomes(batches[ref].outcomes, item)

    def pointer_pages(
        self, site: str, *, unless_listed_by: str | None = None, after: str | None = None
    ) -> Iterator[tuple[str, list[Pointer]]]:
        """The site's pointers resolved a query page at a time (with the batches of the last pages kept),
        each page with the position after it (``position``: its shard and last sort key; ``after`` resumes
        there); with ``unless_listed_by``, without those whose last committed listing is that job's, or that
        of a part it adopted (left out before their batches are read: a pointer naming a batch of the job that
        its states item shows committed, or a part's the job adopted)."""
        batches: OrderedDict[Ref, CrawlBatch] = OrderedDict()
        adoptions = self.parts.adoptions(site)
        own: set[str] | None = None  # (the job's committed batches, read when a pointer names one of its)
        for position, items in shard_pages(self.client, self.table, site, "URL#", after=after, consistent=True):
            pointers = [parse_pointer(item) for item in items]
            if unless_listed_by is not None and adoptions:
                pointers = [p for p in pointers if not _adopted_by(p, adoptions, unless_listed_by)]
            if unless_listed_by is not None and any(_names_batch_of(p, unless_listed_by) for p in pointers):
                own = self._committed(unless_listed_by) if own is None else own
                pointers = [p for p in pointers if not (_names_batch_of(p, unless_listed_by) and _bid(p) in own)]
            known = dict(batches)
            self.resolve(site, pointers, known, adoptions)
            for ref, batch in known.items():
                batches[ref] = batch
                batches.move_to_end(ref)
            while len(batches) > _BATCHES_KEPT:
                batches.popitem(last=False)
            kept = []
            for p in pointers:
                if p.record is None:
                    continue
                if unless_listed_by is not None and p.record.last_listed_job == unless_listed_by:
                    continue
                kept.append(p)
            yield position, kept

    def _committed(self, job_id: str) -> set[str]:
        """The job's batches whose listing committed: those its states items show (listed_batch.py), read
        consistently (the job's end reads them after its last listing)."""
        items = query(
            self.client,
            self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :batch)",
            ExpressionAttributeValues={":pk": _s(f"JOB#{job_id}"), ":batch": _s("BATCH#")},
            ProjectionExpression="sk",
            ConsistentRead=True,
        )
        keys = (item["sk"]["S"] for item in items)
        return {sk.removeprefix("BATCH#").removesuffix("#S") for sk in keys if sk.endswith("#S")}

    def job_batch_records(
        self, site: str, job_id: str, urls: Sequence[str], *, partial: bool = False
    ) -> dict[str, str] | None:
        """The records (JSON) of ``urls`` in the job's crawl batches, as ``job_records`` gives them, read by key
        through their pointers (a job that fetched few pages); None when a pointer names no committed batch
        of the job holding its URL (another job listed it since, or its record was written whole): the
        job's batches are then read whole. ``partial``: those found, without the others."""
        pointers = self.fetch(site, urls)
        batches: dict[Ref, CrawlBatch] = {}
        refs = {ref for p in pointers.values() for ref in (p.cur, p.prev) if ref is not None and ref.job == job_id}
        self._read_batches(site, refs, batches)
        self._read_outcomes(site, set(batches), batches)
        found: dict[str, str] = {}
        for url in urls:
            p = pointers.get(url)
            for ref in (p.cur, p.prev) if p is not None else ():
                batch = batches.get(ref) if ref is not None and ref.job == job_id else None
                i = batch.position(url) if batch is not None and batch.committed else None
                if batch is not None and i is not None:
                    found[url] = batch.record(i)[0]
                    break
            else:
                if not partial:
                    return None
        return found

    def job_records(self, site: str, job_id: str) -> Iterator[tuple[str, str]]:
        """The records (JSON) of the URLs the job's committed crawl batches hold, each as the batch's last
        settlement left it, else as listed, with their URLs: a batch at a time (a batch's items are together
        in its partition's order), so that memory holds one batch whatever the job's size. A URL in two of
        the job's batches comes twice: the later one is the record."""
        held: list[dict[str, Any]] = []
        projection = f"sk, body, tomb, co, {APART}"
        for item in site_items(self.client, self.table, site, f"CB#{job_id}#", projection, consistent=True):
            if held and _batch_of(held[0]) != _batch_of(item):
                yield from _batch_records(held)
                held = []
            held.append(item)
        yield from _batch_records(held)

    # remembering --------------------------------------------------------------------------------------

    def _remember(self, site: str, pointer: Pointer) -> None:
        key = (site, pointer.url)
        self._remembered[key] = pointer
        self._remembered.move_to_end(key)
        while len(self._remembered) > _REMEMBERED:
            self._remembered.popitem(last=False)

    def remembered(self, site: str, url: str, version: int) -> Pointer | None:
        """The pointer as this container's last lookup of the URL read it, if the record it gave was at
        ``version`` (0: it gave none, the pointer naming no record to read)."""
        pointer = self._remembered.get((site, url))
        if pointer is None:
            return None
        if pointer.version == version if version else pointer.record is None:
            return pointer
        return None

    # moving -------------------------------------------------------------------------------------------

    def mover_base(self, site: str, record: CrawlRecord, *, strict: bool = True) -> Pointer | Literal[False] | None:
        """The pointer a record to be written whole was computed on: as the read that computed it found it
        (remembered), else read now; None for a URL with none; False when a reading made now cannot stand for
        the record's: with ``strict``, it names a page still to be settled (which may settle before the move),
        else one settled into its batch (which may have been open to the record's reading): stale, the caller
        reads again. (Else it is taken as the record's: a caller that read it in another process.)"""
        pointer = self.remembered(site, record.url, record.version - 1)
        if pointer is None and record.version > 1:
            pointer = self.read(site, [record.url]).get(record.url)
            if pointer is not None and (pointer.open if strict else pointer.closed):
                return False
        return pointer

    def guards(
        self, site: str, pointers: Iterable[Pointer], *, mover: str, tombstones: bool = True
    ) -> list[tuple[dict[str, Any], str]]:
        """What moving the pointers away from where they stand needs, each with the URL it is for (module
        docstring): a tombstone for another job's batch not committed (unless the moves wrote them), and a
        moved mark for another job's page still to be settled when the pointer was read."""
        tombs: dict[Ref, str] = {}
        opened: dict[Ref, list[Pointer]] = {}
        for p in pointers:
            if tombstones and p.cur is not None and not p.cur_committed and p.cur.job != mover:
                tombs.setdefault(p.cur, p.url)
            if p.basis is not None and p.open and p.basis.job != mover:
                opened.setdefault(p.basis, []).append(p)
        guards = [(self.tombstone(site, ref), url) for ref, url in tombs.items()]
        guards += [(self._moved_mark(ref, moved), urls_role([p.url for p in moved])) for ref, moved in opened.items()]
        return guards

    def tombstone(self, site: str, ref: Ref) -> dict[str, Any]:
        """The Put that makes sure a listed batch never commits (one that did fails it; another tombstone
        does not: two writers may each move a pointer from it)."""
        return {
            "Put": {
                "TableName": self.table,
                "Item": {**batch_key(site, ref), "tomb": {"BOOL": True}},
                "ConditionExpression": "attribute_not_exists(pk) OR attribute_exists(tomb)",
            }
        }

    def _moved_mark(self, ref: Ref, moved: Sequence[Pointer]) -> dict[str, Any]:
        """The update adding ``moved``'s pages (still to be settled when read) to their batch's moved list, on
        the settlements seen when they were read (a page settled since makes the move stale: its record did
        not have the fetch), moving the states' version on (a settlement holding the version it read must
        read the list)."""
        seen = min(p.seen_settled for p in moved)
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": job_states_key(ref),
            "UpdateExpression": "ADD moved :moved SET version = version + :one",
            "ExpressionAttributeValues": {
                ":moved": {"SS": sorted({str(p.position) for p in moved}, key=int)},
                ":one": _n(1),
            },
        }
        if seen:
            update["ConditionExpression"] = "settled = :seen"
            update["ExpressionAttributeValues"][":seen"] = _n(seen)
        else:
            update["ConditionExpression"] = "attribute_not_exists(settled)"
        return {"Update": update}


def _adopted_by(p: Pointer, adoptions: Adoptions, job_id: str) -> bool:
    """Whether the pointer's record is one of a part ``job_id`` adopted: its last listing is the part's
    maker's (a record written whole since is read whole)."""
    if p.whole or p.cur is None:
        return False
    return adoptions.adopter(p.sitemap, p.cur.job, p.url) == job_id


def _names_batch_of(p: Pointer, job_id: str) -> bool:
    """Whether the pointer's last listing is a batch of ``job_id`` and its record is read from a batch (a
    record written whole since is read whole)."""
    return not p.whole and p.cur is not None and p.cur.job == job_id


def _bid(p: Pointer) -> str | None:
    return p.cur.bid if p.cur is not None else None


def _named_outcomes(item: Mapping[str, Any]) -> list[str] | None:
    """The crawl outcome items (their names: ``crawl_outcome_names``) a states item names, when it names every
    settlement its pages' states show (each settled page's ``o``); else None."""
    if "co" not in item:
        return None
    named: list[str] = []
    versions = set()
    for name in item["co"]["SS"]:
        version, _, part = name.partition("#")
        versions.add(int(version))
        if part != NO_CRAWL_OUTCOME:
            named.append(name)
    pages = orjson.loads(body_text(item)) if "body" in item else {}
    return named if settlements(pages) <= versions else None


def _states_ref(item: Mapping[str, Any]) -> Ref:
    """The batch a job's states item (``job_states_key``) is of."""
    return Ref(item["pk"]["S"].removeprefix("JOB#"), item["sk"]["S"].removeprefix("BATCH#").removesuffix("#S"))


def _add_outcomes(outcomes: dict[int, str] | None, item: Mapping[str, Any]) -> None:
    """A crawl outcome item's records, by position, over those read before it (``outcomes``: a batch's)."""
    assert outcomes is not None
    for line in body_text(item).split("\n"):
        i, _, record = line.partition("\t")
        outcomes[int(i)] = record


def _batch_of(item: dict[str, Any]) -> str:
    """The id of the crawl batch a ``CB#<job>#<bid>...`` item is of."""
    return str(item["sk"]["S"].split("#")[2])


def _batch_records(items: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """The URLs and records of one crawl batch's items (``job_records``)."""
    committed = apart = None
    settled: list[dict[str, Any]] = []
    for item in items:
        sk = item["sk"]["S"]
        if "#O#" in sk:
            settled.append(item)
        elif sk.endswith(LINES):
            apart = item
        else:
            committed = item
    if committed is None or (APART in committed and apart is None):  # (lines gone: collected as they were read)
        return
    outcomes: dict[int, str] = {}
    named = named_by(committed)
    for item in settled:  # (in the order of their versions: the last one wins)
        if counts(item["sk"]["S"], named):
            _add_outcomes(outcomes, item)
    lines = lines_of(committed, apart)
    for i, line in enumerate(lines or ()):
        text = outcomes.get(i) or line[2:]
        if text:
            yield str(orjson.loads(text)["url"]), text
