"""Sets of strings too large for the item that names them: stored apart, in items of their own, and named on
that item by a reference.

Why: a sitemap's part item is written by every listing that moves its epoch, and DynamoDB bills a write by
the whole item's size; a job's record of an adoption travels in a transaction (4 MB, 400 KB an item). A set
of URL keys or URLs past ``INLINE`` values (the URLs a job left out of a part it adopted in part: as many as
a sitemap's changed entries) is written as items ``<prefix><digest>#<i>`` in the partition the caller
names, each holding up to ``CHUNK_BYTES`` of the set's values (sorted, one a line, deflated), and the item
names it by ``@<digest>:<chunks>`` (a string attribute, where an inline set is a string set; its partition
and prefix are the caller's to know, so that the reference holds no key of the item's own).

A stored set never changes: its items are named by the SHA-256 of its content, so a write of the same set
again (a retry, a second reference) writes the same items, and a reader may keep what it read for as long as
it likes. Its items are written before the write that names them, so a consistent read of any item that
names a set finds the set whole. Nothing else deletes them: ``collect`` removes those of a partition that no
item names any more (told by the caller), last written long enough ago that no write naming them can still
be in flight (a set written again for a new reference is written whole again, which restarts that time).
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from harvester.adapters.aws.state_table import batch_get, conditional, query
from harvester.adapters.aws.state_table import n as _n
from harvester.adapters.aws.state_table import s as _s

#: Sets of at most this many values stay inline, a string set on the item (a few KB at most).
INLINE = 64
#: Deflated bytes an item of a stored set holds (an item holds 400 KB).
CHUNK_BYTES = 300_000
#: A stored set no item names is collected only once it is this old: a Lambda invocation runs 15 minutes
#: at most, so no write naming it can be in flight then.
COLLECT_AFTER = 20 * 60
_REF = "@"
_KEPT = 512


def is_ref(value: Mapping[str, Any] | None) -> bool:
    """Whether an attribute value names a stored set (rather than holding its values)."""
    return value is not None and "S" in value and str(value["S"]).startswith(_REF)


def _named(ref: str) -> tuple[str, int]:
    """The digest of the set a reference names, and how many items hold it."""
    digest, _, count = ref[len(_REF) :].rpartition(":")
    return digest, int(count)


class ValueSets:
    """Stored sets of the state table (module docstring): written, read (remembered), collected."""

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table
        self._read: dict[tuple[str, str], frozenset[str]] = {}

    def value(
        self, pk: str, prefix: str, values: Collection[str], *, expires_at: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The attribute value of ``values``: a string set when small, else a reference to the set stored
        in partition ``pk`` under ``prefix`` (written now; ``expires_at``: the items' expiry, if any). (DynamoDB
        has no empty set: a caller leaves an attribute of no values out.)"""
        if len(values) <= INLINE:
            return {"SS": sorted(values)}
        data = "\n".join(sorted(values)).encode()
        digest = hashlib.sha256(data).hexdigest()
        packed = zlib.compress(data, 6)
        chunks = [packed[i : i + CHUNK_BYTES] for i in range(0, len(packed), CHUNK_BYTES)]
        ref = f"{_REF}{digest}:{len(chunks)}"
        # (written even when stored before: the write's time keeps ``collect`` off it until the write that
        # names it has landed)
        for i, chunk in enumerate(chunks):
            item = {"pk": _s(pk), "sk": _s(f"{prefix}{digest}#{i}"), "v": {"B": chunk}, "at": _n(int(time.time()))}
            if expires_at is not None:
                item["expires_at"] = dict(expires_at)
            self.client.put_item(TableName=self.table, Item=item)
        self._remember(pk, prefix + ref, frozenset(values))
        return {"S": ref}

    def read(self, pk: str, prefix: str, value: Mapping[str, Any] | None) -> frozenset[str]:
        """The values an attribute value holds or names (none for no value); a stored set is read from
        partition ``pk`` under ``prefix``, where ``value`` wrote it."""
        if value is None:
            return frozenset()
        if not is_ref(value):
            return frozenset(value.get("SS", ()))
        ref = str(value["S"])
        found = self._read.get((pk, prefix + ref))
        if found is None:
            digest, count = _named(ref)
            keys = [{"pk": _s(pk), "sk": _s(f"{prefix}{digest}#{i}")} for i in range(count)]
            chunks = {int(item["sk"]["S"].rpartition("#")[2]): item["v"]["B"] for item in self._get(keys)}
            if len(chunks) != count:
                missing = count - len(chunks)
                raise LookupError(f"stored set {prefix}{digest} of {pk}: {missing} of its {count} items missing")
            data = zlib.decompress(b"".join(chunks[i] for i in range(count)))
            found = frozenset(data.decode().split("\n")) if data else frozenset()
            self._remember(pk, prefix + ref, found)
        return found

    def collect(self, pk: str, prefix: str, named: Iterable[Mapping[str, Any]]) -> int:
        """Deletes the stored sets of partition ``pk`` under ``prefix`` that none of the attribute values
        ``named`` names and that were last written ``COLLECT_AFTER`` ago or more, each item only if it was
        not written again since it was read (a new reference's write); returns how many items went."""
        kept = {prefix + _named(str(v["S"]))[0] for v in named if is_ref(v)}
        old = int(time.time()) - COLLECT_AFTER
        gone = [
            item
            for item in query(
                self.client,
                self.table,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={":pk": _s(pk), ":prefix": _s(prefix)},
                ProjectionExpression="pk, sk, #at",
                ExpressionAttributeNames={"#at": "at"},
                ConsistentRead=True,
            )
            if item["sk"]["S"].rpartition("#")[0] not in kept and int(item["at"]["N"]) <= old
        ]
        deleted = 0
        for item in gone:  # (each only as read: a set written again since, for a new reference, stays)
            deleted += conditional(
                lambda item=item: self.client.delete_item(
                    TableName=self.table,
                    Key={"pk": item["pk"], "sk": item["sk"]},
                    ConditionExpression="#at = :at",
                    ExpressionAttributeNames={"#at": "at"},
                    ExpressionAttributeValues={":at": item["at"]},
                )
            )
        return deleted

    def _remember(self, pk: str, name: str, values: frozenset[str]) -> None:
        if len(self._read) >= _KEPT:
            self._read.clear()
        self._read[(pk, name)] = values

    def _get(self, keys: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        if len(keys) == 1:
            item = self.client.get_item(TableName=self.table, Key=keys[0], ConsistentRead=True).get("Item")
            return [item] if item is not None else []
        return batch_get(self.client, self.table, keys)
