"""A live demo site: pages that change between crawls, served from memory on 127.0.0.1, every request logged.

A re-crawl is only worth what it saves on a site that behaves like a real one, so this site answers
conditional requests as servers do (``If-None-Match`` against an ETag first, else ``If-Modified-Since``
against Last-Modified, RFC 9110), lets each page carry both, one or none of those validators, and
rebuilds its sitemaps (an index of urlsets, declared in robots.txt) whenever a page changes, with the
``lastmod`` of every page. Tests, the re-crawl benchmark and ``make demo`` change pages, add and remove
them, break them, or stamp every lastmod with a new "build time", and read the log to see exactly what a
crawl asked for.

Times come from the site's own clock, one minute further at each change, so Last-Modified (whole
seconds on the wire) always moves when a page changes, however fast a test runs.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from xml.sax.saxutils import escape

from harvester.demo.site import QuietServer

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class LivePage:
    body: bytes
    lastmod: datetime
    modified: datetime  # the Last-Modified header's time
    sitemap: int
    changefreq: str | None = None
    status: int = 200
    etag: bool = True
    last_modified: bool = True
    listed: bool = True
    version: int = 1
    also_in: set[int] = field(default_factory=set)  # further urlsets that list it too
    also_image: bool = False  # those urlsets list an image of it that its own does not
    repeated: bool = False  # its own urlset lists it a second time, last (with a changefreq of its own)
    #: Sent with ``Content-Encoding: gzip`` (a WARC record keeps it so; the signature is of the content).
    gzip_body: bool = False
    #: Answered with a 301 to this path of the site (a page that moved; its sitemap still lists the old URL).
    moved_to: str | None = None


@dataclass(frozen=True)
class Hit:
    path: str
    headers: Mapping[str, str]
    status: int

    @property
    def conditional(self) -> bool:
        names = {k.lower() for k in self.headers}
        return "if-none-match" in names or "if-modified-since" in names

    @property
    def page(self) -> bool:
        return self.path.startswith("/pages/")


@dataclass
class LiveSite:
    """``pages`` pages spread over ``sitemaps`` urlsets. Use ``with LiveSite(...).serving() as site``."""

    pages: int = 0
    sitemaps: int = 2
    host: str = "127.0.0.1"
    #: Which validators new pages carry (a page's own flags can be changed afterwards).
    etag: bool = True
    last_modified: bool = True
    changefreq: str | None = None
    #: The last urlset is served gzipped (``.xml.gz``), as large sites do.
    gzip_last: bool = False
    #: Every n-th page lists an image (0: none).
    images_every: int = 0
    #: Entries carry a ``<priority>`` from 0.0 to 0.9 by position (n % 10 / 10), as real sitemaps spread them.
    priorities: bool = False
    hits: list[Hit] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.site: dict[str, LivePage] = {}
        self.broken: dict[str, int] = {}  # documents (sitemaps, robots.txt) answering an error status
        self.broken_for: dict[str, int] = {}  # of those, the ones that answer it for so many requests more
        #: Part of every document's ETag: a redeploy (or another server) names the same bytes anew.
        self.deployment = ""
        self._clock = EPOCH
        self._next_sitemap = 0
        self._lock = threading.RLock()
        self._built: dict[str, bytes] | None = None
        self.base = ""
        for n in range(self.pages):
            self.add(f"/pages/{n}.html")

    # the site ---------------------------------------------------------------------------------------

    def tick(self) -> datetime:
        self._clock += timedelta(minutes=1)
        return self._clock

    def url(self, path: str) -> str:
        return self.base + path

    def page_paths(self, *, listed: bool = True) -> list[str]:
        return [p for p, page in self.site.items() if page.listed or not listed]

    def add(self, path: str, **flags: Any) -> str:
        with self._lock:
            now = self.tick()
            self.site[path] = LivePage(
                body=b"",
                lastmod=now,
                modified=now,
                sitemap=self._next_sitemap % self.sitemaps,
                changefreq=flags.pop("changefreq", self.changefreq),
                etag=flags.pop("etag", self.etag),
                last_modified=flags.pop("last_modified", self.last_modified),
                **flags,
            )
            self._next_sitemap += 1
            self._render(path)
            self._built = None
        return self.url(path)

    def change(self, path: str, *, lastmod: bool = True) -> None:
        """New content (and, unless told otherwise, a new lastmod in the sitemap)."""
        with self._lock:
            page = self.site[path]
            page.version += 1
            page.modified = self.tick()
            if lastmod:
                page.lastmod = page.modified
            self._render(path)
            self._built = None

    def touch(self, path: str) -> None:
        """A new lastmod for the same content: what a site that stamps its build time does to every page."""
        with self._lock:
            self.site[path].lastmod = self.tick()
            self._built = None

    def touch_all(self) -> None:
        with self._lock:
            now = self.tick()
            for page in self.site.values():
                page.lastmod = now
            self._built = None

    def unlist(self, path: str) -> None:
        """Dropped from the sitemaps (the page itself still answers)."""
        with self._lock:
            self.site[path].listed = False
            self._built = None

    def relist(self, path: str) -> None:
        with self._lock:
            self.site[path].listed = True
            self._built = None

    def fail(self, path: str, status: int = 404, *, lastmod: bool = True) -> None:
        """The page answers ``status`` from now on (with a new lastmod, so that a crawl looks at it)."""
        with self._lock:
            page = self.site[path]
            page.status = status
            if lastmod:
                page.lastmod = self.tick()
            self._built = None

    def list_also(self, path: str, sitemap: int, *, image: bool = False) -> None:
        """Listed by a further urlset as well: real sites list a page in several sitemaps (news, images);
        ``image``: with an image there that its own urlset does not list."""
        with self._lock:
            self.site[path].also_in.add(sitemap)
            self.site[path].also_image = image
            self._built = None

    def repeat(self, path: str, repeated: bool = True) -> None:
        """Listed a second time by its own urlset, at its end: a sitemap that repeats an entry."""
        with self._lock:
            self.site[path].repeated = repeated
            self._built = None

    def list_only_in(self, path: str, sitemap: int) -> None:
        with self._lock:
            page = self.site[path]
            page.sitemap, page.also_in = sitemap, set()
            self._built = None

    def break_document(self, path: str, status: int | None, *, times: int | None = None) -> None:
        """A sitemap (or robots.txt) answers ``status`` from now on (``times``: to that many requests, then its
        document again); None mends it."""
        with self._lock:
            if status is None:
                self.broken.pop(path, None)
            else:
                self.broken[path] = status
                if times is not None:
                    self.broken_for[path] = times

    def _render(self, path: str) -> None:
        page = self.site[path]
        text = (
            f"<!doctype html><html><head><title>{path} v{page.version}</title></head>"
            f"<body><h1>{path}</h1><p>Version {page.version}.</p>"
            f"<p>{'Some text of the live demo site. ' * 8}</p></body></html>\n"
        )
        page.body = text.encode()

    # the documents -----------------------------------------------------------------------------------

    def _documents(self) -> dict[str, bytes]:
        with self._lock:
            if self._built is None:
                self._built = self._build()
            return self._built

    def _build(self) -> dict[str, bytes]:
        urlsets: list[list[str]] = [[] for _ in range(self.sitemaps)]
        repeats: list[list[str]] = [[] for _ in range(self.sitemaps)]
        for n, (path, page) in enumerate(self.site.items()):
            if not page.listed:
                continue
            entry = f"<url><loc>{escape(self.url(path))}</loc><lastmod>{page.lastmod.isoformat()}</lastmod>"
            if page.changefreq:
                entry += f"<changefreq>{page.changefreq}</changefreq>"
            if self.priorities:
                entry += f"<priority>{(n % 10) / 10:.1f}</priority>"
            if self.images_every and n % self.images_every == 0:
                entry += f"<image:image><image:loc>{self.url(f'/img/{n}.jpg')}</image:loc></image:image>"
            urlsets[page.sitemap].append(entry + "</url>")
            image = f"<image:image><image:loc>{self.url(f'/img/also-{n}.jpg')}</image:loc></image:image>"
            for sitemap in page.also_in - {page.sitemap}:
                urlsets[sitemap].append(entry + (image if page.also_image else "") + "</url>")
            if page.repeated:
                repeats[page.sitemap].append(
                    f"<url><loc>{escape(self.url(path))}</loc><changefreq>weekly</changefreq></url>"
                )
        for sitemap, entries in enumerate(repeats):
            urlsets[sitemap] += entries
        head = '<?xml version="1.0" encoding="UTF-8"?>\n'
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        images = self.images_every or any(page.also_image for page in self.site.values())
        image_ns = ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"' if images else ""
        built = {
            "/robots.txt": f"User-agent: *\nAllow: /\n\nSitemap: {self.url('/sitemap_index.xml')}\n".encode(),
            "/sitemap_index.xml": (
                head
                + f"<sitemapindex {ns}>\n"
                + "".join(f"<sitemap><loc>{self.url(self._urlset(n))}</loc></sitemap>\n" for n in range(self.sitemaps))
                + "</sitemapindex>\n"
            ).encode(),
        }
        for n, entries in enumerate(urlsets):
            body = (head + f"<urlset {ns}{image_ns}>\n" + "\n".join(entries) + "\n</urlset>\n").encode()
            path = self._urlset(n)
            built[path] = gzip.compress(body, mtime=0) if path.endswith(".gz") else body
        return built

    def _urlset(self, n: int) -> str:
        return f"/sitemaps/{n}.xml" + (".gz" if self.gzip_last and n == self.sitemaps - 1 else "")

    @property
    def sitemap_urls(self) -> list[str]:
        return [self.url("/sitemap_index.xml")] + [self.url(self._urlset(n)) for n in range(self.sitemaps)]

    # what happened ------------------------------------------------------------------------------------

    def page_hits(self) -> list[Hit]:
        return [h for h in self.hits if h.page]

    def reset_log(self) -> None:
        with self._lock:
            self.hits.clear()

    def _log(self, hit: Hit) -> None:
        with self._lock:
            self.hits.append(hit)

    # serving ------------------------------------------------------------------------------------------

    def answer(self, path: str, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of a GET: what the handler sends (and what the log records)."""
        path = path.partition("?")[0]
        documents = self._documents()
        if path in self.broken:
            status = self.broken[path]
            with self._lock:
                if path in self.broken_for:
                    self.broken_for[path] -= 1
                    if self.broken_for[path] <= 0:
                        del self.broken_for[path]
                        self.broken.pop(path, None)
            return status, {"Content-Type": "text/html"}, b"<html><body>Broken</body></html>"
        if path in documents:
            body = documents[path]
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + self.deployment + '"'
            kind = {".txt": "text/plain", ".gz": "application/gzip"}.get(path[path.rfind(".") :], "application/xml")
            if _matches(headers.get("if-none-match"), etag):
                return 304, {"ETag": etag}, b""
            return 200, {"ETag": etag, "Content-Type": kind}, body
        with self._lock:
            page = self.site.get(path)
            if page is None or page.status != 200:
                status = page.status if page is not None else 404
                return status, {"Content-Type": "text/html"}, b"<html><body>Not here</body></html>"
            if page.moved_to is not None:
                moved = {"Location": self.url(page.moved_to), "Content-Type": "text/html"}
                return 301, moved, b"<html><body>Moved</body></html>"
            body, modified, encoded = page.body, page.modified, page.gzip_body
            validators: dict[str, str] = {}
            if page.etag:
                validators["ETag"] = '"' + hashlib.sha256(body).hexdigest()[:16] + f'-{page.version}"'
            if page.last_modified:
                validators["Last-Modified"] = format_datetime(modified, usegmt=True)
        if "ETag" in validators and headers.get("if-none-match") is not None:
            if _matches(headers.get("if-none-match"), validators["ETag"]):
                return 304, validators, b""
        elif "Last-Modified" in validators and _not_modified_since(headers.get("if-modified-since"), modified):
            return 304, validators, b""
        if encoded:
            return (
                200,
                {**validators, "Content-Type": "text/html; charset=utf-8", "Content-Encoding": "gzip"},
                (gzip.compress(body, mtime=0)),
            )
        return 200, {**validators, "Content-Type": "text/html; charset=utf-8"}, body

    @contextlib.contextmanager
    def serving(self) -> Iterator[LiveSite]:
        server = QuietServer((self.host, 0), _handler(self))
        self.base = f"http://{self.host}:{server.server_address[1]}"
        for path in self.site:
            self._render(path)
        self._built = None
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="live-site", daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


def _matches(if_none_match: str | None, etag: str) -> bool:
    if if_none_match is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def _not_modified_since(value: str | None, modified: datetime) -> bool:
    if not value:
        return False
    try:
        since = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return False
    return modified.replace(microsecond=0) <= since


def _handler(site: LiveSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
        disable_nagle_algorithm = True  # (headers and body are two writes: Nagle would hold the body 40 ms)

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, reply, body = site.answer(self.path, headers)
            site._log(Hit(self.path.partition("?")[0], dict(self.headers.items()), status))
            try:
                self.send_response(status)
                for name, value in reply.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler
