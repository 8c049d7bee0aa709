"""Properties: what is written is read back; nothing a server sends makes the parser raise."""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from xml.sax.saxutils import escape

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvester.sitemap import PageEntry, SitemapParser, parse_bytes

from .helpers import FIXTURES, fixture

SETTINGS = settings(
    max_examples=int(os.environ.get("SITEMAP_PROPERTY_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Characters XML 1.0 can carry in text, minus controls (a URL has none) and the characters the parser strips
# from the ends of a value; the generated path always ends with an ASCII letter anyway.
URL_CHARS = st.characters(
    blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff\ufeff\u200b\u200c\u200d\u2060"
)
ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
CHANGEFREQS = ["always", "hourly", "daily", "weekly", "monthly", "yearly", "never"]


@dataclass
class Page:
    url: str
    lastmod: datetime | date | None
    changefreq: str | None
    priority: float | None

    def expected(self) -> PageEntry:
        lastmod = self.lastmod
        if isinstance(lastmod, datetime):
            lastmod = lastmod if lastmod.tzinfo else lastmod.replace(tzinfo=UTC)
        elif isinstance(lastmod, date):
            lastmod = datetime(lastmod.year, lastmod.month, lastmod.day, tzinfo=UTC)
        changefreq = self.changefreq.lower() if self.changefreq else None
        return PageEntry(self.url, lastmod, changefreq, 0.5 if self.priority is None else self.priority)


@st.composite
def pages(draw: st.DrawFn) -> Page:
    scheme = draw(st.sampled_from(["http", "https"]))
    host = draw(st.from_regex(r"[a-z][a-z0-9-]{0,20}\.(org|com|de)", fullmatch=True))
    path = draw(st.text(URL_CHARS, max_size=40))
    url = f"{scheme}://{host}/{path}x"
    lastmod = draw(
        st.none()
        | st.dates(date(1990, 1, 1), date(2100, 12, 31))
        | st.datetimes(datetime(1990, 1, 1), datetime(2100, 12, 31), timezones=ZONES)
    )
    changefreq = draw(st.none() | st.sampled_from(CHANGEFREQS))
    if changefreq is not None and draw(st.booleans()):
        changefreq = changefreq.upper()
    priority = draw(st.none() | st.floats(0.0, 1.0))
    return Page(url, lastmod, changefreq, priority)


def serialise(items: list[Page], *, prefix: str, cdata: bool, padding: str) -> str:
    ns = f"xmlns{':' + prefix[:-1] if prefix else ''}"
    out = [
        f'<?xml version="1.0" encoding="ENCODING"?>\n<{prefix}urlset {ns}="http://www.sitemaps.org/schemas/sitemap/0.9">'
    ]
    for page in items:
        loc = f"<![CDATA[{page.url}]]>" if cdata and "]]>" not in page.url else escape(page.url)
        out.append(f"<{prefix}url><{prefix}loc>{padding}{loc}{padding}</{prefix}loc>")
        if page.lastmod is not None:
            out.append(f"<{prefix}lastmod>{page.lastmod.isoformat()}</{prefix}lastmod>")
        if page.changefreq is not None:
            out.append(f"<{prefix}changefreq>{page.changefreq}</{prefix}changefreq>")
        if page.priority is not None:
            out.append(f"<{prefix}priority>{page.priority!r}</{prefix}priority>")
        out.append(f"</{prefix}url>\n")
    out.append(f"</{prefix}urlset>\n")
    return "".join(out)


def feed_split(url: str, data: bytes, cuts: list[int], *, complete: bool = True) -> tuple[list, object]:
    parser = SitemapParser(url)
    entries = []
    previous = 0
    for cut in [*sorted(cuts), len(data)]:
        entries += parser.feed(data[previous:cut])
        previous = max(previous, cut)
    entries += parser.close(complete=complete)
    return entries, parser.report


def assert_chunking_does_not_matter(url: str, document: bytes, cuts: list[int]) -> None:
    whole = parse_bytes(url, document)
    pieces = feed_split(url, document, cuts)
    reasons = {report.error or report.truncated or "" for report in (whole[1], pieces[1])}
    if any(reason.startswith("gzip:") for reason in reasons):
        # Corrupt gzip: zlib drops the output of the call that hits the corruption, so how much came out
        # before it depends on where the input was split. Everything before that is the same.
        return
    assert pieces == whole


@SETTINGS
@given(
    items=st.lists(pages(), max_size=12),
    prefix=st.sampled_from(["", "sm:"]),
    encoding=st.sampled_from(["UTF-8", "UTF-16", "ISO-8859-1"]),
    gzipped=st.booleans(),
    cdata=st.booleans(),
    padding=st.sampled_from(["", " ", "\n\t  ", "\u00a0\u3000"]),
    data=st.data(),
)
def test_written_urlsets_read_back(items, prefix, encoding, gzipped, cdata, padding, data):
    text = serialise(items, prefix=prefix, cdata=cdata, padding=padding).replace("ENCODING", encoding)
    try:
        body = text.encode(encoding.lower())
    except UnicodeEncodeError:
        body = text.replace(f'encoding="{encoding}"', 'encoding="UTF-8"').encode()
    if gzipped:
        body = gzip.compress(body)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=8))
    entries, report = feed_split("https://example.org/sitemap.xml", body, cuts)
    assert report.error is None
    assert report.truncated is None
    assert entries == [page.expected() for page in items]


@st.composite
def sitemap_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(path.name for path in FIXTURES.iterdir())))
    body = fixture(name)
    if draw(st.booleans()):
        body = gzip.compress(body)
    return f"https://example.org/{name}", body


@SETTINGS
@given(document=sitemap_bodies(), data=st.data())
def test_truncated_documents_yield_a_prefix_of_the_entries(document, data):
    url, body = document
    full, _ = parse_bytes(url, body)
    cut = data.draw(st.integers(0, len(body)))
    cuts = data.draw(st.lists(st.integers(0, cut), max_size=4))
    entries, report = feed_split(url, body[:cut], cuts, complete=False)
    assert entries == full[: len(entries)]
    if cut < len(body) and report.error is None and entries != full:
        assert report.truncated is not None


@SETTINGS
@given(
    url=st.sampled_from(
        ["https://example.org/sitemap.xml", "https://example.org/robots.txt", "https://example.org/s.txt"]
    ),
    head=st.sampled_from([b"", b"<urlset>", b"<sitemapindex><sitemap>", b"<rss><channel><item>", b"\x1f\x8b"]),
    body=st.binary(max_size=600),
    data=st.data(),
)
def test_random_bytes_never_raise_and_chunking_does_not_matter(url, head, body, data):
    document = head + body
    cuts = data.draw(st.lists(st.integers(0, len(document)), max_size=6))
    assert_chunking_does_not_matter(url, document, cuts)
    feed_split(url, document, cuts, complete=False)


XMLISH = st.sampled_from(
    [
        "<",
        ">",
        "/",
        "&",
        ";",
        "=",
        '"',
        " ",
        "\n",
        "<![CDATA[",
        "]]>",
        "<!--",
        "-->",
        "<?xml version='1.0'?>",
        "<!DOCTYPE x>",
        "&amp;",
        "&nbsp;",
        "&#x41;",
        "urlset",
        "sitemapindex",
        "sitemap",
        "url",
        "loc",
        "lastmod",
        "priority",
        "changefreq",
        "image:image",
        "image:loc",
        "video:video",
        "video:tag",
        "news:news",
        "xhtml:link",
        'rel="alternate"',
        'hreflang="de"',
        'href="https://e.org/"',
        "rss",
        "item",
        "link",
        "guid",
        "feed",
        "entry",
        "https://example.org/",
        "2024-01-01",
        "0.5",
        "é",
        "\u2028",
    ]
)


@SETTINGS
@given(pieces=st.lists(XMLISH, max_size=60), data=st.data())
def test_xml_like_noise_never_raises_and_chunking_does_not_matter(pieces, data):
    document = "".join(pieces).encode()
    cuts = data.draw(st.lists(st.integers(0, len(document)), max_size=6))
    url = "https://example.org/sitemap.xml"
    assert_chunking_does_not_matter(url, document, cuts)
    feed_split(url, document, cuts, complete=False)


@SETTINGS
@given(document=sitemap_bodies(), data=st.data())
def test_corrupted_sitemaps_never_raise_and_chunking_does_not_matter(document, data):
    url, body = document
    mutable = bytearray(body)
    for _ in range(data.draw(st.integers(1, 6))):
        if not mutable:
            break
        position = data.draw(st.integers(0, len(mutable) - 1))
        action = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            mutable[position] = data.draw(st.integers(0, 255))
        elif action == "delete":
            del mutable[position]
        else:
            mutable[position:position] = data.draw(st.binary(min_size=1, max_size=8))
    cuts = data.draw(st.lists(st.integers(0, len(mutable)), max_size=4))
    assert_chunking_does_not_matter(url, bytes(mutable), cuts)
    feed_split(url, bytes(mutable), cuts, complete=False)
