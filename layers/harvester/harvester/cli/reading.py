"""The command line's reading rules (``harvester.model.reading.ReadingRules``): their flags, and the job
request's ``reading`` section built from them."""

from __future__ import annotations

import argparse
import re
from typing import Any

from harvester.cli.errors import UsageError
from harvester.limits import SITEMAP_MAX_BYTES
from harvester.model.reading import DEFAULT_WARN_SIZE, ReadingRules, reading_section
from harvester.words import size

_SIZE = re.compile(r"\s*(\d+)\s*(|b|bytes?|k|kb|kib|m|mb|mib)\s*", re.IGNORECASE)


def reading_arguments(parser: argparse.ArgumentParser, *, parse: bool = False) -> None:
    """The reading rules' flags, in a group of their own; ``parse``: those of ``harvest parse`` (the two the
    parser applies: the URL rules are the job's screening)."""
    group = parser.add_argument_group("reading rules (how sitemaps are read beyond the defaults)")
    if not parse:
        group.add_argument(
            "--repair-urls",
            action="store_true",
            help="give a URL written without its scheme (www.example.com/page, //host/page, /page) the sitemap's"
            " scheme (and host, for a path) instead of dropping it; counted as url_repaired",
        )
        group.add_argument(
            "--strict-location",
            action="store_true",
            help="sitemaps.org's location rule: a sitemap lists only URLs under its own directory, unless"
            " robots.txt declared it (then any URL of robots.txt's host); others dropped as"
            " outside_sitemap_directory",
        )
    group.add_argument(
        "--allow-doctype",
        action="store_true",
        help="read a sitemap with a DOCTYPE (an external DTD is never fetched, an external entity never read);"
        " one declaring an internal or parameter entity is still refused",
    )
    group.add_argument(
        "--warn-size",
        metavar="SIZE",
        help=f"warn of a sitemap larger than SIZE uncompressed (e.g. 16MiB; default {size(DEFAULT_WARN_SIZE)};"
        f" 0: never), below the {size(SITEMAP_MAX_BYTES)} at which it is cut",
    )


def warn_size(given: str) -> int:
    """``--warn-size`` in bytes (``32MiB``, ``500k``, ``1048576``)."""
    match = _SIZE.fullmatch(given)
    if match is None:
        raise UsageError(f"--warn-size {given}: not a size (bytes, or with a unit: 500KiB, 16MiB)")
    unit = match[2].lower()
    bytes_ = int(match[1]) * (1024 if unit.startswith("k") else 1024 * 1024 if unit.startswith("m") else 1)
    if bytes_ >= SITEMAP_MAX_BYTES:
        raise UsageError(
            f"--warn-size {given}: must be below {size(SITEMAP_MAX_BYTES)}, the size at which a sitemap is cut"
            " (0: no warning)"
        )
    return bytes_


def reading_rules(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``reading`` section of the flags given; None when none was (the job reads with the defaults, and
    its request has no ``reading`` section: its fingerprint is that of a request without the flags)."""
    given = getattr(args, "warn_size", None)
    return reading_section(
        repair_urls=getattr(args, "repair_urls", False),
        strict_location=getattr(args, "strict_location", False),
        allow_doctype=getattr(args, "allow_doctype", False),
        warn_size=None if given is None else warn_size(given),
    )


def reading_flags(reading: ReadingRules | None) -> str:
    """A job's reading rules as the command line gives them (what ``harvest jobs`` and a crawl that does not
    resume a job show of its options)."""
    if reading is None:
        return "no reading rules"
    flags = [f"--{name.replace('_', '-')}" for name in reading.listing()]
    if reading.warn_size != DEFAULT_WARN_SIZE:
        flags.append(f"--warn-size {reading.warn_size}")
    return " ".join(flags) or "the default reading rules"
