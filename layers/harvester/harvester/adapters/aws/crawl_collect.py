"""The collection of a site's crawl batches no URL's pointer names any more (``CrawlDatabase.collect``).

A listing moves a URL's pointer to a batch of its own job, and the batch the pointer named before may then be
named by none: garbage, once its job is over. ``collect`` finds such batches of jobs over and deletes them
(with their settlements' items).

Batches only become garbage when pointers move, and every write that moves a pointer moves, in its own
transaction, the epoch of a sitemap part item (crawl_parts.py: ``touches``). So a collection notes the
site's part epochs it started from (``CRAWL#<site>`` / ``COLLECTED``: how many part items, the sum of their
epochs, when, and ``waiting`` if it left a batch of another job not over yet), and the next one starts with
a look at them (one Query of the part items): the same, with nothing waiting, and nothing is to be
collected. A cycle that adopted every part moved no pointer, so its end reads neither the site's batches nor
its pointers.
Once ``FULL_PASS_SECONDS`` passed since the noted collection, the batches are read whatever the epochs say:
a batch left behind by a case the note does not see (a job's batches made garbage by another job that ended
long before it) is collected within that time.

A collection reads every batch of the site (and, when some are of jobs over, every pointer): a cost that
follows the site's size. Garbage follows what changed: a batch goes when every URL it holds was listed again
since. So a job's end that listed few of its URLs one by one (the rest adopted with their sitemaps' parts)
adds them to the note (``pending``) instead, and the batches are read once the URLs listed one by one since
the last collection reach ``COLLECT_SHARE`` of the site's (or the week passed): on a site re-crawled with 1 %
of its entries changed, one changed cycle in five collects.

A collection given a ``pause`` goes in steps: after each query page read and each thousand items deleted it
asks whether its time is up, and if so returns its state (``Collected.paused``: the phase, the position in
it, the batches found so far), from which the next call goes on. Its memory is the batches of jobs over
that no pointer read so far names (a string a batch and the sort keys of its items: about 500 bytes a
batch), never the pointers; the pointers are read until every such batch is found named, or to the end.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from msgspec import Struct

from harvester.adapters.aws.crawl_parts import PartItems
from harvester.adapters.aws.pointer_items import LINES, PASSED, shard_pages, url_shard
from harvester.adapters.aws.state_table import batch_delete
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model.crawl import Collected

#: The longest a collection is skipped for on the strength of unmoved epochs, or of few URLs listed since.
FULL_PASS_SECONDS = 7 * 24 * 3600.0
#: The share of a site's URLs listed one by one since the last collection that makes the next one read.
COLLECT_SHARE = 0.05
#: Items deleted between two looks at the time (40 BatchWriteItem requests).
_DELETED_AT_ONCE = 1000
_CUR, _PREV = "cur", "prev"


class _Pass(Struct, kw_only=True):
    """A collection under way: its ``phase`` (reading the batches, the pointers, deleting the doomed batches'
    items, then their lines items) and where in it (a shard and the last sort key read; or how many of the
    phase's keys went), the epochs it started from, the jobs' verdicts, and the batches of jobs over no pointer
    read so far names (``<job>/<bid>`` -> the sort keys of its items)."""

    epochs: tuple[int, int]
    phase: Literal["batches", "pointers", "items", "lines"] = "batches"
    at: str | None = None
    verdicts: dict[str, bool] = {}
    waiting: bool = False
    candidates: dict[str, list[str]] = {}
    #: The URLs listed one by one that the note counted when it began (``Collector._note``).
    pending: int = 0


class Collector:
    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table

    def collect(
        self,
        site: str,
        ended: Callable[[str], bool],
        *,
        by: str | None = None,
        relisted: int | None = None,
        urls: int = 0,
        pause: Callable[[], bool] | None = None,
        resume: bytes | None = None,
    ) -> Collected:
        """Deletes the site's crawl batches (with their settlements' items) that no pointer reads its record
        from, of the jobs ``ended`` says are over; says how many batches went. ``by``: the job whose end
        collects (its own batches, named by the pointers it just wrote, do not keep the note from being made);
        ``relisted``: how many of its ``urls`` it listed one by one, noted instead while those since the last
        collection stay below COLLECT_SHARE of ``urls`` (None: read now, unless no epoch moved). ``pause``: a
        collection in steps (module docstring), ``resume`` the state a paused one returned.

        A pointer whose record is written whole (``w``: an orphan, a moved page's settlement) reads none: the
        batches it names are for their jobs to find their pages by while they run, and its next listing drops
        them (the listing finds the one it named last gone, as if never committed: a tombstone is written in
        its place, and collected in turn).

        The batches of jobs over are read first: when there are none, no pointer is read. Safe beside
        running jobs: a pointer only ever moves to a new batch, of a running job, naming as ``prev`` the
        batch its record came from, one it named before (the move is conditioned on the version its reading
        found). So a batch of a job over that a pointer no longer names, it never names again (a record
        written whole only becomes a batch's again by a listing, of a new batch): a batch no pointer named
        when each was read (consistently: an older state of a pointer may not name the batch its current one
        does) is garbage, however the reads interleaved with moves, and however long the steps between them.
        The batches are read eventually consistently: one missed is collected next time. A running job's
        batches are never touched (a listing writes its pointers before its batch: a batch may be named by
        none yet). A reading made before a batch went, resolved after, finds it gone and reads the record its
        pointer names next; a write on that reading is refused by the pointer's version, as any stale write
        is. Run again (a job's end done twice, a step that died), it deletes what is left."""
        if resume is not None:
            state = msgspec.msgpack.decode(zlib.decompress(resume), type=_Pass)
        else:
            # (read first: a move after it shows in the next collection's)
            epochs = PartItems(self.client, self.table).epochs(site)
            pending = self._due(site, epochs, relisted, urls)
            if pending is None:
                return Collected()
            state = _Pass(epochs=epochs, pending=pending)
        time_up = pause or (lambda: False)
        if state.phase == "batches":
            # (eventually consistent: a batch missed is collected next time)
            batches = shard_pages(
                self.client, self.table, site, "CB#", after=state.at, consistent=False, projection="sk"
            )
            for at, items in batches:
                for item in items:
                    sk = item["sk"]["S"]
                    job, bid = sk.removeprefix("CB#").split("#")[:2]
                    if job not in state.verdicts:
                        state.verdicts[job] = ended(job)
                    if state.verdicts[job]:
                        state.candidates.setdefault(f"{job}/{bid}", []).append(sk)
                    elif job != by:
                        state.waiting = True  # (a batch of a job not over: it may become garbage, no epoch moving)
                state.at = at
                if at != PASSED and time_up():
                    return _paused(state)
            state.phase, state.at = "pointers", None
        if state.phase == "pointers" and state.candidates:
            names = {"#cur": _CUR, "#prev": _PREV}
            projection = "#cur, #prev, w"
            pointers = shard_pages(
                self.client,
                self.table,
                site,
                "URL#",
                after=state.at,
                consistent=True,
                projection=projection,
                names=names,
            )
            for at, items in pointers:
                for item in items:
                    if "w" in item:
                        continue  # (its record is its body: the batches it names are only its running jobs')
                    for name in (_CUR, _PREV):
                        if name in item:
                            state.candidates.pop(item[name]["S"], None)
                state.at = at
                if not state.candidates:
                    break  # (every batch found named: none to delete)
                if at != PASSED and time_up():
                    return _paused(state)
        if state.phase == "pointers":
            state.phase, state.at = "items", "0"
        # The batches' items and their outcomes first, their lines after: a lines item left alone (the
        # collection cut short) reads as a listing that never committed, which a tombstone can bury; a batch
        # item left without its lines could not be read, nor buried.
        if state.phase == "items":
            if not self._delete(site, state, lines=False, time_up=time_up):
                return _paused(state)
            state.phase, state.at = "lines", "0"
        if state.phase == "lines" and not self._delete(site, state, lines=True, time_up=time_up):
            return _paused(state)
        self._note(site, state)
        return Collected(batches=len(state.candidates))

    def _note(self, site: str, state: _Pass) -> None:
        """The note of this collection: the epochs it started from, whether it left a batch waiting (the epochs
        alone cannot tell the next one to skip then), and the URLs listed one by one that the ends since it
        began added (``pending`` less those it found there: they are collected now)."""
        values = {
            ":parts": _n(state.epochs[0]),
            ":epochs": _n(state.epochs[1]),
            ":at": _n(time.time()),
            ":taken": _n(-state.pending),
        }
        update = "SET parts = :parts, epochs = :epochs, #at = :at"
        if state.waiting:
            update += ", waiting = :waiting"
            values[":waiting"] = {"BOOL": True}
        else:
            update += " REMOVE waiting"
        self.client.update_item(
            TableName=self.table,
            Key=_noted_key(site),
            UpdateExpression=update + " ADD pending :taken",
            ExpressionAttributeNames={"#at": "at"},
            ExpressionAttributeValues=values,
        )

    def _delete(self, site: str, state: _Pass, *, lines: bool, time_up: Callable[[], bool]) -> bool:
        """Deletes the doomed batches' items (``lines``: their lines items) from the ``state.at``-th on, a
        thousand at a time; False when the time was up before all went (``state.at``: how many did)."""
        doomed = [
            {"pk": url_shard(site, ref.partition("/")[2]), "sk": _s(sk)}
            for ref in sorted(state.candidates)
            for sk in state.candidates[ref]
            if sk.endswith(LINES) == lines
        ]
        at = int(state.at or 0)
        while at < len(doomed):
            batch_delete(self.client, self.table, doomed[at : at + _DELETED_AT_ONCE])
            at += _DELETED_AT_ONCE
            state.at = str(at)
            if at < len(doomed) and time_up():
                return False
        return True

    def _due(self, site: str, epochs: tuple[int, int], relisted: int | None, urls: int) -> int | None:
        """None when the note of the last collection says none is due: no epoch moved and nothing was left
        waiting, or the URLs listed one by one since (``relisted`` added to the note) are still few; else the
        URLs listed one by one the note counts (this collection takes them)."""
        noted = self.client.get_item(TableName=self.table, Key=_noted_key(site), ConsistentRead=True).get("Item")
        if noted is None:
            return 0
        pending = int(noted.get("pending", {"N": "0"})["N"])
        if time.time() - float(noted["at"]["N"]) >= FULL_PASS_SECONDS:
            return pending
        if "waiting" not in noted and _same(noted, epochs):
            return None
        if relisted is not None and pending + relisted < COLLECT_SHARE * urls:
            if relisted:
                self.client.update_item(
                    TableName=self.table,
                    Key=_noted_key(site),
                    UpdateExpression="ADD pending :n",
                    ExpressionAttributeValues={":n": _n(relisted)},
                )
            return None
        return pending


def _paused(state: _Pass) -> Collected:
    return Collected(paused=zlib.compress(msgspec.msgpack.encode(state), 1))


def _noted_key(site: str) -> dict[str, Any]:
    return {"pk": _s(f"CRAWL#{site}"), "sk": _s("COLLECTED")}


def _same(noted: dict[str, Any], epochs: tuple[int, int]) -> bool:
    return (int(noted["parts"]["N"]), int(noted["epochs"]["N"])) == epochs
