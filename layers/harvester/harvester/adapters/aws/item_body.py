"""A record's JSON ``body`` as the state table stores it: deflated against a preset dictionary, as binary.

Why: DynamoDB bills a write per started KB of the item (twice in a transaction, and again for each index
holding it), and a fetched page's records are JSON of ~1 KB whose bytes are mostly field names, timestamps
and URL prefixes repeated from record to record. Deflated against a dictionary of those field names and
common values (zlib's preset dictionary), the job record and the crawl record of a page stay under 1 KB
each, with room for long URLs, so each of their writes is one unit.

The stored value is ``B``: one version byte, then raw deflate (no zlib header or checksum: DynamoDB keeps
the bytes whole). A body that deflate would not shorten is stored as the plain string ``S``, and ``S``
bodies are read as they are, so items stored without the codec mix freely with deflated ones.

The dictionary is part of the stored format: it must never change. A better one is a new version byte with
its own dictionary, and :func:`body_text` keeps reading the old ones.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

#: Version 1's preset dictionary: the records' field names, then values every record repeats. Deflate
#: finds the nearest match cheapest, so the most common strings are last. Frozen: see the module's note.
_DICTIONARY_V1 = "".join(
    (
        '"origin":"robots"depth":"ancestors":["parent":"kind":"urlset"sitemapindex"error_message":',
        '"truncated":false"final_url":"pages_recorded":"pages_enqueued":"checkpoint_digest":',
        '"probes_spent":"pages_new":"children":"dropped":"invalid_children":"warnings":[]',
        '"not_modified":"orphan_of":"orphaned_job":"extensions":{}"fetch_interval":2592000.0',
        '"change_frequency":"daily"weekly"monthly"fetch_reason":"new"due"change":"unchanged"',
        '"fetched_last_modified":"http_last_modified":"Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"',
        '"etag":"\\"W/"content_type":"text/html; charset=utf-8"application/xml"size":',
        '"record_type":"response"revisit"payload_digest":"sha1:"filename":"warc/job-.warc.gz"',
        '"offset":"length":"date":"warc":{"signature":"last_fetch_time":"next_fetch_time":',
        '"first_listed":"last_listed":"last_listed_job":"job-"changes":0"retries":0"version":',
        '"state":"unfetched"fetched"gone"not_modified"failed"crawl_state":"fetched"',
        '"known":{"_k":{"discovered_at":"finished_at":"fetch_time":"attempts":1',
        '"status":"pending"processing"completed"failed"excluded"http_status":200',
        '"last_modified":"priority":0.5"sitemap":"https://www.http://sitemap.xml"',
        '.000000Z"T00:00:00Z"2026-"2027-"url":"https://www.',
    )
).encode()
_DICTIONARIES = {1: _DICTIONARY_V1}
_VERSION = 1


def stored_body(body: str) -> dict[str, Any]:
    """The attribute value a record's ``body`` is written as."""
    raw = body.encode()
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _DICTIONARIES[_VERSION])
    packed = bytes((_VERSION,)) + deflate.compress(raw) + deflate.flush()
    return {"B": packed} if len(packed) < len(raw) else {"S": body}


def body_text(item: Mapping[str, Any]) -> str:
    """An item's ``body`` as the JSON it was written from, whichever way it was stored."""
    value = item["body"]
    if "S" in value:
        return str(value["S"])
    packed = bytes(value["B"])
    dictionary = _DICTIONARIES.get(packed[0]) if packed else None
    if dictionary is None:
        raise ValueError(
            f"item {_key(item)}: body stored in format {packed[:1].hex() or 'empty'}, which this version of Harvester"
            f" cannot read (it reads {sorted(_DICTIONARIES)}): written by a later version?"
        )
    inflate = zlib.decompressobj(-15, zdict=dictionary)
    try:
        text = inflate.decompress(packed[1:]) + inflate.flush()
    except zlib.error as exc:
        raise ValueError(f"item {_key(item)}: body stored damaged ({exc})") from None
    if not inflate.eof or inflate.unused_data:  # (cut short, or with bytes after its end)
        raise ValueError(f"item {_key(item)}: body stored damaged (its deflate stream is not whole)")
    return text.decode()


def _key(item: Mapping[str, Any]) -> str:
    return f"{item.get('pk', {}).get('S')}/{item.get('sk', {}).get('S')}"
