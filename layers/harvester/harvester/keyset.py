"""A set of URL keys in 16 bytes each: de-duplication that does not grow memory with the site.

Used for the URLs a sitemap already listed (one reading's "first declaration only") and for the URLs a
job recorded (its de-duplication, in the local state store). Why not a Python ``set``: a set of 400,000
keys costs about 80 bytes a key (the objects and the table), and what is kept per URL is what makes memory
grow with the site. Why not the state file: an indexed SQLite insert costs more than everything else done
for a listed URL. So the 128-bit keys (the URL's SHA-256 prefix, the same key the state stores use) sit
in one ``array`` as an open-addressing hash table: 16 bytes a slot, filled to at most 4/5 before it
doubles (linear probing stays short enough at that load for keys that are hashes, and the slots are what
memory is spent on).
"""

from __future__ import annotations

from array import array

_LOW = (1 << 64) - 1
_MIN_SLOTS = 1 << 12


class KeySet:
    """``add`` says whether a 128-bit key (an int) was new, exactly."""

    __slots__ = ("_count", "_limit", "_mask", "_table", "_zero")

    def __init__(self) -> None:
        self._count = 0
        self._zero = False  # the key 0, which cannot be stored: (0, 0) is an empty slot
        self._allocate(_MIN_SLOTS)

    def _allocate(self, slots: int) -> None:
        self._table = array("Q", bytes(16 * slots))  # (high, low) pairs, zeroed
        self._mask = slots - 1
        self._limit = slots * 4 // 5

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: int) -> bool:
        if not key:
            return self._zero
        high, low = key >> 64, key & _LOW
        table, mask = self._table, self._mask
        slot = low & mask
        while True:
            at = slot << 1
            found = table[at]
            if found == high and table[at + 1] == low:
                return True
            if found == 0 and table[at + 1] == 0:
                return False
            slot = (slot + 1) & mask

    def add(self, key: int) -> bool:
        if not key:
            new = not self._zero
            self._zero = True
            self._count += new
            return new
        high, low = key >> 64, key & _LOW
        table, mask = self._table, self._mask
        slot = low & mask
        while True:
            at = slot << 1
            found = table[at]
            if found == high and table[at + 1] == low:
                return False
            if found == 0 and table[at + 1] == 0:
                table[at] = high
                table[at + 1] = low
                self._count += 1
                if self._count > self._limit:
                    self._grow()
                return True
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        old = self._table
        self._allocate((self._mask + 1) * 2)
        table, mask = self._table, self._mask
        for at in range(0, len(old), 2):
            high, low = old[at], old[at + 1]
            if high or low:
                slot = low & mask
                while table[slot << 1] or table[(slot << 1) + 1]:
                    slot = (slot + 1) & mask
                table[slot << 1] = high
                table[(slot << 1) + 1] = low
