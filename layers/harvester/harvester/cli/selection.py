"""The command line's selection of entries (``--since``, ``--alternates``, ``--lang``...): the flags, and
the job request's ``select`` section made of them (``EntrySelection``)."""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Any, get_args

from harvester.cli.errors import UsageError
from harvester.model.base import ValidationError
from harvester.model.selection import ChangeFrequency, EntrySelection, Extension

_BOUND = re.compile(r"Expected `float` ([<>]=) (\S+)")
_WHERE = re.compile(r"(?P<reason>.*?) - at `\$\.(?P<field>\w+)[^`]*`", re.S)

#: The section's fields as the command line names them (cli/options.py words a complaint with it).
FLAGS = {
    "select": "--since/--before/--lang...",
    "since": "--since",
    "before": "--before",
    "require_lastmod": "--require-lastmod",
    "min_priority": "--min-priority",
    "changefreq": "--changefreq",
    "extensions": "--with-extension",
    "sitemap_since": "--sitemap-since",
    "alternates": "--alternates",
    "lang": "--lang",
}


def selection_flags(select: EntrySelection | None) -> str:
    """The section as the flags that give it (``harvest jobs`` lists a job's options with them)."""
    if select is None:
        return "no selection of entries"
    words: list[str] = []
    for name, flag in FLAGS.items():
        value = getattr(select, name, None)
        if value in (None, False, ()):
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, tuple):
            words += [f"{flag} {shlex.quote(str(v))}" for v in value]
        else:
            words.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(words) or "no selection of entries"


def selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags choosing which of the sitemaps' entries a job lists, in a group of their own."""
    # (the rules, and what the summary says of the entries left out: docs/sitemaps.md, "Selecting entries")
    group = parser.add_argument_group("selecting entries (left out ones are counted, never made orphan)")
    add = group.add_argument
    add(
        "--since",
        metavar="WHEN",
        help="pages whose lastmod is WHEN or later: a date (2026-01-01, UTC) or a duration before the job's start"
        " (30m, 12h, 7d, 2w); pages without one are kept",
    )
    add("--before", metavar="WHEN", help="pages whose lastmod is before WHEN (pages without one are kept)")
    add("--require-lastmod", action="store_true", help="leave out the pages that give no lastmod")
    add("--min-priority", type=float, metavar="P", help="pages whose priority is at least P (0.5 when not given)")
    add(
        "--changefreq",
        action="append",
        default=[],
        choices=get_args(ChangeFrequency),
        help="pages with this changefreq (repeat for more)",
    )
    add(
        "--with-extension",
        action="append",
        default=[],
        choices=get_args(Extension),
        help="pages that have this sitemap extension (repeat: any of them)",
    )
    add("--sitemap-since", metavar="WHEN", help="follow only the child sitemaps whose index lastmod is WHEN or later")
    add("--alternates", action="store_true", help="also list each entry's hreflang alternates as pages")
    add("--lang", metavar="CODE", help="pages in this language (ISO 639-1: de): an entry's hreflang alternate in it")


def selection_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``select`` section the flags give, checked (None when none is given); a bad value is refused
    naming its flag (``UsageError``)."""
    values: dict[str, Any] = {
        "since": getattr(args, "since", None),
        "before": getattr(args, "before", None),
        "require_lastmod": getattr(args, "require_lastmod", False),
        "min_priority": getattr(args, "min_priority", None),
        "changefreq": tuple(dict.fromkeys(getattr(args, "changefreq", ()))),
        "extensions": tuple(dict.fromkeys(getattr(args, "with_extension", ()))),
        "sitemap_since": getattr(args, "sitemap_since", None),
        "alternates": getattr(args, "alternates", False),
        "lang": getattr(args, "lang", None),
    }
    given = {name: value for name, value in values.items() if value not in (None, False, ())}
    if not given:
        return None
    try:
        EntrySelection.model_validate(given)
    except ValidationError as exc:
        where = _WHERE.fullmatch(str(exc))
        field = where["field"] if where is not None else None
        reason = where["reason"] if where is not None else str(exc)
        bound = _BOUND.match(reason)
        if bound is not None:
            reason = f"must be {'at least' if bound[1] == '>=' else 'at most'} {bound[2]}"
        if field in given:
            raise UsageError(f"{FLAGS[field]} {given[field]}: {reason}") from None
        raise UsageError(f"{FLAGS['select']}: {reason}") from None
    return given
