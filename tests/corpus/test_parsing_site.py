"""One nasty site read end to end: every point of parsing.md (discovery, detection, leniency, values,
extensions, URL hygiene, recursion), served over HTTP and read by the real ``harvest sitemaps`` command.

The site is read twice (``--format json`` for the tree, ``--format jsonl`` for the pages); each test then
checks one behaviour on that output. Broken sitemaps sit next to good ones on purpose: a broken one must
cost its own pages and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.corpus import fixtures as f
from tests.corpus import sites as s
from tests.corpus.cli import FAST_RETRIES, ONLY_127_0_0_1, Run, Tree, harvest, pages_by_sitemap
from tests.corpus.server import Hit, Route, RouteServer


@dataclass
class ParsedSite:
    base: str
    tree_run: Run
    pages_run: Run
    tree: Tree
    pages: dict[str, dict[str, dict[str, Any]]]  # sitemap URL -> page URL -> jsonl line
    hits: list[Hit]  # requests of the tree run

    def url(self, path: str) -> str:
        return self.base + path

    def node(self, path: str) -> dict[str, Any]:
        return self.tree[self.url(path)]

    def pages_of(self, path: str) -> dict[str, dict[str, Any]]:
        return self.pages.get(self.url(path), {})

    def page(self, scenario: str, n: int | str) -> str:
        return s.page(self.base, scenario, n)

    def fetches(self, path: str) -> int:
        return sum(1 for h in self.hits if h.path == path)


@pytest.fixture(scope="module")
def site(server: RouteServer) -> ParsedSite:
    s.parsing_site(server)
    args = ("sitemaps", server.base + "/", "--allow-network", ONLY_127_0_0_1)
    tree_run = harvest(*args, "--format", "json", env=FAST_RETRIES)
    hits = list(server.hits)
    server.reset_log()
    pages_run = harvest(*args, "--format", "jsonl", env=FAST_RETRIES)
    return ParsedSite(
        base=server.base,
        tree_run=tree_run,
        pages_run=pages_run,
        tree=Tree(tree_run.json()),
        pages=pages_by_sitemap(pages_run.jsonl()),
        hits=hits,
    )


def two_pages(site: ParsedSite, scenario: str) -> set[str]:
    return {site.page(scenario, 0), site.page(scenario, 1)}


# the job as a whole -------------------------------------------------------------------------------


def test_the_job_completes_and_the_good_sitemaps_give_all_their_pages(site):
    """Dozens of broken sitemaps on the site; the job still completes and the good ones are whole."""
    assert site.tree_run.returncode == 0, site.tree_run.stderr
    assert site.pages_run.returncode == 0, site.pages_run.stderr
    for path, scenario in ((s.GOOD, "good"), (s.RELATIVE, "relative"), (s.SHARED, "shared")):
        assert site.node(path)["status"] == "completed"
        assert site.node(path)["pages"] == 2
        assert set(site.pages_of(path)) == two_pages(site, scenario)


def test_the_site_node_holds_robots_txt_and_the_known_paths(site):
    """The top of the tree is the site; robots.txt and the known-path probes are its children."""
    top = site.tree.data
    assert top["url"] == site.url("/")
    children = {c["url"]: c["origin"] for c in top["children"]}
    assert children.pop(site.url("/robots.txt")) == "robots"
    assert set(children.values()) == {"known_path"}
    assert set(children) == {site.url(p) for p in s.KNOWN_PATHS if p != s.DECLARED_KNOWN_PATH}


# discovery -----------------------------------------------------------------------------------------


def test_robots_txt_sitemap_lines_in_any_spelling_are_declared_once_each_in_order(site):
    """``sitemap:``, ``SITEMAP:``, ``Site-map:``, odd spacing, a trailing comment, relative URLs and a
    UTF-8 byte-order mark; repeated lines are dropped and the first order kept."""
    robots = site.node("/robots.txt")
    assert (robots["status"], robots["kind"]) == ("completed", "robots")
    declared = site.tree.children_of(site.url("/robots.txt"))
    assert declared[:5] == [site.url(p) for p in (s.RELATIVE, s.UPPER, s.SITE_MAP, s.SPACED, s.DECLARED_KNOWN_PATH)]
    assert len(declared) == len(set(declared))
    assert declared[-1] == site.url(s.GOOD)  # declared in the middle, repeated at the end: first place kept
    for path in (s.RELATIVE, s.UPPER, s.SITE_MAP, s.SPACED):
        assert site.node(path)["origin"] == "declared"
        assert site.node(path)["pages"] == 2


def test_every_well_known_path_not_declared_is_probed_and_a_missing_one_is_absent(site):
    """The 14 paths of ultimate-sitemap-parser are tried; a 404 / 410 / 403 there is quietly absent."""
    for path in s.KNOWN_PATHS:
        if path != s.DECLARED_KNOWN_PATH:
            assert site.fetches(path) == 1, path
            assert site.node(path)["origin"] == "known_path"
    for path, status in ((s.KNOWN_GONE, 410), (s.KNOWN_FORBIDDEN, 403), ("/sitemap-news.xml", 404)):
        node = site.node(path)
        assert (node["status"], node.get("http_status")) == ("absent", status)
        assert str(status) in node["error"]


def test_a_well_known_path_declared_in_robots_txt_is_read_once_as_declared(site):
    node = site.node(s.DECLARED_KNOWN_PATH)
    assert (node["origin"], node["status"], node["pages"]) == ("declared", "completed", 2)
    assert site.fetches(s.DECLARED_KNOWN_PATH) == 1


def test_a_known_path_redirecting_to_a_sitemap_declared_in_robots_txt_is_recursion(site):
    node = site.node(s.KNOWN_TO_DECLARED)
    assert node["status"] == "invalid"
    assert node["error"].startswith("recursion")
    assert node["final_url"] == site.url(s.GOOD)
    assert node["pages"] == 0
    assert site.node(s.GOOD)["pages"] == 2  # the declared sitemap itself is untouched


def test_known_paths_that_are_sitemaps_are_read(site):
    """A gzipped sitemap labelled octet-stream, a text list at ``/sitemap`` and a news sitemap."""
    assert site.node(s.KNOWN_GZIPPED)["kind"] == "urlset"
    assert set(site.pages_of(s.KNOWN_GZIPPED)) == two_pages(site, "known-gzipped")
    assert site.node(s.KNOWN_TEXT)["kind"] == "text"
    assert set(site.pages_of(s.KNOWN_TEXT)) == two_pages(site, "known-text")
    assert site.node(s.KNOWN_NEWS)["pages"] == 1


def test_an_html_soft_404_at_a_known_path_is_absent_with_the_reason(site):
    """A CMS answering 200 with an HTML page for /sitemap.xml: no sitemap there, and no crash."""
    for path in (s.KNOWN_SOFT_404, s.KNOWN_SOFT_404_NO_DOCTYPE):
        node = site.node(path)
        assert (node["status"], node["pages"], node.get("http_status")) == ("absent", 0, 200)
        assert "not a sitemap: root element <html>" in node["error"]
    empty = site.node(s.KNOWN_EMPTY)
    assert empty["status"] == "absent"
    assert "empty" in empty["error"]


@pytest.mark.parametrize("path", [s.SOFT_404_DECLARED, s.INDEXED_SOFT_404])
def test_an_html_page_at_a_declared_or_indexed_sitemap_is_invalid_not_a_crash(site, path):
    node = site.node(path)
    assert (node["status"], node["pages"]) == ("invalid", 0)
    assert "not a sitemap: root element <html>" in node["error"]


def test_a_declared_sitemap_that_404s_is_failed_with_the_status(site):
    """Only a probe is quietly absent; a sitemap robots.txt promised and that is missing is a failure."""
    node = site.node(s.DECLARED_404)
    assert (node["status"], node.get("http_status")) == ("failed", 404)
    assert "404" in node["error"]


# detection by content ------------------------------------------------------------------------------


def test_gzip_is_detected_by_its_magic_bytes_not_by_name_or_content_type(site):
    node = site.node(s.GZIP_AS_HTML)  # a .php URL served as text/html
    assert (node["status"], node["kind"]) == ("completed", "urlset")
    assert set(site.pages_of(s.GZIP_AS_HTML)) == two_pages(site, "gzip-as-html")


def test_a_gz_url_that_is_not_gzipped_still_parses(site):
    assert site.node(s.GZ_NOT_GZIPPED)["kind"] == "urlset"
    assert set(site.pages_of(s.GZ_NOT_GZIPPED)) == two_pages(site, "gz-not-gzipped")


@pytest.mark.parametrize(
    ("path", "scenario"),
    [
        (s.CE_GZIP, "ce-gzip"),
        (s.CE_DEFLATE, "ce-deflate"),
        (s.CE_RAW_DEFLATE, "ce-raw-deflate"),
        (s.CE_GZIP_AROUND_GZIP, "ce-gzip-around-gzip"),
    ],
)
def test_content_encoding_is_undone_once_then_a_gzipped_body_once_more(site, path, scenario):
    """gzip and deflate (zlib-wrapped or raw) Content-Encoding; and a .xml.gz sent with Content-Encoding
    gzip on top, which servers do, is unwrapped twice."""
    node = site.node(path)
    assert (node["status"], node["kind"]) == ("completed", "urlset")
    assert set(site.pages_of(path)) == two_pages(site, scenario)


def test_xml_is_recognised_after_a_bom_blank_lines_and_comments(site):
    assert site.node(s.BOM_AND_COMMENTS)["kind"] == "urlset"
    assert set(site.pages_of(s.BOM_AND_COMMENTS)) == two_pages(site, "bom-comments")


@pytest.mark.parametrize(
    ("path", "kind", "count"),
    [(s.INDEX, "index", 0), (s.RSS2, "rss", 3), (s.RSS1, "rss", 2), (s.ATOM1, "atom", 2), (s.ATOM03, "atom", 2)],
)
def test_the_root_element_decides_the_kind(site, path, kind, count):
    node = site.node(path)
    assert (node["status"], node["kind"], node["pages"]) == ("completed", kind, count)


def test_an_unknown_root_element_is_an_invalid_sitemap_with_the_reason(site):
    node = site.node(s.WRONG_ROOT)
    assert (node["status"], node["kind"], node["pages"]) == ("invalid", None, 0)
    assert "root element <catalog>" in node["error"]


def test_a_plain_text_sitemap_skips_lines_that_are_not_urls(site):
    """Served as text/html with CRLF line ends, a title, a comment, an ftp: URL and an HTML fragment."""
    node = site.node(s.TEXT_LIST)
    assert (node["status"], node["kind"]) == ("completed", "text")
    assert set(site.pages_of(s.TEXT_LIST)) == {site.page("text", n) for n in range(3)}
    assert node["warnings"]["not_a_url"] == 4


# leniency ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "scenario"), [(s.NS_NONE, "ns-none"), (s.NS_GOOGLE, "ns-google"), (s.NS_PREFIXED, "ns-prefixed")]
)
def test_missing_wrong_or_prefixed_namespaces_are_matched_on_local_names(site, path, scenario):
    assert site.node(path)["kind"] == "urlset"
    assert set(site.pages_of(path)) == two_pages(site, scenario)


def test_a_prefixed_urlset_keeps_its_fields(site):
    assert site.pages_of(s.NS_PREFIXED)[site.page("ns-prefixed", 0)]["priority"] == 0.9


@pytest.mark.parametrize(
    ("path", "scenario", "names"),
    [(s.UTF16, "utf16", ("ünïcödé", "東京")), (s.LATIN1, "latin1", ("café", "naïve"))],
)
def test_declared_encodings_other_than_utf8_are_honoured(site, path, scenario, names):
    assert site.node(path)["kind"] == "urlset"
    assert set(site.pages_of(path)) == {site.page(scenario, name) for name in names}


def test_an_index_whose_entries_have_no_loc_still_yields_its_children(site):
    """crawler-commons' leniency: ``<sitemap>URL</sitemap>``."""
    children = site.tree.children_of(site.url(s.INDEX_BARE))
    assert set(children) >= {site.url("/bare/a.xml"), site.url("/bare/b.xml")}
    assert set(site.pages_of("/bare/a.xml")) == two_pages(site, "bare-a")
    assert set(site.pages_of("/bare/b.xml")) == two_pages(site, "bare-b")


def test_whitespace_cdata_entities_and_unicode_blanks_around_a_loc_are_cleaned(site):
    assert set(site.pages_of(s.MESSY)) == {
        site.page("messy", "spaces"),
        site.page("messy", "cdata") + "?a=1&b=2",
        site.page("messy", "entities") + "?a=1&b=2&c=3",
        site.page("messy", "unicode-blanks"),
        site.page("messy", "cdata-padded"),
    }


def test_a_document_cut_mid_url_keeps_every_complete_entry_and_no_cut_url(site):
    """USP's case: fifty entries, the last one cut inside its <loc>, gives 49."""
    node = site.node(s.CUT_MID_URL)
    assert (node["status"], node["pages"]) == ("completed", 49)
    assert node["truncated"]
    assert set(site.pages_of(s.CUT_MID_URL)) == {site.page("cut", n) for n in range(49)}


def test_a_document_missing_its_closing_tag_keeps_all_fifty_entries(site):
    node = site.node(s.NO_CLOSING_TAG)
    assert node["pages"] == 50
    assert "</urlset>" in node["truncated"]


def test_a_download_cut_short_keeps_the_entries_that_arrived_whole(site):
    """The server promises the whole document and hangs up inside the 50th <loc>: the sitemap is read
    again a bounded number of times, then what arrived whole is kept and the sitemap marked truncated."""
    node = site.node(s.CUT_DOWNLOAD)
    assert node["status"] == "completed"
    assert "broken off" in node["truncated"]
    assert node["truncated"].endswith("(gave up after 3 attempts)")
    assert set(site.pages_of(s.CUT_DOWNLOAD)) == {site.page("download", n) for n in range(100, 149)}
    assert node["pages"] == 49


def test_a_download_cut_short_is_retried_a_bounded_number_of_times_and_hurts_nothing_else(site):
    """Whatever becomes of its entries, the broken download is given up on with the reason."""
    node = site.node(s.CUT_DOWNLOAD)
    assert node["status"] in ("completed", "failed")
    assert "broken off" in (node.get("error") or "") or node.get("truncated")
    assert site.fetches(s.CUT_DOWNLOAD) <= 9
    assert not any(url.endswith("/p/download/14") for url in site.pages_of(s.CUT_DOWNLOAD))


def test_rss_items_with_only_a_permalink_guid_still_yield_a_page(site):
    pages = site.pages_of(s.RSS2)
    assert set(pages) == {site.page("rss2", 0), site.page("rss2", "guid-only"), site.page("rss2", 2)}
    assert site.node(s.RSS2)["warnings"]["missing_loc"] == 1  # the item with a non-URL guid and no link


# values --------------------------------------------------------------------------------------------


def test_lastmod_in_every_w3c_form_and_rfc822_dates_in_feeds(site):
    values = site.pages_of(s.VALUES)
    expected = {
        "year": "2024-01-01T00:00:00+00:00",
        "month": "2024-03-01T00:00:00+00:00",
        "day": "2024-03-05T00:00:00+00:00",
        "minutes-z": "2024-03-05T14:30:00+00:00",
        "seconds-offset": "2024-03-05T14:30:15+02:00",
        "fraction": "2024-03-05T14:30:15.500000-05:00",
        "junk-date": None,
        "junk-priority": None,
    }
    for name, lastmod in expected.items():
        assert values[site.page("values", name)]["last_modified"] == lastmod, name
    rss = site.pages_of(s.RSS2)
    assert rss[site.page("rss2", 0)]["last_modified"] == "2024-03-05T14:30:00+00:00"
    assert rss[site.page("rss2", "guid-only")]["last_modified"] == "2024-03-05T14:30:00+01:00"  # "05 Mar 24"
    assert rss[site.page("rss2", 2)]["last_modified"] is None  # "the day before yesterday": null, not an error
    assert site.pages_of(s.RSS1)[site.page("rss1", 1)]["last_modified"] == "2024-03-01T00:00:00+00:00"
    assert site.pages_of(s.ATOM03)[site.page("atom03", 0)]["last_modified"] == "2003-12-13T18:30:02+00:00"
    assert site.node(s.VALUES)["warnings"]["invalid_lastmod"] == 1


def test_changefreq_is_case_insensitive_and_anything_else_is_null(site):
    values = site.pages_of(s.VALUES)
    expected = {
        "year": "daily",
        "month": "weekly",
        "minutes-z": "always",
        "junk-date": None,
        "junk-priority": "never",
        "negative-priority": None,
    }
    for name, changefreq in expected.items():
        assert values[site.page("values", name)]["change_frequency"] == changefreq, name
    assert site.node(s.VALUES)["warnings"]["invalid_changefreq"] == 1


def test_priority_defaults_to_one_half_and_a_bad_one_is_one_half_with_a_warning(site):
    values = site.pages_of(s.VALUES)
    expected = {
        "year": 0.8,
        "month": 1.0,
        "day": 0.0,
        "seconds-offset": 0.3,
        "fraction": 0.5,  # missing
        "junk-date": 0.5,  # 1.5
        "junk-priority": 0.5,  # "high"
        "negative-priority": 0.5,  # -0.1
    }
    for name, priority in expected.items():
        assert values[site.page("values", name)]["priority"] == priority, name
    assert site.node(s.VALUES)["warnings"]["invalid_priority"] == 3
    assert site.node(s.VALUES)["pages"] == 9  # no bad value costs its page


# extensions ----------------------------------------------------------------------------------------


def test_image_news_video_and_hreflang_extensions_reach_the_page_record(site):
    b = site.base
    full = site.pages_of(s.EXTENSIONS)[site.page("ext", "full")]
    assert full["images"] == [
        {
            "loc": f"{b}/img/a.jpg",
            "caption": "A & B",
            "title": "Title",
            "geo_location": "Lyon, France",
            "license": f"{b}/license",
        },
        {"loc": f"{b}/img/b.jpg"},
    ]
    assert full["news"] == {
        "title": "Big news",
        "publication_name": "The Daily",
        "publication_language": "fr",
        "publication_date": "2024-03-05T10:00:00+01:00",
        "keywords": ["a", "b", "c"],
        "genres": ["PressRelease", "Blog"],
    }
    (video,) = full["videos"]
    assert video["thumbnail_loc"] == f"{b}/v/thumb.jpg"
    assert (video["title"], video["description"], video["duration"]) == ("Clip", "A clip", 600)
    assert (video["content_loc"], video["player_loc"]) == (f"{b}/v/clip.mp4", f"{b}/v/player")
    assert video["publication_date"] == "2024-02-01T08:00:00+00:00"
    # Only links with rel="alternate", hreflang and href all present.
    assert full["alternates"] == [
        {"hreflang": "fr", "href": site.page("ext", "fr")},
        {"hreflang": "x-default", "href": site.page("ext", "full")},
    ]
    plain = site.pages_of(s.EXTENSIONS)[site.page("ext", "plain")]
    assert not {"images", "news", "videos", "alternates"} & set(plain)


# URL hygiene ---------------------------------------------------------------------------------------


def test_url_hygiene_keeps_http_urls_in_scope_once_and_counts_each_refusal(site):
    """ftp:, javascript:, mailto: (not_http); 2,049 characters (too_long, while 2,048 passes); another
    host, 127.0.0.2 included (out_of_scope); a second declaration, also after normalising (duplicate)."""
    node = site.node(s.HYGIENE)
    assert node["dropped"] == {"not_http": 3, "too_long": 1, "out_of_scope": 2, "duplicate_in_sitemap": 2}
    assert set(site.pages_of(s.HYGIENE)) == {
        site.page("hygiene", "ok"),
        s.long_url(site.base, s.LONGEST_URL),
        site.page("hygiene", "last"),
    }


def test_an_index_child_that_is_not_http_is_dropped_and_counted(site):
    node = site.node(s.HYGIENE_INDEX)
    assert node["dropped"] == {"sitemap_not_http": 2}
    assert site.tree.children_of(site.url(s.HYGIENE_INDEX)) == []  # good.xml: already part of the job


# one reading per sitemap, recursion, depth ---------------------------------------------------------


def test_a_sitemap_listed_by_two_indexes_is_read_once_per_job(site):
    """USP fetches it once per listing (its issue #13); here it is one node, one fetch, its pages once."""
    assert site.fetches(s.SHARED) == 1
    assert site.tree.parents[site.url(s.SHARED)] in (site.url(s.INDEX), site.url(s.INDEX_BARE))
    listed_as_page = [p for pages in site.pages.values() for p in pages if p in two_pages(site, "shared")]
    assert len(listed_as_page) == 2


def test_a_sitemap_listing_itself_or_its_ancestor_is_refused_as_recursion(site):
    loop, child = site.url(s.LOOP), site.url(s.LOOP_CHILD)
    assert site.tree.refusal(loop, parent=loop)["error"] == "recursion: lists itself"
    assert site.tree.refusal(loop, parent=child)["error"].startswith("recursion")
    assert site.node(s.LOOP)["dropped"] == {"invalid_sitemap": 1}
    assert site.node(s.LOOP_CHILD)["dropped"] == {"invalid_sitemap": 1}
    assert site.fetches(s.LOOP) == 1
    assert site.node("/loop/leaf.xml")["pages"] == 2  # the loop's real child is still read


def test_a_sitemap_redirecting_to_its_ancestor_is_recursion(site):
    node = site.node(s.TO_ANCESTOR_CHILD)
    assert node["status"] == "invalid"
    assert node["error"].startswith("recursion")
    assert node["final_url"] == site.url(s.TO_ANCESTOR)
    assert site.node("/ancestor/leaf.xml")["pages"] == 2


def test_a_sitemap_redirecting_to_one_the_job_already_has_is_a_duplicate(site):
    node = site.node(s.DUP_ALIAS)
    assert node["status"] == "duplicate"
    assert node["final_url"] == site.url(s.DUP_TARGET)
    assert site.url(s.DUP_TARGET) in node["error"]
    assert node["pages"] == 0
    assert site.node(s.DUP_TARGET)["pages"] == 2


def test_the_depth_limit_ends_a_runaway_chain(site):
    """robots.txt is depth 1, deep/1 depth 2 ... deep/9 depth 10: deep/10 would be depth 11."""
    last = site.url(s.DEEP.format(n=s.DEEPEST - 1))
    assert site.node(s.DEEP.format(n=s.DEEPEST - 1))["status"] == "completed"
    refused = site.tree.refusal(site.url(s.DEEP.format(n=s.DEEPEST)), parent=last)
    assert "max_depth" in refused["error"]
    assert site.url(s.DEEP.format(n=s.DEEPEST)) not in site.tree
    assert site.fetches(s.DEEP.format(n=s.DEEPEST)) == 0


def test_no_sitemap_is_fetched_twice_unless_a_redirect_leads_back_to_it(site):
    """Across the whole job a sitemap URL is processed once; only the redirects of this site (to good.xml,
    to dup/target.xml, to ancestor/index.xml) and the retried broken download fetch a path again."""
    again = {h.path for h in site.hits if site.fetches(h.path) > 1}
    assert again <= {s.GOOD, s.DUP_TARGET, s.TO_ANCESTOR, s.CUT_DOWNLOAD, "/robots.txt"}


# scope ---------------------------------------------------------------------------------------------

SCOPE_HOSTS = ("www.shop.invalid", "shop.invalid", "blog.shop.invalid", "www.other.invalid")


@pytest.mark.parametrize(
    ("scope", "kept"),
    [
        ("same-host", {"www.shop.invalid"}),
        ("same-domain", {"www.shop.invalid", "shop.invalid", "blog.shop.invalid"}),
        ("any", set(SCOPE_HOSTS)),
    ],
)
def test_page_scope_is_the_same_host_by_default_and_same_domain_or_any_on_request(server, scope, kept):
    """The job's site is www.shop.invalid; its sitemap (here on 127.0.0.1) lists pages on four hosts.
    Nothing but the sitemap is fetched, so the hosts need not exist."""
    server.add("/scope.xml", Route(f.urlset(*(f.url(f"http://{host}/page") for host in SCOPE_HOSTS))))
    args = ["--scope", scope] if scope != "same-host" else []
    run = harvest(
        "sitemaps",
        "http://www.shop.invalid/",
        "--sitemap",
        server.url("/scope.xml"),
        "--allow-network",
        ONLY_127_0_0_1,
        "--format",
        "jsonl",
        *args,
    )
    assert run.returncode == 0, run.stderr
    assert {line["url"] for line in run.jsonl()} == {f"http://{host}/page" for host in kept}
