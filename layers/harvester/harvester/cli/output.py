"""Where a command's output file goes (``harvest export --output``, ``harvest report --html``), so that
nothing but Harvester's own output is ever replaced:

- ``-``: standard output;
- a folder: ``<folder>/<default name>`` inside it;
- a character device or a FIFO (``/dev/stdout``, ``/dev/null``, a named pipe): written through, in place;
- a symbolic link: what it points to, by the same rules (the link itself stays);
- an existing regular file: replaced only when it is empty or what ``ours`` recognises as this command's
  output (a WARC file for a WARC export, say), or with ``force``; refused otherwise, with the reason;
- anything else (a block device, a socket): refused.

A file is written beside its name and renamed onto it when whole, so that a failed or interrupted command
leaves no half file under the name. Every OS error names the path and the reason (a ``CommandError``).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from harvester.cli.errors import EXIT_FAILED, CommandError, UsageError

#: The first bytes of an existing file, enough for ``ours`` to recognise a format by.
HEAD_BYTES = 64


def output_target(target: Path, default_name: str) -> Path:
    """``target`` as given, or ``default_name`` inside it when it is a folder."""
    return target / default_name if target.is_dir() else target


@contextlib.contextmanager
def output_file(
    target: Path,
    *,
    default_name: str,
    ours: Callable[[bytes], bool],
    force: bool = False,
    option: str = "--output",
) -> Iterator[BinaryIO]:
    """A binary file to write the command's output to, at ``target`` by the rules of the module docstring.
    ``option``: the flag the path came from, which the messages name."""
    if str(target) == "-":
        yield sys.stdout.buffer
        return
    path = _resolved(output_target(target, default_name), default_name, option)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise _failed(option, path, exc) from None
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        with _through(path, option) as out:
            yield out
        return
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(f"{option} {path}: is {_kind(mode)}, not a file or a folder: not written")
    if mode is not None and not force and not _replaceable(path, ours, option):
        raise UsageError(
            f"{option} {path}: exists and is not output of this command: not replaced (give another path,"
            " or --force to replace it)"
        )
    with _beside(path, option) as out:
        yield out


def _resolved(path: Path, default_name: str, option: str) -> Path:
    """A symbolic link's final target (a folder's ``default_name``), or ``path`` itself."""
    if not path.is_symlink():
        return path
    try:
        real = path.resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # (a loop of links)
        raise UsageError(f"{option} {path}: a symbolic link that cannot be followed ({exc})") from None
    return output_target(real, default_name)


def _replaceable(path: Path, ours: Callable[[bytes], bool], option: str) -> bool:
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError as exc:
        raise _failed(option, path, exc) from None
    return not head or ours(head)


@contextlib.contextmanager
def _through(path: Path, option: str) -> Iterator[BinaryIO]:
    """A device or a pipe, written in place (opening a FIFO waits for its reader, as a shell's ``>`` does)."""
    try:
        raw = open(path, "wb", buffering=0)  # noqa: SIM115 (closed below, its errors named)
    except OSError as exc:
        raise _failed(option, path, exc) from None
    try:
        out = io.BufferedWriter(_Named(raw, path, option), 1024 * 1024)
        yield out  # type: ignore[misc]
        out.flush()
    finally:
        with contextlib.suppress(OSError):
            raw.close()


@contextlib.contextmanager
def _beside(path: Path, option: str) -> Iterator[BinaryIO]:
    """A temporary file beside ``path``, renamed onto it when the caller's writing is done."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: no folder {folder}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as exc:
        raise _failed(option, path, exc, f"cannot write in {folder}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # (what a file the user's shell made would have, not mkstemp's 0600)
    try:
        with open(fd, "wb", buffering=0) as raw:
            out = io.BufferedWriter(_Named(raw, path, option), 1024 * 1024)
            yield out  # type: ignore[misc]
            out.flush()
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _failed(option, path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _Named(io.RawIOBase):
    """A file whose failed writes raise a ``CommandError`` naming the output (a full disk, ``/dev/full``),
    not the failures of whatever the caller reads from."""

    def __init__(self, raw: io.FileIO, path: Path, option: str) -> None:
        super().__init__()
        self._raw, self._path, self._option = raw, path, option

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        try:
            return self._raw.write(data) or 0
        except OSError as exc:
            raise _failed(self._option, self._path, exc) from None


def _failed(option: str, path: Path, exc: OSError, what: str = "") -> CommandError:
    reason = exc.strerror or str(exc)
    return CommandError(f"{option} {path}: {what + ': ' if what else ''}{reason}", EXIT_FAILED)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
