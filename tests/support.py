"""Helpers for tests that drive the real `harvest` command."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.0/8"


def sigint_as_in_a_terminal() -> None:
    """A ``preexec_fn`` for a `harvest` run a test interrupts with SIGINT (Ctrl-C): a test run started in the
    background (cmd &) has SIGINT ignored, and an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def harvest(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the real `harvest` command (as installed: ``python -m harvester``) and captures its output."""
    return subprocess.run(
        [sys.executable, "-m", "harvester", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def urls_processed(db: Path) -> int:
    """The URLs a state file's jobs have settled, read while a crawl writes it (0 while it cannot be read)."""
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            row = conn.execute("SELECT SUM(urls_succeeded + urls_failed) FROM counters").fetchone()
    except sqlite3.Error:
        return 0
    return (row[0] or 0) if row else 0


def killed_part_way(args: tuple[str, ...], db: Path, at: int) -> None:
    """Starts ``harvest ARGS`` (a crawl) and kills it (SIGKILL) once ``at`` more URLs are settled in ``db``."""
    start = urls_processed(db) if db.exists() else 0
    process = subprocess.Popen([sys.executable, "-m", "harvester", *args], stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while urls_processed(db) < start + at and time.monotonic() < deadline:
        assert process.poll() is None, "the crawl ended before it could be killed"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()


def harvest_json(*args: str, **kwargs: object) -> dict[str, object]:
    result = harvest(*args, "--json", **kwargs)  # type: ignore[arg-type]
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


#: Crawl-record fields that differ between two runs of the same crawl (times, job ids).
RUN_SPECIFIC = frozenset(
    {"last_fetch_time", "next_fetch_time", "first_listed", "last_listed", "last_listed_job", "orphaned_job"}
)


def crawl_database(state: Path, site: str) -> dict[str, dict[str, object]]:
    """A local state directory's crawl records of ``site`` (an origin), without what differs between runs."""
    from harvester.adapters.local.runner import LocalHarvest

    with LocalHarvest.open(state) as local:
        return {
            r.url: _same_runs(r.model_dump(mode="json", exclude=set(RUN_SPECIFIC)))
            for r in local.crawldb.site_urls(site)
        }


def _same_runs(record: dict[str, Any]) -> dict[str, Any]:
    """Where a capture landed (its file, offset, time) is the run's; what it holds (its digest) is not."""
    if record.get("warc"):
        record["warc"] = {k: record["warc"][k] for k in ("record_type", "payload_digest")}
    return record


def warc_captures(documents: Any) -> list[tuple[str, str, str, str, str]]:
    """Every response and revisit record in the WARC files of a document store (a folder's or S3's: WARC
    files are documents under ``warc/``): (file, record type, target URI, payload digest, and what was
    fetched: ``page``, ``sitemap``, ``robots.txt`` or ``redirect``, from the capture's metadata record, or
    ``error`` for a page's error answer)."""
    import io

    from warcio.archiveiterator import ArchiveIterator

    found = []
    for key in documents.keys("warc/"):
        if not key.endswith(".warc.gz"):
            continue
        kinds: dict[str, str] = {}
        for record in ArchiveIterator(io.BytesIO(documents.get(key))):
            headers = record.rec_headers
            if record.rec_type == "metadata":
                kinds[headers.get_header("WARC-Concurrent-To")] = json.loads(record.content_stream().read())["kind"]
            elif record.rec_type in ("response", "revisit"):
                uri, digest = headers.get_header("WARC-Target-URI"), headers.get_header("WARC-Payload-Digest")
                kind = kinds.get(headers.get_header("WARC-Record-ID"), "")
                status = record.http_headers.get_statuscode() if record.http_headers else ""
                if kind == "page" and record.rec_type == "response" and not status.startswith("2"):
                    kind = "error"  # (an error page archived as sent: no version of the page)
                found.append((key, record.rec_type, uri, digest, kind))
    return found


def stored_versions(documents: Any, origin: str) -> set[str]:
    """Each version of a site's pages that was stored, however its job kept it: a loose document (its key)
    or a WARC response record of a page (its URL and payload digest: a version archived twice counts once)."""
    from harvester.crawldb.documents import site_prefix

    loose = set(documents.keys(site_prefix(origin)))
    archived = {
        f"{uri} {digest}"
        for _, record_type, uri, digest, kind in warc_captures(documents)
        if record_type == "response" and kind == "page" and uri.startswith(origin + "/")
    }
    return loose | archived


def stored_content(documents: Any, warcs: Any, record: dict[str, Any] | Any) -> bytes | None:
    """The content a job's or crawl record names (its ``warc`` location, or its ``document_key``), read the
    way `harvest get` reads it: one record by a ranged read of the WARC store."""
    from harvester.archive.stored import stored_content as content
    from harvester.model.crawl import WarcLocation

    values = record if isinstance(record, dict) else record.model_dump(mode="json")
    warc = WarcLocation.model_validate(values["warc"]) if values.get("warc") else None
    return content(warc=warc, document_key=values.get("document_key"), warcs=warcs, documents=documents)


def local_stores(state: Path) -> tuple[Any, Any]:
    """A state directory's document store and WARC store."""
    from harvester.adapters.local.documents import FolderDocumentStore
    from harvester.adapters.local.warc_files import FolderWarcStore

    return FolderDocumentStore(state / "documents"), FolderWarcStore(state / "documents")


def page_tasks_in(body: str) -> list[Any]:
    """The page tasks a page message carries: its page task, or its page batch's pages (all valid here)."""
    from harvester.model.messages import PageBatchTask, PageTask

    if json.loads(body).get("kind") == "pages":
        tasks, invalid = PageBatchTask.model_validate_json(body).tasks()
        assert invalid == [], invalid
        return tasks
    return [PageTask.model_validate_json(body)]
