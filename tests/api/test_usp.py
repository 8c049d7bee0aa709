"""USP code runs on Harvester's tree unchanged: the same USP-style code, given ultimate-sitemap-parser's tree
and Harvester's of one loopback site, sees the same sitemaps, the same pages and the same callbacks' effect."""

from __future__ import annotations

import asyncio
import gc
import logging
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harvester import InvalidSitemap, sitemap_tree_for_homepage
from tests.support import LOOPBACK

ALLOW = {"allow_networks": [LOOPBACK]}
URLSET = (
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    ' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"'
    ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">{}</urlset>'
)
NEWS = (
    "<news:news><news:publication><news:name>The Daily</news:name><news:language>en</news:language>"
    "</news:publication><news:publication_date>2024-03-0{n}T10:00:00+00:00</news:publication_date>"
    "<news:title>Story {n}</news:title></news:news>"
)


def urlset(base: str, pages: list[str], *, news: bool = False) -> str:
    entries = []
    for n, page in enumerate(pages, 1):
        extra = NEWS.format(n=n) if news else f"<image:image><image:loc>{base}/img/{n}.jpg</image:loc></image:image>"
        entries.append(
            f"<url><loc>{base}/{page}</loc><lastmod>2024-02-0{n}T08:00:00+00:00</lastmod>"
            f"<changefreq>weekly</changefreq><priority>0.{n}</priority>{extra}</url>"
        )
    return URLSET.format("".join(entries))


def usp_site(root: Path, base: str) -> None:
    """robots.txt declares an index of a news sitemap, a page sitemap (which lists a news page again) and a
    missing one; /sitemap.xml, at a well-known path, is declared nowhere."""
    (root / "robots.txt").write_text(f"User-agent: *\nSitemap: {base}/index.xml\n")
    children = "".join(f"<sitemap><loc>{base}/{c}</loc></sitemap>" for c in ("news.xml", "pages.xml", "missing.xml"))
    (root / "index.xml").write_text(
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{children}</sitemapindex>'
    )
    (root / "news.xml").write_text(urlset(base, ["news/1", "news/2"], news=True))
    (root / "pages.xml").write_text(urlset(base, ["a", "b", "c", "news/1"]))
    (root / "sitemap.xml").write_text(urlset(base, ["d", "e"]))


def usp_style(tree: Any) -> dict[str, Any]:
    """What USP code reads of a tree, with USP's names only (``type(...).__name__`` for USP's classes)."""

    def sitemap(s: Any) -> tuple[Any, ...]:
        invalid = type(s).__name__ == "InvalidSitemap"
        return (s.url, invalid, [c.url for c in s.sub_sitemaps], len(s.pages), bool(invalid and s.reason))

    def page(p: Any) -> tuple[Any, ...]:
        story = p.news_story
        return (
            p.url,
            float(p.priority),  # (USP: a Decimal; Harvester: a float)
            p.last_modified,
            getattr(p.change_frequency, "value", p.change_frequency),  # (USP: an enum; Harvester: its value)
            (story.title, story.publish_date, story.publication_name, story.publication_language) if story else None,
            [i.loc for i in p.images] if p.images else None,
        )

    return {
        "url": tree.url,
        "sub_sitemaps": [s.url for s in tree.sub_sitemaps],
        "pages": list(tree.pages),
        "sitemaps": [sitemap(s) for s in tree.all_sitemaps()],
        "all_pages": [page(p) for p in tree.all_pages()],
        "each_pages": [[page(p) for p in s.pages] for s in tree.all_sitemaps()],
    }


@pytest.fixture
def site(served_dir: Callable[[Path], str], tmp_path: Path) -> str:
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    usp_site(root, base)
    return base


def usp_tree(homepage: str, **callbacks: Any) -> Any:
    usp = pytest.importorskip("usp.tree", reason="ultimate-sitemap-parser (the dev extra) compares the trees")
    logging.getLogger("usp").setLevel(logging.CRITICAL)
    return usp.sitemap_tree_for_homepage(homepage, **callbacks)


def test_usp_code_reads_the_same_tree_from_usp_and_from_harvester(site):
    harvester = usp_style(sitemap_tree_for_homepage(f"{site}/", **ALLOW))

    assert harvester == usp_style(usp_tree(f"{site}/"))


def test_the_tree_of_usp_with_the_facts_of_the_site(site):
    """The same, against what the site serves (for a machine without USP installed)."""
    tree = sitemap_tree_for_homepage(f"{site}/", **ALLOW)

    robots, index = f"{site}/robots.txt", f"{site}/index.xml"
    assert tree.url == f"{site}/" and tree.pages == []
    assert [s.url for s in tree.sub_sitemaps] == [robots, f"{site}/sitemap.xml"]
    listed = ("news.xml", "pages.xml", "missing.xml")
    assert [s.url for s in tree.all_sitemaps()] == [
        robots,
        index,
        *(f"{site}/{n}" for n in listed),
        f"{site}/sitemap.xml",
    ]
    (missing,) = [s for s in tree.all_sitemaps() if isinstance(s, InvalidSitemap)]
    assert missing.url == f"{site}/missing.xml" and "404" in missing.reason and missing.pages == []
    assert all(s.sub_sitemaps == [] for s in tree.all_sitemaps() if s.url.endswith(("news.xml", "pages.xml")))
    # Page by page, once per listing sitemap (news/1 twice), in the order of the sitemaps, as USP yields them.
    paths = ["news/1", "news/2", "a", "b", "c", "news/1", "d", "e"]
    assert [p.url for p in tree.all_pages()] == [f"{site}/{p}" for p in paths]
    assert tree.distinct_pages == 7 and sum(s.page_count for s in tree.all_sitemaps()) == 8
    news = next(s for s in tree.all_sitemaps() if s.url.endswith("news.xml"))
    story = news.pages[1].news_story
    assert (story.title, story.publish_date.isoformat(), story.publication_name) == (
        "Story 2",
        "2024-03-02T10:00:00+00:00",
        "The Daily",
    )
    first = next(iter(tree.all_pages()))
    assert first.priority == 0.1 and first.change_frequency == "weekly" and first.images is None
    page_d = next(p for p in tree.all_pages() if p.url.endswith("/d"))
    assert [i.loc for i in page_d.images] == [f"{site}/img/1.jpg"] and page_d.news_story is None


def test_the_pages_of_a_tree_live_on_disk_until_the_tree_is_gone(site):
    tree = sitemap_tree_for_homepage(f"{site}/", **ALLOW)
    spool = tree.spool_path
    assert spool is not None and spool.exists()
    pages = tree.all_pages()
    del tree
    gc.collect()
    assert spool.exists()  # (an iterator of the pages still reads them)
    assert len(list(pages)) == 8
    del pages
    gc.collect()
    assert not spool.exists()

    with sitemap_tree_for_homepage(f"{site}/", **ALLOW) as tree:
        spool = tree.spool_path
    assert spool is not None and not spool.exists()


def test_the_callbacks_have_the_same_effect_on_usp(site):
    def news_only(url: str, level: int, parents: set[str]) -> bool:
        return "news" in url or url.endswith("index.xml")

    usp = usp_tree(f"{site}/", recurse_callback=news_only)
    ours = sitemap_tree_for_homepage(f"{site}/", recurse_callback=news_only, **ALLOW)

    assert [p.url for p in ours.all_pages()] == [p.url for p in usp.all_pages()]


def test_a_tree_keeps_its_pages_on_disk_written_a_batch_at_a_time(site_factory, monkeypatch):
    """USP (>= 1.0) keeps pages in temporary files, not in memory; so does the tree: its pages cost the
    discovery, and a walk through them, no more memory than a batch (20,000 pages in a list: some 40 MB)."""
    from harvester.adapters.local.page_spool import PageSpool

    site = site_factory(pages=20_000, broken=0, sitemaps=4, gzip_last=False)
    writes: list[int] = []
    real_add = PageSpool.add

    def add(self, sitemap, first, listed):
        writes.append(len(listed))
        real_add(self, sitemap, first, listed)

    monkeypatch.setattr(PageSpool, "add", add)
    tracemalloc.start()
    try:
        tree = sitemap_tree_for_homepage(f"{site.base_url}/", rate_limit_delay=0.001, **ALLOW)
        listed = sum(1 for _ in tree.all_pages())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert listed == sum(writes) == tree.distinct_pages == 20_000
    assert len(writes) <= 20_000 / 500 + 4  # batches of the store's 500, one short one per sitemap at most
    assert peak < 20_000_000


def test_a_discovery_left_early_removes_the_pages_it_kept(site, monkeypatch):
    from harvester import Discovery
    from harvester.adapters.local.page_spool import PageSpool

    spools: list[PageSpool] = []
    real_init = PageSpool.__init__

    def init(self):
        real_init(self)
        spools.append(self)

    monkeypatch.setattr(PageSpool, "__init__", init)

    async def first_page() -> str:
        pages = Discovery(f"{site}/", keep_pages=True, **ALLOW).pages()
        async for page in pages:
            await pages.aclose()
            return page.url
        raise AssertionError("no page")

    assert asyncio.run(first_page()).startswith(site)
    (spool,) = spools
    assert spool.closed and not spool.directory.exists()


def test_a_sitemap_read_again_gives_its_pages_once():
    """A reading resumed at its checkpoint, or started over on a changed sitemap, gives its positions again:
    they replace what was written from there on, so the tree never shows a page twice for one listing."""
    from harvester.adapters.local.page_spool import PageSpool
    from harvester.sitemap import PageEntry

    def batch(*names: str) -> list[tuple[str, PageEntry]]:
        return [(f"https://example.com/{n}", PageEntry(f"https://example.com/{n}")) for n in names]

    spool = PageSpool()
    spool.add("https://example.com/s.xml", 0, batch("a", "b"))
    spool.add("https://example.com/s.xml", 2, batch("c", "d"))
    spool.add("https://example.com/s.xml", 2, batch("c", "d", "e"))  # resumed at the checkpoint after b
    spool.add("https://example.com/t.xml", 0, batch("a"))
    assert [p.url.rsplit("/", 1)[1] for p in spool.pages("https://example.com/s.xml")] == ["a", "b", "c", "d", "e"]
    spool.add("https://example.com/s.xml", 0, batch("x"))  # started over: the sitemap changed meanwhile
    assert [p.url for p in spool.pages("https://example.com/s.xml")] == ["https://example.com/x"]
    assert [p.sitemap for p in spool.pages("https://example.com/t.xml")] == ["https://example.com/t.xml"]
    spool.close()
    assert not spool.path.exists()
    with pytest.raises(RuntimeError, match="closed"):
        list(spool.pages("https://example.com/t.xml"))
