"""CPython's cyclic garbage collector, held back while a crawl runs.

Why: a listed URL allocates about twenty container objects (its entry, images and links, its record and
their dicts) that live until its batch is recorded and handed out. With CPython's default thresholds that
is a full collection every few thousand URLs, and a full collection walks every object the process holds
(a few hundred thousand after importing the HTTP stack). Nothing on these paths makes reference cycles
worth collecting early, so while a crawl runs the youngest generation is collected every 50,000
allocations instead of every 700. Memory stays bounded (cycles are
still collected, later); the previous thresholds come back when the last crawl of the process ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def relaxed() -> Iterator[None]:
    """Runs the block with the relaxed threshold (nested and concurrent uses share one setting)."""
    global _holders, _saved
    with _lock:
        if _holders == 0:
            _saved = gc.get_threshold()
            if _saved[0] and _saved[0] < YOUNG_THRESHOLD:  # (0: collection is off; leave it so)
                gc.set_threshold(YOUNG_THRESHOLD, *_saved[1:])
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                gc.set_threshold(*_saved)
