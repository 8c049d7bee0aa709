"""Raw documents and results in a folder (``<state-dir>/documents/<key>``), written atomically.

A page's document is written on the crawl's hot path, so a key is checked by its text (no ``..`` part, not
absolute) rather than by resolving the path on disk, its folder is made with one ``mkdir``, and the
temporary file gets a name no other writer uses instead of a random one tried until it is free. The write
is a few page-cache syscalls, so the crawl makes it on its event loop (``writes_inline``) rather than
handing it to a thread and back, which costs more than the write (GIL hand-offs).
"""

from __future__ import annotations

import itertools
import os
import posixpath
import shutil
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO


class FolderDocumentStore:
    #: ``put`` is quick enough to make on the event loop (an S3 PUT is not).
    writes_inline = True

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._names = itertools.count()

    def _path(self, key: str) -> Path:
        normal = posixpath.normpath(key)
        if normal.startswith(("/", "../")) or normal in ("..", ".") or "\0" in key:
            raise ValueError(f"document key {key!r} leaves the document folder")
        return self.root / normal

    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        # Content type and metadata live in the URL records here; S3 keeps them on the object as well.
        path = self._path(key)
        with self._write(path) as out:
            if isinstance(body, bytes):
                out.write(body)
            else:
                shutil.copyfileobj(body, out, 1024 * 1024)
        return str(path)

    def writer(self, key: str, *, content_type: str | None = None) -> AbstractContextManager[BinaryIO]:
        """A temporary file beside the document, renamed onto it at the end: a reader never sees half."""
        return self._write(self._path(key))

    @contextmanager
    def _write(self, path: Path) -> Iterator[BinaryIO]:
        # Unique among this process's writers (the counter) and other processes (the pid); O_EXCL still
        # refuses a leftover of a killed run that happens to share the name.
        tmp = f"{path.parent}/.tmp-{os.getpid()}-{next(self._names)}"
        try:
            os.mkdir(path.parent)  # a page's own folder: usually new, its parents usually there
        except FileExistsError:
            pass
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with open(fd, "wb") as out:
                yield out
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def join(self, key: str, parts: Sequence[str], *, content_type: str | None = None) -> str:
        path = self._path(key)
        with self._write(path) as out:
            for part in parts:
                with self._path(part).open("rb") as source:
                    shutil.copyfileobj(source, out, 1024 * 1024)
        return str(path)

    def get(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        with self._path(key).open("rb") as file:
            file.seek(offset)
            return file.read(max(0, length))

    @contextmanager
    def reader(self, key: str) -> Iterator[BinaryIO]:
        with self._path(key).open("rb") as file:
            yield file

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def keys(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix) if prefix else self.root
        start = base if base.is_dir() else base.parent
        for path in sorted(start.rglob("*")):
            if path.is_file() and not path.name.startswith(".tmp-"):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    yield key

    def delete(self, *keys: str) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def delete_folder(self, prefix: str) -> None:
        """Removes the documents under ``prefix`` (a job's result files: ``jobs/<job id>``)."""
        path = self._path(prefix)
        if path == self.root:
            raise ValueError("the document folder itself is not a job's")
        shutil.rmtree(path, ignore_errors=True)

    def location(self, key: str) -> str:
        return str(self._path(key))
