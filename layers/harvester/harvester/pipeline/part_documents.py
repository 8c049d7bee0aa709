"""The documents of sitemap parts: where a part's lines and index rows are kept for the site, the index of
exactly a set of parts' rows kept for the next job that adopts them, and the record lines a job's adopted
part gives (its lines with the job's tail)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from harvester.archive.results import PARQUET_TYPE, with_later_kinds
from harvester.crawldb import parts
from harvester.crawldb.documents import site_slug
from harvester.model.messages import JobRequest
from harvester.model.records import JobRecord, SitemapURL, url_key
from harvester.model.state import AdoptedPart, ListedBatch
from harvester.ports import DocumentStore, StateStore


def part_folder(origin: str, sitemap: str) -> str:
    """Where a sitemap's parts' documents are: ``sites/<site>/parts/<sitemap key>/``."""
    return f"sites/{site_slug(origin)}/parts/{url_key(sitemap)}/"


def part_key(origin: str, sitemap: str, job_id: str, kind: str) -> str:
    """A part's document: ``<part_folder>/<job>.<kind>``."""
    return f"{part_folder(origin, sitemap)}{job_id}.{kind}"


def parts_index_key(origin: str, rows: Iterable[str]) -> str:
    """Where the sorted index of exactly these parts' rows (their documents) is kept for the site."""
    digest = hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:32]
    return f"sites/{site_slug(origin)}/parts/index-{digest}.parquet"


def keep_parts_index(documents: DocumentStore, origin: str, key: str, built: Path) -> None:
    """Keeps a job's index made of parts only as the site's (the one kept before is let go)."""
    with built.open("rb") as body:
        documents.put(key, body, content_type=PARQUET_TYPE)
    documents.delete(*[older for older in documents.keys(f"sites/{site_slug(origin)}/parts/index-") if older != key])


class PartRows(NamedTuple):
    """The index rows of a part a job adopted, as its index takes them: the part's Parquet document, the
    ``change`` its records have in the job, and the URLs the job did not take from it."""

    key: str
    change: str
    excluded: frozenset[str] = frozenset()


def adopted_lines(
    documents: DocumentStore, request: JobRequest, adopted: AdoptedPart, extras: dict[str, dict[str, Any]]
) -> bytes:
    """The job's record lines of a part it adopted (each ending with a newline), with what later listings
    of a URL added to its extensions."""
    stripped = documents.get(adopted.part.lines)
    if adopted.excluded:
        left_out = adopted.excluded
        urls = parts.block_urls(stripped)
        kept = (line for line, url in zip(stripped.splitlines(keepends=True), urls, strict=True) if url not in left_out)
        stripped = b"".join(kept)
    lines = parts.render(stripped, adopted.at, parts.reason_of(request))
    if not extras:
        return lines
    out = []
    for line in lines.splitlines():
        record = orjson.loads(line)
        more = extras.get(record["url"])
        if more:
            record["extensions"] = with_later_kinds(record.get("extensions") or {}, more)
            line = orjson.dumps(record)
        out.append(line + b"\n")
    return b"".join(out)


def job_pages(store: StateStore, documents: DocumentStore, job: JobRecord) -> Iterator[SitemapURL]:
    """Every URL record of the job, those of the parts it adopted included (``harvest report``, ``export``)."""
    for item in store.job_records(job.job_id):
        if isinstance(item, AdoptedPart):
            for line in adopted_lines(documents, job.request, item, {}).splitlines():
                yield SitemapURL.model_validate_json(line)
        elif isinstance(item, ListedBatch):
            for body in item.bodies.split("\n"):
                yield SitemapURL.model_validate_json(body)
        else:
            yield SitemapURL.model_validate_json(item)
