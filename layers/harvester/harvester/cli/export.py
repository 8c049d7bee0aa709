"""``harvest export``: a local job's output in one file, as the tools of the web-archive world read it.

``warc``: the job's captures as one ``.warc.gz`` (its WARC files' gzip members, one after the other: a
concatenation of WARC files is a WARC file); ``parquet``: its columnar URL index (the one its end wrote, or
one built now from its records); ``jsonl`` / ``csv``: its URL records, as ``harvest report JOB --format``
prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from harvester.adapters.local.runner import LocalHarvest
from harvester.adapters.local.warc_files import indexed_end
from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.report import write_job_records
from harvester.cli.state import open_state
from harvester.pipeline.completion import index_key

#: The file name a binary format is written to by default: ``<job_id>.<extension>``.
EXTENSIONS = {"warc": "warc.gz", "parquet": "parquet"}


def run_export(args: argparse.Namespace) -> int:
    with open_state(args.state_dir) as harvest:
        if harvest.store.get_job(args.job_id) is None:
            raise UsageError(f"no job {args.job_id!r} in {args.state_dir}")
        if args.format in ("jsonl", "csv"):
            if args.output is None or str(args.output) == "-":
                write_job_records(harvest, args.job_id, args.format, sys.stdout)
            else:
                with _output(args.output) as out, open(out.fileno(), "w", newline="", closefd=False) as text:
                    write_job_records(harvest, args.job_id, args.format, text)
            return EXIT_OK
        target = args.output or Path(f"{args.job_id}.{EXTENSIONS[args.format]}")
        if str(target) == "-" and sys.stdout.isatty():
            raise UsageError(f"--output -: {args.format} is binary; not written to a terminal (give a file)")
        if args.format == "warc":
            files = [harvest.warcs.root / key for key in harvest.warcs.files(args.job_id)]
            if not files:
                raise UsageError(f"job {args.job_id} has no WARC files (it kept no page, or kept them as files)")
            with _output(target) as out:
                copied = _concatenate(files, out)
            _said(target, f"{copied:,} bytes from {len(files)} WARC file{'s' * (len(files) != 1)}")
        else:
            with _output(target) as out:
                rows = _index(harvest, args.job_id, out)
            _said(target, f"the URL index ({'copied' if rows is None else f'built: {rows:,} rows'})")
    return EXIT_OK


def _concatenate(files: list[Path], out: BinaryIO) -> int:
    """Each file's bytes up to the end of its last indexed record (what a run still writing, or killed in
    the middle of a chunk, has whole): every record a URL record names, and nothing half written."""
    copied = 0
    for path in files:
        end = indexed_end(path)
        with path.open("rb") as file:
            left = end
            while left > 0:
                piece = file.read(min(left, 1024 * 1024))
                if not piece:
                    break
                out.write(piece)
                left -= len(piece)
                copied += len(piece)
    return copied


def _index(harvest: LocalHarvest, job_id: str, out: BinaryIO) -> int | None:
    """The job's index.parquet (None: copied as its end wrote it), or one built now from its records (a job
    still running, or one that ended before the index was written): its row count."""
    key = index_key(job_id)
    if harvest.documents.exists(key):
        with harvest.documents.reader(key) as stored:
            shutil.copyfileobj(stored, out, 1024 * 1024)
        return None
    from harvester.archive.index import build_index  # (DuckDB: only for this)

    with tempfile.TemporaryDirectory(prefix="harvest-export-") as work:
        records, built = Path(work) / "records.jsonl", Path(work) / "index.parquet"
        with records.open("w") as lines:
            write_job_records(harvest, job_id, "jsonl", lines)
        rows = build_index(records, built, job_id=job_id, gzipped=False)
        with built.open("rb") as body:
            shutil.copyfileobj(body, out, 1024 * 1024)
    return rows


@contextlib.contextmanager
def _output(target: Path) -> Iterator[BinaryIO]:
    """Standard output for ``-``; else a temporary file beside ``target``, renamed onto it when the export
    is whole (a failed or interrupted export leaves no half file under the name)."""
    if str(target) == "-":
        yield sys.stdout.buffer
        return
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"--output {target}: no folder {folder}")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # (what a file the user's shell made would have, not mkstemp's 0600)
    try:
        with open(fd, "wb") as out:
            yield out
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _said(target: Path, what: str) -> None:
    if str(target) != "-":
        print(f"harvest: wrote {target}: {what}", file=sys.stderr)
