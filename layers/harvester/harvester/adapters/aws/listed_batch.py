"""A listed batch of a job's pages as the state table keeps it, and what reading and writing it shares.

Layout (``pk`` ``JOB#<id>``; the job's other items are job_items.py's):

* ``BATCH#<bid>``: the batch's job records as listed (packed: page_body.py), one a line, deflated; written
  alone just before the listing's transaction (a transactional write costs twice the write units), so that
  a listing that did not commit can leave it behind: it is read only beside its states item;
* ``BATCH#<bid>#O#<version>#<part>#<tag>``: the final records of the pages a settlement settled, by
  position in the batch (a part per 256 KB), named as ``settlement_names`` says. Written apart, just before
  the settlement's transaction (a transactional write costs twice the write units), so that a settlement
  that did not commit (it lost its states' version to another writer, or died) can leave them behind: they
  count only when the states item names them (``jo``: ``counts``), and expire with the job. (Items without a
  tag were written inside the transaction, and count as they are.)
* ``BATCH#<bid>#S``: the pages' states since listing (status, attempts, retries, error, lease), by
  position, with the item's ``version``, ``settled`` (the version of its last settlement), ``jo`` (the
  settlements' outcome items, by name) and ``co`` (the crawl outcome items its settlements
  wrote: crawl_pointers.py); the listing's transaction writes it, so it is what says the batch was committed.

A page's record is its outcome when it has one, else its listed record with its state applied. The items of
a batch sort together (records, outcomes, states), so a reading of the job folds them a batch at a time.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from msgspec import Struct, field

from harvester.adapters.aws.item_body import body_text
from harvester.adapters.aws.page_body import unpack
from harvester.model.records import PageRecord, SitemapURL, UrlStatus, body_of
from harvester.model.state import Lease

#: Where a states item's read gives the positions whose pointer another writer moved since the listing (the
#: item's ``moved`` set: crawl_pointers), beside the positions' states; never written into the body.
MOVED = "x"


def batch_sk(bid: str) -> str:
    return f"BATCH#{bid}"


def state_sk(bid: str) -> str:
    return f"BATCH#{bid}#S"


def outcome_sk(bid: str, name: str) -> str:
    """A settlement's outcome item of the batch, by its name (``settlement_names``)."""
    return f"BATCH#{bid}#O#{name}"


#: The states item's attribute naming its settlements' outcome items (``settlement_names``).
OUTCOME_NAMES = "jo"


def settlement_tag() -> str:
    """What a settlement's try adds to its outcome items' names, new for each transaction it tries: two
    settlements of one version (the loser's written apart, not counted), or a try whose transaction was
    cancelled and the next one (fewer parts, its stale pages held back), write items of their own."""
    return uuid.uuid4().hex[:12]


def settlement_names(version: int, parts: int, tag: str) -> list[str]:
    """The names of the outcome items a settlement's try writes, job and crawl alike: ``<version>#<part>#<tag>``
    (``tag``: ``settlement_tag``), what the transaction that commits them names (``jo``, ``co``)."""
    return [f"{version:06d}#{part}#{tag}" for part in range(parts)]


def counts(sk: str, named: Iterable[str] | None) -> bool:
    """Whether the outcome item ``sk`` (``...#O#<name>``, a job's or a crawl batch's) holds a settlement's
    records: written in its settlement's transaction (no tag: an older version's), or named by the
    transaction that committed it (``named``)."""
    name = sk.split("#O#")[1]
    return name.count("#") < 2 or (named is not None and name in named)


#: The most bytes of packed records one item holds, before deflate (an item holds 400 KB): a batch of pages
#: with large extensions (an image sitemap's hundreds of images a page) is split into smaller batches.
ITEM_BYTES = 256 * 1024


def sized(items: Sequence[Any], sizes: Sequence[int], most: int) -> list[list[Any]]:
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


def batched(items: Sequence[Any], sizes: Sequence[int], most: int, together: int) -> list[list[Any]]:
    """``sized`` runs of ``most`` items at most, as even as they can be: a batch's pages travel in a page
    message with one other batch at most, and a batch of a few pages costs its fetches a claim's and a
    settlement's writes as a full one does (59 pages are batches of 30 and 29, not 49 and 10). A remainder
    shorter than ``most`` that fits a batch (``together`` items) with a run is shared out rather than a run
    of its own (99 pages at 49: 50 and 49)."""
    if not items:
        return []
    runs = math.ceil(len(items) / most)
    remainder = len(items) - (runs - 1) * most
    if runs > 1 and remainder < most and most + remainder <= together:
        runs -= 1
    even: list[list[Any]] = []
    start = 0
    for i in range(runs):  # (the first len % runs runs a page more; a run past ITEM_BYTES is cut again)
        end = start + len(items) // runs + (i < len(items) % runs)
        even += sized(items[start:end], sizes[start:end], end - start)
        start = end
    return even


class Listing(Struct):
    """A listed chunk's pages that are its batch's, the items its transaction writes beside the batch's (each
    with its role and URL: a failed ``crawl`` role makes its URL stale), or, before any, the URLs found stale."""

    mine: list[PageRecord]
    items: list[dict[str, Any]] = field(default_factory=list)
    roles: list[tuple[str, str]] = field(default_factory=list)
    #: The items written apart before the transaction (a listing's crawl batch lines, a settlement's crawl
    #: outcome items: pointer_items.py).
    apart: list[dict[str, Any]] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    #: What the transaction must guard beside its items, for a whole transaction at once (see ``PageBatches._guards``).
    guarded: list[Any] = field(default_factory=list)
    #: The sitemaps (by record key) whose epochs its records written whole move (crawl_parts.py).
    touched: set[str] = field(default_factory=set)
    #: Its transaction could pass DynamoDB's 100 items (its URLs' pointers name that many batches and
    #: sitemaps): nothing was written, and it is listed in two halves.
    split: bool = False


class StoredBatch(Struct):
    """A batch as read: its listed records (packed bodies, in order), the states and final records (packed) of
    the pages that moved since, by position, and its states' version."""

    bid: str
    records: list[str]
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    version: int = 0
    #: The settlements whose outcome items were read.
    read: set[int] = field(default_factory=set)
    #: The outcome items the states item names (``jo``).
    named: set[str] = field(default_factory=set)
    #: Outcome items read (text by sort key) and not yet folded (``fold_outcomes``).
    found: dict[str, str] = field(default_factory=dict)
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
        return settlements(self.states)

    def body(self, i: int, job_id: str) -> str:
        """The page's record as ``body_of`` writes it."""
        key = str(i)
        if key in self.outcomes:
            return unpack(self.outcomes[key], job_id, self.records[i])
        if key not in self.states:
            return unpack(self.records[i], job_id)
        return body_of(self.record(i, job_id))

    def record(self, i: int, job_id: str) -> SitemapURL:
        key = str(i)
        if key in self.outcomes:
            return SitemapURL.model_validate_json(unpack(self.outcomes[key], job_id, self.records[i]))
        listed = SitemapURL.model_validate_json(unpack(self.records[i], job_id))
        state = self.states.get(key)
        return listed if state is None else applied(listed, state)

    def add_outcomes(self, text: str, sk: str) -> None:
        """An outcome item read (``sk``: its sort key, ``outcome_sk``), folded once the states item beside it
        is (``fold_outcomes``)."""
        self.found[sk] = text

    def read_states(self, item: Mapping[str, Any]) -> None:
        """The states item's pages' states, version and named outcome items (``states_of``)."""
        self.states, self.version = states_of(item)
        self.named = set(item[OUTCOME_NAMES]["SS"]) if OUTCOME_NAMES in item else set()

    def fold_outcomes(self) -> None:
        """Folds the outcome items read that count (untagged, or named by the states read), in the order of
        their versions (a page's last settlement wins); the others were written by settlements that did not
        commit."""
        for sk in sorted(self.found):
            if not counts(sk, self.named):
                continue
            self.read.add(int(sk.split("#O#")[1].partition("#")[0]))
            for line in self.found[sk].split("\n"):
                i, _, body = line.partition("\t")
                self.outcomes[i] = body
        self.found.clear()


def settlements(states: Mapping[str, Any]) -> set[int]:
    """The settlements (states' versions) a batch's pages' states show: each settled page's ``o``."""
    return {int(state["o"]) for i, state in states.items() if i != MOVED and "o" in state}


def states_of(item: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], int]:
    """A states item's pages' states and its version (with, under ``MOVED``, its positions other writers
    moved: an attribute of their own, which those writers add to)."""
    states = json.loads(body_text(item))
    if "moved" in item:
        states[MOVED] = sorted(item["moved"]["SS"], key=int)
    return states, int(item["version"]["N"])


def as_lines(bodies: Sequence[str]) -> str:
    """Bodies one a line (JSON holds no raw newline), so that reading splits rather than parses them."""
    return "\n".join(bodies)


def applied(record: SitemapURL, state: Mapping[str, Any]) -> SitemapURL:
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


def holds(states: Mapping[str, Any], lease: Lease, positions: Iterable[int]) -> bool:
    """Whether ``lease`` holds the pages at ``positions`` of a batch's states (a claim that landed)."""
    return all(states.get(str(i), {}).get("t") == lease.token for i in positions)


def state_of(record: SitemapURL, lease: Lease | None = None) -> dict[str, Any]:
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
