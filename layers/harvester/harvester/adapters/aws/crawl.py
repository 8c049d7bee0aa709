"""The crawl database in the state table: its own key space, and no ``expires_at``, so TTL never takes it.

Layout (``pk`` / ``sk``):

* ``CRAWL#<site>#<h>`` / ``URL#<url key>``: a URL's item, ``h`` being the first hex digit of the URL key, so
  that a site's URLs spread over 16 partitions (a busy site's page workers do not all write one partition)
  and a scan of the site is 16 queries. It holds the URL's record written whole (``body``), or points into
  the crawl batches of the listings that hold it (crawl_pointers.py, beside them in the same partitions);
* ``CRAWL#<site>`` / ``SITEMAP#<url key>``: the last complete reading of a sitemap;
* ``CRAWL#<site>`` / ``SITE``: lastmod trust;
* ``CRAWL#<site>`` / ``PART#<sitemap key>``: the sitemap's epoch and current part (crawl_parts.py).

Records are stored as their JSON ``body`` (deflated: item_body.py) with a ``version``; a versioned write
is conditioned on the version it was computed from (``attribute_not_exists(pk)`` for a new record), so it
can ride in the same transaction as the job's records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harvester.adapters.aws.crawl_collect import Collector
from harvester.adapters.aws.crawl_parts import touches
from harvester.adapters.aws.crawl_pointers import Pointers
from harvester.adapters.aws.item_body import body_text, stored_body
from harvester.adapters.aws.job_items import TRANSACTION_ITEMS, JobItems
from harvester.adapters.aws.pointer_items import URL_SHARDS, Pointer, url_shard, whole_write
from harvester.adapters.aws.record_shelf import RecordShelf
from harvester.adapters.aws.state_table import TransactionFailed, conditional, transact, versioned_put
from harvester.adapters.aws.state_table import s as _s
from harvester.crawldb.parts import Adoptions, sitemap_of, writer_of
from harvester.model.crawl import Collected, CrawlRecord, SiteCrawl, SitemapCrawl, SitemapPart, UrlPage
from harvester.model.records import body_of, url_key

#: The URLs of a job ``job_urls`` reads through their pointers before it reads the job's crawl batches whole
#: (16 queries, one a partition: about what reading this many URLs' pointers and batches by key costs).
_BY_POINTER = 200
#: Records written whole in one transaction at most (each a Put, the guards of its pointer, and its sitemaps'
#: epochs shared: well within a transaction's 100 items).
_WHOLE_TOGETHER = 25


def put_whole(
    client: Any,
    table: str,
    pointers: Pointers,
    site: str,
    records: Sequence[CrawlRecord],
    *,
    writer: str | None = None,
) -> list[str]:
    """Writes each record whole (``DynamoCrawlDatabase.put_urls``); returns the URLs whose record moved on.
    Records of one writer go together, a transaction for up to ``_WHOLE_TOGETHER`` of them (within a
    transaction's items); a transaction one of them cancels is written again a record a transaction, so that
    only that one is refused."""
    stale: list[str] = []
    pending: dict[str, list[tuple[CrawlRecord, Pointer | None]]] = {}
    for record in records:
        pointer = pointers.mover_base(site, record, strict=False)
        if pointer is False:
            stale.append(record.url)
            continue
        by = writer if writer is not None else writer_of(record)
        pending.setdefault(by, []).append((record, pointer))
    for by, writes in pending.items():
        for start in range(0, len(writes), _WHOLE_TOGETHER):
            group = writes[start : start + _WHOLE_TOGETHER]
            items = _whole_writes(table, pointers, site, group, by) if len(group) > 1 else []
            if items and len(items) <= TRANSACTION_ITEMS and len({r.url for r, _ in group}) == len(group):
                try:
                    transact(client, items)
                    continue
                except TransactionFailed:
                    pass  # (one by one: which record moved)
            for one in group:
                try:
                    transact(client, _whole_writes(table, pointers, site, [one], by))
                except TransactionFailed as exc:
                    if "ConditionalCheckFailed" not in exc.reasons:
                        raise
                    stale.append(one[0].url)
    return stale


def _whole_writes(
    table: str, pointers: Pointers, site: str, group: Sequence[tuple[CrawlRecord, Pointer | None]], by: str
) -> list[dict[str, Any]]:
    """The items of one transaction writing the records whole: their Puts, the guards of the pointers they
    move (crawl_pointers), and the moves of the epochs of the sitemaps they name, once each."""
    items = [whole_write(table, site, record) for record, _ in group]
    moved = [pointer for _, pointer in group if pointer is not None]
    items += [guard for guard, _ in pointers.guards(site, moved, mover="")]
    named: list[str | None] = []
    for record, pointer in group:
        sitemap = sitemap_of(record)
        named += [url_key(sitemap) if sitemap else None, pointer.sitemap if pointer else None]
    return items + [update for update, _ in touches(table, site, named, by)]


def settle(
    client: Any, table: str, pointers: Pointers, site: str, urls: Sequence[str], writer: str
) -> frozenset[str] | None:
    """Writes the records of ``urls`` that read otherwise than stored (through their sitemaps' parts) as they
    read: a part adopted in part leaves them out, and they read as stored from then on. The writes are
    ``writer``'s (they move the sitemaps' epochs: no other job adopts the part after them, even should the
    adoption itself not follow). Returns the jobs the records written read as listed by (the adopters they
    were read through), or None when one of them moved meanwhile."""
    found = pointers.fetch(site, urls)
    pointers.resolve(site, found.values(), {}, Adoptions({}))  # (as stored)
    reading = pointers.parts.adoptions(site)
    settled = []
    for p in found.values():
        if p.record is not None and (read := reading.resolve(p.record)) is not p.record:
            settled.append(read.model_copy(update={"version": p.record.version + 1}))
    if settled and put_whole(client, table, pointers, site, settled, writer=writer):
        return None
    return frozenset(r.last_listed_job for r in settled if r.last_listed_job is not None)


class DynamoCrawlDatabase:
    """URL records read through their pointers (crawl_pointers: a record written whole is read as it is)."""

    def __init__(self, client: Any, table: str) -> None:

        self.client = client
        self.table = table
        self.pointers = Pointers(client, table)
        self._jobs: JobItems | None = None
        self._job_records: tuple[tuple[str, str], RecordShelf] | None = None
        self._asked_by_pointer: dict[tuple[str, str], int] = {}  # (``job_urls``)

    def _conditional_put(self, request: dict[str, Any]) -> bool:
        if "Update" in request:
            return conditional(lambda: self.client.update_item(**request["Update"]))
        return conditional(lambda: self.client.put_item(**request["Put"]))

    def get_urls(self, site: str, urls: Sequence[str]) -> dict[str, CrawlRecord]:
        found = self.pointers.read(site, urls)
        return {url: p.record for url, p in found.items() if p.record is not None}

    def job_urls(self, site: str, job_id: str, urls: Sequence[str], *, by_key: bool = False) -> dict[str, CrawlRecord]:
        """Read from the job's own crawl batches and their settlements: by key through the URLs' pointers for
        a job's first ``_BY_POINTER`` URLs asked (a job that fetched few pages) or when asked ``by_key``, else a
        query of each of the site's partitions, once for a job (its records' bytes in read units, not a
        pointer read a URL)."""
        if by_key:
            found = self.pointers.job_batch_records(site, job_id, urls, partial=True)
            return {url: CrawlRecord.model_validate_json(text) for url, text in (found or {}).items()}
        if self._job_records is None or self._job_records[0] != (site, job_id):
            asked = self._asked_by_pointer.get((site, job_id), 0) + len(urls)
            few = self.pointers.job_batch_records(site, job_id, urls) if asked <= _BY_POINTER else None
            if few is not None:
                self._asked_by_pointer[(site, job_id)] = asked
                return {url: CrawlRecord.model_validate_json(text) for url, text in few.items()}
            shelf = RecordShelf(self.pointers.job_records(site, job_id))
            self.release_job_urls()
            self._job_records = ((site, job_id), shelf)
        return {url: CrawlRecord.model_validate_json(text) for url, text in self._job_records[1].get(urls).items()}

    def release_job_urls(self) -> None:
        """Removes the scratch file of the job's records ``job_urls`` read whole (gigabytes for a job that
        fetched millions of pages, in the /tmp the next job's end needs)."""
        if self._job_records is not None:
            self._job_records[1].close()
            self._job_records = None

    def put_urls(self, site: str, records: Sequence[CrawlRecord], *, writer: str | None = None) -> list[str]:
        """Each record written whole on its pointer, in one transaction with the moves of the epochs of the
        sitemaps it names (crawl_parts.py) and, for a record whose pointer names another job's batch, what
        moving it away needs (crawl_pointers), on the reading of it this container made (the orphan
        pass's), else one made now."""
        return put_whole(self.client, self.table, self.pointers, site, records, writer=writer)

    def site_urls(self, site: str, *, unless_listed_by: str | None = None) -> Iterator[CrawlRecord]:
        for page in self.url_pages(site, unless_listed_by=unless_listed_by):
            yield from page.records

    def url_pages(
        self, site: str, *, unless_listed_by: str | None = None, after: str | None = None
    ) -> Iterator[UrlPage]:
        """A query page of pointers at a time, shard after shard; a position is the shard and the last sort
        key read. (Read consistently: the orphan pass must see every listing written before it.)"""
        pages = self.pointers.pointer_pages(site, unless_listed_by=unless_listed_by, after=after)
        for position, pointers in pages:
            yield UrlPage([p.record for p in pointers if p.record is not None], position)

    def collect(
        self,
        site: str,
        ended: Callable[[str], bool],
        *,
        by: str | None = None,
        relisted: int | None = None,
        urls: int = 0,
        pause: Callable[[], bool] | None = None,
        resume: bytes | None = None,
    ) -> Collected:
        """The crawl batches no pointer names, of jobs over, deleted (crawl_collect.py)."""
        collector = Collector(self.client, self.table)
        return collector.collect(site, ended, by=by, relisted=relisted, urls=urls, pause=pause, resume=resume)

    def count_urls(self, site: str) -> int | None:
        """0 for a site with no URL record, told by a one-item read of each shard; None for one with some,
        since a COUNT query reads, and pays for, every record it counts. Saying 0 spares a site's first
        crawl the lookup of every URL it lists (a read unit a page, in batches) for 16 small reads a
        container asks once per job."""
        for shard in URL_SHARDS:
            found = self.client.query(
                TableName=self.table,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :url)",
                ExpressionAttributeValues={":pk": url_shard(site, shard), ":url": _s("URL#")},
                ProjectionExpression="pk",
                Limit=1,
                ConsistentRead=True,  # (the orphan pass skips a site it is told is empty)
            )
            if found.get("Items"):
                return None
        return 0

    keeps_parts = True
    adopts_partly = True
    counts_urls = False  # (only whether a site has none: count_urls)

    def sitemap_part(self, site: str, sitemap: str) -> tuple[SitemapPart | None, int]:
        return self.pointers.parts.get(site, sitemap)

    def put_part(self, site: str, part: SitemapPart, keys: Sequence[str]) -> bool:
        """(The part's keys are not kept: a job that adopted a part takes a URL listed through another
        sitemap as its own already by the part's item, crawl_parts.py.)"""
        return self.pointers.parts.put(site, part, self._job_over)

    def part_keys(self, site: str, part: SitemapPart) -> list[str] | None:
        return None  # (see put_part)

    def _job_over(self, job_id: str) -> bool:
        if self._jobs is None:
            self._jobs = JobItems(self.client, self.table)
        return self._jobs.job_over(job_id)

    def get_sitemap(self, site: str, url: str) -> SitemapCrawl | None:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(f"CRAWL#{site}"), "sk": _s(f"SITEMAP#{url_key(url)}")},
            ConsistentRead=True,
        ).get("Item")
        return SitemapCrawl.model_validate_json(body_text(item)) if item else None

    def put_sitemap(self, site: str, record: SitemapCrawl) -> bool:
        fetched = repr(record.fetched_at.timestamp())
        return self._conditional_put(
            {
                "Put": {
                    "TableName": self.table,
                    "Item": {
                        "pk": _s(f"CRAWL#{site}"),
                        "sk": _s(f"SITEMAP#{url_key(record.url)}"),
                        "body": stored_body(body_of(record)),
                        "fetched_at": {"N": fetched},
                    },
                    "ConditionExpression": "attribute_not_exists(pk) OR fetched_at <= :mine",
                    "ExpressionAttributeValues": {":mine": {"N": fetched}},
                }
            }
        )

    def site_sitemaps(self, site: str) -> Iterator[SitemapCrawl]:
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :sitemap)",
            ExpressionAttributeValues={":pk": _s(f"CRAWL#{site}"), ":sitemap": _s("SITEMAP#")},
        )
        for page in pages:
            for item in page.get("Items", []):
                yield SitemapCrawl.model_validate_json(body_text(item))

    def get_site(self, site: str) -> SiteCrawl | None:
        item = self.client.get_item(
            TableName=self.table, Key={"pk": _s(f"CRAWL#{site}"), "sk": _s("SITE")}, ConsistentRead=True
        ).get("Item")
        return SiteCrawl.model_validate_json(body_text(item)) if item else None

    def put_site(self, record: SiteCrawl) -> bool:
        key = {"pk": _s(f"CRAWL#{record.site}"), "sk": _s("SITE")}
        return self._conditional_put(versioned_put(self.table, key, body_of(record), record.version))
