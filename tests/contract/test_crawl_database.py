"""The crawl database contract, for both adapters: versioned writes that never lose an update, and the
atomic pairing of a job's records with the crawl records they move."""

from __future__ import annotations

from datetime import datetime, timedelta

from harvester.crawldb.crawl_state import Fetched, FetchResult, after_fetch, listed
from harvester.crawldb.schedule import Schedule
from harvester.model.crawl import CrawlRecord, HostTrust, SiteCrawl, SitemapCrawl
from harvester.model.records import UrlStatus
from harvester.model.state import PageOutcome
from tests.contract.test_state_store import NOW, SITE, T0, claimed_sitemap, counts, lease, new_job, page

ORIGIN = "https://example.com"
SCHEDULE = Schedule()


def crawl_record(url: str, job_id: str = "job-1", prior: CrawlRecord | None = None) -> CrawlRecord:
    return listed(
        prior,
        url=url,
        lastmod=None,
        changefreq=None,
        priority=0.5,
        sitemap=f"{SITE}sitemap-1.xml",
        job_id=job_id,
        now=T0,
        schedule=SCHEDULE,
    )


def fetched(record: CrawlRecord, signature: str) -> CrawlRecord:
    answer = Fetched(FetchResult.SUCCESS, 200, signature=signature, document_key=signature)
    return after_fetch(record, answer, now=T0, schedule=SCHEDULE)


def test_a_write_lands_only_on_the_version_it_follows(backend):
    db = backend.crawldb
    url = page(1).url
    first = crawl_record(url)
    assert db.put_urls(ORIGIN, [first]) == []
    assert db.put_urls(ORIGIN, [first]) == [url]  # "new" again: someone created it already
    one, other = fetched(first, "a"), fetched(first, "b")  # two writers read version 1
    assert db.put_urls(ORIGIN, [one]) == []
    assert db.put_urls(ORIGIN, [other]) == [url]  # the loser is told, and changes nothing
    assert db.get_urls(ORIGIN, [url])[url].signature == "a"
    # Re-applied to the winner's version, the loser's change lands on top of it.
    again = fetched(db.get_urls(ORIGIN, [url])[url], "b")
    assert db.put_urls(ORIGIN, [again]) == []
    stored = db.get_urls(ORIGIN, [url])[url]
    assert (stored.signature, stored.changes, stored.version) == ("b", 1, 3)


def test_records_are_kept_per_site_and_read_in_batches(backend):
    db = backend.crawldb
    urls = [page(n).url for n in range(230)]
    db.put_urls(ORIGIN, [crawl_record(u) for u in urls])
    db.put_urls("https://other.example", [crawl_record(urls[0])])
    assert set(db.get_urls(ORIGIN, [*urls, f"{SITE}unknown"])) == set(urls)
    assert sorted(r.url for r in db.site_urls(ORIGIN)) == sorted(urls)
    assert [r.url for r in db.site_urls("https://other.example")] == [urls[0]]
    assert db.get_urls("https://third.example", urls) == {}
    # Counted where that is cheap (SQLite); DynamoDB would read every record to count them, so it says None,
    # and 0 for a site with none (a first crawl's, which then looks up no URL it lists).
    expected = (230, 1, 0) if backend.name == "local" else (None, None, 0)
    assert tuple(db.count_urls(s) for s in (ORIGIN, "https://other.example", "https://third.example")) == expected


def test_the_orphan_pass_reads_only_what_another_job_listed_last(backend):
    db = backend.crawldb
    urls = [page(n).url for n in range(30)]
    db.put_urls(ORIGIN, [crawl_record(u, job_id="job-1") for u in urls])
    relisted = [crawl_record(u, job_id="job-2", prior=db.get_urls(ORIGIN, [u])[u]) for u in urls[:12]]
    assert db.put_urls(ORIGIN, relisted) == []
    assert sorted(r.url for r in db.site_urls(ORIGIN, unless_listed_by="job-2")) == sorted(urls[12:])
    assert sorted(r.url for r in db.site_urls(ORIGIN, unless_listed_by="job-1")) == sorted(urls[:12])
    assert len(list(db.site_urls(ORIGIN, unless_listed_by="job-3"))) == 30


def test_a_sitemap_reading_is_replaced_only_by_a_later_one(backend):
    db = backend.crawldb
    url = f"{SITE}sitemap-1.xml"

    def reading(at: datetime, etag: str) -> SitemapCrawl:
        return SitemapCrawl(
            url=url, fetched_at=at, http_status=200, etag=etag, signature=etag, document_key="d", listing_key="l"
        )

    assert db.get_sitemap(ORIGIN, url) is None
    assert db.put_sitemap(ORIGIN, reading(T0, "one"))
    assert not db.put_sitemap(ORIGIN, reading(T0 - timedelta(seconds=5), "older"))
    assert db.put_sitemap(ORIGIN, reading(T0 + timedelta(seconds=5), "two"))
    assert db.get_sitemap(ORIGIN, url).etag == "two"
    assert [s.url for s in db.site_sitemaps(ORIGIN)] == [url]


def test_the_site_record_is_versioned_too(backend):
    db = backend.crawldb
    assert db.get_site(ORIGIN) is None
    first = SiteCrawl(site=ORIGIN, hosts={"example.com": HostTrust(score=0.5)}, version=1)
    assert db.put_site(first) and not db.put_site(first)
    assert db.put_site(first.model_copy(update={"version": 2, "hosts": {}}))
    assert not db.put_site(first.model_copy(update={"version": 2}))
    assert db.get_site(ORIGIN).version == 2


def test_recording_pages_writes_their_crawl_records_with_them_or_nothing(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    url = f"{SITE}sitemap-1.xml"
    pages = [page(n) for n in range(3)]
    writes = {p.url: crawl_record(p.url, job_id) for p in pages}
    # Another job of the site created page 2's record meanwhile: this batch's view of it is stale.
    backend.crawldb.put_urls(ORIGIN, [crawl_record(page(2).url, "job-other")])

    stale = backend.store.record_pages(job_id, url, pages, checkpoint=3, lease=lease(), site=ORIGIN, crawl=writes)

    assert stale.new == [] and stale.stale == [page(2).url]
    assert backend.store.get_page(job_id, page(0).url) is None  # nothing of the batch was written
    assert backend.crawldb.get_urls(ORIGIN, [page(0).url]) == {}
    assert backend.store.get_sitemap(job_id, url).pages_recorded == 0 and counts(backend, job_id).urls_total == 0

    other = backend.crawldb.get_urls(ORIGIN, [page(2).url])[page(2).url]
    writes[page(2).url] = crawl_record(page(2).url, job_id, prior=other)
    done = backend.store.record_pages(job_id, url, pages, checkpoint=3, lease=lease(), site=ORIGIN, crawl=writes)
    assert [p.url for p in done.new] == [page(n).url for n in range(3)] and done.stale == []
    records = backend.crawldb.get_urls(ORIGIN, [page(n).url for n in range(3)])
    assert records[page(2).url].version == 2 and records[page(2).url].last_listed_job == job_id
    assert counts(backend, job_id).urls_total == 3
    # Listed by a second sitemap of the same job: the first declaration stands, in both databases.
    later = {page(0).url: fetched(records[page(0).url], "x")}
    again = backend.store.record_pages(job_id, url, [page(0)], checkpoint=4, lease=lease(), site=ORIGIN, crawl=later)
    assert again.new == [] and backend.crawldb.get_urls(ORIGIN, [page(0).url])[page(0).url].signature is None


def test_settling_a_page_writes_its_crawl_record_with_it_or_nothing(backend):
    job_id = new_job(backend)
    claimed_sitemap(backend, job_id)
    knowns = [crawl_record(page(n).url, job_id) for n in range(2)]
    backend.store.record_pages(
        job_id, f"{SITE}sitemap-1.xml", [page(n, known=k) for n, k in enumerate(knowns)],
        checkpoint=2, lease=lease(), site=ORIGIN, crawl={k.url: k for k in knowns},
    )  # fmt: skip
    mine = backend.store.claim_pages(job_id, [page(0).url, page(1).url], lease("w"), now=NOW)
    outcomes = [
        PageOutcome(p.model_copy(update={"status": UrlStatus.COMPLETED}), crawl=fetched(p.known, f"sig-{i}"))
        for i, p in enumerate(mine)
    ]
    # Another job fetched page 1 first.
    backend.crawldb.put_urls(ORIGIN, [fetched(knowns[1], "theirs")])

    settled = backend.store.finish_pages(job_id, outcomes, lease("w"), site=ORIGIN)

    assert settled.applied == [mine[0].url] and settled.stale == [mine[1].url]
    assert backend.store.get_page(job_id, mine[1].url).status is UrlStatus.PROCESSING  # held back whole
    assert counts(backend, job_id).urls_succeeded == 1
    theirs = backend.crawldb.get_urls(ORIGIN, [mine[1].url])[mine[1].url]
    retried = PageOutcome(outcomes[1].record, crawl=fetched(theirs, "sig-1"))
    assert backend.store.finish_pages(job_id, [retried], lease("w"), site=ORIGIN).applied == [mine[1].url]
    final = backend.crawldb.get_urls(ORIGIN, [mine[1].url])[mine[1].url]
    assert (final.signature, final.changes, final.version) == ("sig-1", 1, 3)  # both fetches counted
    assert counts(backend, job_id).urls_succeeded == 2


def test_a_crawl_record_the_previous_version_stored_is_read_with_todays_names(backend):
    """Stored before the outputs took the data model's names (tests/model/test_stored_names.py): the
    sitemap's values and the HTTP Last-Modified header each read into their own field today."""
    from harvester.model.records import CrawlRow
    from tests.model.test_stored_names import OLD_CRAWL, expected_crawl

    db = backend.crawldb
    url = "https://example.com/page-1"
    stored = expected_crawl(version=1)
    assert db.put_urls(ORIGIN, [CrawlRow(url, OLD_CRAWL.replace('"version":2', '"version":1'))]) == []
    assert db.get_urls(ORIGIN, [url]) == {url: stored}
    assert list(db.site_urls(ORIGIN)) == [stored]
    # Written again by this version (its next listing), it keeps what it had.
    again = listed(
        stored,
        url=url,
        lastmod=stored.last_modified,
        changefreq="daily",
        priority=0.8,
        sitemap=f"{SITE}sitemap-1.xml",
        job_id="job-2",
        now=T0,
        schedule=SCHEDULE,
    )
    assert db.put_urls(ORIGIN, [again]) == []
    assert db.get_urls(ORIGIN, [url])[url] == again and again.http_last_modified == stored.http_last_modified


def test_a_pass_over_a_sites_records_resumes_after_any_page(backend):
    db = backend.crawldb
    urls = sorted(f"{SITE}page-{n}" for n in range(2300))  # (more than a local page of records: 1,000)
    for start in range(0, len(urls), 100):
        assert db.put_urls(ORIGIN, [crawl_record(u) for u in urls[start : start + 100]]) == []
    pages = list(db.url_pages(ORIGIN))
    assert len(pages) > 2
    seen = [r.url for page in pages for r in page.records]
    assert sorted(seen) == urls and len(seen) == len(set(seen))
    assert sorted(r.url for r in db.site_urls(ORIGIN)) == urls
    for n, one in enumerate(pages):  # (resumed after each page: exactly the records of the pages after it)
        after = [r.url for later in db.url_pages(ORIGIN, after=one.after) for r in later.records]
        assert after == [r.url for later in pages[n + 1 :] for r in later.records], n
    assert all(not p.records for p in db.url_pages("https://other.example"))
