"""A job's result as stored: the keys of its files (the summary, the records, the change feed, the Parquet
index), and the records' lines, made from the state store's bodies (copied where they are the line already)
with the extension kinds later listings of a URL added.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from harvester.crawldb.changes import Stored
from harvester.model.records import SitemapURL


def result_key(job_id: str) -> str:
    return f"jobs/{job_id}/result.json"


def report_key(job_id: str) -> str:
    """The job's report page (harvester.report), beside its result."""
    return f"jobs/{job_id}/report.html"


def records_key(job_id: str) -> str:
    return f"jobs/{job_id}/urls.jsonl"


def changes_key(job_id: str) -> str:
    return f"jobs/{job_id}/changes.jsonl"


def removed_key(job_id: str, piece: int, claim: float) -> str:
    """The change feed's lines of the URLs a step of the job's end found removed, until the feed holds them:
    the ``piece``-th, written under the claim ``claim`` (a writer whose claim lapsed writes a document of its
    own, never the one its successor's progress names). ``steps/``: what a function left there when it died
    after the result expires (template.yaml)."""
    return f"steps/{job_id}/removed-{piece}-{round(claim * 1000)}.jsonl"


def piece_key(job_id: str, piece: int, claim: float) -> str:
    """What the ``piece``-th step of the job's end wrote of its records pass, written under the claim ``claim``
    (as ``removed_key``): the stem of its documents, ``<stem>.<kind>`` each."""
    return f"steps/{job_id}/piece-{piece}-{round(claim * 1000)}"


def collection_key(job_id: str, claim: float) -> str:
    """Where a step of the collection that follows the job's result (``CrawlDatabase.collect`` in steps) left
    its state, written under the claim ``claim`` (as ``removed_key``)."""
    return f"{collection_prefix(job_id)}{round(claim * 1000)}.state"


def collection_prefix(job_id: str) -> str:
    return f"steps/{job_id}/collect-"


def index_folder(job_id: str) -> str:
    """The job's columnar URL index (harvester.archive.index): a folder of Parquet files, one for each step
    of the job's end that read records (``index_key``), each sorted by SURT key."""
    return f"jobs/{job_id}/index/"


def index_key(job_id: str, n: int = 0) -> str:
    """The ``n``-th file of the job's index."""
    return f"{index_folder(job_id)}{n:05d}.parquet"


PARQUET_TYPE = "application/vnd.apache.parquet"

#: The crawl database's snapshot a job record carries is for the engine; the records show the job's view.
_NOT_IN_RECORDS = {"known"}
#: A job record's ``http_last_modified`` under its old stored name.
_OLD_HEADER = '"last_modified_header":'


def record_line(body: str) -> bytes:
    """A URL's line in the job's records. The stored body is that line already when the record carries no
    snapshot and no empty field (``body_of``; a body stored without it keeps its nulls), and is copied, not
    serialised again. (A ``"known":`` or ``:null`` inside a URL only sends the record the long way; so does
    a body stored under an old name, to be written under today's.)"""
    if '"known":' not in body and ":null" not in body and _OLD_HEADER not in body:
        return body.encode()
    page = SitemapURL.model_validate_json(body)
    return page.model_dump_json(exclude_none=True, exclude=_NOT_IN_RECORDS).encode()


def with_later_kinds(extensions: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """A record's extensions and the kinds later listings added that its first listing lacked (its own win).
    A news story takes the fields a later one adds that its own lacks: a feed item's story is its title and
    date, a news sitemap's later listing of the page adds the publication, the keywords, ..."""
    merged = dict(extensions)
    for kind, value in more.items():
        own = merged.setdefault(kind, value)
        if kind == "news" and own is not value and isinstance(own, dict) and isinstance(value, dict):
            merged[kind] = value | own
    return merged


def enriched_line(line: bytes, more: dict[str, Any]) -> bytes:
    """:func:`with_later_kinds` for a record's line."""
    record = orjson.loads(line)
    record["extensions"] = with_later_kinds(record.get("extensions") or {}, more)
    return orjson.dumps(record)


def enriched_block(bodies: str, extras: dict[str, dict[str, Any]]) -> bytes:
    """A batch of records written straight as JSON (their lines joined, as stored), each enriched."""
    lines = []
    for line in bodies.encode().split(b"\n"):
        more = extras.get(orjson.loads(line)["url"]) if line else None
        lines.append(enriched_line(line, more) if more else line)
    return b"\n".join(lines)


def enriched(record: SitemapURL, extras: dict[str, dict[str, Any]]) -> SitemapURL:
    """:func:`with_later_kinds` for a record read from the store (``harvest report``)."""
    more = extras.get(record.url)
    if not more:
        return record
    return record.model_copy(update={"extensions": with_later_kinds(record.extensions, more)})


def stored_record(body: str) -> Stored:
    """A job record's stored body as the values the job's end counts and writes its feed from: parsed, not
    validated (what the state store holds was a validated record, or one built from checked values)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:  # (orjson refuses what it cannot read exactly: read slowly, but read)
        return json.loads(body)
