"""Discovery across tasks: recursion through the ancestor chain each task carries, a sitemap shared by two
indexes read once, and the depth limit."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import LOOPBACK, harvest

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def index(base: str, *children: str) -> str:
    entries = "".join(f"<sitemap><loc>{base}/{c}</loc></sitemap>" for c in children)
    return f"<sitemapindex {NS}>{entries}</sitemapindex>"


def urlset(base: str, *pages: str) -> str:
    return f"<urlset {NS}>" + "".join(f"<url><loc>{base}/{p}</loc></url>" for p in pages) + "</urlset>"


def write_site(root: Path, files: dict[str, str]) -> None:
    for name, body in files.items():
        (root / name).write_text(body)


def test_recursion_is_caught_across_tasks_and_a_shared_sitemap_is_read_once(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    write_site(
        root,
        {
            "robots.txt": f"Sitemap: {base}/a.xml\n",
            "a.xml": index(base, "a.xml", "b.xml", "shared.xml"),  # lists itself
            "b.xml": index(base, "a.xml", "shared.xml", "pages.xml"),  # lists its parent
            "shared.xml": urlset(base, "p1", "p2"),
            "pages.xml": urlset(base, "p2", "p3"),
        },
    )

    run = harvest("sitemaps", f"{base}/", "--allow-network", LOOPBACK)

    assert run.returncode == 0, run.stderr
    tree = run.stdout
    assert tree.count("shared.xml  [urlset]") == 1  # one sitemap URL, one reading per job
    assert f"{base}/a.xml  [index]  2 sitemaps  1 entry dropped (invalid_sitemap 1)" in tree
    # shared.xml hangs under a.xml, which listed it first: b.xml shows one followed child.
    assert f"{base}/b.xml  [index]  1 sitemap  1 entry dropped (invalid_sitemap 1)" in tree
    assert f"{base}/a.xml: recursion: lists itself (listed in {base}/a.xml)" in tree
    assert f"{base}/a.xml: recursion: is an ancestor of the sitemap listing it (listed in {base}/b.xml)" in tree
    assert tree.splitlines()[-1] == "3 pages in 4 sitemaps"  # p2 listed twice, counted once
    pages = harvest("sitemaps", f"{base}/", "--allow-network", LOOPBACK, "--format", "jsonl").stdout.splitlines()
    assert sorted(json.loads(p)["url"] for p in pages) == [f"{base}/p1", f"{base}/p2", f"{base}/p3"]


def test_the_depth_limit_stops_a_runaway_chain(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    chain = {f"d{n}.xml": index(base, f"d{n + 1}.xml") for n in range(1, 8)}
    write_site(root, {"robots.txt": f"Sitemap: {base}/d1.xml\n", **chain, "d8.xml": urlset(base, "deep")})

    shallow = harvest("sitemaps", f"{base}/", "--allow-network", LOOPBACK, "--max-depth", "4").stdout
    deep = harvest("sitemaps", f"{base}/", "--allow-network", LOOPBACK).stdout

    # robots.txt is depth 1, d1 depth 2 ... d3 depth 4: d3's child would be depth 5.
    assert "d3.xml  [index]  1 entry dropped (sitemap_too_deep 1)" in shallow
    assert (
        "d4.xml" not in shallow.split("d3.xml")[1].split("\n")[0]
        and shallow.splitlines()[-1] == "0 pages in 3 sitemaps"
    )
    assert deep.splitlines()[-1] == "1 page in 8 sitemaps"
