"""A site's sitemap parts in the state table (see ``SitemapPart`` and ``crawldb.parts``).

``CRAWL#<site>`` / ``PART#<sitemap key>`` (no ``expires_at``: the crawl database outlives jobs), one item a
sitemap whose URLs some job listed:

* ``epoch``: a count of the writes of crawl records that name the sitemap, moved by each such write in its
  own transaction (``touches``: a listing's, for its sitemap and the sitemaps its URLs' pointers named
  before; a record written whole, for the sitemaps it names before and after);
* ``f_<job>`` / ``l_<job>``: when each job first and last made such a write (microseconds, the writer's
  clock): a part is kept only if no other job wrote after its own job first did (less ``CLOCK_SKEW``, so
  that clocks apart by that much still refuse rather than keep);
* ``body`` and ``made_by``: the sitemap's current part; ``ab`` / ``at``, its latest adoption, which makes the
  records its maker listed read as listed by that job (``crawldb.parts.Adoptions``); ``a_<job>``, each running job that
  adopted one of its parts, so that a listing by that job of a URL this sitemap named (through another
  sitemap) takes it as the job's already, and is refused in its own transaction (its touch is conditioned
  on it) when the adoption came between its reading and its commit, rather than counted twice; ``sb``, the
  adopter whose adoption the records an adoption in part settled read through (it first writes the records
  of the URLs it leaves out as they read, ``crawl.settle``: the part holds those records, whichever job's
  mark is dropped since; a part is adopted in part once at most, its epoch moving then);
* the part's lineage (``crawldb.parts.Lineage``): ``inh`` / ``inh_at``, the earlier makers it inherits and
  when; ``exc``, the keys of the URLs it leaves out; ``ax``, those its latest adoption left out; ``hx``,
  whether there are any (the key sets are read apart); ``x_<job>``, the URLs whose records may name the sitemap
  that each running job did not take in its adoption: those it left out (in part) and those the part does
  not hold (``exc``, as the adopted part had it: a part put later has its own); a URL of these that job lists
  through another sitemap is its own listing's, not the part's;
  ``o_<job>``, a running job listed a URL of these records through another sitemap (it may not adopt the
  part in part: it could keep that URL). ``ax`` and ``x_<job>`` hold as many keys as the sitemap has
  changed entries: past a few they are stored apart (value_sets.py, ``KEYS#<sitemap key>#…`` in the site's
  partition) and the item names them, so that every listing's move of the epoch rewrites a small item; a
  part put deletes the stored sets its new item does not name.

A part's documents (its lines, index rows and keys) are the crawl database's documents in S3, written by
the job that made it; the item holds what the conditions need. Attributes of jobs over are dropped when a
part is put or refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.state_table import batch_get, conditional, query
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s
from harvester.adapters.aws.value_sets import ValueSets, is_ref
from harvester.crawldb.parts import CLOCK_SKEW, MAX_EXCLUDED, Adoptions, Lineage
from harvester.model.crawl import SitemapPart
from harvester.model.records import body_of, url_key

#: Parts (and adoptions) whose URLs left out a container keeps.
_LEFT_OUTS_KEPT = 256
_FIRST, _LAST, _ADOPTER, _LEFT_OUT, _THROUGH = "f_", "l_", "a_", "x_", "o_"
#: The attributes of a part's lineage (``crawldb.parts.Lineage``): the earlier makers it inherits, when its
#: maker took them over, the URL keys it leaves out, and those its latest adoption left out; ``hx`` says
#: whether either set is there (they are read apart: ``PartItems.adoptions``).
_LINEAGE = ("inh", "inh_at", "exc", "ax", "hx")
_JOB_ATTRIBUTES = (_FIRST, _LAST, _ADOPTER, _LEFT_OUT, _THROUGH)
#: What a reading of the site's lineages projects (``#at``: ``at``).
_LINEAGE_READ = "sk, made_by, ab, #at, inh, inh_at, hx"


def part_key(site: str, sitemap_key: str) -> dict[str, Any]:
    return {"pk": _s(f"CRAWL#{site}"), "sk": _s(f"PART#{sitemap_key}")}


def now_us() -> int:
    return int(time.time() * 1_000_000)


def touches(
    table: str, site: str, sitemap_keys: Iterable[str | None], writer: str, *, unless_adopted_by: str | None = None,
    own: str | None = None, urls: Mapping[str, Sequence[str]] | None = None,
    latest: Mapping[str, str | None] | None = None, refs: Mapping[str, str] | None = None,
) -> list[tuple[dict[str, Any], str]]:  # fmt: skip
    """The Updates that move the epochs of the sitemaps (by record key) a crawl-record write names, one an
    item, for the write's transaction, each with its sitemap key. With ``unless_adopted_by`` (a listing by
    that job), each but ``own`` (the listing's own sitemap) is conditioned on that job not having adopted
    its part but for the sitemap's ``urls`` (the URL would then be the job's already), and, for a sitemap in
    ``latest``, on its latest adoption being still the one read (``PartAdopters.latest``: None, none). A
    sitemap in ``refs`` had the job's adoption read with its URLs not taken stored apart (that reference):
    the listing found ``urls`` among them, and its move is conditioned on that adoption still being there
    (a stored set never changes)."""
    now = _n(now_us())
    updates = []
    for key in dict.fromkeys(k for k in sitemap_keys if k):
        update: dict[str, Any] = {
            "TableName": table,
            "Key": part_key(site, key),
            "UpdateExpression": "ADD epoch :one SET #f = if_not_exists(#f, :now), #l = :now",
            "ExpressionAttributeNames": {"#f": _FIRST + writer, "#l": _LAST + writer},
            "ExpressionAttributeValues": {":one": _n(1), ":now": now},
        }
        if unless_adopted_by is not None and key != own:
            # (and marked: the job listed a URL of this sitemap's records through another sitemap, so it may not
            # adopt its part in part: it could keep that URL)
            update["UpdateExpression"] += ", #o = :now"
            update["ExpressionAttributeNames"]["#o"] = _THROUGH + unless_adopted_by
            condition = "attribute_not_exists(#a)"
            update["ExpressionAttributeNames"]["#a"] = _ADOPTER + unless_adopted_by
            left_out = [url_key(url) for url in (urls or {}).get(key, ())]
            if refs is not None and key in refs:  # (adopted, without these URLs: as read)
                update["ExpressionAttributeNames"]["#x"] = _LEFT_OUT + unless_adopted_by
                update["ExpressionAttributeValues"][":xr"] = _s(refs[key])
                condition += " OR #x = :xr"
            elif left_out:  # (or adopted in part, without these URLs)
                update["ExpressionAttributeNames"]["#x"] = _LEFT_OUT + unless_adopted_by
                values = update["ExpressionAttributeValues"]
                values.update({f":k{i}": _s(k) for i, k in enumerate(left_out)})
                condition += " OR (" + " AND ".join(f"contains(#x, :k{i})" for i in range(len(left_out))) + ")"
            if latest is not None and key in latest:
                seen = latest[key]
                if seen is None:
                    condition = f"({condition}) AND attribute_not_exists(ab)"
                else:
                    condition = f"({condition}) AND ab = :ab"
                    update["ExpressionAttributeValues"][":ab"] = _s(seen)
            update["ConditionExpression"] = condition
        updates.append(({"Update": update}, key))
    return updates


class PartItems:
    """The site's part items (module docstring): read, put, adopted. Shared by the crawl database and the
    state store (through ``Pointers``): an adoption is made on the item its reading read."""

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table
        self._read: dict[tuple[str, str], dict[str, Any]] = {}
        self._left_outs: dict[tuple[str, ...], frozenset[str]] = {}
        #: The key sets too large for the item (``ax``, ``x_<job>``), stored apart (value_sets.py).
        self.sets = ValueSets(client, table)

    def item(self, site: str, sitemap: str) -> dict[str, Any] | None:
        item = self.client.get_item(
            TableName=self.table, Key=part_key(site, url_key(sitemap)), ConsistentRead=True
        ).get("Item")
        if item is not None:
            self._read[(site, sitemap)] = item
        return item

    def get(self, site: str, sitemap: str) -> tuple[SitemapPart | None, int]:
        item = self.item(site, sitemap)
        if item is None:
            return None, 0
        part = SitemapPart.model_validate_json(body_text(item)) if "body" in item else None
        return part, _epoch(item)

    def put(self, site: str, part: SitemapPart, job_over: Callable[[str], bool]) -> bool:
        """Makes ``part`` the sitemap's if its epoch is still the part's and no other job wrote a record
        naming the sitemap since the part's job first did; the writers and adopters of jobs over are
        dropped either way. Decided on the item as the part's maker read it for the part's epoch, if this
        container did: the put is conditioned on that epoch, and every write of a record moves it."""
        if len(part.excluded) > MAX_EXCLUDED:
            return False  # (its item would hold their keys, its body the URLs: past 400 KB; see excluded_bound)
        item = self._read.get((site, part.sitemap))
        if item is None or _epoch(item) != part.epoch:
            item = self.item(site, part.sitemap)
        epoch = _epoch(item) if item is not None else 0
        if item is None or epoch != part.epoch:
            return False
        first = _times(item, _FIRST)
        last = _times(item, _LAST)
        own = first.get(part.job_id)
        if own is None and part.urls:
            return False
        since = (own if own is not None else now_us()) - int(CLOCK_SKEW * 1_000_000)
        if any(job != part.job_id and at >= since for job, at in last.items()):
            self._prune(site, part.sitemap, item, job_over)
            return False
        kept = {name: value for name, value in item.items() if _running(name, job_over, first, last)}
        new = {
            **kept,
            **part_key(site, url_key(part.sitemap)),
            "epoch": _n(epoch),
            "body": stored_body(body_of(part)),
            "made_by": _s(part.job_id),
        }
        for name in ("ab", "at", "sb", *_LINEAGE):
            new.pop(name, None)
        if part.inherits:
            new["inh"] = {"SS": list(part.inherits)}
            new["inh_at"] = _s(part.inherited_at.isoformat() if part.inherited_at else "")
        if part.excluded:
            new["exc"] = {"SS": sorted({url_key(url) for url in part.excluded})}
            new["hx"] = {"BOOL": True}
        put = conditional(
            lambda: self.client.put_item(
                TableName=self.table,
                Item=new,
                ConditionExpression="epoch = :epoch",
                ExpressionAttributeValues={":epoch": _n(epoch)},
            )
        )
        if put:  # (the key sets the item named before and names no more: its earlier adoptions')
            self.sets.collect(*_sets_of(site, url_key(part.sitemap)), new.values())
        return put

    def _prune(self, site: str, sitemap: str, item: Mapping[str, Any], job_over: Callable[[str], bool]) -> None:
        """Drops the attributes of jobs over whose writes no running job's part can depend on."""
        first, last = _times(item, _FIRST), _times(item, _LAST)
        gone = [name for name in item if name[:2] in _JOB_ATTRIBUTES]
        gone = [name for name in gone if not _running(name, job_over, first, last)]
        if len(gone) < 8:
            return  # (a few attributes: not worth a write)
        names = {f"#g{i}": name for i, name in enumerate(gone)}
        conditional(
            lambda: self.client.update_item(
                TableName=self.table,
                Key=part_key(site, url_key(sitemap)),
                UpdateExpression="REMOVE " + ", ".join(names),
                ConditionExpression="epoch = :epoch",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":epoch": item["epoch"]},
            )
        )

    def adoption(
        self,
        site: str,
        job_id: str,
        part: SitemapPart,
        at: datetime,
        job_over: Callable[[str], bool],
        excluded: Sequence[str] | None = None,
        *,
        settled_by: Iterable[str] = (),
    ) -> dict[str, Any]:
        """The Update that records, in the adoption's transaction, that the job adopted ``part``: its
        condition fails when ``part`` is not the sitemap's current one at the epoch it was made at. In part
        (``excluded``: the URLs it left out), at the epoch the item was last read at (``partly_movable``
        checked who moved it), moving it on: a write of the job's, which no other job's adoption passes."""
        item = self._read.get((site, part.sitemap)) or {}
        ended = [name for name in item if name.startswith((_ADOPTER, _LEFT_OUT, _THROUGH)) and job_over(name[2:])]
        names = {"#a": _ADOPTER + job_id, "#at": "at", "#x": _LEFT_OUT + job_id}
        names.update({f"#g{i}": name for i, name in enumerate(ended) if name not in names.values()})
        values: dict[str, Any] = {":job": _s(job_id), ":at": _s(at.isoformat()), ":made": _s(part.job_id)}
        sets = ["ab = :job", "#at = :at", "#a = :made"]  # (a_<job>: the maker of the part it adopted)
        removes = [n for n in names if n.startswith("#g")]
        keys = {url_key(url) for url in excluded or ()}
        pk, prefix = _sets_of(site, url_key(part.sitemap))
        if keys:  # (as many as the sitemap's changed entries: stored apart past a few, value_sets.py)
            sets.append("ax = :keys")
            values[":keys"] = self.sets.value(pk, prefix, keys)
        else:
            removes.append("ax")
        # The job's URLs not in what it adopted: those it left out and those the part does not hold (its
        # lineage's, whose records may still name the sitemap): another of its sitemaps listing one lists it.
        not_taken = keys | {url_key(url) for url in part.excluded}
        if not_taken:
            sets.append("#x = :not_taken")
            same = not_taken == keys  # (the part holds all its records: one set, written once)
            values[":not_taken"] = values[":keys"] if same else self.sets.value(pk, prefix, not_taken)
        else:
            removes.append("#x")
        sets.append("hx = :hx")
        values[":hx"] = {"BOOL": bool(keys) or "exc" in item}
        adds = ""
        # The adopters its settled records read through (crawl.settle), or, when it settled none now (they
        # were settled by a delivery before, its adoption not landed), the latest adopter they read through
        # then: no adoption came since, their writes having moved the epoch.
        settled = sorted(set(settled_by) or ({item["ab"]["S"]} if "ab" in item else set()))
        if excluded is not None and settled:
            sets.append("sb = :sb")
            values[":sb"] = _s(settled[0]) if len(settled) == 1 else {"SS": settled}
        if excluded is not None:  # (a write by the job: no other job adopts the part after it, whole or in part)
            names.update({"#f": _FIRST + job_id, "#l": _LAST + job_id})
            sets += ["#f = if_not_exists(#f, :now)", "#l = :now"]
            values.update({":now": _n(now_us()), ":one": _n(1), ":epoch": _n(_epoch(item))})
            adds = " ADD epoch :one"
        else:
            values[":epoch"] = _n(part.epoch)
        return {
            "Update": {
                "TableName": self.table,
                "Key": part_key(site, url_key(part.sitemap)),
                "UpdateExpression": "SET "
                + ", ".join(sets)
                + (" REMOVE " + ", ".join(removes) if removes else "")
                + adds,
                "ConditionExpression": "made_by = :made AND epoch = :epoch",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def partly_movable(self, site: str, job_id: str, part: SitemapPart) -> bool:
        """Whether the job may adopt ``part`` in part: it is the sitemap's current one, and no job but this
        one wrote a record of the sitemap since the part was made (read now, for ``adoption``)."""
        item = self.item(site, part.sitemap)
        if item is None or item.get("made_by", {}).get("S") != part.job_id or _THROUGH + job_id in item:
            return False  # (not current; or the job listed one of its URLs through another sitemap)
        since = int(part.made_at.timestamp() * 1_000_000) - int(CLOCK_SKEW * 1_000_000)
        last = _times(item, _LAST)
        return not any(job not in (job_id, part.job_id) and when >= since for job, when in last.items())

    def adopters(
        self, site: str, sitemap_keys: Iterable[str], job_id: str, job_over: Callable[[str], bool]
    ) -> dict[str, PartAdopters]:
        """The adoptions of the sitemaps' parts (by record key) a listing by the job decides on, read
        consistently: the job's own, and the other running jobs' of the current part (``PartAdopters``)."""
        keys = [part_key(site, key) for key in dict.fromkeys(sitemap_keys)]
        found = {}
        for item in batch_get(self.client, self.table, keys):
            maker = item.get("made_by", {}).get("S")
            latest = item.get("ab", {}).get("S")
            # (a_<job> names the maker of the part the job adopted: those naming this one adopted the current part)
            marked = {name[2:] for name, value in item.items() if name.startswith(_ADOPTER) and value.get("S") == maker}
            key = item["sk"]["S"].removeprefix("PART#")
            pk, prefix = _sets_of(site, key)
            others = {
                job: self.sets.read(pk, prefix, item.get(_LEFT_OUT + job))
                for job in marked
                if job != job_id and not job_over(job)
            }
            adopted = _ADOPTER + job_id in item
            ref = item.get(_LEFT_OUT + job_id)
            mine = self.sets.read(pk, prefix, ref) if adopted else None
            makers = frozenset({maker, *_keys(item, "inh")}) if maker is not None else frozenset()
            settled = {*item.get("sb", {}).get("SS", ()), item.get("sb", {}).get("S")}  # (see "sb")
            adopters = marked | ({latest, *settled} - {None} if maker is not None else set())
            found[key] = PartAdopters(
                mine, others, latest, makers, frozenset(adopters), _keys(item, "exc"),
                mine_ref=str(ref["S"]) if adopted and is_ref(ref) else None,
            )  # fmt: skip
        return found

    def site_items(
        self, site: str, projection: str, names: Mapping[str, str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The site's part items, read consistently, only the attributes projected."""
        yield from query(
            self.client,
            self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :part)",
            ExpressionAttributeValues={":pk": _s(f"CRAWL#{site}"), ":part": _s("PART#")},
            ProjectionExpression=projection,
            ConsistentRead=True,
            **({"ExpressionAttributeNames": dict(names)} if names else {}),
        )

    def epochs(self, site: str) -> tuple[int, int]:
        """How many part items the site has, and the sum of their epochs (each only ever grows)."""
        items = list(self.site_items(site, "epoch"))
        return len(items), sum(_epoch(item) for item in items)

    def adoptions(self, site: str) -> Adoptions:
        """The site's current parts' lineages, read consistently (a listing decides on them): their URLs
        left out read apart, once a container for each part and adoption."""
        lineages: dict[str, Lineage] = {}
        for item in self.site_items(site, _LINEAGE_READ, {"#at": "at"}):
            key = item["sk"]["S"].removeprefix("PART#")
            excluded: frozenset[str] = frozenset()
            if item.get("hx", {}).get("BOOL") and "made_by" in item:
                item, excluded = self._left_out(site, key, item)
            if "made_by" not in item or not ("ab" in item or "inh" in item):
                continue
            adopter = (item["ab"]["S"], datetime.fromisoformat(item["at"]["S"])) if "ab" in item else None
            inherited_at = item.get("inh_at", {}).get("S")
            lineages[key] = Lineage(
                maker=item["made_by"]["S"],
                inherits=frozenset(item.get("inh", {}).get("SS", ())),
                inherited_at=datetime.fromisoformat(inherited_at) if inherited_at else None,
                excluded=excluded,
                adopter=adopter,
                keyed=True,
            )
        return Adoptions(lineages, key=url_key)

    def _left_out(self, site: str, key: str, item: Mapping[str, Any]) -> tuple[Mapping[str, Any], frozenset[str]]:
        """The URL keys a part leaves out, and its latest adoption: fixed for a part (its maker) and an
        adoption (its job and time), so read once for them; with the item they belong to (``item``, or the
        item read for them, when a part was put or adopted since ``item`` was read: its lineage is that one)."""
        found = self._left_outs.get(_stamp(site, key, item))
        if found is not None:
            return item, found
        read = self.client.get_item(
            TableName=self.table,
            Key=part_key(site, key),
            ConsistentRead=True,
            ProjectionExpression=f"{_LINEAGE_READ}, exc, ax",
            ExpressionAttributeNames={"#at": "at"},
        ).get("Item", {})
        found = _keys(read, "exc") | self.sets.read(*_sets_of(site, key), read.get("ax"))
        if "made_by" in read:
            if len(self._left_outs) >= _LEFT_OUTS_KEPT:
                self._left_outs.clear()
            self._left_outs[_stamp(site, key, read)] = found
        return read, found


class PartAdopters(NamedTuple):
    """The adoptions of a sitemap's part a listing decides on: ``mine``, the keys of the URLs the listing's
    job did not take from the part it adopted (None: it adopted none); ``others``, the other running jobs
    that adopted the current part, each with the keys of the URLs it did not take; ``latest``, the job whose
    adoption the item read last (``ab``), which a listing moving a URL from those jobs' parts conditions on
    (an adoption since would be missed: the listing is decided again)."""

    mine: frozenset[str] | None
    others: dict[str, frozenset[str]]
    latest: str | None
    #: The jobs whose listings the current part holds: its maker and the makers it inherits.
    makers: frozenset[str] = frozenset()
    #: The jobs that adopted the current part (``a_<job>`` naming its maker, the latest adopter, and the one
    #: its adoption in part settled records through, ``sb``): a record written whole as read through an
    #: adoption (``crawl.settle``) is listed by one of them.
    adopters: frozenset[str] = frozenset()
    #: The keys of the URLs whose records name one of its makers and that the part does not hold (``exc``).
    excluded: frozenset[str] = frozenset()
    #: ``mine`` as the item names it when stored apart (value_sets.py): the listing's move is conditioned on it.
    mine_ref: str | None = None

    def holds_for(self, listed_by: str | None, url: str, *, whole: bool) -> set[str]:
        """The other running jobs whose adoption of the current part holds the URL, its record as stored
        (``listed_by``, not as read through an adoption; ``whole``: written whole, not a listing's line): a
        record one of the part's makers listed, or one written whole as read through one of its adoptions
        (a job's own listing of the URL is not the part's), that the part and the job did not leave out."""
        if not self.others or not (listed_by in self.makers or (whole and listed_by in self.adopters)):
            return set()
        key = url_key(url)
        if key in self.excluded:
            return set()
        return {job for job, not_taken in self.others.items() if key not in not_taken}


def _sets_of(site: str, sitemap_key: str) -> tuple[str, str]:
    """Where a sitemap's part item stores its key sets apart (value_sets.py): the site's partition, and the
    prefix of the sets' items."""
    return f"CRAWL#{site}", f"KEYS#{sitemap_key}#"


def _stamp(site: str, key: str, item: Mapping[str, Any]) -> tuple[str | None, ...]:
    """What fixes a part's left-out keys: its maker and its latest adoption."""
    return (site, key, item["made_by"]["S"], item.get("ab", {}).get("S"), item.get("at", {}).get("S"))


def _keys(item: Mapping[str, Any], name: str) -> frozenset[str]:
    return frozenset(item.get(name, {}).get("SS", ()))


def _epoch(item: Mapping[str, Any]) -> int:
    return int(item["epoch"]["N"]) if "epoch" in item else 0


def _times(item: Mapping[str, Any], prefix: str) -> dict[str, int]:
    return {name[len(prefix) :]: int(value["N"]) for name, value in item.items() if name.startswith(prefix)}


def _running(name: str, job_over: Callable[[str], bool], first: Mapping[str, int], last: Mapping[str, int]) -> bool:
    """Whether an item attribute stays: not a job's, or a running job's, or a write of a job over that a
    running job's part may yet have to be refused for (it came after that job first wrote)."""
    if name[:2] not in _JOB_ATTRIBUTES:
        return True
    job = name[2:]
    if not job_over(job):
        return True
    if name.startswith((_ADOPTER, _LEFT_OUT, _THROUGH)):
        return False
    running = [at for other, at in first.items() if other != job and not job_over(other)]
    return bool(running) and last.get(job, 0) >= min(running) - int(CLOCK_SKEW * 1_000_000)
