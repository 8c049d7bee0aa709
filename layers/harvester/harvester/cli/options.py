"""The job options of the command line as a job request and a fetch policy, and the job request's
complaints about them in the command line's words."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harvester.cli.discovery import discovery_options
from harvester.cli.errors import UsageError
from harvester.cli.reading import reading_rules
from harvester.cli.selection import selection_of
from harvester.fetch import FetchPolicy, policy_for
from harvester.model.base import ValidationError
from harvester.model.messages import JobRequest, Output, Refetch, Scope


def sites_given(args: argparse.Namespace, none: str) -> list[tuple[str, str]]:
    """The sites of the command line, then those of ``--sites`` (one a line, ``#`` comments), each with where
    it was given (for a complaint about it); ``none``: what a user who gave none is told."""
    sites: list[tuple[str, str]] = [(site, f"site {site!r}") for site in args.site]
    if args.sites is not None:
        try:
            lines = Path(args.sites).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--sites {args.sites}: cannot be read ({exc})") from None
        for number, line in enumerate(lines, 1):
            site = line.split("#", 1)[0].strip()
            if site:
                sites.append((site, f"--sites {args.sites} line {number}"))
    if not sites:
        raise UsageError(none)
    return sites


def site_request(args: argparse.Namespace, site: str, where: str) -> JobRequest:
    """``job_request`` for one of several sites, its complaint naming where the site was given (``sites_given``)."""
    try:
        request = job_request(args, site=site)
    except UsageError as exc:
        message = str(exc)
        raise UsageError(message if message.startswith(where) else f"{where}: {message}") from None
    note_root(site, request.site)
    return request


def note_root(given: str, site: str) -> None:
    """Says so when the site given was a page of it: a job crawls a site from its root (or, keeping the site's
    path, from that path as a folder: ``--keep-site-path``)."""
    parts, path = urlsplit(given.strip()), urlsplit(site).path
    if path == "/" and (parts.path not in ("", "/") or parts.query):
        print(f"harvest: {given.strip()}: a site is crawled from its root: {site}", file=sys.stderr)
    elif path != "/" and (parts.path.rstrip("/") != path.rstrip("/") or parts.query):
        print(f"harvest: {given.strip()}: the site's sitemaps are looked for under {site}", file=sys.stderr)


def job_request(args: argparse.Namespace, *, fetch_pages: bool | None = None, site: str | None = None) -> JobRequest:
    fields = {
        "site": args.site if site is None else site,
        "sitemaps": tuple(args.sitemap),
        "include": tuple(args.include),
        "exclude": tuple(args.exclude),
        "sitemap_include": tuple(args.sitemap_include),
        "sitemap_exclude": tuple(args.sitemap_exclude),
        "scope": args.scope,
        "max_depth": args.max_depth,
        "fetch_pages": (not getattr(args, "no_pages", False)) if fetch_pages is None else fetch_pages,
        "refetch": "all" if getattr(args, "full", False) else "due",
        "output": getattr(args, "output", "warc"),
    }
    discovery = discovery_options(args)
    if discovery is not None:
        fields["discovery"] = discovery
    if getattr(args, "rate_limit_delay", None) is not None:
        fields["rate_limit_delay"] = args.rate_limit_delay
    if getattr(args, "job_id", None):
        fields["job_id"] = args.job_id
    select = selection_of(args)
    if select is not None:
        fields["select"] = select
    if (reading := reading_rules(args)) is not None:
        fields["reading"] = reading
    try:
        return JobRequest.model_validate(fields)
    except ValidationError as exc:
        raise UsageError(_validation_message(exc, fields)) from None


#: The job request's fields as the command line names them.
FLAGS = {
    "rate_limit_delay": "--rate-limit-delay",
    "sitemaps": "--sitemap",
    "include": "--include",
    "exclude": "--exclude",
    "sitemap_include": "--sitemap-include",
    "sitemap_exclude": "--sitemap-exclude",
    "scope": "--scope",
    "max_depth": "--max-depth",
    "job_id": "--job-id",
    "fetch_pages": "--no-pages",
    "refetch": "--full",
    "output": "--output",
    "select": "--since/--lang...",
}
#: A refusal as msgspec and the records' rules word it: the reason, and where (``- at `$.field[i]```).
_WHERE = re.compile(r"(?P<reason>.*?)(?: - at `\$\.(?P<field>\w+)(?:\[(?P<index>\d+)\])?[^`]*`)?", re.S)
_EXPECTED = re.compile(r"Expected `(?P<type>\w+)`(?: (?P<op>[<>]=?) (?P<bound>\S+))?")
_BOUNDS = {">": "greater than", ">=": "greater than or equal to", "<": "less than", "<=": "less than or equal to"}
_CHOICES = {"scope": Scope, "refetch": Refetch, "output": Output}


def _validation_message(exc: ValidationError, fields: dict[str, Any]) -> str:
    """The job request's complaint, in the command line's words: the option as it is typed, the value as
    it was given, the reason without the decoder's phrasing."""
    where = _WHERE.fullmatch(str(exc))
    assert where is not None  # (the pattern matches any text)
    field, index = where["field"] or "", where["index"]
    message = where["reason"]
    given = fields.get(field)
    if index is not None and isinstance(given, tuple | list) and int(index) < len(given):
        given = given[int(index)]
    expected = _EXPECTED.match(message)
    if isinstance(given, str) and message.startswith(f"{given.strip()!r}: "):  # (a URL refused: urls.py)
        message = message[len(f"{given.strip()!r}: ") :]
    elif field in _CHOICES and message.startswith("Invalid enum value"):
        message = "must be one of " + ", ".join(choice.value for choice in _CHOICES[field])
    elif expected and expected["op"]:
        message = f"must be {_BOUNDS[expected['op']]} {expected['bound']}"
    elif expected and "matching regex" in message:
        message = "must be up to 128 letters, digits, '.', '_', ':' or '-', beginning with a letter or digit"
    elif expected:
        message = f"must be of type {expected['type']}"
    if field == "site":
        return f"site {given!r}: {message}"
    if isinstance(given, dict | tuple | list) or field not in FLAGS:
        return f"{FLAGS.get(field, field or 'input')}: {message}"
    return f"{FLAGS[field]} {given}: {message}"


def fetch_policy(args: argparse.Namespace) -> FetchPolicy:
    try:
        return policy_for(args.allow_network, args.user_agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
