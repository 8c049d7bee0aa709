"""The records pass of a job's end split into pieces at any page counts what one pass counts: the exclusions'
first ``REASONS_KEPT`` reasons (and ``other`` for the rest) as one tally would see them, the page errors in
order up to the cap (the rest omitted), the counts, the lines."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from harvester.adapters.local.documents import FolderDocumentStore
from harvester.model.messages import JobRequest
from harvester.model.records import JobRecord
from harvester.pipeline.records_pass import REASONS_KEPT, RecordsPass
from harvester.settings import EngineSettings

SITE = "https://example.com"
JOB = JobRecord(job_id="job-1", request=JobRequest(site=f"{SITE}/"), start_time=datetime(2026, 11, 1, tzinfo=UTC))


def body(n: int, status: str, reason: str = "") -> str:
    record = {"url": f"{SITE}/{n}.html", "status": status, "change": "new", "error_message": reason or None}
    return orjson.dumps({k: v for k, v in record.items() if v is not None}).decode()


#: 62 records: one excluded for "a", then 55 distinct reasons, then "a" again; 5 failures among them.
RECORDS = [
    body(0, "excluded", "a"),
    *(body(n, "excluded", f"r{n}") for n in range(1, 56)),
    body(56, "excluded", "a"),
    *(body(n, "failed", f"HTTP {n}") for n in range(57, 62)),
]


def counted(tmp_path: Path, cuts: list[int]) -> tuple[dict, list, int, int, bytes]:
    """The records read in pages cut at ``cuts``, each page but the last a step stored as a piece."""
    ctx = SimpleNamespace(documents=FolderDocumentStore(tmp_path), settings=EngineSettings(max_error_details=3))
    stems: list[str] = []
    bounds = [0, *cuts, len(RECORDS)]
    for n, (start, end) in enumerate(itertools.pairwise(bounds)):
        with RecordsPass(ctx, JOB, extras={}, maker=None) as records:  # type: ignore[arg-type]
            records.carry_on(stems)
            records.read(RECORDS[start:end])
            if end < len(RECORDS):
                records.store_piece(f"steps/job-1/piece-{n}")
                stems.append(f"steps/job-1/piece-{n}")
                continue
            records.flush()
            records.take_in(stems)
            records.join(
                "urls.jsonl",
                "records.jsonl",
                records.records,
                stems,
                f"steps/job-1/piece-{n}",
                content_type="application/x-ndjson",
            )
            c = records.counts
            lines = ctx.documents.get("urls.jsonl")
            return records.exclusions.counts, [e.url for e in c.errors], c.omitted, c.excluded + c.failed, lines
    raise AssertionError("no last step")


@pytest.mark.parametrize("cuts", [[1], [30], [56], [57, 59], list(range(1, 62))], ids=str)
def test_a_records_pass_in_pieces_counts_what_one_pass_counts(tmp_path, cuts):
    whole = counted(tmp_path / "one", [])
    assert whole[0]["a"] == 2 and len(whole[0]) == REASONS_KEPT + 1 and whole[0]["other"] == 6
    assert whole[1:4] == ([f"{SITE}/{n}.html" for n in (57, 58, 59)], 2, 62)
    assert counted(tmp_path / "cut", cuts) == whole
