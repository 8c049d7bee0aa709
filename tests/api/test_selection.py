"""The selection of entries in the Python API (issue 43, items 1-3): by their fields, the callables, the
alternates as pages, the language; through the real parser against a site served on 127.0.0.1. The
fixtures and expectations of the peers' own tests are translated where they have one (named in each)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harvester import iter_pages, sitemap_tree_for_homepage
from harvester.demo import serve
from harvester.sitemap import ChildSitemap, PageEntry

LOOPBACK = "127.0.0.0/8"
URLSET = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:xhtml="http://www.w3.org/1999/xhtml"'
NEWS = ' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"'
IMAGE = ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"'

# Scrapy, tests/test_spider_sitemap.py, test_sitemap_filter
SCRAPY_FILTER = f"""<?xml version="1.0" encoding="UTF-8"?>
{URLSET}>
    <url><loc>http://www.example.com/english/</loc><lastmod>2010-01-01</lastmod></url>
    <url><loc>http://www.example.com/portuguese/</loc><lastmod>2005-01-01</lastmod></url>
</urlset>"""
# Scrapy, tests/test_spider_sitemap.py, test_alternate_url_locs
SCRAPY_ALTERNATES = f"""<?xml version="1.0" encoding="UTF-8"?>
{URLSET}>
    <url>
        <loc>http://www.example.com/english/</loc>
        <xhtml:link rel="alternate" hreflang="de" href="http://www.example.com/deutsch/"/>
        <xhtml:link rel="alternate" hreflang="de-ch" href="http://www.example.com/schweiz-deutsch/"/>
        <xhtml:link rel="alternate" hreflang="it" href="http://www.example.com/italiano/"/>
        <xhtml:link rel="alternate" hreflang="it"/><!-- wrong tag without href -->
    </url>
</urlset>"""
# Scrapy, tests/test_spider_sitemap.py, test_sitemap_filter_with_alternate_links
SCRAPY_FILTER_ALTERNATES = f"""<?xml version="1.0" encoding="UTF-8"?>
{URLSET}>
    <url>
        <loc>http://www.example.com/english/article_1/</loc><lastmod>2010-01-01</lastmod>
        <xhtml:link rel="alternate" hreflang="de" href="http://www.example.com/deutsch/article_1/"/>
    </url>
    <url><loc>http://www.example.com/english/article_2/</loc><lastmod>2015-01-01</lastmod></url>
</urlset>"""
# Scrapy, tests/test_spider_sitemap.py, test_sitemapindex_filter
SCRAPY_INDEX = """<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
    <sitemap><loc>http://www.example.com/sitemap1.xml</loc><lastmod>2004-01-01T20:00:00+00:00</lastmod></sitemap>
    <sitemap><loc>http://www.example.com/sitemap2.xml</loc><lastmod>2005-01-01</lastmod></sitemap>
</sitemapindex>"""
# trafilatura, tests/sitemaps_tests.py, test_extraction: resources/sitemap-hreflang.xml (its <url> entries)
TRAFILATURA_HREFLANG = (
    f"""<?xml version="1.0" encoding="UTF-8"?>
{URLSET}>
"""
    + "".join(
        f"""  <url>
    <loc>http://www.example.com/{loc}/page.html</loc>
    <xhtml:link rel="alternate" hreflang="de" href="http://www.example.com/deutsch/page.html"/>
    <xhtml:link rel="alternate" hreflang="de-ch" href="http://www.example.com/schweiz-deutsch/page.html"/>
    <xhtml:link rel="alternate" hreflang="en" href="http://www.example.com/english/page.html"/>
  </url>
"""
        for loc in ("english", "deutsch", "schweiz-deutsch")
    )
    + "</urlset>"
)
# trafilatura, tests/sitemaps_tests.py, test_extraction: "XML sitemap with matching hreflang links"
TRAFILATURA_ONE = f"""<?xml version="1.0" encoding="UTF-8"?>
{URLSET}><url><loc>https://example.org/page</loc>
<xhtml:link rel="alternate" hreflang="de" href="https://example.org/de/page"/></url></urlset>"""
# trafilatura, tests/sitemaps_tests.py, test_extraction: "TXT links + language"
TRAFILATURA_TEXT = "https://test.org/en/1\nhttps://test.org/en/2\nhttps://test.org/es/3\n"
# An index of sitemaps by language: trafilatura also judges the sitemaps' URLs.
LANGUAGE_INDEX = """<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
    <sitemap><loc>http://www.example.com/de/sitemap.xml</loc></sitemap>
    <sitemap><loc>http://www.example.com/fr/sitemap.xml</loc></sitemap>
    <sitemap><loc>http://www.example.com/sitemap-misc.xml</loc></sitemap>
</sitemapindex>"""
FIELDS = f"""<?xml version="1.0" encoding="UTF-8"?>
{URLSET}{NEWS}{IMAGE}>
    <url><loc>http://www.example.com/a</loc><lastmod>2026-03-01</lastmod><priority>0.9</priority>
      <changefreq>daily</changefreq></url>
    <url><loc>http://www.example.com/b</loc><lastmod>2025-06-01</lastmod><priority>0.3</priority>
      <changefreq>monthly</changefreq><image:image><image:loc>http://www.example.com/b.png</image:loc></image:image></url>
    <url><loc>http://www.example.com/c</loc><changefreq>weekly</changefreq></url>
    <url><loc>http://www.example.com/d</loc><news:news><news:publication><news:name>N</news:name>
      <news:language>en</news:language></news:publication>
      <news:publication_date>2026-02-15T10:00:00Z</news:publication_date><news:title>D</news:title></news:news></url>
</urlset>"""


def _write(root: Path, base: str) -> None:
    files = {
        "filter.xml": SCRAPY_FILTER,
        "alternates.xml": SCRAPY_ALTERNATES,
        "filter-alternates.xml": SCRAPY_FILTER_ALTERNATES,
        "index.xml": SCRAPY_INDEX,
        "sitemap1.xml": SCRAPY_FILTER.replace("english", "one").replace("portuguese", "two"),
        "sitemap2.xml": SCRAPY_FILTER.replace("english", "three").replace("portuguese", "four"),
        "hreflang.xml": TRAFILATURA_HREFLANG,
        "one.xml": TRAFILATURA_ONE,
        "lang.txt": TRAFILATURA_TEXT,
        "languages.xml": LANGUAGE_INDEX,
        "de/sitemap.xml": SCRAPY_FILTER.replace("english", "de/eins").replace("portuguese", "de/zwei"),
        "fr/sitemap.xml": SCRAPY_FILTER.replace("english", "fr/un").replace("portuguese", "fr/deux"),
        "sitemap-misc.xml": SCRAPY_FILTER.replace("english", "misc"),
        "fields.xml": FIELDS,
    }
    for name, text in files.items():
        for host in ("http://www.example.com", "https://example.org", "https://test.org"):
            text = text.replace(host, base)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("selection")
    with serve(root) as url:
        _write(root, url)
        yield url


def paths(base: str, sitemap: str, **options: object) -> list[str]:
    pages = iter_pages(f"{base}/", sitemaps=[f"{base}/{sitemap}"], allow_networks=[LOOPBACK], **options)
    return [page.url.removeprefix(base) for page in pages]


def dropped(base: str, sitemap: str, **options: object) -> dict[str, int]:
    tree = sitemap_tree_for_homepage(
        f"{base}/", sitemaps=[f"{base}/{sitemap}"], allow_networks=[LOOPBACK], keep_pages=False, **options
    )
    counts: dict[str, int] = {}
    for node in tree.all_sitemaps():
        for reason, n in node.dropped.items():
            counts[reason] = counts.get(reason, 0) + n
    return counts


# --- 1. entries by their fields


def test_the_entry_filter_keeps_what_it_returns_true_for(base):
    """Scrapy, tests/test_spider_sitemap.py, test_sitemap_filter: a filter on the lastmod's year."""
    assert paths(base, "filter.xml") == ["/english/", "/portuguese/"]
    after_2008 = paths(base, "filter.xml", entry_filter=lambda e: e.last_modified.year > 2008)
    assert after_2008 == ["/english/"]
    assert dropped(base, "filter.xml", entry_filter=lambda e: e.last_modified.year > 2008) == {"entry_filter": 1}


def test_since_and_before_choose_by_the_lastmod(base):
    """The same case as Scrapy's test_sitemap_filter, by the option rather than a callable."""
    assert paths(base, "filter.xml", since="2008-01-01") == ["/english/"]
    assert paths(base, "filter.xml", before=datetime(2008, 1, 1, tzinfo=UTC)) == ["/portuguese/"]
    assert dropped(base, "filter.xml", since="2008-01-01") == {"lastmod_before_since": 1}


def test_a_duration_is_taken_back_from_the_start_of_the_run(base):
    assert paths(base, "fields.xml", since=timedelta(days=365 * 30)) == ["/a", "/b", "/c", "/d"]
    since = datetime.now(UTC) - datetime(2026, 2, 1, tzinfo=UTC)  # (a and d are later; b is older; c has none)
    assert paths(base, "fields.xml", since=since) == ["/a", "/c", "/d"]
    assert paths(base, "fields.xml", since=f"{since.days}d", require_lastmod=True) == ["/a", "/d"]


def test_an_entry_without_a_lastmod_is_kept_unless_one_is_required(base):
    """The news entry is dated by its publication date; the entry without either is kept, unless required."""
    assert paths(base, "fields.xml", since="2026-01-01") == ["/a", "/c", "/d"]
    assert paths(base, "fields.xml", since="2026-01-01", require_lastmod=True) == ["/a", "/d"]
    assert dropped(base, "fields.xml", since="2026-01-01", require_lastmod=True) == {
        "lastmod_before_since": 1,
        "no_lastmod": 1,
    }


def test_priority_changefreq_and_extensions(base):
    assert paths(base, "fields.xml", min_priority=0.5) == ["/a", "/c", "/d"]  # (c and d: 0.5 by default)
    assert paths(base, "fields.xml", changefreq=["daily", "weekly"]) == ["/a", "/c"]
    assert paths(base, "fields.xml", extensions=["image"]) == ["/b"]
    assert paths(base, "fields.xml", extensions=["news", "video"]) == ["/d"]
    assert dropped(base, "fields.xml", extensions=["news"], min_priority=0.5) == {
        "priority_below_min": 1,
        "no_chosen_extension": 2,
    }


def test_the_entry_filter_sees_every_field_and_extension(base):
    seen: list[PageEntry] = []
    paths(base, "fields.xml", entry_filter=lambda e: seen.append(e) or True)
    by_url = {e.url.removeprefix(base): e for e in seen}
    assert by_url["/a"].priority == 0.9 and by_url["/a"].change_frequency == "daily"
    assert by_url["/b"].images[0].loc == f"{base}/b.png"
    assert by_url["/d"].news is not None and by_url["/d"].news.title == "D"


def test_child_sitemaps_by_their_index_lastmod(base):
    """Scrapy, tests/test_spider_sitemap.py, test_sitemapindex_filter: the index's children by year."""
    assert paths(base, "index.xml") == ["/one/", "/two/", "/three/", "/four/"]
    assert paths(base, "index.xml", sitemap_since="2005-01-01") == ["/three/", "/four/"]
    chosen = paths(base, "index.xml", child_filter=lambda c: c.last_modified.year > 2004)
    assert chosen == ["/three/", "/four/"]
    assert dropped(base, "index.xml", sitemap_since="2005-01-01") == {"sitemap_lastmod_before_since": 1}


def test_the_child_filter_sees_the_child_sitemap(base):
    seen: list[ChildSitemap] = []
    paths(base, "index.xml", child_filter=lambda c: seen.append(c) or False)
    assert [(c.url.removeprefix(base), c.last_modified.year) for c in seen] == [
        ("/sitemap1.xml", 2004),
        ("/sitemap2.xml", 2005),
    ]
    assert dropped(base, "index.xml", child_filter=lambda c: False) == {"sitemap_child_filter": 2}


def test_a_bad_moment_is_refused_naming_the_option(base):
    with pytest.raises(ValueError, match=r"neither a date.*\$\.since`\Z"):
        iter_pages(f"{base}/", since="last week")
    with pytest.raises(ValueError, match=r"ISO 639-1.*\$\.lang`\Z"):
        iter_pages(f"{base}/", lang="german")


# --- 2. alternates as pages


def test_alternates_are_listed_after_their_entry(base):
    """Scrapy, tests/test_spider_sitemap.py, test_alternate_url_locs (the link without href is no alternate)."""
    assert paths(base, "alternates.xml") == ["/english/"]
    assert paths(base, "alternates.xml", alternates=True) == [
        "/english/",
        "/deutsch/",
        "/schweiz-deutsch/",
        "/italiano/",
    ]


def test_an_alternate_knows_the_entry_it_came_from(base):
    pages = list(
        iter_pages(f"{base}/", sitemaps=[f"{base}/alternates.xml"], allow_networks=[LOOPBACK], alternates=True)
    )
    by_url = {page.url.removeprefix(base): page for page in pages}
    assert by_url["/deutsch/"].extensions == {"alternate_of": f"{base}/english/", "hreflang": "de"}
    assert by_url["/deutsch/"].sitemap == f"{base}/alternates.xml"
    assert "alternate_of" not in by_url["/english/"].extensions


def test_alternates_repeated_by_every_entry_of_a_group_are_listed_once_and_not_counted(base):
    """trafilatura's sitemap-hreflang.xml: three entries, each naming the group's three pages."""
    listed = paths(base, "hreflang.xml", alternates=True)
    assert listed == ["/english/page.html", "/deutsch/page.html", "/schweiz-deutsch/page.html"]
    assert dropped(base, "hreflang.xml", alternates=True) == {"duplicate_in_sitemap": 2}  # (two locs seen before)


def test_alternates_pass_the_page_patterns(base):
    assert paths(base, "alternates.xml", alternates=True, exclude=["*/italiano/*"]) == [
        "/english/",
        "/deutsch/",
        "/schweiz-deutsch/",
    ]


def test_the_entry_filter_may_replace_an_entry_by_an_alternate(base):
    """Scrapy, tests/test_spider_sitemap.py, test_sitemap_filter_with_alternate_links: the filter sets the
    entry's loc to its /deutsch/ alternate, and leaves out the entries without one."""

    def german(entry: PageEntry) -> bool | str:
        return next((a.href for a in entry.alternates if "/deutsch/" in a.href), False)

    assert paths(base, "filter-alternates.xml") == ["/english/article_1/", "/english/article_2/"]
    assert paths(base, "filter-alternates.xml", entry_filter=german) == ["/deutsch/article_1/"]


# --- 3. languages


def test_lang_keeps_the_alternates_in_the_language(base):
    """trafilatura, tests/sitemaps_tests.py, test_extraction: sitemap-hreflang.xml with target_lang "de"
    gives the German pages (de and de-ch), whichever entry names them."""
    assert paths(base, "hreflang.xml", lang="de") == ["/deutsch/page.html", "/schweiz-deutsch/page.html"]
    assert paths(base, "hreflang.xml", lang="en") == ["/english/page.html"]
    assert dropped(base, "hreflang.xml", lang="fr") == {"other_language": 3}


def test_lang_lists_an_entry_at_its_alternate_in_the_language(base):
    """trafilatura, tests/sitemaps_tests.py, test_extraction: "XML sitemap with matching hreflang links"."""
    assert paths(base, "one.xml", lang="de") == ["/de/page"]


def test_lang_judges_urls_without_alternates_by_their_path(base):
    """trafilatura, tests/sitemaps_tests.py, test_extraction: "TXT links + language" (en/1, en/2 kept)."""
    assert paths(base, "lang.txt", lang="en") == ["/en/1", "/en/2"]
    assert dropped(base, "lang.txt", lang="en") == {"other_language": 1}


def test_lang_skips_the_child_sitemaps_of_another_language(base):
    assert paths(base, "languages.xml", lang="de") == ["/de/eins/", "/de/zwei/", "/misc/", "/portuguese/"]
    assert dropped(base, "languages.xml", lang="de") == {"sitemap_other_language": 1}
