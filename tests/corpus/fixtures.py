"""Builders for the documents a nasty site serves: sitemaps in every shape real sites get wrong.

Everything is generated here, at test time, from a base URL (so every ``<loc>`` points back at the test
server): urlsets with every field and extension, indexes with and without ``<loc>``, RSS 2.0 / 1.0 and
Atom 0.3 / 1.0 feeds, plain-text lists, robots.txt variants, documents in other encodings, truncated
documents, the 50,001-entry sitemap, gzip bombs, billion laughs and an HTML soft 404.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable, Iterator
from html import escape

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
#: A namespace real sites use by mistake (Google's old one).
GOOGLE_NS = "http://www.google.com/schemas/sitemap/0.84"
IMAGE_NS = "http://www.google.com/schemas/sitemap-image/1.1"
NEWS_NS = "http://www.google.com/schemas/sitemap-news/0.9"
VIDEO_NS = "http://www.google.com/schemas/sitemap-video/1.1"
XHTML_NS = "http://www.w3.org/1999/xhtml"
EXTENSIONS = f'xmlns:image="{IMAGE_NS}" xmlns:news="{NEWS_NS}" xmlns:video="{VIDEO_NS}" xmlns:xhtml="{XHTML_NS}"'

MiB = 1024 * 1024
GiB = 1024 * MiB


# urlsets and indexes --------------------------------------------------------------------------------


def url(
    loc: str,
    *,
    lastmod: str | None = None,
    changefreq: str | None = None,
    priority: str | None = None,
    extra: str = "",
    prefix: str = "",
) -> str:
    """One ``<url>``; ``loc`` is written as given (escape it yourself if it holds ``&``)."""
    p = f"{prefix}:" if prefix else ""
    fields = [f"<{p}loc>{loc}</{p}loc>"]
    for name, value in (("lastmod", lastmod), ("changefreq", changefreq), ("priority", priority)):
        if value is not None:
            fields.append(f"<{p}{name}>{value}</{p}{name}>")
    return f"<{p}url>{''.join(fields)}{extra}</{p}url>\n"


def urlset(*entries: str, namespace: str | None = SITEMAP_NS, prefix: str = "", declaration: str = "") -> str:
    """A ``<urlset>`` around ``entries`` (see :func:`url`); ``namespace=None`` leaves the namespace out,
    ``prefix`` binds it to a prefix (``<sit:urlset xmlns:sit=...>``)."""
    p = f"{prefix}:" if prefix else ""
    xmlns = "" if namespace is None else f' xmlns{":" + prefix if prefix else ""}="{namespace}"'
    head = declaration or '<?xml version="1.0" encoding="UTF-8"?>\n'
    return f"{head}<{p}urlset{xmlns} {EXTENSIONS}>\n{''.join(entries)}</{p}urlset>\n"


def index(*locs: str, bare: bool = False) -> str:
    """A ``<sitemapindex>``; ``bare=True`` writes each URL as the ``<sitemap>``'s own text, without
    ``<loc>`` (crawler-commons recovers those; most parsers do not)."""
    if bare:
        children = "".join(f"<sitemap>\n  {loc}\n</sitemap>\n" for loc in locs)
    else:
        children = "".join(
            f"<sitemap><loc>{loc}</loc><lastmod>2024-01-0{1 + i % 9}</lastmod></sitemap>\n"
            for i, loc in enumerate(locs)
        )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">\n{children}</sitemapindex>\n'


def image(loc: str, *, caption: str = "", title: str = "", geo_location: str = "", license: str = "") -> str:
    parts = [f"<image:loc>{loc}</image:loc>"]
    for name, value in (("caption", caption), ("title", title), ("geo_location", geo_location), ("license", license)):
        if value:
            parts.append(f"<image:{name}>{escape(value)}</image:{name}>")
    return f"<image:image>{''.join(parts)}</image:image>"


def news(*, name: str, language: str, date: str, title: str, keywords: str = "", genres: str = "") -> str:
    extra = f"<news:keywords>{keywords}</news:keywords>" if keywords else ""
    extra += f"<news:genres>{genres}</news:genres>" if genres else ""
    return (
        "<news:news><news:publication>"
        f"<news:name>{escape(name)}</news:name><news:language>{language}</news:language>"
        f"</news:publication><news:publication_date>{date}</news:publication_date>"
        f"<news:title>{escape(title)}</news:title>{extra}</news:news>"
    )


def video(
    *, thumbnail: str, title: str, description: str, content: str = "", player: str = "", duration: str = ""
) -> str:
    parts = [
        f"<video:thumbnail_loc>{thumbnail}</video:thumbnail_loc>",
        f"<video:title>{escape(title)}</video:title>",
        f"<video:description>{escape(description)}</video:description>",
    ]
    if content:
        parts.append(f"<video:content_loc>{content}</video:content_loc>")
    if player:
        parts.append(f"<video:player_loc>{player}</video:player_loc>")
    if duration:
        parts.append(f"<video:duration>{duration}</video:duration>")
    parts.append("<video:publication_date>2024-02-01T08:00:00+00:00</video:publication_date>")
    return f"<video:video>{''.join(parts)}</video:video>"


def hreflang(lang: str | None, href: str | None, rel: str | None = "alternate") -> str:
    """An ``xhtml:link``; pass None to leave an attribute out (such a link must not become an alternate)."""
    attrs = "".join(
        f' {name}="{value}"' for name, value in (("rel", rel), ("hreflang", lang), ("href", href)) if value is not None
    )
    return f"<xhtml:link{attrs}/>"


# feeds ---------------------------------------------------------------------------------------------


def rss2(*items: tuple[str | None, str | None, str | None]) -> str:
    """RSS 2.0; each item is ``(link, guid, pubDate)``, None leaving the element out. A ``guid`` is a
    permalink unless it is not a URL."""
    body = ""
    for link, guid, date in items:
        body += "<item><title>story</title>"
        body += f"<link>{link}</link>" if link is not None else ""
        body += f'<guid isPermaLink="true">{guid}</guid>' if guid is not None else ""
        body += f"<pubDate>{date}</pubDate>" if date is not None else ""
        body += "</item>\n"
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>News</title>'
        f"<link>http://example.invalid/</link><description>d</description>\n{body}</channel></rss>\n"
    )


def rss1(*items: tuple[str, str]) -> str:
    """RSS 1.0 (RDF); each item is ``(link, dc:date)``."""
    body = "".join(
        f'<item rdf:about="{link}"><title>t</title><link>{link}</link><dc:date>{date}</dc:date></item>\n'
        for link, date in items
    )
    return (
        '<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">'
        '<channel rdf:about="http://example.invalid/"><title>c</title></channel>\n'
        f"{body}</rdf:RDF>\n"
    )


def atom1(*entries: tuple[str, str]) -> str:
    """Atom 1.0; each entry is ``(href, updated)``."""
    body = "".join(
        f'<entry><title>t</title><id>urn:uuid:{i}</id><link rel="alternate" href="{href}"/>'
        f'<link rel="edit" href="{href}/edit"/><updated>{updated}</updated></entry>\n'
        for i, (href, updated) in enumerate(entries)
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom"><title>f</title>'
        f'<link href="http://example.invalid/feed"/><updated>2024-01-01T00:00:00Z</updated>\n{body}</feed>\n'
    )


def atom03(*entries: tuple[str, str]) -> str:
    """Atom 0.3; each entry is ``(href, modified)``."""
    body = "".join(
        f'<entry><title>t</title><link rel="alternate" type="text/html" href="{href}"/>'
        f"<modified>{modified}</modified><issued>2003-12-13T08:29:29-04:00</issued></entry>\n"
        for href, modified in entries
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<feed version="0.3" xmlns="http://purl.org/atom/ns#">'
        f"<title>f</title>\n{body}</feed>\n"
    )


# line-based documents ------------------------------------------------------------------------------


def text_sitemap(*lines: str, newline: str = "\n") -> str:
    return newline.join(lines) + newline


def robots(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# encodings and damage ------------------------------------------------------------------------------


def encoded(document: str, encoding: str) -> bytes:
    """``document`` (whose XML declaration names ``encoding``) in that encoding, with a BOM for UTF-16."""
    if encoding.lower() == "utf-16":
        return document.encode("utf-16")  # Python writes the byte-order mark
    return document.encode(encoding)


def cut(document: str, marker: str) -> bytes:
    """The document up to (not including) the last occurrence of ``marker``: a download that broke off."""
    data = document.encode()
    return data[: data.rindex(marker.encode())]


def gzipped(data: bytes | str) -> bytes:
    return gzip.compress(data.encode() if isinstance(data, str) else data, mtime=0)


def deflated(data: bytes | str) -> bytes:
    """zlib-wrapped deflate: what ``Content-Encoding: deflate`` means by RFC 9110."""
    return zlib.compress(data.encode() if isinstance(data, str) else data)


def gzip_bomb(size: int = GiB, *, filler: bytes = b"\0", prefix: bytes = b"") -> bytes:
    """``prefix`` then ``size`` bytes of ``filler``, gzipped: 1 GiB becomes about 1 MiB.

    Built as the deflate stream of one MiB of filler, made byte-aligned and independent of what precedes
    it by a full flush, repeated: a quarter of a second instead of the three seconds zlib needs to
    compress a gibibyte. It is a valid gzip stream (CRC and size included), one member.
    """
    block = filler * (MiB // len(filler))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH) if prefix else b""
    repeated = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.flush(zlib.Z_FINISH)
    count = size // len(block)
    crc = zlib.crc32(prefix)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    total = len(prefix) + count * len(block)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + head + repeated * count + tail + struct.pack("<II", crc, total & 0xFFFFFFFF)


def billion_laughs() -> str:
    """The classic: ten levels of ten entity references, a billion "lol"s if anything expands them."""
    entities = ['<!ENTITY lol "lol">']
    for n in range(1, 10):
        previous = f"lol{n - 1}" if n > 1 else "lol"
        entities.append(f'<!ENTITY lol{n} "{f"&{previous};" * 10}">')
    return (
        '<?xml version="1.0"?>\n<!DOCTYPE urlset [\n  '
        + "\n  ".join(entities)
        + f'\n]>\n<urlset xmlns="{SITEMAP_NS}"><url><loc>http://example.invalid/&lol9;</loc></url></urlset>\n'
    )


def external_entity() -> str:
    return (
        '<?xml version="1.0"?>\n<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
        f'<urlset xmlns="{SITEMAP_NS}"><url><loc>http://example.invalid/&xxe;</loc></url></urlset>\n'
    )


def soft_404() -> str:
    """What a CMS answers, with 200, for a sitemap it does not have."""
    return (
        "<!DOCTYPE html>\n<html lang=en><head><title>Page not found</title></head>"
        "<body><h1>Oops!</h1><p>We could not find <a href=/>that page</a>.</p></body></html>\n"
    )


def soft_404_without_doctype() -> str:
    return "\n\n  <html><head><title>404</title></head><body>Nothing here</body></html>\n"


# big documents -------------------------------------------------------------------------------------


def numbered_urlset(base: str, count: int) -> bytes:
    """A urlset of ``count`` pages ``base/n/<i>`` (the 50,001-entry sitemap is 3 MB: bytes will do)."""
    head = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n'
    body = "".join(f"<url><loc>{base}/n/{i}</loc></url>\n" for i in range(count))
    return (head + body + "</urlset>\n").encode()


def padded_urlset(base: str, before: Iterable[str], padding: int, after: Iterable[str]) -> Iterator[bytes]:
    """A urlset with ``padding`` bytes of blanks between two groups of pages, streamed in 1 MiB chunks
    (for the 50 MiB limit without holding 50 MiB)."""
    yield (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n'
        + "".join(url(base + p) for p in before)
    ).encode()
    blanks = b" " * (MiB - 1) + b"\n"
    for _ in range(padding // MiB):
        yield blanks
    yield ("".join(url(base + p) for p in after) + "</urlset>\n").encode()
