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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harvester.adapters.aws.crawl_parts import PartItems
from harvester.adapters.aws.pointer_items import LINES, site_items
from harvester.adapters.aws.state_table import batch_delete
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s

#: The longest a collection is skipped for on the strength of unmoved epochs, or of few URLs listed since.
FULL_PASS_SECONDS = 7 * 24 * 3600.0
#: The share of a site's URLs listed one by one since the last collection that makes the next one read.
COLLECT_SHARE = 0.05
_CUR, _PREV = "cur", "prev"


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
    ) -> int:
        """Deletes the site's crawl batches (with their settlements' items) that no pointer reads its record
        from, of the jobs ``ended`` says are over; returns how many batches went. ``by``: the job whose end
        collects (its own batches, named by the pointers it just wrote, do not keep the note from being made);
        ``relisted``: how many of its ``urls`` it listed one by one, noted instead while those since the last
        collection stay below COLLECT_SHARE of ``urls`` (None: read now, unless no epoch moved).

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
        fresh = noted is not None and time.time() - float(noted["at"]["N"]) < FULL_PASS_SECONDS
        if fresh and noted is not None and "waiting" not in noted and _same(noted, epochs):
            return 0
        if fresh and noted is not None and relisted is not None:
            pending = int(noted.get("pending", {"N": "0"})["N"]) + relisted
            if pending < COLLECT_SHARE * urls:
                if relisted:
                    self.client.update_item(
                        TableName=self.table,
                        Key=_noted_key(site),
                        UpdateExpression="ADD pending :n",
                        ExpressionAttributeValues={":n": _n(relisted)},
                    )
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
            doomed = [key for keys in candidates.values() for key in keys]
            # The batches' items and their outcomes first, their lines after: a lines item left alone (the
            # collection cut short) reads as a listing that never committed, which a tombstone can bury; a
            # batch item left without its lines could not be read, nor buried.
            batch_delete(self.client, self.table, [k for k in doomed if not k["sk"]["S"].endswith(LINES)])
            batch_delete(self.client, self.table, [k for k in doomed if k["sk"]["S"].endswith(LINES)])
        # (``waiting``: a batch of a job not over was left; the epochs alone cannot tell the next one to skip)
        item = {**_noted_key(site), "parts": _n(epochs[0]), "epochs": _n(epochs[1]), "at": _n(time.time())}
        if waiting:
            item["waiting"] = {"BOOL": True}
        self.client.put_item(TableName=self.table, Item=item)
        return len(candidates)


def _noted_key(site: str) -> dict[str, Any]:
    return {"pk": _s(f"CRAWL#{site}"), "sk": _s("COLLECTED")}


def _same(noted: dict[str, Any], epochs: tuple[int, int]) -> bool:
    return (int(noted["parts"]["N"]), int(noted["epochs"]["N"])) == epochs
