"""The job options of the command line as a job request and a fetch policy, and pydantic's complaints about
them in the command line's words."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from harvester.cli.errors import UsageError
from harvester.fetch import FetchPolicy, policy_for
from harvester.model.messages import JobRequest


def job_request(args: argparse.Namespace, *, fetch_pages: bool | None = None, site: str | None = None) -> JobRequest:
    fields = {
        "site": site or args.site,
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
    if getattr(args, "rate_limit_delay", None) is not None:
        fields["rate_limit_delay"] = args.rate_limit_delay
    if getattr(args, "job_id", None):
        fields["job_id"] = args.job_id
    try:
        return JobRequest(**fields)
    except ValidationError as exc:
        raise UsageError(_validation_message(exc)) from None


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
}
#: URL refusals (harvester.urls) in words.
_URL_REASONS = {
    "not_http": "not an http(s) URL: give it whole, with its scheme (https://example.com/)",
    "no_host": "no host name",
    "malformed": "not a well-formed URL",
    "too_long": "longer than 2048 characters",
}


def _validation_message(exc: ValidationError) -> str:
    """pydantic's complaint about a job request, in the command line's words: the option as it is typed,
    the value as it was given, the reason without pydantic's phrasing."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        code = message.rpartition(": ")[2]
        if code in _URL_REASONS:
            message = _URL_REASONS[code]
        elif message.startswith("Input should be "):
            message = "must be " + message.removeprefix("Input should be ")
        given = error.get("input")
        if field == "site":
            problems.append(f"site {given!r}: {message}")
        elif isinstance(given, dict | tuple | list) or field not in FLAGS:
            problems.append(f"{FLAGS.get(field, field or 'input')}: {message}")
        else:
            problems.append(f"{FLAGS[field]} {given}: {message}")
    return "; ".join(problems)


def fetch_policy(args: argparse.Namespace) -> FetchPolicy:
    try:
        return policy_for(args.allow_network, args.user_agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
