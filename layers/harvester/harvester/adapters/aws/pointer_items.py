"""The items of a site's URL records in the pointer layout (crawl_pointers.py says how they work together): their
keys, a URL's pointer and a listed crawl batch as read, the writes of a record whole and the checks of a
record's version, and a batch's lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson
from msgspec import Struct

from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.listed_batch import settlement_names
from harvester.adapters.aws.state_table import created, versioned_put
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.model.crawl import CrawlRecord
from harvester.model.records import UrlStatus, body_of, url_key

#: A pointer's fields as stored, and what an item written whole (``body``) has instead.
_CUR, _PREV, _SITEMAP = "cur", "prev", "sm"
#: Lines of a listed batch: made final by its listing, or handed to a fetch.
FINAL, PENDING = "f", "p"
#: The sort key's end of a crawl batch's lines item, and the attribute of a crawl batch item whose lines are
#: in it.
LINES, APART = "#L", "apart"


#: A site's URL items (and crawl batches) are spread over 16 partitions by the first hex digit of their key.
URL_SHARDS = "0123456789abcdef"


def url_shard(site: str, key: str) -> dict[str, str]:
    return _s(f"CRAWL#{site}#{key[0]}")


def site_items(
    client: Any,
    table: str,
    site: str,
    prefix: str,
    projection: str,
    names: dict[str, str] | None = None,
    *,
    consistent: bool = False,
) -> Iterator[dict[str, Any]]:
    """The site's items of one kind in its URL shards (by their sort key's ``prefix``), only the attributes
    projected: a Query a shard."""
    pages = shard_pages(
        client, table, site, prefix, after=None, consistent=consistent, projection=projection, names=names
    )
    for _, items in pages:
        yield from items


#: The position of a pass over a site's shards that is over (``shard_pages``).
PASSED = "~"


def shard_pages(
    client: Any,
    table: str,
    site: str,
    prefix: str,
    *,
    after: str | None,
    consistent: bool,
    projection: str | None = None,
    names: dict[str, str] | None = None,
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The site's items of one kind in its URL shards (by their sort key's ``prefix``) a query page at a time,
    shard after shard, each page with the position after it: its shard and the last sort key read, the next
    shard (a page that ended one), or ``PASSED`` after the last. ``after`` (such a position; None: the start)
    resumes there."""
    if after == PASSED:
        return
    first, start = 0, None
    if after is not None:
        if after[:1] not in URL_SHARDS or (len(after) > 1 and not after[1:].startswith(prefix)):
            raise ValueError(f"not a position in a site's {prefix} items: {after!r}")
        first, start = URL_SHARDS.index(after[0]), after[1:] or None
    shown = {"ProjectionExpression": projection} if projection else {}
    if names:
        shown["ExpressionAttributeNames"] = names
    for i, shard in enumerate(URL_SHARDS[first:], first):
        resume = {"ExclusiveStartKey": {"pk": url_shard(site, shard), "sk": _s(start)}} if start else {}
        start = None
        for page in client.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": url_shard(site, shard), ":prefix": _s(prefix)},
            ConsistentRead=consistent,
            **shown,
            **resume,
        ):
            last = page.get("LastEvaluatedKey")
            following = URL_SHARDS[i + 1] if i + 1 < len(URL_SHARDS) else PASSED
            yield (f"{shard}{last['sk']['S']}" if last else following), page.get("Items", [])


def pointer_key(site: str, url: str) -> dict[str, Any]:
    key = url_key(url)
    return {"pk": url_shard(site, key), "sk": _s(f"URL#{key}")}


class Ref(Struct, frozen=True):
    """A listed batch of a job."""

    job: str
    bid: str

    def __str__(self) -> str:
        return f"{self.job}/{self.bid}"

    @classmethod
    def parse(cls, text: str) -> Ref:
        job, _, bid = text.partition("/")
        return cls(job, bid)


def batch_key(site: str, ref: Ref) -> dict[str, Any]:
    return {"pk": url_shard(site, ref.bid), "sk": _s(f"CB#{ref.job}#{ref.bid}")}


def lines_key(site: str, ref: Ref) -> dict[str, Any]:
    """Where a listed crawl batch's lines are when its item says ``apart``."""
    return {"pk": url_shard(site, ref.bid), "sk": _s(f"CB#{ref.job}#{ref.bid}{LINES}")}


def crawl_batch_items(table: str, site: str, ref: Ref, lines: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A listed crawl batch as a listing writes it: its lines item (written apart, first) and the Put of its
    item (in the listing's transaction: what says it committed, and what a tombstone takes the place of)."""
    item = {**lines_key(site, ref), "body": stored_body(lines)}
    return item, created(table, {**batch_key(site, ref), APART: {"BOOL": True}})


def outcome_key(site: str, ref: Ref, name: str) -> dict[str, Any]:
    """The crawl outcome item of the batch ``ref`` a settlement wrote, by its name (``crawl_outcome_names``)."""
    return {"pk": url_shard(site, ref.bid), "sk": _s(f"CB#{ref.job}#{ref.bid}#O#{name}")}


#: The part ``co`` names for a settlement that wrote no crawl outcome item (``<version>#-``).
NO_CRAWL_OUTCOME = "-"


def crawl_outcome_names(version: int, parts: int, tag: str) -> list[str]:
    """What a settlement adds to ``co``, on its batch's states item and on its crawl batch item:
    the name of each crawl outcome item it writes (``outcome_key``; listed_batch.settlement_names), or
    ``<version>#-`` for none, so that a reader of the batch's records reads
    them by key, and knows every settlement the states show (their pages' ``o``) is named. The items are
    written apart, just before the settlement's transaction (a transactional write costs twice the write
    units): one no ``co`` names is a settlement's that did not commit (listed_batch.counts)."""
    return settlement_names(version, parts, tag) or [f"{version:06d}#{NO_CRAWL_OUTCOME}"]


def naming(table: str, site: str, ref: Ref, names: Sequence[str]) -> dict[str, Any]:
    """The update of a committed crawl batch item that names crawl outcome items (``co``) in their
    settlement's transaction."""
    return {
        "Update": {
            "TableName": table,
            "Key": batch_key(site, ref),
            "UpdateExpression": "ADD co :co",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": {":co": {"SS": list(names)}},
        }
    }


def named_by(item: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The crawl outcome items a crawl batch item names (``co``), None when it names none."""
    return frozenset(item["co"]["SS"]) if item is not None and "co" in item else None


def job_states_key(ref: Ref) -> dict[str, Any]:
    """The job's states item of the batch (listed_batch.py)."""
    return {"pk": _s(f"JOB#{ref.job}"), "sk": _s(f"BATCH#{ref.bid}#S")}


class CrawlBatch(Struct):
    """A listed batch's crawl records as read: its lines (None: a tombstone), and its settlements' records."""

    ref: Ref
    lines: list[str] | None
    outcomes: dict[int, str] | None = None
    #: The crawl outcome items its crawl batch item names (``co``; None: none).
    named: frozenset[str] | None = None
    _positions: dict[str, int] | None = None

    @property
    def committed(self) -> bool:
        return self.lines is not None

    def position(self, url: str) -> int | None:
        if self._positions is None:
            self._positions = {}
            for i, line in enumerate(self.lines or ()):
                if len(line) > 2:
                    self._positions[orjson.loads(line[2:])["url"]] = i
        return self._positions.get(url)

    def record(self, i: int) -> tuple[str, bool]:
        """The URL's record at position ``i`` (JSON) and whether a settlement may still move it."""
        assert self.lines is not None and self.outcomes is not None
        if i in self.outcomes:
            return self.outcomes[i], False
        line = self.lines[i]
        return line[2:], line[0] == PENDING


class Pointer(Struct):
    """A URL's pointer as read, and its record resolved (``basis``: the batch the record came from, None for a
    record written whole or none)."""

    url: str
    version: int
    cur: Ref | None = None
    prev: Ref | None = None
    #: The record is ``body``, written whole after the last listing (the batches stay named: their jobs find
    #: their pages by them).
    whole: bool = False
    sitemap: str | None = None
    body: str | None = None
    #: The jobs whose listing of the URL committed or is under way, those known over left out as met: what
    #: keeps a URL once in its job however many other jobs listed it since.
    jobs: frozenset[str] = frozenset()
    cur_committed: bool = False
    basis: Ref | None = None
    record: CrawlRecord | None = None
    #: The job whose listing the record is, as stored (``record`` may read as listed by the job that
    #: adopted the part holding it: ``Adoptions``).
    listed_by: str | None = None
    #: The URL's position in its basis batch.
    position: int | None = None
    #: The basis batch's page may still be settled (handed to a fetch, no settlement seen).
    open: bool = False
    #: Of an open page: its batch's settlements when read (its states item's ``settled``): a writer moving
    #: the pointer on this reading makes its move conditional on no settlement since.
    seen_settled: int = 0
    #: The basis batch's page was settled into its outcome (it may have been open to an earlier reading).
    closed: bool = False

    def of_job(self, job_id: str) -> Ref | None:
        """The job's batch of the URL (the last listing's, else the one before)."""
        for ref in (self.cur, self.prev):
            if ref is not None and ref.job == job_id:
                return ref
        return None


def parse_pointer(item: Mapping[str, Any]) -> Pointer:
    """A pointer item (or a record written whole) as read; its URL is ``u`` (or the record's)."""
    body = body_text(item) if "body" in item else None
    url = item["u"]["S"] if "u" in item else str(orjson.loads(body or "{}").get("url", ""))
    pointer = Pointer(url, int(item["version"]["N"]), body=body)
    if _CUR in item:
        pointer.cur = Ref.parse(item[_CUR]["S"])
        pointer.sitemap = item[_SITEMAP]["S"] if _SITEMAP in item else None
    if _PREV in item:
        pointer.prev = Ref.parse(item[_PREV]["S"])
    if "jobs" in item:
        pointer.jobs = frozenset(item["jobs"]["SS"])
    pointer.whole = "w" in item or _CUR not in item
    return pointer


def whole_write(table: str, site: str, record: CrawlRecord) -> dict[str, Any]:
    """A TransactWriteItems write of a record whole on its pointer, on the version it follows (a new URL's:
    on none). The pointer keeps the batches it names (their jobs find their pages by them); ``w`` says the
    record is the body until the next listing."""

    key = pointer_key(site, record.url)
    if record.version == 1:
        return versioned_put(table, key, body_of(record), 1)
    return {
        "Update": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET body = :body, version = :next, w = :whole",
            "ConditionExpression": "version = :previous",
            "ExpressionAttributeValues": {
                ":body": stored_body(body_of(record)),
                ":next": _n(record.version),
                ":whole": {"BOOL": True},
                ":previous": _n(record.version - 1),
            },
        }
    }


def urls_role(urls: Sequence[str]) -> str:
    """The URLs a guard is for, as one transaction role's URL (one a line: a URL holds no newline): all are
    stale when it fails (page_batches splits them)."""
    return "\n".join(urls)


def stale_urls(failed: Iterable[tuple[str, str]]) -> list[str]:
    """The URLs a transaction's failed roles make stale: those of its ``crawl`` roles (a guard's names all
    it covers: ``urls_role``), once each."""
    return list(dict.fromkeys(u for role, urls in failed if role == "crawl" for u in urls.split("\n")))


def stale_check(table: str, site: str, record: CrawlRecord) -> dict[str, Any]:
    """A condition that fails, in place of a whole write found stale before it was tried (see ``mover_base``):
    the transaction reports the URL stale as a failed write would."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": pointer_key(site, record.url),
            "ConditionExpression": "version = :never",
            "ExpressionAttributeValues": {":never": _n(-1)},
        }
    }


def lines_of(item: Mapping[str, Any], apart: Mapping[str, Any] | None = None) -> list[str] | None:
    """A crawl batch's lines from its item (None: a tombstone), or from its lines item ``apart`` when the item
    says they are there."""
    if "tomb" in item:
        return None
    if APART in item:
        if apart is None:
            raise LookupError(f"the lines of crawl batch {item['sk']['S']} are missing")
        item = apart
    return body_text(item).split("\n")


def final_state(state: Any) -> bool:
    """Whether a page state (page_batches' states item) is final: its page will not be settled again."""
    return isinstance(state, dict) and UrlStatus(state["s"]).final


def listed_lines(records: Sequence[tuple[str, bool]]) -> str:
    """A listed batch's lines: (record JSON, made final by the listing), in the order of its job records."""
    return "\n".join(f"{FINAL if final else PENDING}\t{text}" for text, final in records)
