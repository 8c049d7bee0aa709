"""``harvest export``: a job's output in one file, as the tools of the web-archive world read it: a local
job's (``--state-dir``) or a deployed stack's (``--stack``: its job records in DynamoDB, its WARC objects and
index in S3).

``warc``: the job's captures as one ``.warc.gz`` (its WARC files' gzip members, one after the other: a
concatenation of WARC files is a WARC file); ``parquet``: its columnar URL index in one file (the one its end
wrote, its files merged when the end wrote several, or one built now from its records); ``jsonl`` / ``csv``:
its URL records, as ``harvest report JOB --format`` prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from harvester.adapters.local.warc_files import indexed_end
from harvester.archive.results import index_folder
from harvester.cli.errors import EXIT_OK, UsageError
from harvester.cli.output import output_file, output_target
from harvester.cli.report import write_job_records
from harvester.cli.state import open_stores
from harvester.words import count, size

#: The file name a binary format is written to by default: ``<job_id>.<extension>``.
EXTENSIONS = {"warc": "warc.gz", "parquet": "parquet", "jsonl": "jsonl", "csv": "csv"}
#: What an existing file that ``--output`` may replace begins with: an export of the same format.
OURS: dict[str, Callable[[bytes], bool]] = {
    "warc": lambda head: head.startswith((b"\x1f\x8b", b"WARC/")),
    "parquet": lambda head: head.startswith(b"PAR1"),
    "jsonl": lambda head: head.startswith(b'{"url":'),
    "csv": lambda head: head.startswith(b"url,"),
}


def run_export(args: argparse.Namespace) -> int:
    with open_stores(args) as (harvest, where):
        if harvest.store.get_job(args.job_id) is None:
            raise UsageError(f"no job {args.job_id!r} in {where}")
        name = f"{args.job_id}.{EXTENSIONS[args.format]}"
        if args.format in ("jsonl", "csv"):
            if args.output is None or str(args.output) == "-":
                write_job_records(harvest, args.job_id, args.format, sys.stdout)
                return EXIT_OK
            with _output(args, name) as out:
                text = io.TextIOWrapper(out, encoding="utf-8", newline="")
                write_job_records(harvest, args.job_id, args.format, text)
                text.flush()
                text.detach()
            return EXIT_OK
        target = args.output or Path(name)
        if str(target) == "-" and sys.stdout.isatty():
            raise UsageError(f"--output -: {args.format} is binary; not written to a terminal (give a file)")
        if args.format == "warc":
            keys = list(harvest.warcs.files(args.job_id))
            if not keys:
                raise UsageError(f"job {args.job_id} has no WARC files (it kept no page, or kept them as files)")
            with _output(args, name, target) as out:
                if args.stack:  # (an S3 object is stored whole or not at all)
                    copied = _concatenate_objects(harvest.documents, keys, out)
                else:
                    copied = _concatenate([harvest.warcs.root / key for key in keys], out)
            _said(target, name, f"{size(copied)} from {count(len(keys), 'WARC file')}")
        else:
            with _output(args, name, target) as out:
                how = _index(harvest, args.job_id, out)
            _said(target, name, f"the URL index ({how})")
    return EXIT_OK


def _output(
    args: argparse.Namespace, name: str, target: Path | None = None
) -> contextlib.AbstractContextManager[BinaryIO]:
    return output_file(target or args.output, default_name=name, ours=OURS[args.format], force=args.force)


def _concatenate_objects(documents: Any, keys: list[str], out: BinaryIO) -> int:
    """Each stored WARC object, whole, one after the other."""
    copied = 0
    for key in keys:
        with documents.reader(key) as body:
            while piece := body.read(1024 * 1024):
                out.write(piece)
                copied += len(piece)
    return copied


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


def _index(harvest: Any, job_id: str, out: BinaryIO) -> str:
    """The job's index in one file: copied as its end wrote it, merged from the files its end wrote in steps,
    or built now from its records (a job still running, or one that ended before the index was written);
    says which."""
    stored, older = list(harvest.documents.keys(index_folder(job_id))), f"jobs/{job_id}/index.parquet"
    if not stored and harvest.documents.exists(older):  # (the one file of a job an older version ended)
        stored = [older]
    if len(stored) == 1:
        with harvest.documents.reader(stored[0]) as body:
            shutil.copyfileobj(body, out, 1024 * 1024)
        return "copied"
    from harvester.archive.index import build_index, merge_index  # (DuckDB: only for this)

    with tempfile.TemporaryDirectory(prefix="harvest-export-") as work:
        built = Path(work) / "index.parquet"
        if stored:
            files = []
            for n, key in enumerate(stored):
                files.append(Path(work) / f"{n}.parquet")
                with harvest.documents.reader(key) as body, files[-1].open("wb") as copy:
                    shutil.copyfileobj(body, copy, 1024 * 1024)
            how = f"merged from {len(files)} files: {merge_index(files, built):,} rows"
        else:
            records = Path(work) / "records.jsonl"
            with records.open("w") as lines:
                write_job_records(harvest, job_id, "jsonl", lines)
            how = f"built: {build_index(records, built, job_id=job_id, gzipped=False):,} rows"
        with built.open("rb") as body:
            shutil.copyfileobj(body, out, 1024 * 1024)
    return how


def _said(target: Path, name: str, what: str) -> None:
    if str(target) != "-":
        print(f"harvest: wrote {output_target(target, name)}: {what}", file=sys.stderr)
