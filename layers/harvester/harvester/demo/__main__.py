"""`make demo`: serve the live demo site on 127.0.0.1, crawl it, change it, and crawl it again.

The second crawl is the point: it asks only for what changed (conditional requests for the rest, answered
304 or not even sent), stores only new versions, and says what changed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from harvester.demo.live import LiveSite

ALLOW = ["--allow-network", "127.0.0.0/8"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the demo site on 127.0.0.1, crawl it, change it, re-crawl.")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--broken", type=int, default=5)
    parser.add_argument("--state-dir", type=Path, default=Path(".harvest-demo"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.state_dir, ignore_errors=True)
    site = LiveSite(pages=args.pages, sitemaps=4, gzip_last=True, images_every=10)
    for n in range(args.broken):
        site.add(f"/pages/missing-{n}.html", status=404)
    state = ["--state-dir", str(args.state_dir)]
    with site.serving():
        base = site.url("/")
        print(
            f"Demo site on {base} : robots.txt -> sitemap index -> 4 sitemaps (one gzipped),"
            f" {args.pages} pages, {args.broken} broken links\n"
        )
        status = _run(["sitemaps", base, *ALLOW])
        if status == 0:
            status = _run(["crawl", base, *state, *ALLOW])
        if status == 0:
            site.reset_log()
            pages = site.page_paths()
            for path in pages[1:4]:
                site.change(path)
            site.add(f"/pages/{args.pages}.html")
            site.add(f"/pages/{args.pages + 1}.html")
            site.unlist(pages[10])
            site.unlist(pages[11])
            site.fail(pages[20])
            print(
                "The site changes: 3 pages edited, 2 added, 2 no longer in its sitemaps, 1 now answers 404;"
                " their lastmods move. Crawl again: only what is due or changed is fetched.\n"
            )
            status = _run(["crawl", base, *state, *ALLOW])
            asked = site.page_hits()
            print(
                f"The site saw {len(asked)} page requests in that crawl"
                f" ({sum(h.conditional for h in asked)} conditional) and {len(site.hits) - len(asked)} for"
                " robots.txt and sitemaps (conditional where they were read before).\n"
            )
        if status == 0:
            status = _run(["changes", *state])
    if status == 0:
        where = args.state_dir
        print(
            f"Change feed of the latest job:  .venv/bin/harvest changes --state-dir {where} [--format csv]\n"
            f"The site in the crawl database: .venv/bin/harvest report --site {base} --state-dir {where}\n"
            f"Jobs, progress and results:     .venv/bin/harvest report --state-dir {where}\n"
            f"The pages as WARC (and CDXJ):   {where}/documents/warc/<job>/\n"
            f"The crawl report, in a browser: {where}/documents/jobs/<job>/report.html"
        )
    return status


def _run(arguments: list[str]) -> int:
    print("$ harvest " + " ".join(arguments), flush=True)
    status = subprocess.run([sys.executable, "-m", "harvester", *arguments], check=False).returncode
    print(flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
