"""A set of URL keys in 16 bytes each: the de-duplication of a throwaway discovery run.

Why not a Python ``set``: a set of 400,000 keys costs about 80 bytes a key (the objects and the table), and
what is kept per URL is what makes memory grow with the site. Why not the state file: an indexed SQLite
insert costs more than everything else done for a listed URL. So the 128-bit keys (the URL's SHA-256
prefix, the same key the state stores use) sit in one ``array`` as an open-addressing hash table: 16 bytes
a slot, filled to at most 5/8 before it doubles.
"""

from __future__ import annotations

from array import array

_LOW = (1 << 64) - 1
#: Set on every stored high half, so that a zero word always means an empty slot.
_TAKEN = 1 << 63
_MIN_SLOTS = 1 << 12


class KeySet:
    """``add`` says whether a 128-bit key (an int) was new. Exact but for the one bit ``_TAKEN`` costs."""

    __slots__ = ("_count", "_limit", "_mask", "_table")

    def __init__(self) -> None:
        self._count = 0
        self._allocate(_MIN_SLOTS)

    def _allocate(self, slots: int) -> None:
        self._table = array("Q", bytes(16 * slots))  # (high, low) pairs, zeroed
        self._mask = slots - 1
        self._limit = slots * 5 // 8

    def __len__(self) -> int:
        return self._count

    def add(self, key: int) -> bool:
        high, low = (key >> 64) | _TAKEN, key & _LOW
        table, mask = self._table, self._mask
        slot = low & mask
        while True:
            at = slot << 1
            found = table[at]
            if found == 0:
                table[at] = high
                table[at + 1] = low
                self._count += 1
                if self._count > self._limit:
                    self._grow()
                return True
            if found == high and table[at + 1] == low:
                return False
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        old = self._table
        self._allocate((self._mask + 1) * 2)
        table, mask = self._table, self._mask
        for at in range(0, len(old), 2):
            high = old[at]
            if high:
                low = old[at + 1]
                slot = low & mask
                while table[slot << 1]:
                    slot = (slot + 1) & mask
                table[slot << 1] = high
                table[(slot << 1) + 1] = low
