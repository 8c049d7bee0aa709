"""A URL listed by two sitemaps: the first listing makes the record, and what a later one adds in extensions
(a news sitemap's story after an RSS feed's item) is kept in the job's records, not thrown away: a kind the
record lacked, or the fields its news story lacked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import LOOPBACK, harvest, jsonl

NEWS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"'
#: What the news sitemap's story adds to the feed item's (which has only a title).
NEWS_ADDS = {"publication_name": "Daily", "publication_language": "en", "publication_date": "2026-11-20T00:00:00+00:00"}


def news_site(root: Path, base: str, stories: int) -> list[str]:
    urls = [f"{base}/story/{n}.html" for n in range(stories)]
    (root / "story").mkdir(parents=True)
    for n in range(stories):
        (root / "story" / f"{n}.html").write_text(f"story {n}")
    items = "".join(f"<item><title>t{n}</title><link>{u}</link></item>" for n, u in enumerate(urls))
    (root / "feed.rss").write_text(f'<?xml version="1.0"?><rss version="2.0"><channel>{items}</channel></rss>')
    entries = "".join(
        f"<url><loc>{u}</loc><news:news><news:publication><news:name>Daily</news:name><news:language>en"
        f"</news:language></news:publication><news:publication_date>2026-11-20</news:publication_date>"
        f"<news:title>Story {n}</news:title></news:news></url>"
        for n, u in enumerate(urls)
    )
    (root / "news.xml").write_text(f"<urlset {NEWS}>{entries}</urlset>")
    # One worker reads the sitemaps in the order robots.txt gives them: the feed first.
    (root / "robots.txt").write_text(f"Sitemap: {base}/feed.rss\nSitemap: {base}/news.xml\n")
    return urls


@pytest.mark.parametrize("pages", ["fetched", "--no-pages"])
def test_news_metadata_of_a_url_an_rss_feed_listed_first_is_kept(served_dir, tmp_path, pages):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    urls = news_site(root, base, 30)
    state = str(tmp_path / "state")
    flags = ("--no-pages",) if pages == "--no-pages" else ()

    run = harvest(
        "crawl", f"{base}/", "--state-dir", state, "--allow-network", LOOPBACK, "--concurrency", "1",
        "--rate-limit-delay", "0.0001", "--quiet", "--json", *flags,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["total_urls"] == 30  # (each URL once: the second listing is no second record)
    records = {r["url"]: r for r in jsonl(Path(result["processed_urls"]))}
    assert set(records) == set(urls)
    assert {r["sitemap"] for r in records.values()} == {f"{base}/feed.rss"}  # (the first listing made them)
    # The feed item's story (its title: the first listing's, which wins) with what the news sitemap adds.
    story = {url: {"title": f"t{n}", **NEWS_ADDS} for n, url in enumerate(urls)}
    assert {url: (records[url].get("extensions") or {}).get("news") for url in urls} == story
    report = harvest("report", result["job_id"], "--state-dir", state, "--format", "jsonl")
    shown = {r["url"]: r for r in map(json.loads, report.stdout.splitlines())}
    assert {url: shown[url]["extensions"]["news"] for url in urls} == story
