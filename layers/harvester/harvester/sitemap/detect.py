"""Deciding what a document is from its first bytes, never from its Content-Type.

Servers label sitemaps ``text/html``, ``application/octet-stream`` or ``text/plain`` and serve HTML error
pages with a 200, so the only evidence worth having is the body itself: a byte-order mark, then (after any
whitespace) ``<`` for XML or anything else for a line-based document. For XML the root element's local name
settles the kind later (:data:`ROOT_KINDS`), because prefixes and namespaces vary too much to trust.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from msgspec import Struct

from harvester.sitemap.entries import SitemapKind

#: Root element local names (lower-cased) and the kind they make a document.
ROOT_KINDS: dict[str, SitemapKind] = {
    "urlset": SitemapKind.URLSET,
    "sitemapindex": SitemapKind.INDEX,
    "rss": SitemapKind.RSS,
    "rdf": SitemapKind.RSS,  # RSS 1.0: <rdf:RDF>
    "feed": SitemapKind.ATOM,
}

_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_WHITESPACE = frozenset(b" \t\r\n\x0b\x0c")
# Leading blanks per encoding, matched by the regex engine rather than a Python loop: a document may
# start with megabytes of them.
_BLANKS = {
    "utf-8": re.compile(rb"[ \t\r\n\x0b\x0c]*"),
    "utf-16-le": re.compile(rb"(?:[ \t\r\n\x0b\x0c]\x00)*"),
    "utf-16-be": re.compile(rb"(?:\x00[ \t\r\n\x0b\x0c])*"),
}


class Sniffed(Struct, frozen=True):
    """The verdict: XML or lines, the text encoding the first bytes imply, and the bytes to parse.

    ``data`` starts at the first non-blank character; for XML a byte-order mark is kept in front of it so
    that expat sees the same encoding evidence the document had.
    """

    is_xml: bool
    encoding: str
    data: bytes


class Sniffer:
    """Finds the first meaningful character of a stream fed in pieces of any size.

    Leading whitespace is dropped as it arrives, so a document that starts with megabytes of blank lines
    costs no memory; only a handful of bytes are ever held back.
    """

    def __init__(self) -> None:
        self._head = b""
        self._bom = b""
        self._encoding: str | None = None
        self._unit = 1  # bytes per code unit: 2 for UTF-16
        self._offset = 0  # which byte of a code unit holds an ASCII character (1 in UTF-16 big-endian)

    def feed(self, chunk: bytes) -> Sniffed | None:
        """The verdict once the first non-blank character has arrived, else None (feed more)."""
        self._head += chunk
        if self._encoding is None and not self._detect_encoding(final=False):
            return None
        return self._skip_blanks()

    def close(self) -> Sniffed | None:
        """The verdict at the end of the input; None when the document was empty or blank."""
        if self._encoding is None:
            self._detect_encoding(final=True)
        return self._skip_blanks()

    def _detect_encoding(self, *, final: bool) -> bool:
        head = self._head
        for bom, encoding in _BOMS:
            if head.startswith(bom):
                self._set(encoding, bom)
                return True
            if not final and bom.startswith(head):
                return False  # could still become this byte-order mark
        if len(head) < 2 and not final:
            return False
        # UTF-16 without a byte-order mark: an ASCII character (whitespace or "<") next to a NUL byte.
        if len(head) >= 2 and (head[0] == 0) != (head[1] == 0):
            ascii_byte = head[1] if head[0] == 0 else head[0]
            if ascii_byte in _WHITESPACE or ascii_byte == ord("<"):
                self._set("utf-16-be" if head[0] == 0 else "utf-16-le", b"")
                return True
        self._set("utf-8", b"")
        return True

    def _set(self, encoding: str, bom: bytes) -> None:
        self._encoding = encoding
        self._bom = bom
        self._head = self._head[len(bom) :]
        if encoding.startswith("utf-16"):
            self._unit = 2
            self._offset = 1 if encoding == "utf-16-be" else 0

    def _skip_blanks(self) -> Sniffed | None:
        assert self._encoding is not None
        head, unit, offset = self._head, self._unit, self._offset
        blanks = _BLANKS[self._encoding].match(head)
        self._head = head[blanks.end() if blanks else 0 :]
        if len(self._head) < unit:
            return None
        rest, self._head = self._head, b""
        is_xml = rest[offset] == ord("<") and (unit == 1 or rest[1 - offset] == 0)
        return Sniffed(is_xml, self._encoding, (self._bom + rest) if is_xml else rest)


def is_robots_url(url: str) -> bool:
    """Whether a non-XML body at ``url`` is a robots.txt (the path, or a local file name, says so)."""
    try:
        path = urlsplit(url).path
    except ValueError:
        path = url
    return path.lower().endswith("robots.txt")


def root_kind(local_name: str) -> SitemapKind | None:
    return ROOT_KINDS.get(local_name.lower())
