"""Where a local crawl keeps its state unless told otherwise. A module of its own so that the command line
can name it in its help without loading the local adapter (``harvest parse`` loads nothing it does not use)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_STATE_DIR = Path(".harvest")
