"""A page's stored content, wherever its job kept it: a WARC record (read by its location: a ranged read)
or a loose document (by its key)."""

from __future__ import annotations

from harvester.archive.stores import DocumentStore, WarcStore
from harvester.archive.warc import Stored, parse_record
from harvester.model.crawl import WarcLocation


def read_capture(warcs: WarcStore, place: WarcLocation) -> Stored:
    """The capture's record at ``place``."""
    member = warcs.read(place.filename, place.offset, place.length)
    return parse_record(member, where=f"{place.filename} offset {place.offset} (length {place.length})")


def stored_content(
    *, warc: WarcLocation | None, document_key: str | None, warcs: WarcStore, documents: DocumentStore
) -> bytes | None:
    """The content (its Content-Encoding undone) a crawl record's or job record's ``warc`` / ``document_key``
    names; None when neither does, or when the record there is a revisit (whose content is at the
    location the crawl record keeps)."""
    if warc is not None:
        stored = read_capture(warcs, warc)
        return stored.content if stored.record_type == "response" else None
    if document_key:
        return documents.get(document_key)
    return None
