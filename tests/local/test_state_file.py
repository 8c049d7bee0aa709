"""The state file across versions: an older file is upgraded in place, once, losing nothing; a newer one
is refused with a reason."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harvester.adapters.local.database import SCHEMA_VERSION, Checkpointer, StateDirError, connect
from harvester.adapters.local.state import SqliteStateStore
from harvester.crawldb.schedule import Schedule
from harvester.model.messages import JobRequest, SitemapOrigin
from harvester.model.records import JobRecord, SitemapRecord, SitemapURL, UrlStatus, body_of, url_key
from harvester.model.state import Lease, ListedBatch
from harvester.pipeline.listed_rows import first_listings
from harvester.sitemap import PageEntry

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SITE = "https://example.com/"
SITEMAP = f"{SITE}sitemap.xml"
#: The urls table as schema version 2 wrote it: one unique index over every record of a job.
V2_URLS = """
CREATE TABLE urls (
    job_id TEXT NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL, lease_token TEXT,
    lease_until REAL NOT NULL DEFAULT 0, body TEXT NOT NULL, PRIMARY KEY (job_id, key)
);
CREATE INDEX urls_by_status ON urls (job_id, status);
"""


def page(n: int, **fields: object) -> SitemapURL:
    return SitemapURL(url=f"{SITE}page-{n}.html", sitemap=SITEMAP, **fields)


def job_with_sitemap(conn: sqlite3.Connection) -> SqliteStateStore:
    """A store on ``conn`` holding job ``j`` and its one sitemap, ``SITEMAP``."""
    store = SqliteStateStore(conn)
    store.create_job(JobRecord(job_id="j", request=JobRequest(site=SITE), start_time=T0))
    store.add_sitemaps("j", [SitemapRecord(url=SITEMAP, origin=SitemapOrigin.REQUESTED, depth=1)])
    return store


def version_2_file(path: Path, pages: list[SitemapURL]) -> None:
    """A state file as version 2 left it: a job with a leased sitemap and URL records, open and final."""
    conn = connect(path)
    job_with_sitemap(conn)
    conn.executescript("DROP TABLE urls;" + V2_URLS)
    conn.executemany(
        "INSERT INTO urls (job_id, key, status, body) VALUES ('j', ?, ?, ?)",
        [(p.key, p.status.value, body_of(p)) for p in pages],
    )
    conn.execute("UPDATE meta SET value = '2' WHERE name = 'schema_version'")
    conn.close()


def test_a_version_2_file_is_upgraded_with_every_record_in_its_order(tmp_path):
    path = tmp_path / "harvest.db"
    pages = [page(3), page(1, status=UrlStatus.COMPLETED, fetch_reason="listed"), page(2)]
    version_2_file(path, pages)

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    table = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'urls'").fetchone()[0]
    assert "PRIMARY KEY" not in table
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'urls' AND type = 'index'")}
    assert indexes == {"urls_by_status", "urls_open"}
    store = SqliteStateStore(conn)
    assert list(store.pages("j")) == pages  # discovery order kept
    assert store.get_page("j", page(1).url) == pages[1]
    lease = Lease(token="t", until=T0.timestamp() + 60)
    claimed = store.claim_pages("j", [page(2).url, page(1).url], lease, now=T0.timestamp())
    assert [p.url for p in claimed] == [page(2).url]  # the open one; a final record is not claimable
    # The job's URLs stay its own: recording them again adds nothing.
    sitemap = store.claim_sitemap("j", f"{SITE}sitemap.xml", lease, now=T0.timestamp())
    assert sitemap is not None
    recorded = store.record_pages("j", sitemap.url, [page(1), page(4)], checkpoint=2, lease=lease)
    assert [p.url for p in recorded.new] == [page(4).url]
    conn.close()
    connect(path).close()  # opened again: nothing left to upgrade


def test_an_open_record_is_unique_per_job(tmp_path):
    conn = connect(tmp_path / "harvest.db")
    row = ("j", page(1).key, "pending", body_of(page(1)))
    conn.execute("INSERT INTO urls (job_id, key, status, body) VALUES (?, ?, ?, ?)", row)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO urls (job_id, key, status, body) VALUES (?, ?, ?, ?)", row)


def test_a_file_of_a_newer_version_is_refused_with_its_version(tmp_path):
    path = tmp_path / "harvest.db"
    connect(path).execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(StateDirError, match=rf"{path} was written by schema version 99; this Harvester reads"):
        connect(path)


def test_a_throwaway_store_counts_pages_by_key_and_forgets_a_batch_that_did_not_commit(tmp_path):
    """count_pages (a throwaway run's store keeps no page): new keys counted as succeeded, a key counted
    once across and within batches, and a batch refused (a lost lease) left new for its next attempt."""
    from harvester.adapters.local.runner import LocalHarvest
    from harvester.keyset import bits_of
    from harvester.ports import LeaseLost
    from tests.contract.conftest import Backend
    from tests.contract.test_state_store import claimed_sitemap, counts, lease, new_job, page, sitemap

    with LocalHarvest.open(tmp_path / "state", ephemeral=True) as harvest:
        backend = Backend(
            "local", harvest.store, harvest.queue, harvest.documents, lambda _: [], {}, harvest.crawldb, harvest.warcs
        )
        job_id = new_job(backend, fetch_pages=False)
        claimed_sitemap(backend, job_id)
        url = sitemap(1).url
        keys = [bits_of(page(n).key) for n in range(5)]
        with pytest.raises(LeaseLost):
            harvest.store.count_pages(job_id, url, keys[:3], checkpoint=3, lease=lease("intruder"))
        assert harvest.store.count_pages(job_id, url, keys[:3], checkpoint=3, lease=lease()) == [0, 1, 2]
        again = [keys[1], keys[3], keys[3], keys[4]]
        assert harvest.store.count_pages(job_id, url, again, checkpoint=7, lease=lease()) == [1, 3]
        c = counts(backend, job_id)
        assert (c.urls_total, c.urls_succeeded) == (5, 5)
        assert harvest.store.get_sitemap(job_id, url).pages_recorded == 7
        with pytest.raises(ValueError, match="count_pages"):
            harvest.store.record_pages(job_id, url, [page(9)], checkpoint=8, lease=lease())


#: The crawl records' table as schema version 3 wrote it: keyed by a hash of the URL.
V3_CRAWL_URLS = """
CREATE TABLE crawl_urls (
    site TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (site, key)
);
"""


def test_a_version_3_file_keeps_every_crawl_record_found_by_its_url(tmp_path):
    """Version 4 finds a site's crawl records by URL: a version 3 file's records (hash-keyed) are all there
    after the upgrade, readable, writable from the version they had, and listed in URL order."""
    from harvester.adapters.local.crawl import SqliteCrawlDatabase
    from harvester.model.crawl import CrawlRecord

    path = tmp_path / "harvest.db"
    records = [
        CrawlRecord(
            url=f"{SITE}page-{n}.html",
            fetch_interval=86400,
            next_fetch_time=T0,
            first_listed=T0,
            last_listed=T0,
            last_listed_job="j",
            version=n,
        )
        for n in (3, 1, 2)
    ]
    conn = connect(path)
    conn.executescript("DROP TABLE crawl_urls;" + V3_CRAWL_URLS)
    conn.executemany(
        "INSERT INTO crawl_urls (site, key, version, body) VALUES (?, ?, ?, ?)",
        [(SITE, url_key(r.url), r.version, body_of(r)) for r in records],
    )
    conn.execute("UPDATE meta SET value = '3' WHERE name = 'schema_version'")
    conn.close()

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert "url TEXT" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'crawl_urls'").fetchone()[0]
    crawldb = SqliteCrawlDatabase(conn)
    assert crawldb.get_urls(SITE, [r.url for r in records]) == {r.url: r for r in records}
    assert [r.url for r in crawldb.site_urls(SITE)] == sorted(r.url for r in records)
    assert crawldb.count_urls(SITE) == 3 and crawldb.find_url(records[0].url) == [(SITE, records[0])]
    moved = records[1].model_copy(update={"version": 2, "changes": 1})
    assert crawldb.put_urls(SITE, [moved, records[2].model_copy(update={"version": 2})]) == [records[2].url]
    assert crawldb.get_urls(SITE, [moved.url])[moved.url] == moved
    conn.close()
    connect(path).close()  # opened again: nothing left to upgrade


def test_a_version_4_jobs_final_records_stay_beside_the_batches_written_after_the_upgrade(tmp_path):
    """Version 5 keeps the records a listing makes final at once as one row per batch. A version 4 file's
    final records, one row each, are read with them after the upgrade: in the job's records, by URL, in
    its counts by status, and in its de-duplication (a URL listed again by a resumed job is not new)."""
    from tests.contract.test_state_store import lease

    path = tmp_path / "harvest.db"
    done = {"status": UrlStatus.COMPLETED, "finished_at": T0, "fetch_reason": "listed"}
    before = [page(0, **done), page(1, **done), page(2)]  # (page 2: open, to be fetched)
    conn = connect(path)
    store = job_with_sitemap(conn)
    sitemap_url = SITEMAP
    conn.executemany(
        "INSERT INTO urls (job_id, key, status, body) VALUES ('j', ?, ?, ?)",
        [(p.key, p.status.value, body_of(p)) for p in before],
    )
    conn.executescript("DROP TABLE url_batches;")
    conn.execute("UPDATE meta SET value = '4' WHERE name = 'schema_version'")
    conn.close()

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    store = SqliteStateStore(conn)
    assert store.claim_sitemap("j", sitemap_url, lease(), now=0) is not None
    after = [page(1, **done), page(3, **done), page(4, **done), page(5)]  # (page 1 again: not new)
    recorded = store.record_pages("j", sitemap_url, after, checkpoint=4, lease=lease())
    assert [p.url for p in recorded.new] == [p.url for p in after[1:]]
    assert conn.execute("SELECT count(*) FROM url_batches").fetchone()[0] == 1  # pages 3 and 4, one row

    everyone = [*before, *after[1:]]
    assert sorted(SitemapURL.model_validate_json(b).url for b in store.page_bodies("j")) == sorted(
        p.url for p in everyone
    )
    for p in everyone:
        assert store.get_page("j", p.url) == p
    assert store.get_page("j", f"{SITE}never.html") is None
    completed = {p.url for p in store.pages("j", status=UrlStatus.COMPLETED)}
    assert completed == {p.url for p in everyone if p.status is UrlStatus.COMPLETED}
    assert {p.url for p in store.pages("j", status=UrlStatus.PENDING)} == {page(2).url, page(5).url}
    conn.close()

    restarted = SqliteStateStore(connect(path))  # the job's keys read again, from both kinds of rows
    assert restarted.claim_sitemap("j", sitemap_url, lease("again"), now=10**10) is not None
    again = restarted.record_pages(
        "j", sitemap_url, [page(0, **done), page(3, **done), page(6, **done)], checkpoint=7, lease=lease("again")
    )
    assert [p.url for p in again.new] == [page(6).url]


def test_a_version_5_jobs_batches_are_read_one_by_one_beside_the_summarised_ones(tmp_path):
    """Version 6 keeps, beside a batch of records written straight as JSON, their feed lines and counts by
    kind. A version 5 file's batches have none: after the upgrade the job's end reads their records one by
    one, and the batches written since come whole, with their summary."""
    from tests.contract.test_state_store import lease

    path = tmp_path / "harvest.db"
    done = {"status": UrlStatus.COMPLETED, "finished_at": T0, "fetch_reason": "listed"}
    before = [page(0, **done), page(1, **done)]
    conn = connect(path)
    store = job_with_sitemap(conn)
    sitemap_url = SITEMAP
    conn.executescript(
        "DROP TABLE url_batches;"
        "CREATE TABLE url_batches (job_id TEXT NOT NULL, keys TEXT NOT NULL, bodies TEXT NOT NULL);"
    )
    conn.execute(
        "INSERT INTO url_batches VALUES ('j', ?, ?)",
        ("\n".join(p.key for p in before), "\n".join(body_of(p) for p in before)),
    )
    conn.execute("UPDATE meta SET value = '5' WHERE name = 'schema_version'")
    conn.close()

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    store = SqliteStateStore(conn)
    assert store.claim_sitemap("j", sitemap_url, lease(), now=0) is not None
    entries = [PageEntry(page(n).url, priority=0.25) for n in (1, 2, 3)]  # (page 1 again: not new)
    rows = first_listings([(e.url, e) for e in entries], sitemap=sitemap_url, job_id="j", now=T0, schedule=Schedule())
    recorded = store.record_pages("j", sitemap_url, [r[0] for r in rows if r], checkpoint=3, lease=lease())
    assert [p.url for p in recorded.new] == [page(2).url, page(3).url]

    items = list(store.job_records("j"))
    assert items[:2] == [body_of(p) for p in before]  # the version 5 batch: one by one
    assert len(items) == 3 and isinstance(items[2], ListedBatch)
    assert items[2].kinds == {"new": 2} and items[2].count == 2
    assert items[2].bodies.split("\n") == [r[0].body for r in rows[1:] if r]
    assert items[2].feed.split(b"\n") == [r[0].feed for r in rows[1:] if r]
    assert sorted(SitemapURL.model_validate_json(b).url for b in store.page_bodies("j")) == [
        page(n).url for n in range(4)
    ]
    assert store.get_page("j", page(3).url) == SitemapURL.model_validate_json(rows[2][0].body)  # type: ignore[index]
    conn.close()


def test_the_wal_is_copied_into_the_state_file_by_a_thread_of_its_own(tmp_path):
    """While a crawl writes, its WAL is checkpointed by the Checkpointer's own connection and thread (the
    writer's own checkpoints are off here): the state file grows to hold what was committed, and the
    thread is gone when the block ends."""
    path = tmp_path / "harvest.db"
    conn = connect(path)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE filler (body TEXT NOT NULL)")
    with conn:
        conn.executemany("INSERT INTO filler VALUES (?)", [("x" * 1000,) for _ in range(2000)])
    before = path.stat().st_size
    assert before < 1_000_000  # (committed, in the WAL only)
    checkpointer = Checkpointer(path, every=0.01)
    with checkpointer:
        deadline = time.monotonic() + 10
        while path.stat().st_size <= before and time.monotonic() < deadline:
            time.sleep(0.01)
    assert path.stat().st_size > 2_000_000
    assert not checkpointer._thread.is_alive()
    assert conn.execute("SELECT count(*) FROM filler").fetchone()[0] == 2000
    conn.close()


def test_records_final_at_once_keep_the_order_listed_whatever_made_them(tmp_path):
    """A batch that mixes records built as models with records written straight as JSON is kept as runs
    of one kind, a row each, in the order listed: the job's records (after the open ones) and its end see
    them in that order."""
    from tests.contract.test_state_store import lease

    store = job_with_sitemap(connect(tmp_path / "harvest.db"))
    sitemap_url = SITEMAP
    assert store.claim_sitemap("j", sitemap_url, lease(), now=0) is not None
    done = {"status": UrlStatus.COMPLETED, "finished_at": T0, "fetch_reason": "listed"}
    made = first_listings(
        [(page(n).url, PageEntry(page(n).url)) for n in (1, 3, 4)],
        sitemap=sitemap_url,
        job_id="j",
        now=T0,
        schedule=Schedule(),
    )
    rows = [r[0] for r in made if r is not None]
    batch = [page(0, **done), rows[0], page(2, **done), rows[1], rows[2], page(5)]  # (page 5: open)
    store.record_pages("j", sitemap_url, batch, checkpoint=6, lease=lease())
    listed = [SitemapURL.model_validate_json(b).url for b in store.page_bodies("j")]
    assert listed == [page(n).url for n in (5, 0, 1, 2, 3, 4)]
    items = list(store.job_records("j"))
    assert [type(i).__name__ for i in items] == ["str", "str", "ListedBatch", "str", "ListedBatch"]
    assert [i.count for i in items if isinstance(i, ListedBatch)] == [1, 2]
    store.conn.close()


def test_a_version_7_queue_gains_the_rank_and_its_messages_keep_their_order(tmp_path):
    """Version 8 ranks a message (its page task's rank): a version 7 file's queued messages are kept, at
    rank 0 in the order they were sent, and the pages sent since come highest rank first."""
    from harvester.adapters.local.queue import SqliteTaskQueue
    from harvester.model.messages import PageTask

    path = tmp_path / "harvest.db"
    conn = _with_old_messages(path, "")
    old = [PageTask(job_id="j", url=f"{SITE}old-{n}") for n in range(2)]
    conn.executemany(
        "INSERT INTO messages (queue, job_id, body, available_at) VALUES ('pages', 'j', ?, 0)",
        [(t.model_dump_json(),) for t in old],
    )
    conn.execute("UPDATE meta SET value = '7' WHERE name = 'schema_version'")
    conn.close()

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    queue = SqliteTaskQueue(conn)
    queue.push([PageTask(job_id="j", url=f"{SITE}{name}", rank=rank) for name, rank in [("low", 0.5), ("high", 1.5)]])
    received = []
    while (message := queue.pop()) is not None:
        received.append(PageTask.model_validate_json(message.body).url.removeprefix(SITE))
        queue.ack(message)
    assert received == ["high", "low", "old-0", "old-1"]


def test_a_version_8_queue_gains_the_host_and_its_messages_are_still_handed_out(tmp_path):
    """Version 9 keeps the host a message goes to (for the dispatcher): a version 8 file's queued pages
    have none and are served as one host of their own, beside the pages sent since."""
    from harvester.adapters.local.dispatch import Dispatcher
    from harvester.adapters.local.queue import SqliteTaskQueue
    from harvester.model.messages import PageTask

    path = tmp_path / "harvest.db"
    conn = _with_old_messages(path, ", priority REAL NOT NULL DEFAULT 0")
    conn.execute(
        "INSERT INTO messages (queue, job_id, body, available_at, priority) VALUES ('pages', 'j', ?, 0, 0.5)",
        (PageTask(job_id="j", url=f"{SITE}old").model_dump_json(),),
    )
    conn.execute("UPDATE meta SET value = '8' WHERE name = 'schema_version'")
    conn.close()

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    queue = SqliteTaskQueue(conn)
    queue.push([PageTask(job_id="j", url=f"{SITE}new")])
    dispatcher = Dispatcher(queue, ["j"], per_host=8)
    received = {
        (m.host, PageTask.model_validate_json(m.body).url.removeprefix(SITE)) for m in iter(dispatcher.take, None)
    }
    assert received == {("", "old"), ("example.com", "new")}


def _with_old_messages(path: Path, columns: str) -> sqlite3.Connection:
    """A state file whose queue table is an older version's: the first columns, and ``columns``."""
    conn = connect(path)
    conn.executescript(
        "DROP TABLE messages;"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, job_id TEXT NOT NULL,"
        " body TEXT NOT NULL, available_at REAL NOT NULL, in_flight INTEGER NOT NULL DEFAULT 0,"
        f" receive_count INTEGER NOT NULL DEFAULT 0{columns});"
    )
    return conn


def test_a_version_9_file_gets_the_excluded_counter_and_keeps_its_counts(tmp_path):
    """Version 10 counts the URLs a job did not fetch by rule apart: a version 9 file's counters table has
    no such column; it is added (0) and the counts written before stay."""
    path = tmp_path / "harvest.db"
    conn = connect(path)
    store = job_with_sitemap(conn)
    before = store.counts("j")
    conn.execute("ALTER TABLE counters DROP COLUMN urls_excluded")
    conn.execute("UPDATE meta SET value = '9' WHERE name = 'schema_version'")
    conn.close()

    conn = connect(path)
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    counts = SqliteStateStore(conn).counts("j")
    assert counts == before and counts.sitemaps_total == 1 and counts.urls_excluded == 0
    conn.close()


def test_opening_a_current_file_writes_nothing(tmp_path):
    """A file of this version is opened without a write (no commit to sync, no WAL to checkpoint at close:
    every `harvest` command opens the state file); a new file gets its version."""
    path = tmp_path / "state.db"
    first = connect(path)
    assert first.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    first.close()
    again = connect(path)
    assert again.total_changes == 0
    again.close()
