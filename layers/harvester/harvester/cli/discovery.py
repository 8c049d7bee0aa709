"""The command line's discovery options: where a job looks for the site's sitemaps (the job request's
``discovery`` section, harvester/model/discovery.py).

The flags are added to the parser here without importing the model (``harvest parse`` loads the parser
alone); ``discovery_options`` builds the section when a command runs.
"""

from __future__ import annotations

import argparse
import re
import shlex
from typing import TYPE_CHECKING

from harvester.cli.errors import UsageError

if TYPE_CHECKING:
    from harvester.model.discovery import DiscoveryOptions

#: The section's fields as the command line names them.
_FLAGS = {
    "use_robots": "--no-robots",
    "use_known_paths": "--no-known-paths",
    "extra_known_paths": "--known-path",
    "normalize_homepage_url": "--keep-site-path",
}
_WHERE = re.compile(r"(?P<reason>.*?) - at `\$\.(?P<field>\w+)(?:\[(?P<index>\d+)\])?`", re.S)
_LONGEST = re.compile(r"Expected `array` of length <= (?P<most>\d+)")


def discovery_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sitemap discovery (default: robots.txt, then the well-known paths)")
    add = group.add_argument
    add("--no-robots", action="store_true", help="do not read robots.txt for sitemaps (its rules still apply to pages)")
    add("--no-known-paths", action="store_true", help="do not probe the well-known paths (/sitemap.xml and others)")
    add(
        "--known-path",
        action="append",
        default=[],
        metavar="PATH",
        help="also probe PATH, relative to the site (e.g. sitemaps/main.xml); repeatable",
    )
    add(
        "--keep-site-path",
        action="store_true",
        help="discover under the site URL's path, not its root (robots.txt and the known paths there)",
    )


def discovery_options(args: argparse.Namespace) -> DiscoveryOptions | None:
    """The ``discovery`` section the flags ask for (None: the default discovery); a contradiction or a bad
    path is a usage error naming the flag."""
    robots, known, extra, keep = args.no_robots, args.no_known_paths, args.known_path, args.keep_site_path
    if not (robots or known or extra or keep):
        return None
    if getattr(args, "sitemap", None):
        raise UsageError("--sitemap: a job that names its sitemaps runs no discovery: leave out the discovery options")
    if robots and known:
        raise UsageError("--no-robots with --no-known-paths: no sitemap would be looked for")
    if extra and known:
        raise UsageError("--known-path with --no-known-paths: an extra path is probed with the well-known ones")
    from harvester.model.base import ValidationError
    from harvester.model.discovery import DiscoveryOptions

    fields = {
        "use_robots": not robots,
        "use_known_paths": not known,
        "extra_known_paths": tuple(extra),
        "normalize_homepage_url": not keep,
    }
    try:
        return DiscoveryOptions.model_validate(fields)
    except ValidationError as exc:
        raise UsageError(_message(str(exc))) from None


def discovery_flags(options: DiscoveryOptions | None) -> list[str]:
    """The flags that ask for ``options`` (``harvest jobs`` and a crawl's word on a job it does not resume)."""
    if options is None:
        return []
    flags = ["--no-robots"] if not options.use_robots else []
    flags += ["--no-known-paths"] if not options.use_known_paths else []
    flags += [f"--known-path {shlex.quote(path)}" for path in options.extra_known_paths]
    return flags + (["--keep-site-path"] if not options.normalize_homepage_url else [])


def _message(error: str) -> str:
    where = _WHERE.match(error)
    if where is None:
        return f"discovery options: {error}"
    flag, reason = _FLAGS.get(where["field"], where["field"]), where["reason"]
    if where["index"] is not None:
        return f"{flag} {reason}"  # (the reason begins with the path, quoted)
    longest = _LONGEST.match(reason)
    if longest:
        return f"{flag}: at most {longest['most']} paths"
    return f"{flag}: {reason}"
