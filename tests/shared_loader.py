"""One botocore data loader for every session a test process makes.

botocore caches the JSON it loads (service models, endpoint rule sets, ``endpoints.json``) per loader, and
makes a loader per session. A Lambda container makes its session once; the tests make hundreds (every
deployed stack, poller and function container, every adapter built from the environment), and reading and
parsing that JSON again for each was a fifth of the AWS tests' CPU. Sessions with the same data path share
one loader here, so each file is read once a process, with botocore's own cache doing the rest.

boto3 adds its own data folder to the session's loader; the shared loader's search path keeps one copy of
each folder, as a loader of its own would.
"""

from __future__ import annotations

from typing import Any

import botocore.session
from botocore import loaders


class _SearchPaths(list[str]):
    """A loader's search path: a folder added again is already there."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


_LOADERS: dict[str | None, Any] = {}


def _shared_loader(search_path_string: str | None = None) -> Any:
    loader = _LOADERS.get(search_path_string)
    if loader is None:
        loader = loaders.create_loader(search_path_string)
        loader._search_paths = _SearchPaths(loader.search_paths)
        _LOADERS[search_path_string] = loader
    return loader


def share_data_loader() -> None:
    """Every botocore session made in this process from now on loads its data through the one loader."""
    botocore.session.create_loader = _shared_loader  # type: ignore[attr-defined]
