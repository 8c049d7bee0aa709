"""The Python API without AWS: the sitemap tree, pages as a stream, USP's callbacks, sitemap patterns."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harvester import Discovery, SitemapTree, aiter_pages, iter_pages, sitemap_tree_for_homepage
from tests.support import LOOPBACK, harvest_json, jsonl

ALLOW = {"allow_networks": [LOOPBACK]}
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def test_the_tree_of_a_site(site_factory):
    site = site_factory(pages=50, broken=3, sitemaps=3)

    tree = sitemap_tree_for_homepage(f"{site.base_url}/", **ALLOW)

    robots, *probes = tree.children
    assert robots.url == f"{site.base_url}/robots.txt" and robots.kind == "robots"
    (index,) = robots.children
    assert index.kind == "index" and [c.url for c in index.children] == list(site.sitemap_urls[1:])
    assert [c.page_count for c in index.children] == [18, 18, 17] and index.children[-1].kind == "urlset"
    assert len(probes) == 13 and all(p.status == "absent" and p.origin == "known_path" for p in probes)
    assert tree.distinct_pages == 53 and tree.invalid() == [] and tree.status.value == "completed"
    assert tree.to_json()["children"][0]["children"][0]["kind"] == "index"
    assert tree.render().splitlines()[-1] == "53 pages in 4 sitemaps"


def test_pages_come_with_what_their_sitemap_says(site_factory):
    site = site_factory(pages=30, broken=0, sitemaps=2)

    pages = list(iter_pages(f"{site.base_url}/", **ALLOW))

    assert sorted(p.url for p in pages) == sorted(site.page_urls)
    first = next(p for p in pages if p.url.endswith("/pages/1.html"))
    assert first.last_modified is not None and first.change_frequency in {"daily", "weekly", "monthly"}
    assert first.sitemap in site.sitemap_urls and first.extensions["images"][0]["loc"].endswith("/img/0.jpg")


class SlowSite:
    """robots.txt lists a quick sitemap and a slow one; the slow one answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.base = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                pages = {"/quick.xml": ["q1", "q2"], "/slow.xml": ["s1"]}
                if self.path == "/robots.txt":
                    body = f"Sitemap: {site.base}/quick.xml\nSitemap: {site.base}/slow.xml\n"
                elif self.path in pages:
                    if self.path == "/slow.xml":
                        time.sleep(site.delay)
                    locs = "".join(f"<url><loc>{site.base}/{p}</loc></url>" for p in pages[self.path])
                    body = f"<urlset {NS}>{locs}</urlset>"
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


@pytest.fixture
def slow_site() -> Iterator[SlowSite]:
    site = SlowSite(delay=2.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), site.handler())
    server.daemon_threads = True
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield site
    server.shutdown()
    server.server_close()


def test_pages_stream_while_other_sitemaps_are_still_being_read(slow_site):
    start = time.monotonic()
    arrivals = []
    for page in iter_pages(f"{slow_site.base}/", **ALLOW):
        arrivals.append((page.url.rsplit("/", 1)[1], time.monotonic() - start))
    names = [name for name, _ in arrivals]
    assert sorted(names) == ["q1", "q2", "s1"]
    quick = max(t for name, t in arrivals if name.startswith("q"))
    slow = next(t for name, t in arrivals if name == "s1")
    assert quick < 1.5 <= slow  # the quick sitemap's pages were out before the slow one had answered


def test_leaving_the_stream_early_stops_the_discovery(slow_site):
    before = threading.active_count()
    start = time.monotonic()
    for page in iter_pages(f"{slow_site.base}/", **ALLOW):
        assert page.url.rsplit("/", 1)[1] in {"q1", "q2"}
        break
    assert time.monotonic() - start < 5
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name == "harvest-discovery"]


def test_the_async_stream_and_the_tree_afterwards(site_factory):
    site = site_factory(pages=12, broken=0, sitemaps=2)

    async def collect() -> tuple[list[str], int, list[str]]:
        discovery = Discovery(f"{site.base_url}/", **ALLOW)
        urls = [page.url async for page in discovery.pages()]
        assert discovery.tree is not None
        again = [page.url async for page in aiter_pages(f"{site.base_url}/", **ALLOW)]
        return urls, discovery.tree.distinct_pages, again

    urls, counted, again = asyncio.run(collect())
    assert sorted(urls) == sorted(site.page_urls) == sorted(again) and counted == 12


def test_a_stream_keeps_no_page_for_its_tree_unless_asked(site_factory):
    site = site_factory(pages=12, broken=0, sitemaps=2)

    async def trees() -> tuple[SitemapTree, SitemapTree]:
        streamed, kept = (
            Discovery(f"{site.base_url}/", **ALLOW),
            Discovery(f"{site.base_url}/", keep_pages=True, **ALLOW),
        )
        assert len([p async for p in streamed.pages()]) == len([p async for p in kept.pages()]) == 12
        assert streamed.tree is not None and kept.tree is not None
        return streamed.tree, kept.tree

    streamed, kept = asyncio.run(trees())
    assert streamed.spool_path is None and streamed.sub_sitemaps[0].pages == []  # (robots.txt lists no page)
    with pytest.raises(RuntimeError, match="keep_pages=True"):
        next(streamed.all_pages())
    assert sorted(p.url for p in kept.all_pages()) == sorted(site.page_urls)


def news_site(root, base):
    (root / "robots.txt").write_text(f"Sitemap: {base}/index.xml\n")
    children = ["pages.xml", "news_1.xml", "news_2.xml"]
    (root / "index.xml").write_text(
        f"<sitemapindex {NS}>"
        + "".join(f"<sitemap><loc>{base}/{c}</loc></sitemap>" for c in children)
        + "</sitemapindex>"
    )
    for name, pages in (("pages.xml", ["a", "b"]), ("news_1.xml", ["news/1"]), ("news_2.xml", ["news/2"])):
        locs = "".join(f"<url><loc>{base}/{p}</loc></url>" for p in pages)
        (root / name).write_text(f"<urlset {NS}>{locs}</urlset>")


def test_usp_callbacks_choose_the_sitemaps_to_follow(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    news_site(root, base)
    calls = []

    def list_callback(urls, level, parents):
        calls.append(("list", list(urls), level, set(parents)))
        return [u for u in urls if not u.endswith("news_2.xml")]

    def callback(url, level, parents):
        calls.append(("one", url, level, set(parents)))
        return not url.endswith("news_1.xml")

    pages = list(iter_pages(f"{base}/", recurse_callback=callback, recurse_list_callback=list_callback, **ALLOW))

    assert sorted(p.url for p in pages) == [f"{base}/a", f"{base}/b"]
    # robots.txt's children: level 0, robots.txt as the parent; the index's children: level 1, both parents.
    robots, index = f"{base}/robots.txt", f"{base}/index.xml"
    assert ("list", [index], 0, {robots}) in calls
    assert ("list", [f"{base}/{c}" for c in ("pages.xml", "news_1.xml", "news_2.xml")], 1, {robots, index}) in calls
    # The list callback goes first: news_2.xml, left out by it, never reaches the per-URL callback.
    assert ("one", f"{base}/news_1.xml", 1, {robots, index}) in calls
    assert not [c for c in calls if c[0] == "one" and c[1].endswith("news_2.xml")]
    # The well-known locations are the site's own children, fetched whatever the callbacks say (as USP does).
    assert not [c for c in calls if f"{base}/sitemap.xml" in c[1]]


def test_the_recurse_callbacks_never_see_the_well_known_locations(served_dir, tmp_path):
    """USP applies its callbacks to the children of robots.txt and of indexes only: with robots.txt declaring
    /news.xml and a callback that follows news sitemaps, /sitemap.xml (a well-known path) is still read."""
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    (root / "robots.txt").write_text(f"Sitemap: {base}/news.xml\n")
    for name, pages in (("news.xml", ["news/1"]), ("sitemap.xml", ["a", "b"])):
        locs = "".join(f"<url><loc>{base}/{p}</loc></url>" for p in pages)
        (root / name).write_text(f"<urlset {NS}>{locs}</urlset>")
    asked: list[object] = []

    def news_only(url, level, parents):
        asked.append(url)
        return "news" in url

    def every_one(urls, level, parents):
        asked.extend(urls)
        return urls

    options = {"recurse_callback": news_only, "recurse_list_callback": every_one, **ALLOW}
    pages = sorted(p.url for p in iter_pages(f"{base}/", **options))

    assert pages == [f"{base}/a", f"{base}/b", f"{base}/news/1"]
    assert asked == [f"{base}/news.xml", f"{base}/news.xml"]  # robots.txt's child, once to each callback


def test_sitemap_patterns_from_the_command_line(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    news_site(root, base)

    result = harvest_json(
        "crawl", f"{base}/", "--state-dir", str(tmp_path / "s"), "--allow-network", LOOPBACK, "--quiet",
        "--no-pages", "--sitemap-exclude", "*/news_*",
    )  # fmt: skip

    assert sorted(r["url"] for r in jsonl(Path(result["processed_urls"]))) == [f"{base}/a", f"{base}/b"]


def test_bad_options_name_the_input():
    with pytest.raises(ValueError, match=re.escape("ftp://example.com/")):
        Discovery("ftp://example.com/")
    with pytest.raises(ValueError, match=re.escape("300.0.0.0/8")):
        Discovery("https://example.com/", allow_networks=["300.0.0.0/8"])


def test_a_discovery_keeps_nothing_and_holds_its_readers_back_for_a_slow_consumer(site_factory, monkeypatch):
    """Ephemeral: no crawl records, no stored documents, no result; and while the consumer is slow, the
    pages waiting for it stay bounded (the readers wait), so memory does not grow with the site."""
    import harvester.api.pages as pages_module
    from harvester.adapters.local.runner import LocalHarvest

    monkeypatch.setattr(pages_module, "_HANDOVER", 20)
    site = site_factory(pages=4000, broken=0, sitemaps=2)
    waiting: list[int] = []
    opened: list[LocalHarvest] = []
    real_open = LocalHarvest.open.__func__  # type: ignore[attr-defined]

    def spying_open(cls, state_dir, **kwargs):
        context = real_open(cls, state_dir, **kwargs)

        class Spy:
            def __enter__(self):
                harvest = context.__enter__()
                opened.append(harvest)
                return harvest

            def __exit__(self, *exc):
                harvest = opened[-1]
                waiting.append(sum(1 for _ in harvest.crawldb.site_urls(harvest.store.all_jobs()[0].request.origin)))
                documents = harvest.state_dir / "documents"
                waiting.append(sum(1 for f in documents.rglob("*") if f.is_file()) if documents.exists() else 0)
                return context.__exit__(*exc)

        return Spy()

    monkeypatch.setattr(LocalHarvest, "open", classmethod(spying_open))
    real_put = pages_module._Handover.put
    most = [0]

    def put(self, batch, pages):
        real_put(self, batch, pages)
        most[0] = max(most[0], self.waiting)

    monkeypatch.setattr(pages_module._Handover, "put", put)

    async def slow_consumer() -> list[str]:
        urls = []
        # (sitemaps a few milliseconds apart: at the default pace each is read before the next may start)
        async for page in Discovery(f"{site.base_url}/", rate_limit_delay=0.001, **ALLOW).pages():
            urls.append(page.url)
            if len(urls) % 25 == 0:
                await asyncio.sleep(0.001)  # the readers get the loop meanwhile
        return urls

    urls = asyncio.run(slow_consumer())
    assert sorted(urls) == sorted(site.page_urls)
    assert opened and opened[0].ephemeral
    assert waiting == [0, 0]  # no crawl record, no document (sitemap, listing or result) was written
    # Bounded by the handover (20) plus a batch from each of the two readers, whatever the number of pages;
    # without the pauses, every page could be waiting here.
    assert most[0] <= 20 + 2 * opened[0].store.record_batch < len(urls) / 2


@pytest.mark.parametrize("at_once", [2, 6])
def test_sitemaps_are_read_a_few_at_a_time(site_factory, monkeypatch, at_once):
    """Parsing is one thread's work: readers beyond ``sitemaps_read_at_once`` would only hold more in
    memory, so the others wait for their turn (and with a higher setting they do overlap)."""
    from harvester.pipeline.sitemap_step import parsing

    monkeypatch.setenv("HARVEST_SITEMAPS_READ_AT_ONCE", str(at_once))
    # (urlsets of 2,000 URLs arrive in several reads each: readers allowed side by side are, however busy the
    # machine, where urlsets of one read each could be read one after the other)
    site = site_factory(pages=12000, broken=0, sitemaps=6, gzip_last=False)
    active: set[int] = set()
    most = [0]

    class Tracked(parsing.SitemapParser):
        def feed(self, chunk):  # type: ignore[no-untyped-def]
            active.add(id(self))
            most[0] = max(most[0], len(active))
            return super().feed(chunk)

        def close(self, **kwargs):  # type: ignore[no-untyped-def]
            active.discard(id(self))
            return super().close(**kwargs)

    monkeypatch.setattr(parsing, "SitemapParser", Tracked)
    import harvester.api.pages as pages_module

    monkeypatch.setattr(pages_module, "_HANDOVER", 20)  # readers are held back often: they take turns

    async def slow_consumer() -> list[str]:
        urls = []
        # (sitemaps a few milliseconds apart: at the default pace each is read before the next may start)
        async for page in Discovery(f"{site.base_url}/", rate_limit_delay=0.001, **ALLOW).pages():
            urls.append(page.url)
            if len(urls) % 25 == 0:
                await asyncio.sleep(0)
        return urls

    urls = asyncio.run(slow_consumer())
    assert sorted(urls) == sorted(site.page_urls)
    assert most[0] == 2 if at_once == 2 else most[0] > 2


def test_a_batch_its_consumer_cannot_make_ends_the_discovery_with_that_error(site_factory):
    """The pages are counted before the consumer makes its batch: if it cannot, the discovery ends with the
    error rather than finishing with those pages missing from what it handed out."""
    site = site_factory(pages=1200, broken=0, sitemaps=1)  # batches of 500: three of them
    made: list[int] = []

    def make(sitemap: str, listed: list) -> int:
        if made:
            raise RuntimeError(f"cannot make a batch of {len(listed)} pages of {sitemap}")
        made.append(len(listed))
        return len(listed)

    async def consume() -> list[int]:
        return [n async for n in Discovery(f"{site.base_url}/", **ALLOW).batches(make)]

    with pytest.raises(RuntimeError, match="cannot make a batch of"):
        asyncio.run(consume())
    assert made  # the first batch was made and handed out before the failing one
