"""The job's end and its Parquet URL index: records kept a batch at a time (a job that fetches nothing) are
rows like any other, and an index that cannot be built holds back neither the records nor the result."""

from __future__ import annotations

import logging
from pathlib import Path

from harvester.adapters.local.runner import LocalHarvest
from harvester.archive.results import index_key
from harvester.demo.live import LiveSite
from harvester.pipeline import job_index
from harvester.pipeline.completion import write_result
from harvester.pipeline.context import StepContext
from tests.archive.checks import check_index_counts, index_rows
from tests.support import LOOPBACK, harvest_json, jsonl


def context(local: LocalHarvest) -> StepContext:
    return StepContext(
        store=local.store,
        queue=local.queue,
        documents=local.documents,
        fetcher=None,  # type: ignore[arg-type]  # the end fetches nothing
        crawldb=local.crawldb,
    )


def test_a_listing_only_job_has_a_row_per_url_and_a_failed_index_holds_back_no_result(tmp_path, monkeypatch, caplog):
    state = tmp_path / "state"
    with LiveSite(pages=30).serving() as site:
        result = harvest_json(
            "crawl", site.url("/"), "--state-dir", str(state), "--allow-network", LOOPBACK, "--no-pages"
        )
    records = jsonl(Path(str(result["processed_urls"])))
    rows = check_index_counts(Path(str(result["url_index"])), result, records)
    assert len(rows) == 30 and all(r["fetch_status"] is None and r["warc_filename"] is None for r in rows)
    assert {r["crawl_state"] for r in rows} == {"unfetched"} and {r["change"] for r in rows} == {"new"}

    def broken(*args: object, **kwargs: object) -> int:
        raise OSError("No space left on device")

    monkeypatch.setattr(job_index, "build_index", broken)
    with LocalHarvest.open(state) as local:
        local.documents.delete_folder(f"jobs/{result['job_id']}")
        with caplog.at_level(logging.ERROR, logger="harvester.pipeline.job_index"):
            again = write_result(context(local), str(result["job_id"]))
        assert again.url_index is None and again.total_urls == 30
        assert local.documents.exists(f"jobs/{result['job_id']}/result.json")
        assert not local.documents.exists(index_key(str(result["job_id"])))
    assert "index file of the job could not be built" in caplog.text and "No space left on device" in caplog.text
    assert len(jsonl(Path(str(result["processed_urls"])))) == 30


def test_a_job_with_no_url_has_an_empty_index(tmp_path):
    state = tmp_path / "state"
    with LiveSite(pages=0).serving() as site:
        result = harvest_json("crawl", site.url("/"), "--state-dir", str(state), "--allow-network", LOOPBACK)
    assert result["total_urls"] == 0 and index_rows(Path(str(result["url_index"]))) == []
