"""``harvest get URL``: the stored body of a URL, read back from its WARC record (one ranged read).

The crawl database's record of the URL (in the site of its origin) names the response record that holds
its current content (``CrawlRecord.warc``), or, for a job that kept its pages as files, the document
(``document_key``). By default the content is printed with its Content-Encoding undone: what the page's
signature was taken of; ``--raw`` prints the body as it was received, ``--headers`` the status line and
the headers first, as ``curl -i`` does.

Local crawls are read from ``--state-dir``; a deployed stack's with ``--stack`` (its crawl database in
DynamoDB, its WARC objects in S3: one GetItem and one ranged GET).
"""

from __future__ import annotations

import argparse
import sys

from harvester.archive.stored import read_capture
from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.state import open_stores
from harvester.crawldb.crawl_state import known_failure
from harvester.model.crawl import CrawlRecord, CrawlState
from harvester.urls import normalize, origin_of, require_http_url


def run_get(args: argparse.Namespace) -> int:
    try:
        url = normalize(require_http_url(args.url))
    except ValueError as exc:
        raise UsageError(f"{args.url}: {exc}") from None
    with open_stores(args) as (harvest, where):
        record = harvest.crawldb.get_urls(origin_of(url), [url]).get(url)
        if record is None:
            raise UsageError(f"{url}: not in the crawl database of {where}")
        if record.warc is None and not record.document_key:
            if record.last_fetch_time is None:
                raise UsageError(f"{url}: never fetched (crawl state {record.state.value})")
            status = f"HTTP {record.http_status}" if record.http_status else "no answer"
            raise UsageError(
                f"{url}: no content stored (last fetched {record.last_fetch_time:%Y-%m-%d %H:%M:%S}: {status})"
            )
        _stale(url, record)
        out = sys.stdout.buffer
        if record.warc is None:
            if args.raw or args.headers:
                raise UsageError(f"{url}: kept as a file (--output files), not a WARC record: no --raw or --headers")
            try:
                out.write(harvest.documents.get(record.document_key))  # type: ignore[arg-type]
            except FileNotFoundError:
                raise UsageError(f"{url}: its document {record.document_key} is missing") from None
            return EXIT_OK
        place = record.warc
        try:
            stored = read_capture(harvest.warcs, place)
        except FileNotFoundError:
            raise UsageError(f"{url}: its WARC file {place.filename} is missing") from None
        except ValueError as exc:  # (a file cut short or replaced: no readable record where the location says)
            raise UsageError(f"{url}: {exc}") from None
        if stored.record_type != "response":
            raise UsageError(f"{url}: {place.filename} offset {place.offset} is a {stored.record_type} record")
        if args.headers:
            head = [stored.status_line, *(f"{name}: {value}" for name, value in stored.headers), "", ""]
            out.write("\r\n".join(head).encode("latin-1", "replace"))
        out.write(stored.body if args.raw else stored.content)
    return EXIT_OK


def _stale(url: str, record: CrawlRecord) -> None:
    """Says so when the stored content is not what the URL answers now: its last fetch found it gone or
    failing, or no sitemap lists it any more."""
    failure = known_failure(record)
    if failure is not None:
        print(f"harvest: {url}: {failure}; printing the content of its last good fetch", file=sys.stderr)
    elif record.state is CrawlState.ORPHAN:
        print(f"harvest: {url}: no sitemap lists it any more; printing its last stored content", file=sys.stderr)
