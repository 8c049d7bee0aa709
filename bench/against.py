"""This tree against an earlier revision on the per-URL paths, with every job option off: what a change costs
the user who asks for none of it.

The base is a git revision (``--base``, default ``HEAD~1``), checked out in a temporary worktree. Three
measurements, each a fresh child process of the same interpreter with ``PYTHONPATH`` on one tree or the other,
rounds interleaved (base, this tree, base, ...) so that a slow spell of the machine falls on both alike:

* ``parse``: ``SitemapParser`` fed a 50,000-URL urlset in 64 KiB chunks (lastmod, changefreq, priority, an
  hreflang link and an image each; the plain-block reader takes its blocks);
* ``parse-exact``: the same with the plain-block reader off (every element through expat's handlers);
* ``sitemaps``: ``harvest sitemaps --format jsonl`` of a 20,000-URL site (an index of four urlsets) served on
  127.0.0.1, output to /dev/null;
* ``crawl``: ``harvest crawl --no-pages`` of the same site into a fresh state directory (every URL recorded).

Printed: each tree's best CPU seconds (user + system of the child: less disturbed by other load than wall
time) and median, and the ratio of this tree's best to the base's. The script measures; it always exits 0.

    python bench/against.py [--base REV] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "layers" / "harvester"))

from harvester.demo import serve  # noqa: E402

PARSE = """
import resource, sys
from harvester.sitemap.parser import SitemapParser
from harvester.sitemap.xml_parser import XmlParser
XmlParser.read_plain_blocks = sys.argv[2] == "plain"
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF)
parser = SitemapParser("https://www.example.com/sitemap.xml")
n = sum(len(parser.feed(data[i : i + 65536])) for i in range(0, len(data), 65536)) + len(parser.close())
after = resource.getrusage(resource.RUSAGE_SELF)
assert n == 50_000, n
print((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
"""


def write_urlset(path: Path, urls: int = 50_000) -> None:
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1" xmlns:xhtml="http://www.w3.org/1999/xhtml">\n'
    )
    rows = (
        f"<url><loc>https://www.example.com/section-{i % 50}/article-{i}.html</loc>"
        f"<lastmod>2026-11-{1 + i % 28:02d}T10:{i % 60:02d}:00+00:00</lastmod><changefreq>daily</changefreq>"
        f'<priority>0.{i % 10}</priority><xhtml:link rel="alternate" hreflang="de"'
        f' href="https://www.example.com/de/article-{i}.html"/><image:image>'
        f"<image:loc>https://img.example.com/{i}.jpg</image:loc></image:image></url>\n"
        for i in range(urls)
    )
    path.write_text(head + "".join(rows) + "</urlset>\n")


def write_site(root: Path, base: str) -> None:
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    for n in range(4):
        rows = "".join(
            f"<url><loc>{base}/pages/{n}/item-{i}.html</loc><lastmod>2026-0{1 + i % 9}-1{i % 10}T10:00:00+00:00"
            f"</lastmod><changefreq>daily</changefreq><priority>0.{1 + i % 9}</priority></url>\n"
            for i in range(5_000)
        )
        (root / f"{n}.xml").write_text(f'<?xml version="1.0"?>\n<urlset {ns}>\n{rows}</urlset>\n')
    children = "".join(f"<sitemap><loc>{base}/{n}.xml</loc></sitemap>" for n in range(4))
    (root / "sitemap_index.xml").write_text(f'<?xml version="1.0"?>\n<sitemapindex {ns}>{children}</sitemapindex>\n')
    (root / "robots.txt").write_text(f"User-agent: *\nSitemap: {base}/sitemap_index.xml\n")


def child_cpu(argv: list[str], tree: Path) -> float:
    """The CPU seconds of one child run with ``tree``'s engine (user + system)."""
    env = dict(os.environ, PYTHONPATH=f"{tree / 'layers' / 'harvester'}{os.pathsep}{tree}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if argv[1] == "-c":  # (the parse reports its own CPU, the parse alone)
        return float(run.stdout.split()[-1])
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD~1", help="the revision to compare with (default HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="harvester-against-") as tmp:
        work = Path(tmp)
        base_tree = work / "base"
        subprocess.run(
            ["git", "-C", str(HERE), "worktree", "add", "-q", "--detach", str(base_tree), args.base], check=True
        )
        try:
            urlset = work / "urlset.xml"
            write_urlset(urlset)
            site_root = work / "site"
            site_root.mkdir()
            with serve(site_root) as base_url:
                write_site(site_root, base_url.rstrip("/"))
                site = base_url.rstrip("/") + "/"
                harvest = [python, "-m", "harvester"]
                net = ["--allow-network", "127.0.0.0/8", "--rate-limit-delay", "0"]
                contenders = {
                    "parse": lambda: [python, "-c", PARSE, str(urlset), "plain"],
                    "parse-exact": lambda: [python, "-c", PARSE, str(urlset), "exact"],
                    "sitemaps": lambda: [*harvest, "sitemaps", site, *net, "--format", "jsonl"],
                    "crawl": lambda: [
                        *harvest, "crawl", site, *net, "--no-pages", "--quiet",
                        "--state-dir", tempfile.mkdtemp(dir=work),
                    ],
                }  # fmt: skip
                seconds: dict[tuple[str, str], list[float]] = {}
                for _ in range(args.rounds):
                    for name, argv in contenders.items():
                        for label, tree in (("base", base_tree), ("this", HERE)):
                            seconds.setdefault((name, label), []).append(child_cpu(argv(), tree))
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(base_tree)], check=False)
    print(f"CPU seconds, best and median of {args.rounds} interleaved rounds; base {args.base}")
    print(f"{'measure':<12} {'base best':>10} {'base med':>9} {'this best':>10} {'this med':>9} {'this/base':>10}")
    for name in contenders:
        base, this = seconds[(name, "base")], seconds[(name, "this")]
        print(
            f"{name:<12} {min(base):>10.3f} {statistics.median(base):>9.3f} {min(this):>10.3f}"
            f" {statistics.median(this):>9.3f} {min(this) / min(base):>10.2f}"
        )


if __name__ == "__main__":
    main()
