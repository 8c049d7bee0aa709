"""A page's job record as the DynamoDB state store keeps it: its crawl-record snapshot without what the
record itself, or its job, says already.

Why: a job record carries ``known``, the crawl record its listing wrote (the validators, signature and
version a fetch works on; what the change feed and the lastmod evidence compare with at the job's end).
Stored whole, it repeats the URL, the sitemap's values, the job's id and the listing time, and once the page
is fetched, the content's fields the record shows too, and DynamoDB bills a write per started KB (twice in
a transaction): an item past 1 KB costs every move of the record twice what a 1 KB item does. The stored
form keeps only what differs, under ``_k``:

* a field the snapshot shares with the record (same name, same value: ``url``, ``sitemap``, ``signature``,
  ...) is left out and taken from the record when read; one the snapshot lacks while the record has it is
  named in ``~`` by a one-letter code, so that it is read back as absent rather than as the record's;
* ``last_listed_job`` equal to the job's id, and ``first_listed``, ``last_listed`` or ``next_fetch_time``
  equal to the record's ``discovered_at`` (a URL listed for the first time is due at once), are left out;
* ``retries`` and ``changes`` at 0 are left out;
* and of the record itself, its ``extensions`` when empty and ``retries`` at 0, and a ``document_key``
  that ends as a page's does (``/<url key>/<signature>``, crawldb.documents.page_key) keeps only what
  comes before that end, as ``_d``.

A settled page's record (its batch's outcome, ``pack_settled``) whose snapshot is the one its listing stored
has ``_k`` as ``=`` when the store is told to (``PageBatches.snapshot_refs``: a version before this reader
cannot read it): a page fetched again holds its previous fetch (signature, validators, WARC location,
digest: what deflate cannot shrink) in its snapshot, which the listed record, read beside every outcome,
holds already.

Reading gives back the body ``body_of`` wrote, field for field; bodies stored whole (unpacked, or with a
snapshot under the crawl record's old names) are stored and read as they are. Only this adapter sees the
packed form: every body it hands out is unpacked.
"""

from __future__ import annotations

from typing import Any

import orjson

from harvester.model.crawl import CrawlRecord
from harvester.model.records import SitemapURL, url_key

#: Fields of a crawl record that a job record has under the same name, with their codes in ``~``.
SHARED = {
    "url": "u",
    "last_modified": "l",
    "change_frequency": "f",
    "priority": "p",
    "sitemap": "m",
    "http_status": "h",
    "signature": "s",
    "etag": "e",
    "http_last_modified": "t",
    "content_type": "c",
    "size": "z",
    "document_key": "d",
}
#: The snapshot's times that are the listing's time when the URL was first listed by this job.
LISTED_AT = ("first_listed", "last_listed", "next_fetch_time")
ZERO = ("retries", "changes")
PACKED = "_k"
#: ``_k`` of a settled record whose snapshot is its listed record's.
AS_LISTED = "="
ABSENT = "~"
DOCUMENT = "_d"
#: A record's own fields left out at their defaults (a packed record only).
DEFAULTS: dict[str, Any] = {"extensions": {}, "retries": 0}
_FIELDS = tuple(CrawlRecord.__struct_fields__)
_RECORD_FIELDS = tuple(SitemapURL.__struct_fields__)
_NAMES = frozenset(_FIELDS)


def _loads(body: str) -> dict[str, Any] | None:
    try:
        record = orjson.loads(body)
    except orjson.JSONDecodeError:  # (an integer beyond 64 bits in an extension: stored as it is)
        return None
    return record if isinstance(record, dict) else None


def pack(body: str, job_id: str) -> str:
    """The stored form of a job record's body (``body_of``), for the job ``job_id``."""
    packed = _packed(body, job_id)
    return body if packed is None else orjson.dumps(packed[1]).decode()


def _packed(body: str, job_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The body as read, and its stored form with ``_k``; None for a body stored as it is."""
    if '"known":' not in body:
        return None
    record = _loads(body)
    known = record.get("known") if record is not None else None
    if record is None or not isinstance(known, dict) or not _NAMES.issuperset(known):
        return None
    kept = dict(known)
    absent = ""
    for name, code in SHARED.items():
        mine, theirs = kept.get(name), record.get(name)
        if mine is None:
            if theirs is not None:
                absent += code
        elif mine == theirs and type(mine) is type(theirs):
            del kept[name]
    if kept.get("last_listed_job") == job_id:
        del kept["last_listed_job"]
    listed_at = record.get("discovered_at")
    for name in LISTED_AT:
        if listed_at is not None and kept.get(name) == listed_at:
            del kept[name]
    for name in ZERO:
        if kept.get(name) == 0:
            del kept[name]
    if absent:
        kept[ABSENT] = absent
    own = {name: value for name, value in record.items() if DEFAULTS.get(name, ...) != value}
    own = {(PACKED if name == "known" else name): (kept if name == "known" else value) for name, value in own.items()}
    suffix = _document_suffix(record)
    if suffix is not None and own["document_key"].endswith(suffix) and DOCUMENT not in own:
        own = {
            (DOCUMENT if n == "document_key" else n): (v[: -len(suffix)] if n == "document_key" else v)
            for n, v in own.items()
        }
    return record, own


def _document_suffix(record: dict[str, Any]) -> str | None:
    """How a page's stored document key ends (``page_key``), when the record has a key and a signature."""
    url, signature = record.get("url"), record.get("signature")
    if not isinstance(url, str) or not isinstance(signature, str) or not isinstance(record.get("document_key"), str):
        return None
    return f"/{url_key(url)}/{signature[:32]}"


def pack_settled(body: str, listed: str | None, job_id: str) -> str:
    """The stored form of a settled page's job record (``body_of``): ``pack``'s, with ``_k`` as AS_LISTED
    when its snapshot is the one of ``listed``, its listed record as stored (None: not at hand)."""
    packed = _packed(body, job_id)
    if packed is None:
        return body
    record, own = packed
    if listed is not None and _snapshot(record["known"]) == _snapshot(_listed_known(listed, job_id)):
        own[PACKED] = AS_LISTED
    return orjson.dumps(own).decode()


def _snapshot(known: Any) -> bytes:
    """A snapshot's JSON as compared: every field, in one order (1 and 1.0 differ)."""
    return orjson.dumps(known, option=orjson.OPT_SORT_KEYS)


def _listed_known(listed: str, job_id: str) -> Any:
    record = _loads(unpack(listed, job_id))
    return None if record is None else record.get("known")


def unpack(body: str, job_id: str, listed: str | None = None) -> str:
    """A stored body as ``body_of`` wrote it (a body stored whole is returned as it is); ``listed``: the page's
    listed record as stored, which a settled record's AS_LISTED snapshot is taken from."""
    if f'"{PACKED}":' not in body:
        return body
    record = _loads(body)
    kept = record.get(PACKED) if record is not None else None
    if record is not None and kept == AS_LISTED:
        if listed is None:
            raise ValueError(f"a settled record of job {job_id} whose snapshot is its listed one's, read without it")
        record["known"] = _listed_known(listed, job_id)
        del record[PACKED]
        return _whole(record)
    if not isinstance(kept, dict):
        return body
    absent = kept.get(ABSENT, "")
    listed_at = record.get("discovered_at")
    known: dict[str, Any] = {}
    for name in _FIELDS:
        if name in kept:
            known[name] = kept[name]
        elif name in SHARED:
            if SHARED[name] not in absent and record.get(name) is not None:
                known[name] = record[name]
        elif name == "last_listed_job":
            known[name] = job_id
        elif name in LISTED_AT:
            if listed_at is not None:
                known[name] = listed_at
        elif name in ZERO:
            known[name] = 0
    record["known"] = known
    return _whole(record)


def _whole(record: dict[str, Any]) -> str:
    """A packed record with its snapshot unpacked (``known``), as ``body_of`` wrote it."""
    if isinstance(record.get(DOCUMENT), str) and isinstance(record.get("signature"), str):
        record["document_key"] = f"{record[DOCUMENT]}/{url_key(record['url'])}/{record['signature'][:32]}"
    whole = {
        name: record[name] if name in record else DEFAULTS[name]
        for name in _RECORD_FIELDS
        if name in record or name in DEFAULTS
    }
    return orjson.dumps(whole).decode()
