"""A set of URL keys in 12 bytes each: de-duplication that does not grow memory with the site.

Used for the URLs a sitemap already listed (one reading's "first declaration only") and for the URLs a
job recorded (its de-duplication, in the local state store). Why not a Python ``set``: a set of 400,000
keys costs about 80 bytes a key (the objects and the table), and what is kept per URL is what makes memory
grow with the site. Why not the state file: an indexed SQLite insert costs more than everything else done
for a listed URL. So 96 bits of each URL's key (:func:`bits_of` the SHA-256 prefix the state stores use)
sit in two ``array``\\ s as an open-addressing hash table: 12 bytes a slot, filled to at most 4/5 before
it doubles (linear probing stays short enough at that load for keys that are hashes, and the slots are
what memory is spent on). Why 96 bits and not all 128: two distinct URLs of a ten-million-URL job share
96 hash bits with odds of about 10^-15 (Heritrix de-duplicates whole crawls on 64), and 12 bytes a slot
are a quarter less memory than 16.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from hashlib import sha256

_LOW = (1 << 64) - 1
_MIN_SLOTS = 1 << 12
KEY_BITS = 96
assert array("I").itemsize == 4


def bits_of(key: str) -> int:
    """The 96 bits a KeySet keeps of a URL key (``url_key``: 32 hex digits)."""
    return int(key[: KEY_BITS // 4], 16)


def url_bits(url: str) -> bytes:
    """``bits_of(url_key(url))`` as its 12 bytes, made without the key's text (a throwaway run needs no key,
    and ``int.from_bytes`` of these is quicker than parsing the hex key)."""
    return sha256(url.encode("utf-8")).digest()[: KEY_BITS // 8]


class KeySet:
    """``add`` says whether a key (an int below 2**96, see :func:`bits_of`) was new, exactly."""

    __slots__ = ("_count", "_high", "_limit", "_low", "_mask", "_zero")

    def __init__(self) -> None:
        self._count = 0
        self._zero = False  # the key 0, which cannot be stored: (0, 0) is an empty slot
        self._allocate(_MIN_SLOTS)

    def _allocate(self, slots: int) -> None:
        self._low = array("Q", bytes(8 * slots))  # zeroed
        self._high = array("I", bytes(4 * slots))
        self._mask = slots - 1
        self._limit = slots * 4 // 5

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: int) -> bool:
        if not key:
            return self._zero
        return self._probe(key >> 64, key & _LOW)[1]

    def add(self, key: int) -> bool:
        if not key:
            new = not self._zero
            self._zero = True
            self._count += new
            return new
        high, low = key >> 64, key & _LOW
        lows, highs, mask = self._low, self._high, self._mask
        slot = low & mask
        while True:  # _probe, inline: add runs two or three times for every URL listed
            found = lows[slot]
            if found == low and highs[slot] == high:
                return False
            if found == 0 and highs[slot] == 0:
                break
            slot = (slot + 1) & mask
        highs[slot] = high  # first: a key of more than 96 bits raises OverflowError here
        lows[slot] = low
        self._count += 1
        if self._count > self._limit:
            self._grow()
        return True

    def take(self, keys: Iterable[int], new: list[int] | None = None) -> list[int]:
        """Adds the keys; returns the positions of those that were new (the first of a key given twice): what
        ``add`` says of each, for a batch (``add``'s loop inline: a job's de-duplication takes a part's or a
        listing's keys at once). Each position is appended to ``new`` (when given) as its key is taken, so a
        caller that undoes a batch knows them however the batch ends."""
        new = [] if new is None else new
        keep = new.append
        lows, highs, mask, limit = self._low, self._high, self._mask, self._limit
        count = self._count
        try:
            for position, key in enumerate(keys):
                if not key:
                    if not self._zero:
                        self._zero = True
                        count += 1
                        keep(position)
                    continue
                high, low = key >> 64, key & _LOW
                slot = low & mask
                while True:
                    found = lows[slot]
                    if found == low and highs[slot] == high:
                        break
                    if found == 0 and highs[slot] == 0:
                        highs[slot] = high  # (first: a key of more than 96 bits raises OverflowError here)
                        lows[slot] = low
                        count += 1
                        keep(position)
                        if count > limit:
                            self._count = count
                            self._grow()
                            lows, highs, mask, limit = self._low, self._high, self._mask, self._limit
                        break
                    slot = (slot + 1) & mask
        finally:  # (the keys before one refused stay taken, as add took them)
            self._count = count
        return new

    def discard(self, key: int) -> None:
        """Takes a key out (when the write that added it was rolled back): the keys after it in its run
        move back into the hole, so that every key stays reachable from its home slot."""
        if not key:
            self._count -= self._zero
            self._zero = False
            return
        hole, found = self._probe(key >> 64, key & _LOW)
        if not found:
            return
        lows, highs, mask = self._low, self._high, self._mask
        slot = (hole + 1) & mask
        while lows[slot] or highs[slot]:
            home = lows[slot] & mask
            if (slot - home) & mask >= (slot - hole) & mask:  # the hole is on this key's way from home
                lows[hole], highs[hole] = lows[slot], highs[slot]
                hole = slot
            slot = (slot + 1) & mask
        lows[hole] = highs[hole] = 0
        self._count -= 1

    def _probe(self, high: int, low: int) -> tuple[int, bool]:
        """The key's slot and whether it is there, or the empty slot it would take."""
        lows, highs, mask = self._low, self._high, self._mask
        slot = low & mask
        while True:
            found = lows[slot]
            if found == low and highs[slot] == high:
                return slot, True
            if found == 0 and highs[slot] == 0:
                return slot, False
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        old_lows, old_highs = self._low, self._high
        self._allocate((self._mask + 1) * 2)
        lows, highs, mask = self._low, self._high, self._mask
        for low, high in zip(old_lows, old_highs, strict=True):
            if low or high:
                slot = low & mask
                while lows[slot] or highs[slot]:
                    slot = (slot + 1) & mask
                lows[slot] = low
                highs[slot] = high
