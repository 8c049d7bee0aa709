"""How numbers read in what Harvester tells a person: counts with their noun (``1 page``, ``2,000 pages``)
and sizes in binary units (``50 MiB``), the same in every message, summary and progress line."""

from __future__ import annotations

#: Nouns whose plural is not the noun and an ``s``.
_PLURALS = {"entry": "entries", "this": "these", "is": "are", "was": "were"}
_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")


def count(n: int, noun: str) -> str:
    """``n`` with thousands separators and ``noun`` in the number it takes: ``1 page``, ``2,000 pages``."""
    return f"{n:,} {noun if n == 1 else _PLURALS.get(noun, noun + 's')}"


def size(n: int) -> str:
    """A byte count as people read it: ``512 bytes``, ``1.5 KiB``, ``50 MiB`` (whole when it is whole)."""
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return count(n, "byte")
    shown = f"{value:.0f}" if value == int(value) or value >= 100 else f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{shown} {_UNITS[unit]}"
