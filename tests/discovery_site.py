"""A site for the discovery options (``DiscoveryOptions``): sitemaps found only through robots.txt, only at a
well-known path, only at an extra path, and under a folder of the site (its own robots.txt and known paths),
served by a route server that logs every request (tests/corpus/server.py)."""

from __future__ import annotations

from tests.corpus.server import TEXT, Route, RouteServer

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'

#: Where each page is listed (paths of the site): a sitemap per way of finding it.
DECLARED = ["/a"]  # /declared.xml, which only robots.txt names
KNOWN = ["/b", "/private/x"]  # /sitemap.xml, a well-known path (robots.txt disallows /private/)
EXTRA = ["/c"]  # /custom/extra.xml, which only an extra known path finds
FOLDER = ["/foo/bar/d"]  # /foo/bar/sitemap.xml: declared by /foo/bar/robots.txt, and a known path under it
FOLDER_EXTRA = ["/foo/bar/e", "/private/y"]  # /foo/bar/custom_sitemap.xml, /foo/bar/another/path.xml


def urlset(base: str, paths: list[str]) -> Route:
    return Route(f"<urlset {NS}>" + "".join(f"<url><loc>{base}{p}</loc></url>" for p in paths) + "</urlset>")


def discovery_site(server: RouteServer) -> None:
    """Serves the site on ``server`` (any other path answers 404; the pages answer 200)."""
    base = server.base
    server.update(
        {
            "/robots.txt": Route(
                f"User-agent: *\nDisallow: /private/\nSitemap: {base}/declared.xml\n", content_type=TEXT
            ),
            "/declared.xml": urlset(base, DECLARED),
            "/sitemap.xml": urlset(base, KNOWN),
            "/custom/extra.xml": urlset(base, EXTRA),
            "/foo/bar/robots.txt": Route(f"Sitemap: {base}/foo/bar/sitemap.xml\n", content_type=TEXT),
            "/foo/bar/sitemap.xml": urlset(base, FOLDER),
            "/foo/bar/custom_sitemap.xml": urlset(base, FOLDER_EXTRA[:1]),
            "/foo/bar/another/path.xml": urlset(base, FOLDER_EXTRA[1:]),
        }
    )
    for path in DECLARED + KNOWN + EXTRA + FOLDER + FOLDER_EXTRA:
        server.add(path, Route("<html><body>a page</body></html>", content_type="text/html"))


def requested(server: RouteServer) -> list[str]:
    """The paths the server was asked for since its log was last reset, in order."""
    return [hit.path for hit in server.hits]
