"""The collection of a site's crawl batches no URL's pointer names any more (``CrawlDatabase.collect``).

A listing moves a URL's pointer to a batch of its own job, and the batch the pointer named before may then be
named by none: garbage, once its job is over. ``collect`` finds such batches of jobs over and deletes them
(with their settlements' items).

Batches only become garbage when pointers move, and every write that moves a pointer moves, in its own
transaction, the epoch of a sitemap part item (crawl_parts.py: ``touches``). So a collection that left
nothing waiting (no batch of another job not over yet) notes the site's part epochs it started from
(``CRAWL#<site>`` / ``COLLECTED``: how many part items, the sum of their epochs, when), and the next one
starts with a look at them (one Query of the part items): the same, and nothing is to be collected. A cycle
that adopted every part moved no pointer, so its end reads neither the site's batches nor its pointers.
Once ``FULL_PASS_SECONDS`` passed since the noted collection, the batches are read whatever the epochs say:
a batch left behind by a case the note does not see (a job's batches made garbage by another job that ended
long before it) is collected within that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harvester.adapters.aws.crawl_parts import PartItems
from harvester.adapters.aws.pointer_items import site_items
from harvester.adapters.aws.state_table import batch_delete
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s

#: The longest a collection is skipped for on the strength of unmoved epochs.
FULL_PASS_SECONDS = 7 * 24 * 3600.0
_CUR, _PREV = "cur", "prev"


class Collector:
    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table

    def collect(self, site: str, ended: Callable[[str], bool], *, by: str | None = None) -> int:
        """Deletes the site's crawl batches (with their settlements' items) that no pointer reads its record
        from, of the jobs ``ended`` says are over; returns how many batches went. ``by``: the job whose end
        collects (its own batches, named by the pointers it just wrote, do not keep the note from being made).

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
        does) is garbage, however the reads interleaved with moves. The batches are read eventually
        consistently: one missed is collected next time. A running job's batches are never touched (a
        listing writes its pointers before its batch: a batch may be named by none yet). A reading made
        before a batch went, resolved after, finds it gone and reads the record its pointer names next; a
        write on that reading is refused by the pointer's version, as any stale write is. Run again (a job's
        end done twice), it deletes what is left."""
        # (read first: a move after it shows in the next collection's)
        epochs = PartItems(self.client, self.table).epochs(site)
        noted = self.client.get_item(TableName=self.table, Key=_noted_key(site), ConsistentRead=True).get("Item")
        if noted is not None and _same(noted, epochs) and time.time() - float(noted["at"]["N"]) < FULL_PASS_SECONDS:
            return 0
        candidates: dict[str, list[dict[str, Any]]] = {}
        verdicts: dict[str, bool] = {}
        waiting = False  # (a batch of another job not over: it may become garbage with no epoch moving)
        for item in site_items(self.client, self.table, site, "CB#", "pk, sk"):
            job, bid = item["sk"]["S"].removeprefix("CB#").split("#")[:2]
            if job not in verdicts:
                verdicts[job] = ended(job)
            if verdicts[job]:
                candidates.setdefault(f"{job}/{bid}", []).append(item)
            elif job != by:
                waiting = True
        if candidates:
            pointers = site_items(
                self.client,
                self.table,
                site,
                "URL#",
                "#cur, #prev, w",
                {"#cur": _CUR, "#prev": _PREV},
                consistent=True,
            )
            for item in pointers:
                if "w" in item:
                    continue  # (its record is its body: the batches it names are only its running jobs')
                for name in (_CUR, _PREV):
                    if name in item:
                        candidates.pop(item[name]["S"], None)
            batch_delete(self.client, self.table, [key for keys in candidates.values() for key in keys])
        if not waiting:
            item = {**_noted_key(site), "parts": _n(epochs[0]), "epochs": _n(epochs[1]), "at": _n(time.time())}
            self.client.put_item(TableName=self.table, Item=item)
        return len(candidates)


def _noted_key(site: str) -> dict[str, Any]:
    return {"pk": _s(f"CRAWL#{site}"), "sk": _s("COLLECTED")}


def _same(noted: dict[str, Any], epochs: tuple[int, int]) -> bool:
    return (int(noted["parts"]["N"]), int(noted["epochs"]["N"])) == epochs
