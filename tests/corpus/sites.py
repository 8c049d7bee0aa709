"""The nasty sites: route tables that put every point of parsing.md and fetching-and-safety.md in front of
the real command.

Each ``*_site`` function fills a :class:`~tests.corpus.server.RouteServer` (one per test module) and the
module-level names say what each path is, so that a test reads as "this sitemap ... gives that". Page URLs
are ``base + /p/<scenario>/<n>``: every scenario has its own pages, so the jsonl lines of one scenario can
be picked out by their sitemap.

* :func:`parsing_site` -- discovery, detection, leniency, values, extensions, URL hygiene, recursion;
* :func:`limits_site`, :func:`big_site` -- gzip bombs, 51 MiB, 50,001 entries, billion laughs, 512 KiB robots.txt;
* :func:`fetching_site` -- redirects, retries, final errors, Content-Encodings, oversized and bombed pages;
* :func:`ssrf_site`, :func:`site_on_127_0_0_2` -- the deny list and disguised addresses;
* :func:`robots_site` (and two small ones) -- robots.txt rules, unreachable robots.txt, pacing;
* :func:`filtering_site` -- page and sitemap include / exclude patterns.
"""

from __future__ import annotations

from tests.corpus import fixtures as f
from tests.corpus.server import HTML, TEXT, XML, Route, RouteServer, not_found, redirect

# robots.txt declares these (some in odd spellings, some twice).
RELATIVE = "/declared/relative.xml"
UPPER = "/declared/upper.xml"
SITE_MAP = "/declared/site-map.xml"
SPACED = "/declared/spaced.xml"
DECLARED_KNOWN_PATH = "/sitemap_index.xml"  # a well-known path that robots.txt declares itself

GZIP_AS_HTML = "/feeds/gzip-as-html.php"
GZ_NOT_GZIPPED = "/plain.xml.gz"
CE_GZIP = "/ce-gzip.xml"
CE_DEFLATE = "/ce-deflate.xml"
CE_RAW_DEFLATE = "/ce-raw-deflate.xml"
CE_GZIP_AROUND_GZIP = "/ce-gzip-around.xml.gz"
BOM_AND_COMMENTS = "/bom-comments.xml"
INDEX = "/index.xml"
INDEX_BARE = "/index-bare.xml"
INDEXED_SOFT_404 = "/index/soft-404.xml"
RSS2 = "/feeds/rss2.xml"
RSS1 = "/feeds/rss1.rdf"
ATOM1 = "/feeds/atom1.xml"
ATOM03 = "/feeds/atom03.xml"
WRONG_ROOT = "/catalog.xml"
TEXT_LIST = "/list.txt"
SOFT_404_DECLARED = "/declared/soft-404.xml"
DECLARED_404 = "/declared/missing.xml"
NS_NONE = "/ns/none.xml"
NS_GOOGLE = "/ns/google.xml"
NS_PREFIXED = "/ns/prefixed.xml"
UTF16 = "/enc/utf16.xml"
LATIN1 = "/enc/latin1.xml"
MESSY = "/messy.xml"
CUT_MID_URL = "/cut/mid-url.xml"
NO_CLOSING_TAG = "/cut/no-closing-tag.xml"
CUT_DOWNLOAD = "/cut/download.xml"
VALUES = "/values.xml"
EXTENSIONS = "/extensions.xml"
HYGIENE = "/hygiene.xml"
HYGIENE_INDEX = "/hygiene-index.xml"
SHARED = "/shared.xml"
LOOP = "/loop/index.xml"
LOOP_CHILD = "/loop/child.xml"
TO_ANCESTOR = "/ancestor/index.xml"
TO_ANCESTOR_CHILD = "/ancestor/child.xml"
DUP_TARGET = "/dup/target.xml"
DUP_ALIAS = "/dup/alias.xml"
DEEP = "/deep/{n}.xml"
GOOD = "/good.xml"

# well-known paths, each set up to answer something different
KNOWN_SOFT_404 = "/sitemap.xml"
KNOWN_GZIPPED = "/sitemap.xml.gz"
KNOWN_TO_DECLARED = "/sitemap-index.xml"
KNOWN_TEXT = "/sitemap"
KNOWN_EMPTY = "/admin/config/search/xmlsitemap"
KNOWN_SOFT_404_NO_DOCTYPE = "/sitemap/sitemap-index.xml"
KNOWN_FORBIDDEN = "/.sitemap.xml"
KNOWN_GONE = "/sitemap-index.xml.gz"
KNOWN_NEWS = "/sitemap_news.xml"

#: The 14 well-known paths of ultimate-sitemap-parser, in its order.
KNOWN_PATHS = (
    "/sitemap.xml",
    "/sitemap.xml.gz",
    "/sitemap_index.xml",
    "/sitemap-index.xml",
    "/sitemap_index.xml.gz",
    "/sitemap-index.xml.gz",
    "/.sitemap.xml",
    "/sitemap",
    "/admin/config/search/xmlsitemap",
    "/sitemap/sitemap-index.xml",
    "/sitemap_news.xml",
    "/sitemap-news.xml",
    "/sitemap_news.xml.gz",
    "/sitemap-news.xml.gz",
)

DEEPEST = 10  # deep/1 .. deep/10: deep/10 would sit at depth 11, one below the default max_depth
LONGEST_URL = 2048


def page(base: str, scenario: str, n: int | str) -> str:
    return f"{base}/p/{scenario}/{n}"


def plain(base: str, scenario: str, count: int = 2) -> str:
    """A urlset of ``count`` pages of its own."""
    return f.urlset(*(f.url(page(base, scenario, i)) for i in range(count)))


def long_url(base: str, length: int) -> str:
    head = page(base, "hygiene", "long-")
    return head + "x" * (length - len(head))


def parsing_site(server: RouteServer) -> None:
    """Discovery, detection, leniency, values, extensions, URL hygiene and recursion, on one site."""
    b = server.base
    declared = [
        GZIP_AS_HTML,
        GZ_NOT_GZIPPED,
        CE_GZIP,
        CE_DEFLATE,
        CE_RAW_DEFLATE,
        CE_GZIP_AROUND_GZIP,
        BOM_AND_COMMENTS,
        INDEX,
        INDEX_BARE,
        RSS2,
        RSS1,
        ATOM1,
        ATOM03,
        WRONG_ROOT,
        TEXT_LIST,
        SOFT_404_DECLARED,
        DECLARED_404,
        NS_NONE,
        NS_GOOGLE,
        NS_PREFIXED,
        UTF16,
        LATIN1,
        MESSY,
        CUT_MID_URL,
        NO_CLOSING_TAG,
        CUT_DOWNLOAD,
        VALUES,
        EXTENSIONS,
        HYGIENE,
        HYGIENE_INDEX,
        LOOP,
        TO_ANCESTOR,
        DUP_TARGET,
        DUP_ALIAS,
        DEEP.format(n=1),
        GOOD,
    ]
    server.add(
        "/robots.txt",
        Route(
            "\ufeff# every spelling of the Sitemap directive real robots.txt files use\n"
            + f.robots(
                "User-agent: *",
                "Disallow: /private/",
                f"sitemap: {RELATIVE}",
                f"SITEMAP:{b}{UPPER}",
                f"Site-map: {b}{SITE_MAP}",
                f"   Sitemap  :   {b}{SPACED}     # trailing comment",
                f"Sitemap: {b}{RELATIVE}",  # the relative one again, absolute: a duplicate
                f"sitemap: {UPPER}",  # and again
                f"Sitemap: {b}{DECLARED_KNOWN_PATH}",
                *(f"Sitemap: {b}{path}" for path in declared),
                f"Sitemap: {b}{GOOD}",  # a duplicate at the very end
            ),
            content_type=TEXT,
        ),
    )
    for path, scenario in (
        (RELATIVE, "relative"),
        (UPPER, "upper"),
        (SITE_MAP, "site-map"),
        (SPACED, "spaced"),
        (DECLARED_KNOWN_PATH, "declared-known-path"),
        (GOOD, "good"),
        (SHARED, "shared"),
    ):
        server.add(path, Route(plain(b, scenario)))

    # Detection by content, whatever the URL and headers say.
    server.add(GZIP_AS_HTML, Route(f.gzipped(plain(b, "gzip-as-html")), content_type=HTML))
    server.add(GZ_NOT_GZIPPED, Route(plain(b, "gz-not-gzipped"), content_type="application/x-gzip"))
    server.add(CE_GZIP, Route(f.gzipped(plain(b, "ce-gzip")), headers={"Content-Encoding": "gzip"}))
    server.add(CE_DEFLATE, Route(f.deflated(plain(b, "ce-deflate")), headers={"Content-Encoding": "deflate"}))
    raw = f.deflated(plain(b, "ce-raw-deflate"))[2:-4]  # no zlib wrapper: what old IIS sends as "deflate"
    server.add(CE_RAW_DEFLATE, Route(raw, headers={"Content-Encoding": "deflate"}))
    inner = f.gzipped(plain(b, "ce-gzip-around-gzip"))
    server.add(
        CE_GZIP_AROUND_GZIP,
        Route(f.gzipped(inner), content_type="application/x-gzip", headers={"Content-Encoding": "gzip"}),
    )
    server.add(
        BOM_AND_COMMENTS,
        Route(
            b"\xef\xbb\xbf\n\n   \r\n\t"
            + b'<?xml version="1.0" encoding="UTF-8"?>\n<!-- generated by a plugin -->\n\n<!-- twice -->\n'
            + plain(b, "bom-comments").split("?>", 1)[1].encode()
        ),
    )
    server.add(INDEX, Route(f.index(b + SHARED, b + "/index/a.xml", b + "/index/b.xml", b + INDEXED_SOFT_404)))
    server.add(INDEXED_SOFT_404, Route(f.soft_404(), content_type=HTML))
    server.add("/index/a.xml", Route(plain(b, "index-a")))
    server.add("/index/b.xml", Route(plain(b, "index-b")))
    server.add(INDEX_BARE, Route(f.index(b + SHARED, b + "/bare/a.xml", b + "/bare/b.xml", bare=True)))
    server.add("/bare/a.xml", Route(plain(b, "bare-a")))
    server.add("/bare/b.xml", Route(plain(b, "bare-b")))

    # Feeds.
    server.add(
        RSS2,
        Route(
            f.rss2(
                (page(b, "rss2", 0), None, "Tue, 05 Mar 2024 14:30:00 GMT"),
                (None, page(b, "rss2", "guid-only"), "Tue, 05 Mar 24 14:30:00 +0100"),  # two-digit year
                (None, "tag:example.invalid,2024:not-a-url", None),  # no link, no URL: nothing to fetch
                (page(b, "rss2", 2), None, "the day before yesterday"),
            )
        ),
    )
    server.add(RSS1, Route(f.rss1((page(b, "rss1", 0), "2024-03-05T14:30:00Z"), (page(b, "rss1", 1), "2024-03"))))
    server.add(ATOM1, Route(f.atom1((page(b, "atom1", 0), "2024-03-05T14:30:00Z"), (page(b, "atom1", 1), "2024"))))
    server.add(
        ATOM03, Route(f.atom03((page(b, "atom03", 0), "2003-12-13T18:30:02Z"), (page(b, "atom03", 1), "2003-12-14")))
    )

    # Not sitemaps, or not quite.
    server.add(WRONG_ROOT, Route('<?xml version="1.0"?>\n<catalog><book><loc>x</loc></book></catalog>\n'))
    server.add(
        TEXT_LIST,
        Route(
            f.text_sitemap(
                "My site's pages",
                page(b, "text", 0),
                "",
                "   " + page(b, "text", 1) + "   ",
                "# a comment",
                "ftp://example.invalid/file",
                "<a href='/x'>html fragment</a>",
                page(b, "text", 2),
                newline="\r\n",
            ),
            content_type=HTML,
        ),
    )
    server.add(SOFT_404_DECLARED, Route(f.soft_404(), content_type=HTML))
    server.add(DECLARED_404, not_found())

    # Namespaces, encodings and messy text.
    server.add(NS_NONE, Route(f.urlset(f.url(page(b, "ns-none", 0)), f.url(page(b, "ns-none", 1)), namespace=None)))
    server.add(
        NS_GOOGLE,
        Route(f.urlset(f.url(page(b, "ns-google", 0)), f.url(page(b, "ns-google", 1)), namespace=f.GOOGLE_NS)),
    )
    server.add(
        NS_PREFIXED,
        Route(
            f.urlset(
                f.url(page(b, "ns-prefixed", 0), prefix="sit", priority="0.9"),
                f.url(page(b, "ns-prefixed", 1), prefix="sit"),
                prefix="sit",
            )
        ),
    )
    server.add(
        UTF16,
        Route(
            f.encoded(
                f.urlset(
                    f.url(page(b, "utf16", "ünïcödé")),
                    f.url(page(b, "utf16", "東京")),
                    declaration='<?xml version="1.0" encoding="UTF-16"?>\n',
                ),
                "utf-16",
            ),
            content_type="application/xml; charset=utf-16",
        ),
    )
    server.add(
        LATIN1,
        Route(
            f.encoded(
                f.urlset(
                    f.url(page(b, "latin1", "café")),
                    f.url(page(b, "latin1", "naïve")),
                    declaration='<?xml version="1.0" encoding="ISO-8859-1"?>\n',
                ),
                "iso-8859-1",
            )
        ),
    )
    server.add(
        MESSY,
        Route(
            f.urlset(
                f.url(f"\n      {page(b, 'messy', 'spaces')}\n   \t"),
                f.url(f"<![CDATA[{page(b, 'messy', 'cdata')}?a=1&b=2]]>"),
                f.url(page(b, "messy", "entities") + "?a=1&amp;b=2&#38;c=3"),
                f.url("\u00a0\u3000\u200b" + page(b, "messy", "unicode-blanks") + "\u2003\ufeff\u200b"),
                f.url(" <![CDATA[ " + page(b, "messy", "cdata-padded") + " ]]> "),
            )
        ),
    )

    # Truncated documents: fifty pages each.
    fifty = f.urlset(*(f.url(page(b, "cut", i)) for i in range(50)))
    server.add(CUT_MID_URL, Route(f.cut(fifty, "/49</loc>") + b"/4"))  # the 50th <loc> ends mid-URL
    server.add(NO_CLOSING_TAG, Route(f.cut(fifty.replace("/p/cut/", "/p/no-close/"), "</urlset>")))
    # Numbered from 100, so that the cut-off "/p/download/14" cannot pass for a page that is listed.
    download = f.urlset(*(f.url(page(b, "download", i)) for i in range(100, 150))).encode()
    server.add(CUT_DOWNLOAD, Route(download, cut_after=download.rindex(b"/149</loc>") + 3))

    server.add(VALUES, Route(values_urlset(b)))
    server.add(EXTENSIONS, Route(extensions_urlset(b)))
    server.add(HYGIENE, Route(hygiene_urlset(b)))
    server.add(HYGIENE_INDEX, Route(f.index("ftp://example.invalid/s.xml", "javascript:void(0)", b + GOOD)))

    # Recursion and duplicates.
    server.add(LOOP, Route(f.index(b + LOOP, b + LOOP_CHILD)))
    server.add(LOOP_CHILD, Route(f.index(b + LOOP, b + "/loop/leaf.xml")))
    server.add("/loop/leaf.xml", Route(plain(b, "loop-leaf")))
    server.add(TO_ANCESTOR, Route(f.index(b + TO_ANCESTOR_CHILD, b + "/ancestor/leaf.xml")))
    server.add(TO_ANCESTOR_CHILD, redirect(b + TO_ANCESTOR, 301))
    server.add("/ancestor/leaf.xml", Route(plain(b, "ancestor-leaf")))
    server.add(DUP_TARGET, Route(plain(b, "dup")))
    server.add(DUP_ALIAS, redirect(b + DUP_TARGET))
    for n in range(1, DEEPEST + 1):
        server.add(DEEP.format(n=n), Route(f.index(b + DEEP.format(n=n + 1))))
    server.add(DEEP.format(n=DEEPEST + 1), Route(plain(b, "deepest")))

    # The well-known paths.
    server.add(KNOWN_SOFT_404, Route(f.soft_404(), content_type=HTML))
    server.add(KNOWN_GZIPPED, Route(f.gzipped(plain(b, "known-gzipped")), content_type="application/octet-stream"))
    server.add(KNOWN_TO_DECLARED, redirect(b + GOOD, 301))
    server.add(KNOWN_TEXT, Route(f.text_sitemap(page(b, "known-text", 0), page(b, "known-text", 1)), content_type=TEXT))
    server.add(KNOWN_EMPTY, Route(b"", content_type=HTML))
    server.add(KNOWN_SOFT_404_NO_DOCTYPE, Route(f.soft_404_without_doctype(), content_type=HTML))
    server.add(KNOWN_FORBIDDEN, Route("<html>Forbidden</html>", status=403, content_type=HTML))
    server.add(KNOWN_GONE, Route("gone", status=410, content_type=TEXT))
    server.add(
        KNOWN_NEWS,
        Route(
            f.urlset(
                f.url(
                    page(b, "known-news", 0),
                    extra=f.news(name="The Daily", language="en", date="2024-03-05", title="Headline"),
                )
            )
        ),
    )


def values_urlset(b: str) -> str:
    """lastmod in every W3C form (and junk), changefreq in any case (and junk), priority in and out of range."""
    rows = [
        ("year", "2024", "DAILY", "0.8"),
        ("month", "2024-03", "Weekly", "1"),
        ("day", "2024-03-05", "monthly", "0"),
        ("minutes-z", "2024-03-05T14:30Z", "always", "1.0"),
        ("seconds-offset", "2024-03-05T14:30:15+02:00", "hourly", " 0.3 "),
        ("fraction", "2024-03-05T14:30:15.5-05:00", "yearly", None),
        ("junk-date", "yesterday", "fortnightly", "1.5"),
        ("junk-priority", None, "NEVER", "high"),
        ("negative-priority", None, None, "-0.1"),
    ]
    return f.urlset(
        *(f.url(page(b, "values", name), lastmod=lm, changefreq=cf, priority=pr) for name, lm, cf, pr in rows)
    )


def extensions_urlset(b: str) -> str:
    full = page(b, "ext", "full")
    return f.urlset(
        f.url(
            full,
            lastmod="2024-03-05",
            extra=(
                f.image(
                    f"{b}/img/a.jpg",
                    caption="A & B",
                    title="Title",
                    geo_location="Lyon, France",
                    license=f"{b}/license",
                )
                + f.image(f"{b}/img/b.jpg")
                + f.news(
                    name="The Daily",
                    language="fr",
                    date="2024-03-05T10:00:00+01:00",
                    title="Big news",
                    keywords="a, b ,c",
                    genres="PressRelease, Blog",
                )
                + f.video(
                    thumbnail=f"{b}/v/thumb.jpg",
                    title="Clip",
                    description="A clip",
                    content=f"{b}/v/clip.mp4",
                    player=f"{b}/v/player",
                    duration="600",
                )
                + f.hreflang("fr", page(b, "ext", "fr"))
                + f.hreflang("x-default", full)
                + f.hreflang(None, page(b, "ext", "no-hreflang"))  # incomplete: dropped
                + f.hreflang("de", None)  # incomplete: dropped
                + f.hreflang("de", page(b, "ext", "no-rel"), rel=None)  # incomplete: dropped
            ),
        ),
        f.url(page(b, "ext", "plain")),
    )


def hygiene_urlset(b: str) -> str:
    return f.urlset(
        f.url(page(b, "hygiene", "ok")),
        f.url("ftp://example.invalid/file.zip"),
        f.url("javascript:alert(1)"),
        f.url("mailto:someone@example.invalid"),
        f.url(long_url(b, LONGEST_URL)),
        f.url(long_url(b, LONGEST_URL + 1)),
        f.url("http://other.example.invalid/page"),
        f.url(f"http://127.0.0.2:{b.rsplit(':', 1)[1]}/p/hygiene/other-host"),
        f.url(page(b, "hygiene", "ok")),  # second declaration: only the first counts
        f.url(page(b, "hygiene", "ok") + "#fragment"),  # the same page once normalised
        f.url(page(b, "hygiene", "last")),
    )


# limits ----------------------------------------------------------------------------------------------

BIG = "/limits/50001.xml"
HUGE = "/limits/51mib.xml"
BOMB = "/limits/bomb.xml.gz"
BOMB_OF_ZEROS = "/limits/zeros.xml"
CE_BOMB = "/limits/ce-bomb.xml"
CE_AROUND_BOMB = "/limits/ce-around-bomb.xml.gz"
LAUGHS = "/limits/billion-laughs.xml"
EXTERNAL_ENTITY = "/limits/xxe.xml"
LATE = "/limits/declared-after-512-kib.xml"
ROBOTS_PADDING = 600 * 1024


def limits_site(server: RouteServer) -> None:
    """Documents built to exhaust memory or time: a gibibyte of gzip, 51 MiB of XML, entity expansion."""
    b = server.base
    # Two pages, then a gibibyte of blanks inside the urlset: a valid sitemap that never ends.
    open_urlset = f.urlset(f.url(page(b, "bomb", 0)), f.url(page(b, "bomb", 1))).removesuffix("</urlset>\n")
    bomb = f.gzip_bomb(filler=b" ", prefix=open_urlset.encode())
    server.add(BOMB, Route(bomb, content_type="application/x-gzip"))
    server.add(BOMB_OF_ZEROS, Route(f.gzip_bomb(), content_type=XML))
    server.add(CE_BOMB, Route(bomb, headers={"Content-Encoding": "gzip"}))
    server.add(CE_AROUND_BOMB, Route(f.gzipped(bomb), headers={"Content-Encoding": "gzip"}))
    before, after = [f"/p/huge/{i}" for i in range(3)], ["/p/huge/after-the-limit"]
    server.add(HUGE, Route(lambda hit: f.padded_urlset(b, before, 51 * f.MiB, after)))
    server.add(LAUGHS, Route(f.billion_laughs()))
    server.add(EXTERNAL_ENTITY, Route(f.external_entity()))
    server.add(GOOD, Route(plain(b, "good")))
    server.add(LATE, Route(plain(b, "late")))
    early = [BOMB, BOMB_OF_ZEROS, CE_BOMB, CE_AROUND_BOMB, HUGE, LAUGHS, EXTERNAL_ENTITY, GOOD]
    padding = "".join(f"# {i:06d} {'.' * 90}\n" for i in range(ROBOTS_PADDING // 100 + 1))
    server.add(
        "/robots.txt",
        Route(
            f.robots("User-agent: *", *(f"Sitemap: {b}{p}" for p in early)) + padding + f"Sitemap: {b}{LATE}\n",
            content_type=TEXT,
        ),
    )


def big_site(server: RouteServer) -> None:
    """The 50,001-entry sitemap. Its last entry is out of scope: had it been read, it would be counted
    as dropped, so "50,000 pages and nothing dropped" proves that exactly the first 50,000 were read."""
    b = server.base
    body = f.numbered_urlset(b, 50_000).removesuffix(b"</urlset>\n")
    server.add(BIG, Route(body + f.url("http://out-of-scope.invalid/50001").encode() + b"</urlset>\n"))
    server.add(GOOD, Route(plain(b, "good")))


# fetching ------------------------------------------------------------------------------------------

THREE_HOPS = "/redirect/3-hops.xml"
FIVE_HOPS = "/redirect/5-hops.xml"
SIX_HOPS = "/redirect/6-hops.xml"
REDIRECT_LOOP = "/redirect/loop.xml"
TO_FTP = "/redirect/to-ftp.xml"
SERVER_ERROR_TWICE = "/flaky/503-twice.xml"
SERVER_ERROR_ALWAYS = "/flaky/503-always.xml"
TOO_MANY_REQUESTS_ONCE = "/flaky/429-once.xml"
SERVER_ERROR_NO_RETRY_AFTER = "/flaky/500-once.xml"
GONE_SITEMAP = "/errors/410.xml"
CE_BROTLI = "/ce/br.xml"
CE_TWO_LAYERS = "/ce/gzip-gzip.xml"
CE_THIRD_LAYER = "/ce/three-layers.xml.gz"
CE_CORRUPT = "/ce/corrupt.xml"
PAGES = "/pages.xml"

PAGE_OK = "/page/ok/{n}"
PAGE_REDIRECTED = "/page/redirected"
PAGE_LANDING = "/page/landing"
PAGE_GZIPPED = "/page/gzipped"
GZIPPED_PAGE = b"<html><body>" + b"sent gzipped, kept gzipped " * 40 + b"</body></html>"
PAGE_TO_127_0_0_2 = "/page/to-127.0.0.2"
PAGE_TO_METADATA = "/page/to-metadata"
PAGE_SIX_REDIRECTS = "/page/six-redirects"
PAGE_TO_FTP = "/page/to-ftp"
PAGE_TOO_BIG = "/page/11mib"
PAGE_BOMB = "/page/content-encoding-bomb"
PAGE_503_ALWAYS = "/page/503-always"
PAGE_503_RETRY_AFTER = "/page/503-then-ok"
PAGE_429_ONCE = "/page/429-then-ok"
PAGE_404 = "/page/404"
PAGE_410 = "/page/410"
PAGE_403 = "/page/403"
PAGE_CUT = "/page/cut"
PAGE_SLOW = "/page/slow/{n}"
SLOW_PAGES = 8
PAGE_MAX_BYTES = 10 * f.MiB
#: Pages at addresses the crawl must not reach (listed as pages, so the crawl runs with ``--scope any``).
HIDDEN_PAGES = {
    "http://2130706434:{port}/secret/page": "127.0.0.2",
    "http://[::ffff:127.0.0.2]:{port}/secret/page": "127.0.0.2",
    "http://10.0.0.1/page": "10.0.0.1",
    "http://2852039166/latest/meta-data/": "169.254.169.254",
}


def redirect_chain(server: RouteServer, start: str, hops: int, target: str) -> None:
    """``start`` reaches ``target`` after exactly ``hops`` redirects (301, 302, 303, 307, 308 in turn)."""
    statuses = (301, 302, 303, 307, 308)
    path = start
    for i in range(hops - 1):
        nxt = f"{start}/hop-{i + 1}"
        server.add(path, redirect(server.url(nxt), statuses[i % len(statuses)]))
        path = nxt
    server.add(path, redirect(target if "://" in target else server.url(target), statuses[(hops - 1) % 5]))


def unavailable(status: int = 503, retry_after: str | None = "0") -> Route:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Route("<html>busy</html>", status=status, content_type=HTML, headers=headers)


def html(text: str) -> Route:
    return Route(f"<html><body>{text}</body></html>", content_type=HTML)


def fetching_site(server: RouteServer, forbidden: RouteServer) -> None:
    """Redirects, transient and final errors, Content-Encodings and pages that are too big or go where
    they must not. ``forbidden`` is a live server on an address the crawl is not allowed to reach."""
    b = server.base
    for path in (THREE_HOPS, FIVE_HOPS, SIX_HOPS):
        scenario = path.rsplit("/", 1)[1].removesuffix(".xml")
        server.add(f"/target/{scenario}.xml", Route(plain(b, scenario)))
    redirect_chain(server, THREE_HOPS, 3, "/target/3-hops.xml")
    redirect_chain(server, FIVE_HOPS, 5, "/target/5-hops.xml")
    redirect_chain(server, SIX_HOPS, 6, "/target/6-hops.xml")
    server.add(REDIRECT_LOOP, redirect(b + REDIRECT_LOOP))
    server.add(TO_FTP, redirect("ftp://127.0.0.1/sitemap.xml"))
    server.add(SERVER_ERROR_TWICE, [unavailable(), unavailable(), Route(plain(b, "503-twice"))])
    server.add(SERVER_ERROR_ALWAYS, unavailable())
    server.add(TOO_MANY_REQUESTS_ONCE, [unavailable(429), Route(plain(b, "429-once"))])
    server.add(SERVER_ERROR_NO_RETRY_AFTER, [unavailable(500, retry_after=None), Route(plain(b, "500-once"))])
    server.add(GONE_SITEMAP, Route("gone", status=410, content_type=TEXT))
    server.add(CE_BROTLI, Route(b"\x1b\x03\x00\xf8\xa5\x00", headers={"Content-Encoding": "br"}))
    server.add(
        CE_TWO_LAYERS, Route(f.gzipped(f.gzipped(plain(b, "two-layers"))), headers={"Content-Encoding": "gzip, gzip"})
    )
    server.add(
        CE_THIRD_LAYER,
        Route(f.gzipped(f.gzipped(f.gzipped(plain(b, "third-layer")))), headers={"Content-Encoding": "gzip"}),
    )
    server.add(
        CE_CORRUPT,
        Route(f.gzipped(plain(b, "corrupt"))[:40] + b"\x00garbage" * 20, headers={"Content-Encoding": "gzip"}),
    )

    # Pages: every /p/... page of the sitemaps above exists; /page/... are the scenarios.
    server.add_prefix("/p/", html("a page"))
    for n in range(4):
        server.add(PAGE_OK.format(n=n), html(f"ok {n}"))
    redirect_chain(server, PAGE_REDIRECTED, 3, PAGE_LANDING)
    server.add(PAGE_LANDING, html("landing"))
    server.add(PAGE_GZIPPED, Route(f.gzipped(GZIPPED_PAGE), content_type=HTML, headers={"Content-Encoding": "gzip"}))
    server.add(PAGE_TO_127_0_0_2, redirect(forbidden.url("/secret")))
    server.add(PAGE_TO_METADATA, redirect("http://169.254.169.254/latest/meta-data/"))
    redirect_chain(server, PAGE_SIX_REDIRECTS, 6, PAGE_LANDING)
    server.add(PAGE_TO_FTP, redirect("ftp://127.0.0.1/page"))
    server.add(PAGE_TOO_BIG, Route(b"<html>" + b"x" * (PAGE_MAX_BYTES + f.MiB), content_type=HTML))
    server.add(PAGE_BOMB, Route(f.gzip_bomb(), content_type=HTML, headers={"Content-Encoding": "gzip"}))
    server.add(PAGE_503_ALWAYS, unavailable())
    server.add(PAGE_503_RETRY_AFTER, [unavailable(retry_after="1"), html("recovered")])
    server.add(PAGE_429_ONCE, [unavailable(429), html("recovered")])
    server.add(PAGE_404, not_found())
    server.add(PAGE_410, Route("gone", status=410, content_type=HTML))
    server.add(PAGE_403, Route("forbidden", status=403, content_type=HTML))
    whole = b"<html>" + b"y" * 5000 + b"</html>"
    server.add(PAGE_CUT, Route(whole, content_type=HTML, cut_after=1000))
    for n in range(SLOW_PAGES):
        server.add(PAGE_SLOW.format(n=n), Route("<html>slow</html>", content_type=HTML, delay=0.3))
    # (The slow pages first: fetched before the 429 and 503 pages slow the host down to a request a second,
    # they show how many requests the crawl runs at once.)
    page_paths = [
        *(PAGE_SLOW.format(n=n) for n in range(SLOW_PAGES)),
        *(PAGE_OK.format(n=n) for n in range(4)),
        PAGE_REDIRECTED,
        PAGE_GZIPPED,
        PAGE_TO_127_0_0_2,
        PAGE_TO_METADATA,
        PAGE_SIX_REDIRECTS,
        PAGE_TO_FTP,
        PAGE_TOO_BIG,
        PAGE_BOMB,
        PAGE_503_ALWAYS,
        PAGE_503_RETRY_AFTER,
        PAGE_429_ONCE,
        PAGE_404,
        PAGE_410,
        PAGE_403,
        PAGE_CUT,
    ]
    hidden = [url.format(port=forbidden.port) for url in HIDDEN_PAGES]
    server.add(PAGES, Route(f.urlset(*(f.url(b + p) for p in page_paths), *(f.url(u) for u in hidden))))
    server.add(GOOD, Route(f.urlset(f.url(b + PAGE_OK.format(n=0)), f.url(b + PAGE_OK.format(n=1)))))
    declared = [
        THREE_HOPS,
        FIVE_HOPS,
        SIX_HOPS,
        REDIRECT_LOOP,
        TO_FTP,
        SERVER_ERROR_TWICE,
        SERVER_ERROR_ALWAYS,
        TOO_MANY_REQUESTS_ONCE,
        SERVER_ERROR_NO_RETRY_AFTER,
        GONE_SITEMAP,
        CE_BROTLI,
        CE_TWO_LAYERS,
        CE_THIRD_LAYER,
        CE_CORRUPT,
        PAGES,
        GOOD,
    ]
    server.add(
        "/robots.txt",
        Route(f.robots("User-agent: *", "Disallow:", *(f"Sitemap: {b}{p}" for p in declared)), content_type=TEXT),
    )


# the SSRF guard ------------------------------------------------------------------------------------

TO_127_0_0_2 = "/ssrf/redirect-to-127.0.0.2.xml"
HOP_THEN_127_0_0_2 = "/ssrf/allowed-hop-then-127.0.0.2.xml"
TO_METADATA = "/ssrf/redirect-to-metadata.xml"
TO_HIDDEN_METADATA = "/ssrf/redirect-to-2852039166.xml"
DENY_LIST = "/ssrf/deny-list.xml"
HIDDEN_LOOPBACK = "/ssrf/hidden-loopback.xml"

#: One address in every network of the deny list (fetching-and-safety.md), as a URL host.
DENIED_HOSTS = {
    "0.0.0.0/8": ("0.1.2.3", "0.1.2.3"),
    "10.0.0.0/8": ("10.0.0.1", "10.0.0.1"),
    "100.64.0.0/10": ("100.64.0.1", "100.64.0.1"),
    "127.0.0.0/8": ("127.0.0.3", "127.0.0.3"),
    "169.254.0.0/16": ("169.254.169.254", "169.254.169.254"),
    "172.16.0.0/12": ("172.16.0.1", "172.16.0.1"),
    "192.0.0.0/24": ("192.0.0.1", "192.0.0.1"),
    "192.0.2.0/24": ("192.0.2.1", "192.0.2.1"),
    "192.168.0.0/16": ("192.168.1.1", "192.168.1.1"),
    "198.18.0.0/15": ("198.18.0.1", "198.18.0.1"),
    "198.51.100.0/24": ("198.51.100.1", "198.51.100.1"),
    "203.0.113.0/24": ("203.0.113.1", "203.0.113.1"),
    "224.0.0.0/4": ("224.0.0.1", "224.0.0.1"),
    "240.0.0.0/4": ("240.0.0.1", "240.0.0.1"),
    "::/96": ("[::7f00:1]", "::7f00:1"),
    "::1/128": ("[::1]", "::1"),
    "::ffff:0:0/96": ("[::ffff:10.0.0.1]", "::ffff:10.0.0.1"),
    "64:ff9b::/96": ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"),
    "64:ff9b:1::/48": ("[64:ff9b:1::1]", "64:ff9b:1::1"),
    "100::/64": ("[100::1]", "100::1"),
    "2001::/32": ("[2001::1]", "2001::1"),
    "2001:db8::/32": ("[2001:db8::1]", "2001:db8::1"),
    "2002::/16": ("[2002:a9fe:a9fe::1]", "2002:a9fe:a9fe::1"),
    "fc00::/7": ("[fd00::1]", "fd00::1"),
    "fe80::/10": ("[fe80::1]", "fe80::1"),
    "ff00::/8": ("[ff02::1]", "ff02::1"),
}

#: Spellings of 169.254.169.254 that resolve to it (inet_aton forms) and that a host check on the name misses.
HIDDEN_METADATA = ("2852039166", "0xa9fea9fe", "169.254.43518", "0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe")


def hidden_loopback(address_last_octet: int) -> tuple[str, ...]:
    """Spellings of 127.0.0.N (N = 1 or 2): decimal, hexadecimal, short and octal forms, IPv4-mapped IPv6."""
    n = address_last_octet
    return (
        str(0x7F000000 + n),
        f"0x7f.0.0.{n}",
        f"127.{n}",
        f"0{0x7F000000 + n:o}",
        f"[::ffff:127.0.0.{n}]",
    )


def ssrf_site(server: RouteServer, forbidden: RouteServer) -> None:
    """A site on an allowed address whose sitemaps point, directly or through redirects, at addresses that
    are not allowed, among them ``forbidden``, a live server on 127.0.0.2."""
    b = server.base
    port = forbidden.port
    server.add(TO_127_0_0_2, redirect(forbidden.url("/secret/redirected.xml")))
    server.add(HOP_THEN_127_0_0_2, redirect(b + "/ssrf/hop"))
    server.add("/ssrf/hop", redirect(forbidden.url("/secret/after-a-hop.xml"), 307))
    server.add(TO_METADATA, redirect("http://169.254.169.254/latest/meta-data/"))
    server.add(TO_HIDDEN_METADATA, redirect("http://2852039166/latest/meta-data/"))
    children = [f"http://{host}/sitemap.xml" for host, _ in DENIED_HOSTS.values()]
    children += [f"http://{host}/latest/meta-data/" for host in HIDDEN_METADATA]
    children += ["http://user@169.254.169.254:80@evil.invalid/sitemap.xml"]
    server.add(DENY_LIST, Route(f.index(*children)))
    server.add(
        HIDDEN_LOOPBACK,
        Route(f.index(*(f"http://{host}:{port}/secret/{i}.xml" for i, host in enumerate(hidden_loopback(2))))),
    )
    for path in ("/secret/redirected.xml", "/secret/after-a-hop.xml", "/secret/0.xml"):
        forbidden.add(path, Route(plain(forbidden.base, "secret")))
    server.add(GOOD, Route(plain(b, "good")))
    declared = [TO_127_0_0_2, HOP_THEN_127_0_0_2, TO_METADATA, TO_HIDDEN_METADATA, DENY_LIST, HIDDEN_LOOPBACK, GOOD]
    server.add(
        "/robots.txt",
        Route(f.robots("User-agent: *", "Disallow:", *(f"Sitemap: {b}{p}" for p in declared)), content_type=TEXT),
    )


LOOPBACK_TRICKS = "/tricks.xml"


def site_on_127_0_0_2(site: RouteServer, forbidden: RouteServer) -> list[str]:
    """The second site, on 127.0.0.2, with a UTF-16 robots.txt; its index points at ``forbidden`` (on
    127.0.0.1, not allowed for this crawl) in every disguise of fetching-and-safety.md. Returns those URLs."""
    port = forbidden.port
    hosts = [*hidden_loopback(1), "localhost", "127.0.0.1"]
    targets = [f"http://{host}:{port}/secret/{i}.xml" for i, host in enumerate(hosts)]
    targets.append("http://2130706433/secret.xml")  # the doc's example, on port 80
    for i in range(len(hosts)):
        forbidden.add(f"/secret/{i}.xml", Route(plain(forbidden.base, "secret")))
    site.add(LOOPBACK_TRICKS, Route(f.index(*targets)))
    site.add(GOOD, Route(plain(site.base, "good")))
    robots = f.robots("User-agent: *", f"Sitemap: {site.base}{LOOPBACK_TRICKS}", f"Sitemap: {GOOD}")
    site.add("/robots.txt", Route(robots.encode("utf-16"), content_type="text/plain; charset=utf-16"))
    return targets


# robots.txt rules ----------------------------------------------------------------------------------

RULES = "/real/robots.txt"
RULES_SITEMAP = "/rules-sitemap.xml"
#: Page path -> whether the site's robots.txt lets Harvester fetch it.
RULED_PAGES = {
    "/open": True,
    "/private/secret": False,
    "/private/public/page": True,  # the longer Allow wins over Disallow: /private/
    "/tie": True,  # Allow and Disallow of the same length: Allow wins
    "/café": False,  # matched by Disallow: /caf%C3%A9 once the path is percent-encoded
    "/doc.pdf": False,  # Disallow: /*.pdf$
    "/doc.pdf?x=1": True,  # ... which the $ anchors
    "/robots.txt": True,  # always allowed, even under Disallow: /robots
}
OTHER_PAGES = ("/a", "/b", "/c")
#: The crawl of the robots site runs with HARVEST_PAGE_MAX_BYTES set to this; one page is twice as big.
SMALL_PAGE_LIMIT = 1000
OVER_PAGE_LIMIT = "/over-the-page-limit"


def robots_site(
    site: RouteServer, unreachable: RouteServer, throttled: RouteServer, missing: RouteServer, elsewhere: RouteServer
) -> None:
    """The site's robots.txt (reached through two redirects) has a group for Harvester and a stricter
    one for everyone else. Its sitemap also lists pages on three other origins of the same host, whose
    robots.txt answers 503, 429 and 404, and one page on another host (``elsewhere``): out of scope."""
    b = site.base
    site.add("/robots.txt", redirect(b + "/r/robots.txt", 301))
    site.add("/r/robots.txt", redirect(b + RULES, 302))
    site.add(
        RULES,
        Route(
            f.robots(
                "User-agent: *",
                "Disallow: /",
                "",
                "User-agent: Harvester",
                "Disallow: /private/",
                "Allow: /private/public/",
                "Disallow: /tie",
                "Allow: /tie",
                "Disallow: /caf%C3%A9",
                "Disallow: /*.pdf$",
                "Disallow: /robots",
                "",
                f"Sitemap: {RULES_SITEMAP}",
            ),
            content_type=TEXT,
        ),
    )
    site.add_prefix("/", html("a page"))
    unreachable.add("/robots.txt", unavailable(503))
    throttled.add("/robots.txt", unavailable(429))
    missing.add("/robots.txt", not_found())
    urls = [b + path for path in RULED_PAGES]
    for other in (unreachable, throttled, missing):
        other.add_prefix("/", html("a page"))
        urls += [other.url(path) for path in OTHER_PAGES]
    site.add(OVER_PAGE_LIMIT, Route(b"<html>" + b"z" * 2 * SMALL_PAGE_LIMIT + b"</html>", content_type=HTML))
    urls.append(b + OVER_PAGE_LIMIT)
    elsewhere.add_prefix("/", html("out of scope"))
    urls.append(elsewhere.url("/out-of-scope"))
    site.add(RULES_SITEMAP, Route(f.urlset(*(f.url(escape_xml(u)) for u in urls))))


def escape_xml(text: str) -> str:
    return text.replace("&", "&amp;")


ROBOTS_ELSEWHERE = "/seo/robots"


def robots_at_another_name_site(server: RouteServer) -> None:
    """robots.txt redirects to a URL that does not end in robots.txt (a CMS route)."""
    server.add("/robots.txt", redirect(server.url(ROBOTS_ELSEWHERE), 301))
    server.add(ROBOTS_ELSEWHERE, Route(f.robots("User-agent: *", f"Sitemap: {server.url(GOOD)}"), content_type=TEXT))
    server.add(GOOD, Route(plain(server.base, "good")))


CRAWL_DELAY = 1.0


def crawl_delay_site(server: RouteServer) -> None:
    server.add("/robots.txt", Route(f.robots("User-agent: *", f"Crawl-delay: {CRAWL_DELAY:g}"), content_type=TEXT))
    server.add_prefix("/p/", html("a page"))
    server.add("/sitemap.xml", Route(plain(server.base, "delayed", 3)))


# filtering -----------------------------------------------------------------------------------------

FILTER_INDEX = "/filter/index.xml"
FILTER_CHILDREN = ("/filter/blog/2024.xml", "/filter/blog/2023.xml", "/filter/shop/products.xml")


def filtering_site(server: RouteServer) -> None:
    """An index of three urlsets; each lists one blog post, one draft post and one shop page."""
    b = server.base
    server.add(FILTER_INDEX, Route(f.index(*(b + child for child in FILTER_CHILDREN))))
    for child in FILTER_CHILDREN:
        name = child.rsplit("/", 1)[1].removesuffix(".xml")
        server.add(
            child,
            Route(f.urlset(f.url(f"{b}/blog/{name}/post"), f.url(f"{b}/blog/draft-{name}"), f.url(f"{b}/shop/{name}"))),
        )
