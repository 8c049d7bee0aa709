"""The sitemap parts contract (``SitemapPart``), for both adapters: a part is kept only while no other job
wrote a record its sitemap names, adopted whole in one atomic write, and no longer adopted once a record it
holds moved."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from harvester.adapters.aws import value_sets
from harvester.adapters.aws.value_sets import ValueSets
from harvester.adapters.local import adopted_keys
from harvester.crawldb.crawl_state import orphaned
from harvester.crawldb.parts import CLOCK_SKEW, MAX_EXCLUDED
from harvester.model.crawl import SitemapPart
from harvester.model.records import JobStatus, SitemapURL, key_of
from harvester.model.state import AdoptedPart, Checkpoint
from tests.contract.test_crawl_database import ORIGIN, crawl_record, fetched
from tests.contract.test_state_store import (
    SITE,
    T0,
    claimed_sitemap,
    counts,
    lease,
    new_job,
    page,
    read_on_after_any_page,
)

SITEMAP = f"{SITE}sitemap-1.xml"


@pytest.fixture
def parts(backend):
    return backend


def listed_by(backend, job_id: str, n: int = 2) -> list:
    """The job lists pages 0..n-1 of sitemap-1 one by one (their crawl records written with them)."""
    claimed_sitemap(backend, job_id)
    pages = [page(i) for i in range(n)]
    writes = {p.url: crawl_record(p.url, job_id) for p in pages}
    recorded = backend.store.record_pages(
        job_id, SITEMAP, pages, checkpoint=n, lease=lease(), site=ORIGIN, crawl=writes
    )
    assert len(recorded.new) == n
    return pages


def part_of(job_id: str, epoch: int, urls: int = 2) -> SitemapPart:
    return SitemapPart(
        sitemap=SITEMAP, kind="urlset", signature="s", listing="l", job_id=job_id, made_at=T0, epoch=epoch,
        urls=urls, lines=f"sites/parts/{job_id}.lines",
    )  # fmt: skip


def kept_part(backend) -> tuple[list, SitemapPart, int]:
    """job-1 lists pages 0 and 1 of sitemap-1 and keeps its part: the pages, the part, the epoch."""
    pages = listed_by(backend, new_job(backend, "job-1"))
    _, epoch = backend.crawldb.sitemap_part(ORIGIN, SITEMAP)
    part = part_of("job-1", epoch)
    assert backend.crawldb.put_part(ORIGIN, part, [p.key for p in pages])
    return pages, part, epoch


def test_a_part_is_adopted_whole_and_its_records_read_as_listed_by_the_job_that_adopted_it(parts):
    db = parts.crawldb
    pages, part, epoch = kept_part(parts)
    assert epoch > 0  # the listing's writes moved it
    assert db.sitemap_part(ORIGIN, SITEMAP) == (part, epoch)

    second = new_job(parts, "job-2")
    claimed_sitemap(parts, second)
    at = T0 + timedelta(days=1)
    assert parts.store.adopt_part(second, SITEMAP, part, lease(), site=ORIGIN, at=at)
    assert (counts(parts, second).urls_total, counts(parts, second).urls_succeeded) == (2, 2)
    assert parts.store.get_sitemap(second, SITEMAP).adopted == part
    records = db.get_urls(ORIGIN, [p.url for p in pages])
    assert {(r.last_listed_job, r.last_listed) for r in records.values()} == {(second, at)}
    assert db.sitemap_part(ORIGIN, SITEMAP) == (part, epoch)  # (an adoption writes no record)
    assert list(db.site_urls(ORIGIN, unless_listed_by=second)) == []  # (the orphan pass skips them)


def test_a_write_to_one_of_its_records_ends_a_part(parts):
    db = parts.crawldb
    pages, part, epoch = kept_part(parts)
    record = db.get_urls(ORIGIN, [pages[0].url])[pages[0].url]
    assert db.put_urls(ORIGIN, [fetched(record, "new content")]) == []  # (a fetch by another job)
    _, moved = db.sitemap_part(ORIGIN, SITEMAP)
    assert moved > epoch
    later = new_job(parts, "job-2")
    claimed_sitemap(parts, later)
    assert not parts.store.adopt_part(later, SITEMAP, part, lease(), site=ORIGIN, at=T0)
    assert counts(parts, later).urls_total == 0


def test_a_part_is_not_kept_when_another_job_wrote_its_records_after_its_job_did(parts):
    db = parts.crawldb
    first, other = new_job(parts, "job-1"), new_job(parts, "job-2")
    pages = listed_by(parts, first)
    record = db.get_urls(ORIGIN, [pages[1].url])[pages[1].url]
    assert db.put_urls(ORIGIN, [orphaned(record, job_id=other)]) == []  # job-2's write, after job-1's listing
    _, epoch = db.sitemap_part(ORIGIN, SITEMAP)
    assert not db.put_part(ORIGIN, part_of(first, epoch), [p.key for p in pages])
    assert db.sitemap_part(ORIGIN, SITEMAP) == (None, epoch)
    # A job that lists them after that write keeps its part (writes whose order the DynamoDB layout tells by
    # its writers' clocks, allowing them to be CLOCK_SKEW apart).
    time.sleep(2 * CLOCK_SKEW)
    third = new_job(parts, "job-3")
    claimed_sitemap(parts, third)
    known = db.get_urls(ORIGIN, [p.url for p in pages])
    writes = {p.url: crawl_record(p.url, third, prior=known[p.url]) for p in pages}
    parts.store.record_pages(third, SITEMAP, pages, checkpoint=2, lease=lease(), site=ORIGIN, crawl=writes)
    _, epoch = db.sitemap_part(ORIGIN, SITEMAP)
    assert db.put_part(ORIGIN, part_of(third, epoch), [p.key for p in pages])


def test_a_part_holding_a_url_the_job_has_already_is_not_adopted(parts):
    _, part, _ = kept_part(parts)
    later = new_job(parts, "job-2")
    claimed_sitemap(parts, later, n=2)  # another sitemap of the job lists page 0 first (no record written)
    parts.store.record_pages(later, f"{SITE}sitemap-2.xml", [page(0)], checkpoint=1, lease=lease())
    claimed_sitemap(parts, later)
    assert not parts.store.adopt_part(later, SITEMAP, part, lease(), site=ORIGIN, at=T0)
    assert counts(parts, later).urls_total == 1


def listed_from(backend, job_id: str, n: int, url: str) -> list:
    """The job's sitemap-<n> lists ``url`` with its crawl record as it reads now (naming the sitemap it
    named, as a listing tells the store): the pages new to the job."""
    claimed_sitemap(backend, job_id, n=n)
    known = backend.crawldb.get_urls(ORIGIN, [url])[url]
    other = f"{SITE}sitemap-{n}.xml"
    write = {url: crawl_record(url, job_id, prior=known).model_copy(update={"sitemap": other})}
    listed = SitemapURL(url=url, sitemap=other)
    recorded = backend.store.record_pages(
        job_id, other, [listed], checkpoint=1, lease=lease(), site=ORIGIN, crawl=write, left={url: known.sitemap}
    )
    return recorded.new


def test_a_url_of_a_part_adopted_whole_is_the_jobs_when_another_of_its_sitemaps_lists_it(parts):
    """job-2 adopts job-1's part whole, then its sitemap-2 lists page 0 (whose record names sitemap-1): page
    0 is job-2's already, counted once."""
    pages, part, _ = kept_part(parts)
    later = new_job(parts, "job-2")
    claimed_sitemap(parts, later)
    assert parts.store.adopt_part(later, SITEMAP, part, lease(), site=ORIGIN, at=T0)
    assert listed_from(parts, later, 2, pages[0].url) == []
    assert counts(parts, later).urls_total == 2
    assert parts.store.recount(later).urls_total == 2


def adopted_then_listed_by_another_job(backend) -> tuple[list, str]:
    """job-2 adopts job-1's part whole; job-3's sitemap-3 then lists page 0, whose record then names
    sitemap-3: the pages and job-2."""
    pages, part, _ = kept_part(backend)
    second = new_job(backend, "job-2")
    claimed_sitemap(backend, second)
    assert backend.store.adopt_part(second, SITEMAP, part, lease(), site=ORIGIN, at=T0)
    third = new_job(backend, "job-3")
    assert len(listed_from(backend, third, 3, pages[0].url)) == 1
    return pages, second


def test_a_url_of_a_part_adopted_whole_stays_the_jobs_when_another_job_lists_it_since(parts):
    """job-2 adopts job-1's part whole; job-3's sitemap-3 lists page 0, whose record then names sitemap-3;
    job-2's sitemap-2 lists page 0 as it reads then: page 0 is job-2's already, through the part."""
    db = parts.crawldb
    pages, second = adopted_then_listed_by_another_job(parts)
    assert db.get_urls(ORIGIN, [pages[0].url])[pages[0].url].sitemap == f"{SITE}sitemap-3.xml"
    assert listed_from(parts, second, 2, pages[0].url) == []
    assert counts(parts, second).urls_total == 2
    assert parts.store.recount(second).urls_total == 2


def test_a_part_adopted_in_part_leaves_out_urls_that_read_as_they_did(parts):
    """job-2 adopts job-1's part whole; job-3 adopts it but for page 1 (gone from the sitemap): page 0 reads
    as listed by job-3, page 1 as it read before (listed by job-2), and is the only one the orphan pass of
    job-3 reads; the counts (and a recount) have page 0 only."""
    db = parts.crawldb
    pages, part, _ = kept_part(parts)
    second, at2 = new_job(parts, "job-2"), T0 + timedelta(days=1)
    claimed_sitemap(parts, second)
    assert parts.store.adopt_part(second, SITEMAP, part, lease(), site=ORIGIN, at=at2)
    third, at3 = new_job(parts, "job-3"), T0 + timedelta(days=2)
    claimed_sitemap(parts, third)
    kept = parts.store.adopt_part(
        third, SITEMAP, part, lease(), site=ORIGIN, at=at3, excluded=[pages[1].url], checkpoint=Checkpoint(2)
    )
    assert kept
    assert (counts(parts, third).urls_total, counts(parts, third).urls_succeeded) == (1, 1)
    assert parts.store.recount(third).urls_total == 1
    taken = [item for item in parts.store.job_records(third) if isinstance(item, AdoptedPart)]
    assert [(a.urls, a.excluded, a.partly) for a in taken] == [(1, frozenset({pages[1].url}), True)]
    assert read_on_after_any_page(parts.store, third)[-1].items == taken  # (a part a page, after the records)
    records = db.get_urls(ORIGIN, [p.url for p in pages])
    assert (records[pages[0].url].last_listed_job, records[pages[0].url].last_listed) == (third, at3)
    assert (records[pages[1].url].last_listed_job, records[pages[1].url].last_listed) == (second, at2)
    assert [r.url for r in db.site_urls(ORIGIN, unless_listed_by=third)] == [pages[1].url]
    # A delivery of the sitemap's task again finishes it as adopted (its URLs counted once).
    assert parts.store.get_sitemap(third, SITEMAP).adopted is not None
    # No job adopts the part after that, whole or in part: page 1 would read as listed by it.
    fourth = new_job(parts, "job-4")
    claimed_sitemap(parts, fourth)
    assert not parts.store.adopt_part(fourth, SITEMAP, part, lease(), site=ORIGIN, at=T0 + timedelta(days=3))
    assert counts(parts, fourth).urls_total == 0


def test_a_part_is_not_adopted_in_part_when_a_url_it_keeps_is_the_jobs_already(parts):
    """Another sitemap of the job listed page 0 first (its crawl record written by that listing): a part that
    keeps page 0 is not adopted in part."""
    db = parts.crawldb
    pages, part, _ = kept_part(parts)
    later = new_job(parts, "job-2")
    claimed_sitemap(parts, later, n=2)
    known = db.get_urls(ORIGIN, [pages[0].url])
    write = {pages[0].url: crawl_record(pages[0].url, later, prior=known[pages[0].url])}
    parts.store.record_pages(
        later, f"{SITE}sitemap-2.xml", [page(0)], checkpoint=1, lease=lease(), site=ORIGIN, crawl=write
    )
    claimed_sitemap(parts, later)
    assert not parts.store.adopt_part(
        later, SITEMAP, part, lease(), site=ORIGIN, at=T0, excluded=[pages[1].url], checkpoint=Checkpoint(2)
    )
    assert counts(parts, later).urls_total == 1


def test_a_part_is_not_adopted_in_part_once_another_job_wrote_one_of_its_records(parts):
    db = parts.crawldb
    pages, part, _ = kept_part(parts)
    record = db.get_urls(ORIGIN, [pages[0].url])[pages[0].url]
    other = fetched(record, "new content").model_copy(update={"last_listed_job": "job-x"})
    assert db.put_urls(ORIGIN, [other]) == []
    later = new_job(parts, "job-2")
    claimed_sitemap(parts, later)
    left_out = [pages[1].url]
    assert not parts.store.adopt_part(
        later, SITEMAP, part, lease(), site=ORIGIN, at=T0, excluded=left_out, checkpoint=Checkpoint(2)
    )
    assert counts(parts, later).urls_total == 0


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def part_item_size(backend) -> int | None:
    """On AWS, about how many bytes the sitemap's part item holds (every listing of one of its URLs
    rewrites it, and pays for it whole); None locally."""
    if backend.name != "aws":
        return None
    item = backend.store.pointers.parts.item(ORIGIN, SITEMAP)
    sizes = {"S": len, "N": len, "B": len, "SS": lambda v: sum(map(len, v)), "BOOL": lambda v: 1}
    return sum(len(name) + sizes[kind](v) for name, value in item.items() for kind, v in value.items())


def test_a_part_not_holding_many_of_its_records_is_adopted_whole_by_jobs_side_by_side(backend):
    """The URLs whose records name the part's sitemap and that it does not hold (its ``excluded``: another
    sitemap lists them) are the ones each adopter does not take from it: two running jobs adopt such a part
    whole, and on AWS the part's item stays small (each adopter's set stored apart)."""
    pages, part, _ = kept_part(backend)
    leaving = part.model_copy(update={"excluded": [f"{SITE}gone-{i}" for i in range(1500)]})
    assert backend.crawldb.put_part(ORIGIN, leaving, [p.key for p in pages])
    for name in ("adopter-1", "adopter-2"):
        adopter = new_job(backend, name)
        claimed_sitemap(backend, adopter)
        assert backend.store.adopt_part(adopter, SITEMAP, leaving, lease(), site=ORIGIN, at=T0 + timedelta(days=1))
        assert (counts(backend, adopter).urls_total, counts(backend, adopter).urls_succeeded) == (2, 2)
    size = part_item_size(backend)
    assert size is None or size < 1500 * 32 + 30_000, size  # (its body and ``exc``: no copy an adopter)


def test_a_part_adopted_in_part_leaving_out_thousands_of_urls_knows_each_of_them(backend):
    """A sitemap whose entries changed by the thousand is adopted in part all the same (a cycle then costs
    what changed): the job's record of the adoption names every URL it left out, the counts leave them out,
    and the part's item on AWS stays small."""
    pages, part, _ = kept_part(backend)
    big = part.model_copy(update={"urls": 5000})
    assert backend.crawldb.put_part(ORIGIN, big, [p.key for p in pages])
    left_out = [pages[1].url, *(f"{SITE}changed-{i}" for i in range(2999))]
    adopter = new_job(backend, "adopter")
    claimed_sitemap(backend, adopter)
    assert backend.store.adopt_part(
        adopter, SITEMAP, big, lease(), site=ORIGIN, at=T0 + timedelta(days=1), excluded=left_out,
        checkpoint=Checkpoint(5000),
    )  # fmt: skip
    assert counts(backend, adopter).urls_total == 2000
    taken = [item for item in backend.store.job_records(adopter) if isinstance(item, AdoptedPart)]
    assert [(a.excluded, a.partly) for a in taken] == [(frozenset(left_out), True)]
    records = backend.crawldb.get_urls(ORIGIN, [p.url for p in pages])
    assert records[pages[0].url].last_listed_job == adopter  # (taken)
    assert records[pages[1].url].last_listed_job == "job-1"  # (left out: as it was)
    size = part_item_size(backend)
    assert size is None or size < 20_000, size


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def test_a_part_put_collects_the_sets_of_the_adoptions_its_item_no_longer_names(backend, monkeypatch):
    """Two jobs adopt a part not holding 1,500 of its records, one whole and one in part (their sets of URLs
    not taken differ); a part put once the first is over keeps the running one's set only."""
    monkeypatch.setattr(value_sets, "COLLECT_AFTER", -1)
    pages, part, _ = kept_part(backend)
    leaving = part.model_copy(update={"excluded": [f"{SITE}gone-{i}" for i in range(1500)]})
    assert backend.crawldb.put_part(ORIGIN, leaving, [p.key for p in pages])
    whole, partly = new_job(backend, "whole"), new_job(backend, "partly")
    for job in (whole, partly):
        claimed_sitemap(backend, job)
    at = T0 + timedelta(days=1)
    assert backend.store.adopt_part(whole, SITEMAP, leaving, lease(), site=ORIGIN, at=at)
    assert backend.store.adopt_part(
        partly, SITEMAP, leaving, lease(), site=ORIGIN, at=at, excluded=[pages[1].url], checkpoint=Checkpoint(2)
    )
    parts = backend.store.pointers.parts
    item = parts.item(ORIGIN, SITEMAP)
    refs = {job: item[f"x_{job}"]["S"] for job in (whole, partly)}
    assert len(set(refs.values())) == 2 and all(value_sets.is_ref({"S": r}) for r in refs.values())
    client, name, pk = parts.client, parts.table, f"CRAWL#{ORIGIN}"
    assert len(stored_items(client, name, pk, "KEYS#")) == 2
    _, epoch = backend.crawldb.sitemap_part(ORIGIN, SITEMAP)
    assert parts.put(ORIGIN, part_of(partly, epoch), lambda job: job == whole)
    prefix = f"KEYS#{key_of(SITEMAP)}#"
    assert [sk.rpartition("#")[0] for sk in stored_items(client, name, pk, "KEYS#")] == [
        prefix + refs[partly].removeprefix("@").rpartition(":")[0]
    ]
    assert len(ValueSets(client, name).read(pk, prefix, {"S": refs[partly]})) == 1501


def stored_items(client: Any, table: str, pk: str, prefix: str) -> list[str]:
    found = client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
        ExpressionAttributeValues={":pk": {"S": pk}, ":prefix": {"S": prefix}},
        ConsistentRead=True,
    )["Items"]
    return sorted(item["sk"]["S"] for item in found)


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def test_an_adoption_in_part_names_the_adopter_its_settled_records_read_through(backend):
    """A adopts the part whole and ends. C adopts it in part leaving page 1 out: it first writes page 1's
    record as it reads, listed by A; between that reading and its write, D adopts the part whole (the epoch
    has not moved yet), so the latest adopter is D when C's adoption lands, and that adoption drops A's
    mark (A is over). The item names A all the same (``sb``: the adopter the settled record read through),
    so a listing by another job that moves page 1 away keeps D, whose part holds it."""
    pages, part, _ = kept_part(backend)
    store, parts = backend.store, backend.store.pointers.parts
    a, d, c = (new_job(backend, name) for name in ("job-a", "job-d", "job-c"))
    for job in (a, d, c):
        claimed_sitemap(backend, job)
    assert store.adopt_part(a, SITEMAP, part, lease(), site=ORIGIN, at=T0 + timedelta(days=1))
    assert store.end_job(a, JobStatus.COMPLETED, end_time=T0 + timedelta(days=1, hours=1))
    reading = parts.adoptions

    def read_then_d_adopts(site: str) -> Any:
        found = reading(site)
        parts.adoptions = reading  # type: ignore[method-assign]
        assert store.adopt_part(d, SITEMAP, part, lease(), site=ORIGIN, at=T0 + timedelta(days=2))
        return found

    parts.adoptions = read_then_d_adopts  # type: ignore[method-assign]
    assert store.adopt_part(
        c, SITEMAP, part, lease(), site=ORIGIN, at=T0 + timedelta(days=3), excluded=[pages[1].url],
        checkpoint=Checkpoint(2),
    )  # fmt: skip
    record = backend.crawldb.get_urls(ORIGIN, [pages[1].url])[pages[1].url]
    assert record.last_listed_job == a
    (found,) = parts.adopters(ORIGIN, [key_of(SITEMAP)], "job-b", store.jobs.job_over).values()
    assert a in found.adopters
    assert found.holds_for(record.last_listed_job, pages[1].url, whole=True) == {d}


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def test_a_part_leaving_out_more_than_its_item_holds_is_not_kept_on_aws(backend):
    """A part whose lineage leaves out more URLs than ``MAX_EXCLUDED`` (its item holds their keys, its body
    the URLs) is not kept: refused, not failed (the next job lists its sitemap one by one)."""
    pages, part, _ = kept_part(backend)
    _, epoch = backend.crawldb.sitemap_part(ORIGIN, SITEMAP)
    for n, kept in ((MAX_EXCLUDED + 1, False), (MAX_EXCLUDED, True)):
        leaving = part.model_copy(update={"excluded": [f"{SITE}removed/{i}" for i in range(n)], "epoch": epoch})
        assert backend.crawldb.put_part(ORIGIN, leaving, [p.key for p in pages]) is kept, n


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def test_a_lineage_read_while_its_part_is_replaced_is_the_new_items(backend):
    """C adopts the part in part leaving page 1 out; a reading of the site's lineages reads the part item,
    then C's end puts C's own part before the reading reads the URLs the item leaves out. The lineage is the
    item read last (no adoption: page 1 reads as stored), not the first item's with the new one's (empty)
    left-out keys, which would read page 1 as listed by C."""
    pages, part, _ = kept_part(backend)
    parts = backend.store.pointers.parts
    c = new_job(backend, "job-c")
    claimed_sitemap(backend, c)
    assert backend.store.adopt_part(
        c, SITEMAP, part, lease(), site=ORIGIN, at=T0 + timedelta(days=1), excluded=[pages[1].url],
        checkpoint=Checkpoint(2),
    )  # fmt: skip
    listed = parts.site_items

    def replaced_once_read(site: str, projection: str, names: Any = None) -> Any:
        for item in listed(site, projection, names):
            _, epoch = backend.crawldb.sitemap_part(ORIGIN, SITEMAP)
            assert backend.crawldb.put_part(ORIGIN, part_of(c, epoch), [pages[0].key])
            yield item

    parts.site_items = replaced_once_read  # type: ignore[method-assign]
    reading = parts.adoptions(ORIGIN)
    parts.site_items = listed  # type: ignore[method-assign]
    record = backend.crawldb.get_urls(ORIGIN, [pages[1].url])[pages[1].url]
    assert reading.resolve(record).last_listed_job == "job-1"


def test_a_url_of_a_part_adopted_whole_stays_the_jobs_after_another_job_keeps_an_empty_part_of_it(parts):
    """As above, then job-4 finds sitemap-1 empty and keeps an empty part of it (a part that holds no URL
    is kept with no write of its maker's): page 0 is still job-2's through the part it adopted."""
    db = parts.crawldb
    pages, second = adopted_then_listed_by_another_job(parts)
    fourth = new_job(parts, "job-4")
    _, epoch = db.sitemap_part(ORIGIN, SITEMAP)
    assert db.put_part(ORIGIN, part_of(fourth, epoch, urls=0), [])
    assert listed_from(parts, second, 2, pages[0].url) == []
    assert counts(parts, second).urls_total == 2


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_job_reading_parts_again_and_again_takes_every_adopted_part_at_once(backend, monkeypatch):
    """(The local store.) Past as many reads of parts' keys as the job adopted parts, every adopted part's
    keys are taken into one key set: a URL of a part adopted whole, listed again by other sitemaps of the
    job, is the job's already before and after."""
    monkeypatch.setattr(adopted_keys, "_KEPT", 0)  # (no part's keys kept loaded: each listing reads them)
    pages, part, _ = kept_part(backend)
    later = new_job(backend, "job-2")
    claimed_sitemap(backend, later)
    assert backend.store.adopt_part(later, SITEMAP, part, lease(), site=ORIGIN, at=T0)
    kept = backend.store.page_rows.adopted_keys
    assert listed_from(backend, later, 2, pages[0].url) == []
    assert not kept.reads_every_part(later)
    assert listed_from(backend, later, 3, pages[1].url) == []
    assert kept.reads_every_part(later)
    assert listed_from(backend, later, 4, pages[0].url) == []
    assert counts(backend, later).urls_total == 2
