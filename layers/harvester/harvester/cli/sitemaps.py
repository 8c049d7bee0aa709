"""``harvest sitemaps``: discovery only, the sitemap tree or every page it lists."""

from __future__ import annotations

import argparse
import asyncio
import sys

from msgspec import to_builtins

from harvester.api.pages import Discovery
from harvester.cli.errors import EXIT_FAILED, EXIT_OK
from harvester.cli.options import fetch_policy, job_request
from harvester.cli.reporting import dump_json, listed_lines
from harvester.model.records import JobStatus
from harvester.sitemap import PageEntry


def run_sitemaps(args: argparse.Namespace) -> int:
    request = job_request(args, fetch_pages=False)  # validates the options, naming a bad one
    discovery = Discovery(
        request.site,
        sitemaps=request.sitemaps,
        include=request.include,
        exclude=request.exclude,
        sitemap_include=request.sitemap_include,
        sitemap_exclude=request.sitemap_exclude,
        scope=request.scope,
        max_depth=request.max_depth,
        rate_limit_delay=request.rate_limit_delay,
        **(to_builtins(request.select) if request.select is not None else {}),
        **(to_builtins(request.reading) if request.reading is not None else {}),
        **(request.discovery.model_dump() if request.discovery is not None else {}),  # (USP's names, as the API's)
    )
    discovery.policy = fetch_policy(args)

    async def stream() -> None:
        sys.stdout.flush()
        # Bytes straight to the stream under the text layer where there is one (not decoded to be encoded).
        out = getattr(sys.stdout, "buffer", None)
        write = out.write if out is not None else (lambda data: sys.stdout.write(data.decode()))
        async for lines in discovery.batches(listed_lines if args.format == "jsonl" else _no_lines):
            write(lines)
        if out is not None:
            out.flush()

    asyncio.run(stream())
    tree = discovery.tree
    assert tree is not None
    if args.format == "json":
        dump_json(tree.to_json(), sys.stdout)
    elif args.format == "tree":
        print(tree.render(show_absent=args.show_absent))
    if args.format != "tree":  # (the tree shows them in its own text; data on stdout, failures on stderr)
        for node in tree.invalid():
            print(f"harvest: {node.url}: {node.status}: {node.error or 'no reason recorded'}", file=sys.stderr)
    if tree.status is not JobStatus.COMPLETED:
        if args.format != "tree" or not tree.invalid():
            print(f"harvest: {request.site}: no sitemap of the site could be read", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _no_lines(sitemap: str, listed: list[tuple[str, PageEntry]]) -> bytes:
    return b""
