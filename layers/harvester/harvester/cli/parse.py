"""``harvest parse FILE``: one local sitemap file, one JSON line per entry.

It loads the parser and nothing of the engine (no records, no HTTP client, no state store), whose imports
a command that parses one file has no use for (bench/cli_parse.py measures them against the parse).
The lines are serialised by orjson and written as bytes, a thousand at a time, under the text layer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from harvester.archive.lines import LINES_PER_WRITE, json_bytes
from harvester.cli.errors import EXIT_FAILED, EXIT_OK, CommandError, UsageError
from harvester.cli.reading import warn_size
from harvester.model.reading import DEFAULT_WARN_SIZE
from harvester.sitemap import Entry, SitemapKind, parse_file
from harvester.sitemap.entries import OVER_WARN_SIZE
from harvester.words import count, size


def run_parse(args: argparse.Namespace) -> int:
    path: Path = args.file
    if path.is_dir():
        raise UsageError(f"{path}: a directory, not a sitemap file")
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    warn = DEFAULT_WARN_SIZE if args.warn_size is None else warn_size(args.warn_size)
    try:
        entries, report = parse_file(path, allow_doctype=args.allow_doctype, warn_bytes=warn)
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        written = write_entries(entries, sys.stdout)  # (read as they are parsed: the report is complete after)
    except BrokenPipeError:
        raise
    except OSError as exc:  # (the file failing as it is read: a device, a disk error)
        raise CommandError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if report.error:
        print(f"harvest: {path}: {report.error}", file=sys.stderr)
        return EXIT_FAILED
    if not written and report.kind in (None, SitemapKind.TEXT):
        # Any bytes are read as a text sitemap: with no URL line at all, it is not one (a binary, JSON).
        # (An empty file is the parser's own error, "empty document", above.)
        print(f"harvest: {path}: not a sitemap: no URL in it", file=sys.stderr)
        return EXIT_FAILED
    values = {reason: n for reason, n in report.warnings.items() if reason != OVER_WARN_SIZE}
    if values:
        # (a value that does not parse is left out of its entry, which is kept: say which and how many)
        said = ", ".join(f"{reason} {n:,}" for reason, n in sorted(values.items(), key=lambda kv: -kv[1]))
        total = count(sum(values.values()), "value")
        print(f"harvest: {path}: set aside {total} (entries kept): {said}", file=sys.stderr)
    if OVER_WARN_SIZE in report.warnings:
        print(f"harvest: {path}: larger than {size(warn)} uncompressed (--warn-size)", file=sys.stderr)
    if report.truncated:
        print(f"harvest: {path}: truncated: {report.truncated}", file=sys.stderr)
    if not written:
        print(f"harvest: {path}: a {report.kind.value if report.kind else 'sitemap'} with no entries", file=sys.stderr)
    return EXIT_OK


def write_entries(entries: Iterable[Entry], out: TextIO) -> int:
    """Each entry as a JSON line; returns how many. Everything is written (and flushed) before it returns,
    so that what the command says on stderr afterwards comes after the data."""
    out.flush()
    binary = getattr(out, "buffer", None)  # (a stream with no bytes under it takes the text)
    raw = binary.write if binary is not None else lambda data: out.write(data.decode())

    def write(data: bytes) -> None:
        try:
            if data:
                raw(data)
            else:
                (binary or out).flush()
        except BrokenPipeError:
            raise
        except OSError as exc:  # (the output failing, not the file: named apart from a read error)
            raise CommandError(f"standard output: {exc.strerror or exc}") from None

    count = 0
    lines: list[bytes] = []
    for entry in entries:
        lines.append(json_bytes(entry.to_json(), newline=True))
        if len(lines) == LINES_PER_WRITE:
            write(b"".join(lines))
            count += len(lines)
            lines = []
    if lines:
        write(b"".join(lines))
        count += len(lines)
    write(b"")  # (a flush)
    return count
