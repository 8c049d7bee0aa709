"""The WARC output on AWS: template.yaml created in moto, the real handlers driven as Lambda's poller drives
them, a live site on 127.0.0.1 that sends one page gzipped and answers one with 404. Every WARC object
passes ``warcio check`` and ``warcio index`` (its CDXJ object names its captures), the job's end writes
index (`jobs/<job>/index/`) to S3, whose counts DuckDB reads as the job's, and each capture it names reads back by a
ranged GET as the server sent it, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.stack import submit_job
from harvester.archive.results import index_key
from harvester.demo.live import LiveSite
from harvester.model.messages import JobRequest
from tests.archive.checks import check_index_counts, check_read_back, check_warc_file, stored_index, warcio

GZIP_PAGE = "/pages/gz.html"


def crawl(site: LiveSite, stack: Any, poller: Any, **options: Any) -> dict[str, Any]:
    job_id = submit_job(
        JobRequest(site=site.url("/"), rate_limit_delay=0.0001, **options), stack.outputs["JobQueueUrl"]
    )
    stats = poller.drain(max_rounds=3000)
    assert stats.failed_invocations == 0, [f.traceback for f in stats.failures]
    return json.loads(
        AwsAdapters.from_env(stack.function("PageFunction").environment).documents.get(f"jobs/{job_id}/result.json")
    )


def test_warc_objects_and_the_parquet_index_on_s3(deployed_stack, tmp_path):
    stack, poller = deployed_stack
    adapters = AwsAdapters.from_env(stack.function("PageFunction").environment)
    documents, warcs = adapters.documents, adapters.warcs
    site = LiveSite(pages=6)
    site.add(GZIP_PAGE, gzip_body=True)
    with site.serving():
        site.fail("/pages/2.html", 404)
        first = crawl(site, stack, poller)
        second = crawl(site, stack, poller, refetch="all")

    bucket = stack.outputs["DocumentBucketName"]
    for result, kind, captures in ((first, "response", 7), (second, "revisit", 7)):  # (and the 404's answer)
        job_id = result["job_id"]
        assert result["url_index"] == f"s3://{bucket}/jobs/{job_id}/index/"
        files = list(warcs.files(job_id))
        assert files and all(f.startswith(f"warc/{job_id}/") for f in files)
        found = 0
        for key in files:
            local = tmp_path / Path(key).name
            local.write_bytes(documents.get(key))
            found += check_warc_file(local, documents.get(key + ".cdxj"))
        assert found == captures

        parquet = stored_index(documents, job_id, tmp_path / job_id)
        assert [p.name for p in parquet.iterdir()] == ["00000.parquet"]  # (an end in one step: one file)
        records = [json.loads(line) for line in documents.get(f"jobs/{job_id}/urls.jsonl").splitlines()]
        rows = check_index_counts(parquet, result, records)
        assert result["total_urls"] == 7 and result["failed_processing"] == 1
        assert {r["warc_record_type"] for r in rows if r["status"] == "completed"} == {kind}
        if kind == "response":
            assert check_read_back(rows, warcs.read, site) == captures  # (ranged GETs)
            gz = next(r for r in rows if r["url"] == site.url(GZIP_PAGE))
            assert gz["content_mime_type"] == "text/html" and gz["warc_filename"] in files


def test_harvest_export_stack_writes_the_jobs_warc_index_and_records_as_one_file_each(deployed_stack, tmp_path):
    """`harvest export JOB --stack`: the job's WARC objects as one file that `warcio check` passes, holding
    every capture; its index as the job's end wrote it; its records as `report` would print them."""
    from harvester.cli import main

    stack, poller = deployed_stack
    site = LiveSite(pages=5)
    with site.serving():
        site.fail("/pages/2.html", 404)
        result = crawl(site, stack, poller)
    job_id, name = result["job_id"], stack.stack_name

    warc, parquet, records = tmp_path / "job.warc.gz", tmp_path / "job.parquet", tmp_path / "urls.jsonl"
    assert main(["export", job_id, "--stack", name, "--format", "warc", "--output", str(warc)]) == 0
    assert main(["export", job_id, "--stack", name, "--format", "parquet", "--output", str(parquet)]) == 0
    assert main(["export", job_id, "--stack", name, "--format", "jsonl", "--output", str(records)]) == 0

    documents = AwsAdapters.from_env(stack.function("PageFunction").environment).documents
    objects = sorted(key for key in documents.keys(f"warc/{job_id}/") if key.endswith(".warc.gz"))
    assert len(objects) > 1 and warc.read_bytes() == b"".join(documents.get(key) for key in objects)
    checked = warcio("check", warc)
    assert checked.returncode == 0, checked.stdout
    assert parquet.read_bytes() == documents.get(index_key(job_id))
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted(r["url"] for r in lines) == sorted(site.url(p) for p in site.page_paths())
    assert check_index_counts(parquet, result, lines)
    assert main(["export", "job-none", "--stack", name, "--format", "warc"]) == 2
