"""Raw documents and results in a folder (``<state-dir>/documents/<key>``), written atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


class FolderDocumentStore:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"document key {key!r} leaves the document folder")
        return path

    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        # Content type and metadata live in the URL records here; S3 keeps them on the object as well.
        with self.writer(key) as out:
            if isinstance(body, bytes):
                out.write(body)
            else:
                shutil.copyfileobj(body, out, 1024 * 1024)
        return str(self._path(key))

    @contextmanager
    def writer(self, key: str, *, content_type: str | None = None) -> Iterator[BinaryIO]:
        """A temporary file beside the document, renamed onto it at the end: a reader never sees half."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                yield out
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        return self._path(key).read_bytes()

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

    def location(self, key: str) -> str:
        return str(self._path(key))
