"""Pages of a real page's size (tens of KB): their WARC records are written in threads, beside the event
loop, and each batch's records still come out whole and in place."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.request import urlopen

from harvester.adapters.local.runner import LocalHarvest, LocalRunner
from harvester.adapters.local.warc_files import FolderWarcStore
from harvester.archive.batch import WarcBatch
from harvester.fetch import FetchPolicy, parse_networks
from harvester.model.messages import JobRequest
from harvester.pipeline.page_archive import IN_THREAD_BYTES
from harvester.settings import EngineSettings
from tests.support import local_stores, stored_content

POLICY = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))


def crawl_recording_threads(state: Path, site: Any) -> tuple[Any, list[bool]]:
    """The crawl's outcome, and for each page's capture whether it was written off the loop's thread (the
    sitemaps' and robots.txt's, small, are left out)."""
    add = WarcBatch.add
    off_loop: list[bool] = []

    def recording(self: WarcBatch, key: str, capture: Any, **kwargs: Any) -> None:
        if key in site.page_urls:
            off_loop.append(threading.current_thread() is not threading.main_thread())
        add(self, key, capture, **kwargs)

    with mock.patch.object(WarcBatch, "add", recording), LocalHarvest.open(state) as harvest:
        runner = LocalRunner(harvest, policy=POLICY, settings=EngineSettings(), concurrency=8)
        request = JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)
        return asyncio.run(runner.crawl(request)), off_loop


def test_large_pages_are_archived_in_threads_whole_and_byte_for_byte(site_factory, tmp_path):
    site = site_factory(pages=40, broken=0, page_bytes=2 * IN_THREAD_BYTES)
    outcome, off_loop = crawl_recording_threads(tmp_path / "state", site)

    assert outcome.result.successful_processing == 40
    assert len(off_loop) == 40 and all(off_loop)
    for warc in sorted((tmp_path / "state" / "documents" / "warc").rglob("*.warc.gz")):
        check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(warc)], capture_output=True)
        assert check.returncode == 0, (warc, check.stdout, check.stderr)
    documents, warcs = local_stores(tmp_path / "state")
    with LocalHarvest.open(tmp_path / "state") as harvest:
        pages = list(harvest.store.pages(outcome.job.job_id))
    assert len(pages) == 40
    served = {url: urlopen(url).read() for url in site.page_urls}  # (the demo server sends files as they are)
    for page in pages:
        assert stored_content(documents, warcs, page) == served[page.url]


def test_small_pages_are_archived_on_the_event_loop(site_factory, tmp_path):
    """Below the size the hand-off to a thread costs more than the writing."""
    site = site_factory(pages=10, broken=0)
    outcome, off_loop = crawl_recording_threads(tmp_path / "state", site)
    assert outcome.result.successful_processing == 10
    assert len(off_loop) == 10 and not any(off_loop)


def test_batches_storing_their_captures_leave_their_slots_to_other_pages(site_factory, tmp_path):
    """A batch's pages count against their host's slots and the run's budget until their requests are over,
    not until their captures are stored and their outcomes settled: with 8 requests at once and a slow
    store, more than 8 pages are being stored at a time, while others are fetched. (Counted to the end of
    their batch, pages being stored filled the budget, and every request waited for a store to end.)"""
    site = site_factory(pages=48, broken=0)
    store = WarcBatch.store
    lock = threading.Lock()
    storing = [0]
    most = [0]

    def slow(self: WarcBatch, warcs: Any, job_id: str) -> Any:
        with lock:
            storing[0] += len(self)
            most[0] = max(most[0], storing[0])
        try:
            time.sleep(0.3)
            return store(self, warcs, job_id)
        finally:
            with lock:
                storing[0] -= len(self)

    with (
        mock.patch.object(WarcBatch, "store", slow),
        mock.patch.object(FolderWarcStore, "writes_inline", False),  # (stored in a thread, as on S3)
        LocalHarvest.open(tmp_path / "state") as harvest,
    ):
        runner = LocalRunner(harvest, policy=POLICY, settings=EngineSettings(), concurrency=8)
        outcome = asyncio.run(runner.crawl(JobRequest(site=f"{site.base_url}/", rate_limit_delay=0.0001)))
    assert outcome.result.successful_processing == 48
    assert most[0] > 8, most[0]  # pages being stored at once: more than the run's 8 requests
