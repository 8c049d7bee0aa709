"""A sitemap reading in steps (``sitemap_step_urls``, ``sitemap_step_seconds``): each delivery records a bounded
share of the sitemap's pages, then gives the sitemap back with its task sent again; the first step keeps the
document it read (``StepDocument``) and the next deliveries replay it from the checkpoint. The steps together
list what one reading lists: every page once, its task sent once, the counts exact, the reading one attempt
and one request, whatever the site does to the sitemap meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harvester.adapters.local.runner import LocalHarvest
from harvester.demo.live import LiveSite
from harvester.fetch import Fetcher, FetchPolicy, parse_networks
from harvester.model.messages import JobRequest, PageTask, SitemapOrigin, SitemapTask
from harvester.model.records import SitemapRecord, SitemapStatus
from harvester.pipeline.sitemap_step import step_document
from harvester.settings import EngineSettings
from tests.engine.test_listing_batches import CountingStore

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))
BATCH = 49
PAGES = 600


class SentQueue:
    """The task queue, with every message pushed (and its delay) noted."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.sent: list[tuple[Any, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def push(self, messages: Any, *, delay_seconds: Any = 0) -> None:
        self.sent += [(message, delay_seconds) for message in messages]
        self._inner.push(messages, delay_seconds=delay_seconds)


def read_in_steps(
    site: Any,
    state: Path,
    settings: EngineSettings,
    *,
    fetch_pages: bool,
    between: Callable[[int, LocalHarvest], None] = lambda delivery, harvest: None,
) -> tuple[SitemapRecord, list[list[int]], SentQueue, list[str]]:
    """The urlset read by deliveries of its task until one finishes it (``between`` called after each
    delivery that did not, with the delivery's number and the harvest): the finished record, the batch sizes
    each delivery recorded, the queue's sends, and the job's page URLs."""
    urlset = site.sitemap_urls[1]
    base = site.url("") if isinstance(site, LiveSite) else site.base_url
    request = JobRequest(site=f"{base}/", sitemaps=(urlset,), fetch_pages=fetch_pages)
    task = SitemapTask(job_id="j", url=urlset, origin=SitemapOrigin.REQUESTED, depth=1)
    deliveries: list[list[int]] = []

    async def scenario() -> tuple[SitemapRecord, SentQueue, list[str]]:
        with LocalHarvest.open(state, memory_queue=True) as harvest:
            async with Fetcher(POLICY) as fetcher:
                engine = harvest.engine(fetcher, settings)
                counting = CountingStore(harvest.store)
                engine.store = counting  # type: ignore[assignment]
                queue = SentQueue(harvest.queue)
                engine.queue = queue  # type: ignore[assignment]
                engine.start_job(request, job_id="j")
                for _ in range(100):
                    counting.sizes = []
                    done = await engine.process_sitemap(task)
                    deliveries.append(counting.sizes)
                    if done is not None:
                        urls = [page.url for page in harvest.store.pages("j")]
                        assert harvest.store.snapshot("j").counts == harvest.store.recount("j")
                        return done, queue, urls
                    record = harvest.store.get_sitemap("j", urlset)
                    assert record is not None and record.status is SitemapStatus.PENDING
                    assert record.error_message is None and record.attempts == 0  # (a step: no attempt)
                    assert record.pages_enqueued == record.pages_recorded
                    between(len(deliveries), harvest)
                raise AssertionError("the reading never ended")

    done, queue, urls = asyncio.run(scenario())
    return done, deliveries, queue, urls


@pytest.mark.parametrize("fetch_pages", [False, True])
def test_a_reading_in_steps_of_urls_lists_what_one_reading_lists(site_factory, tmp_path, fetch_pages):
    site = site_factory(pages=PAGES, broken=0, sitemaps=1, gzip_last=True)
    whole, deliveries, _, urls = read_in_steps(
        site, tmp_path / "one", EngineSettings(record_batch=BATCH), fetch_pages=fetch_pages
    )
    assert len(deliveries) == 1 and whole.attempts == 1
    step = 100
    stepped, deliveries, queue, stepped_urls = read_in_steps(
        site, tmp_path / "steps", EngineSettings(record_batch=BATCH, sitemap_step_urls=step), fetch_pages=fetch_pages
    )
    # Each delivery but the last recorded its step's URLs (whole batches: at least the step, less than a
    # batch more), then stopped; the last recorded the rest.
    # (600 pages: three steps of 147, and the last 159, whose remainder its last write takes along)
    assert len(deliveries) == 4 and deliveries[-1] == [BATCH, BATCH, PAGES - 3 * 3 * BATCH - 2 * BATCH]
    for sizes in deliveries[:-1]:
        assert sizes == [BATCH] * 3 and step <= sum(sizes) < step + BATCH
    assert sum(map(sum, deliveries)) == PAGES and stepped.pages_recorded == PAGES
    assert stepped_urls == urls and len(set(urls)) == PAGES
    assert stepped.status is SitemapStatus.COMPLETED and stepped.error_message is None
    assert stepped.attempts == 1 and not stepped.restarted  # (a reading in steps is one attempt)
    assert stepped.step_document is None  # (read: the note goes with the reading)
    assert (stepped.pages_recorded, stepped.pages_new) == (PAGES, PAGES)
    sitemap_tasks = [(m, delay) for m, delay in queue.sent if isinstance(m, SitemapTask)]
    assert len(sitemap_tasks) == len(deliveries)  # (the job's start sent the first, each step the next)
    assert all(delay == 0 for _, delay in sitemap_tasks)
    page_tasks = Counter(m.url for m, _ in queue.sent if isinstance(m, PageTask))
    if fetch_pages:  # (every page's task sent once: none of a step's batch held back is sent by it)
        assert sorted(page_tasks) == sorted(urls) and set(page_tasks.values()) == {1}
    else:
        assert not page_tasks


def test_a_reading_in_steps_of_time_records_a_batch_a_step(site_factory, tmp_path):
    site = site_factory(pages=5 * BATCH, broken=0, sitemaps=1, gzip_last=False)
    settings = EngineSettings(record_batch=BATCH, sitemap_step_seconds=1e-9)
    done, deliveries, _, urls = read_in_steps(site, tmp_path / "s", settings, fetch_pages=False)
    # (a step's first batch is recorded once a batch more is held behind it: then the step is spent; the
    # last delivery holds the last batch alone)
    assert deliveries == [[BATCH]] * 5
    assert done.attempts == 1 and len(set(urls)) == 5 * BATCH


def test_a_throwaway_run_is_read_in_one_step(site_factory, tmp_path):
    """A discovery run (``harvest sitemaps``) has no deliveries to go on in: its readings are not bounded."""
    site = site_factory(pages=4 * BATCH, broken=0, sitemaps=1, gzip_last=False)
    urlset = site.sitemap_urls[1]
    request = JobRequest(site=f"{site.base_url}/", sitemaps=(urlset,), fetch_pages=False)
    task = SitemapTask(job_id="j", url=urlset, origin=SitemapOrigin.REQUESTED, depth=1)

    async def scenario() -> SitemapRecord | None:
        with LocalHarvest.open(tmp_path / "s", ephemeral=True) as harvest:
            async with Fetcher(POLICY) as fetcher:
                engine = harvest.engine(fetcher, EngineSettings(record_batch=BATCH, sitemap_step_urls=BATCH))
                engine.start_job(request, job_id="j")
                return await engine.process_sitemap(task)

    done = asyncio.run(scenario())
    assert done is not None and done.status is SitemapStatus.COMPLETED and done.pages_new == 4 * BATCH


def test_a_sitemap_changed_between_steps_is_read_as_the_first_step_downloaded_it():
    """The site rewrites the sitemap between two steps (an entry before the checkpoint gone, one added): the
    later steps replay the copy the first step kept, so the reading lists the version it began, in steps of a
    batch, from one request, and nothing starts over; the stored reading is that version's."""
    with LiveSite(pages=8 * BATCH, sitemaps=1).serving() as site, tempfile.TemporaryDirectory() as state:
        first = [site.url(path) for path in site.page_paths()]
        noted: list[Any] = []

        def change(delivery: int, harvest: LocalHarvest) -> None:
            record = harvest.store.get_sitemap("j", site.sitemap_urls[1])
            noted.append(record.step_document if record is not None else None)
            if delivery == 2:
                site.unlist(site.page_paths()[0])
                site.add("/pages/added.html")

        settings = EngineSettings(record_batch=BATCH, sitemap_step_urls=BATCH)
        done, deliveries, _, urls = read_in_steps(site, Path(state), settings, fetch_pages=False, between=change)
        readings = [hit for hit in site.hits if hit.path.startswith("/sitemaps/")]
        with LocalHarvest.open(Path(state)) as harvest:
            stored = harvest.crawldb.get_sitemap(JobRequest(site=site.url("/")).origin, site.sitemap_urls[1])
    assert all(sizes == [BATCH] for sizes in deliveries[:-1]) and sum(map(sum, deliveries)) == 8 * BATCH
    assert len(readings) == 1  # (the later steps asked the site nothing)
    assert done.status is SitemapStatus.COMPLETED and not done.restarted and done.attempts == 1
    assert sorted(urls) == sorted(first) and done.pages_new == 8 * BATCH
    assert noted[0] is not None and all(note == noted[0] for note in noted)  # (one document, noted once)
    assert stored is not None and stored.document_key == noted[0].key == done.document_key
    assert stored.signature == noted[0].signature and stored.entries == 8 * BATCH


def forget_the_noted_copy(harvest: LocalHarvest, url: str) -> None:
    """The copy the reading's first step kept, deleted (an operator's clean-up, a lifecycle rule)."""
    record = harvest.store.get_sitemap("j", url)
    assert record is not None and record.step_document is not None
    harvest.documents.delete(record.step_document.key)


def test_a_reading_in_steps_whose_noted_copy_is_gone_downloads_again_and_starts_over_if_it_changed():
    """The copy the first step kept is gone and the sitemap lost an entry before the checkpoint: the next
    delivery downloads it, finds other URLs before the checkpoint and starts over; it does not stop before it
    has passed the checkpoint stored before (a delivery resumed there would start over again, for ever), then
    goes on in steps, on the copy it kept."""
    with LiveSite(pages=8 * BATCH, sitemaps=1).serving() as site, tempfile.TemporaryDirectory() as state:

        def change(delivery: int, harvest: LocalHarvest) -> None:
            if delivery == 2:
                forget_the_noted_copy(harvest, site.sitemap_urls[1])
                site.unlist(site.page_paths()[0])

        settings = EngineSettings(record_batch=BATCH, sitemap_step_urls=BATCH)
        done, deliveries, _, urls = read_in_steps(site, Path(state), settings, fetch_pages=False, between=change)
        readings = [hit for hit in site.hits if hit.path.startswith("/sitemaps/")]
    # (steps of a batch; the third starts over, records the two before again and one more: it stops only past
    # the checkpoint stored before; then the rest, a batch a step)
    assert deliveries[:3] == [[BATCH], [BATCH], [BATCH, BATCH, BATCH]]
    assert all(sizes == [BATCH] for sizes in deliveries[3:-1]) and sum(map(sum, deliveries[2:])) == 8 * BATCH - 1
    assert done.status is SitemapStatus.COMPLETED and done.restarted and done.attempts == 1
    assert len(urls) == 8 * BATCH and done.pages_new == 8 * BATCH  # (the page unlisted was listed before)
    # (the first step's download; the third's, and its download again once it found the sitemap changed)
    assert len(readings) == 3


def test_a_reading_in_steps_of_a_sitemap_changed_before_every_step_gets_further_at_each():
    """The noted copy gone and an entry before the checkpoint gone before every step (a "latest first"
    sitemap rewritten meanwhile): each delivery starts over and must get past the stored checkpoint, not stop
    on it, or the reading never ends while the sitemap keeps changing."""
    with LiveSite(pages=8 * BATCH, sitemaps=1).serving() as site, tempfile.TemporaryDirectory() as state:

        def change(delivery: int, harvest: LocalHarvest) -> None:
            if 2 <= delivery < 40:
                forget_the_noted_copy(harvest, site.sitemap_urls[1])
                site.unlist(site.page_paths()[0])

        settings = EngineSettings(record_batch=BATCH, sitemap_step_urls=BATCH)
        done, deliveries, _, _ = read_in_steps(site, Path(state), settings, fetch_pages=False, between=change)
    assert done.status is SitemapStatus.COMPLETED and done.restarted
    assert len(deliveries) <= 8  # (a batch further at least at each delivery)


def test_a_delivery_that_reads_another_document_than_the_note_lets_the_note_go(monkeypatch):
    """The first step keeps copy A. The second cannot read it (a transient read error), downloads the sitemap,
    now B, starts over and moves the checkpoint on B's bytes, but keeps no copy of B (its body broke off after
    the pause): the record must not name A any more, or the third would replay A against a checkpoint made
    from B (and start over again, relisting everything in one invocation)."""
    with LiveSite(pages=8 * BATCH, sitemaps=1).serving() as site, tempfile.TemporaryDirectory() as state:
        urlset = site.sitemap_urls[1]
        seen: list[Any] = []
        kept = step_document.downloaded
        downloads = 0

        async def first_only(*args: Any, **kwargs: Any) -> Any:
            nonlocal downloads
            downloads += 1
            return await kept(*args, **kwargs) if downloads == 1 else None

        monkeypatch.setattr(step_document, "downloaded", first_only)

        def between(delivery: int, harvest: LocalHarvest) -> None:
            record = harvest.store.get_sitemap("j", urlset)
            assert record is not None
            seen.append((record.step_document, record.prefix_bytes, record.prefix_digest))
            if delivery == 1:
                assert record.step_document is not None
                reader, noted = harvest.documents.reader, record.step_document.key
                failed: list[str] = []

                @contextlib.contextmanager
                def flaky(key: str) -> Iterator[Any]:  # (a read timed out, once)
                    if key == noted and not failed:
                        failed.append(key)
                        raise OSError("read timed out")
                    with reader(key) as file:
                        yield file

                harvest.documents.reader = flaky  # type: ignore[method-assign]
                site.unlist(site.page_paths()[0])
                site.add("/pages/added.html")

        settings = EngineSettings(record_batch=BATCH, sitemap_step_urls=BATCH)
        done, deliveries, _, urls = read_in_steps(site, Path(state), settings, fetch_pages=False, between=between)
    (first, *prefix1), (second, *prefix2) = seen[0], seen[1]
    assert first is not None and prefix2 != prefix1  # (the second delivery's checkpoint: B's bytes)
    assert second is None  # (A no longer matches the checkpoint)
    # (the third downloads B again and goes on from its checkpoint: no second start over)
    assert all(sum(sizes) < 2 * BATCH for sizes in deliveries[2:])
    assert done.status is SitemapStatus.COMPLETED and done.restarted and len(set(urls)) == len(urls)
