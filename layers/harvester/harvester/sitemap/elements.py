"""A urlset's ``<url>`` elements as bytes: which entries of a new version of a sitemap are, byte for byte,
entries of the version read before, told without parsing them.

An element is parsed the same wherever it stands when what surrounds it is the same: the document's head
(the XML declaration, the ``<urlset>`` tag and its namespaces) and no markup between elements. So when two
versions of a urlset have the same head and both are plain (each ``<url>`` element follows the one before
with only whitespace between them, and nothing in them is a comment, a CDATA section, a processing
instruction or a declaration, whose text could hide a ``</url>``), an element of the new version that is
one of the old version's gives the entry that element gave; only the others need parsing, and they parse
alone as a document made of the head, them, and the closing tag (``ElementDiff.document``).

Elements are told apart by their bytes (a set of them: a hash, then an exact comparison).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import NamedTuple

_OPEN = b"<url>"
_CLOSE = b"</url>"
_END = b"</urlset>"
_ROOT = b"<urlset"
_LOC, _LOC_END = b"<loc>", b"</loc>"
#: Markup whose text could hide a closing tag, or a second root: a document with any of it in its elements
#: is not cut.
_MARKUP = (b"<!", b"<?", b"-->", _ROOT)
#: XML's whitespace (``bytes.strip`` takes more).
_SPACE = b" \t\r\n"
#: A ``<loc>``'s text, when it holds no markup (``element_locs``).
_LOC_TEXT = re.compile(rb"<loc>([^<]*)</loc>")


class UrlElements(NamedTuple):
    """A plain urlset cut at its elements: its head, and each element without its closing tag."""

    head: bytes
    elements: list[bytes]


def url_elements(document: bytes) -> UrlElements | None:
    """The document's ``<url>`` elements, or None when it is not a plain urlset (see the module)."""
    first, last = document.find(_OPEN), document.rfind(_CLOSE)
    if first < 0 or last < first or document[last + len(_CLOSE) :].strip(_SPACE) != _END:
        return None
    head, body = document[:first], document[first : last + len(_CLOSE)]
    if not _plain_head(head) or any(mark in body for mark in _MARKUP):
        return None
    pieces = body.split(_CLOSE)
    pieces.pop()  # (empty: the body ends with a closing tag)
    elements = [piece.lstrip(_SPACE) for piece in pieces]
    # Each piece opens with an element and holds no other: nothing stands between two elements but
    # whitespace, and none is inside another or left open.
    if body.count(_OPEN) != len(elements) or not all(element.startswith(_OPEN) for element in elements):
        return None
    return UrlElements(head, elements)


def _plain_head(head: bytes) -> bool:
    """Whether the head ends with the ``<urlset>`` start tag, every comment and processing instruction
    before it closed (else the first ``<url>`` found could lie in one)."""
    root = head.rfind(_ROOT)
    if root < 0 or head.count(b"<", root) != 1 or not head[root:].rstrip(_SPACE).endswith(b">"):
        return False
    before = head[:root]
    return before.rfind(b"<!--") <= before.rfind(b"-->") and before.rfind(b"<?") <= before.rfind(b"?>")


def element_loc(element: bytes) -> str | None:
    """The URL an element's ``<loc>`` gives, read without parsing when it is plain (one ``<loc>``, whose text
    has no reference but ``&amp;``): what a parser reads of it, whitespace around it stripped; else None."""
    start = element.find(_LOC)
    end = element.find(_LOC_END, start)
    if start < 0 or end < 0 or element.find(_LOC, start + 1) >= 0:
        return None
    text = element[start + len(_LOC) : end].strip(_SPACE)
    if b"&" in text:
        if text.count(b"&") != text.count(b"&amp;"):
            return None  # (another reference: parsed)
        text = text.replace(b"&amp;", b"&")
    try:
        return text.decode()
    except UnicodeDecodeError:
        return None


def element_locs(elements: Collection[bytes]) -> set[str] | None:
    """The URLs of the elements, each read as ``element_loc`` reads it, or None when one of them is not plain:
    all at once (a match of ``<loc>`` text cannot reach into the next element, which starts with a tag)."""
    if not all(element.count(_LOC) == 1 for element in elements):
        return None
    texts = [text.strip(_SPACE) for text in _LOC_TEXT.findall(b"".join(elements))]
    joined = b"\n".join(texts)
    if len(texts) != len(elements) or joined.count(b"\n") != len(texts) - 1:
        return _one_by_one(elements)  # (a text with markup or a line break in it)
    if b"&" in joined:
        if joined.count(b"&") != joined.count(b"&amp;"):
            return None  # (another reference: parsed)
        joined = joined.replace(b"&amp;", b"&")
    try:
        return set(joined.decode().split("\n")) if texts else set()
    except UnicodeDecodeError:
        return None


def _one_by_one(elements: Collection[bytes]) -> set[str] | None:
    urls = set()
    for element in elements:
        url = element_loc(element)
        if url is None:
            return None
        urls.add(url)
    return urls


class ElementDiff(NamedTuple):
    """What a new version of a urlset holds beside the old one: how many of its elements are the old one's
    (``kept``, each once, and their URLs), its other elements in document order (``added``: new, changed, or
    an element repeated), and the old one's elements it does not hold (``removed``)."""

    head: bytes
    kept: int
    added: list[bytes]
    removed: list[bytes]
    #: The URLs of the elements kept (``element_loc``), or None when one of them is not plain.
    urls: set[str] | None

    @staticmethod
    def of(old: bytes, new: bytes) -> ElementDiff | None:
        """The diff of two versions of a urlset (their bytes, uncompressed), or None when either is not a
        plain urlset, their heads differ, or the old one holds an element twice."""
        before, after = url_elements(old), url_elements(new)
        if before is None or after is None or before.head != after.head:
            return None
        known = set(before.elements)
        if len(known) != len(before.elements):
            return None
        taken: set[bytes] = set()
        added = []
        for element in after.elements:
            if element in known and element not in taken:
                taken.add(element)
            else:
                added.append(element + _CLOSE)
        removed = [element + _CLOSE for element in before.elements if element not in taken]
        urls = element_locs(taken)
        plain = urls is not None and len(urls) == len(taken)
        return ElementDiff(before.head, len(taken), added, removed, urls if plain else None)

    @staticmethod
    def document(head: bytes, elements: list[bytes]) -> bytes:
        """A urlset made of ``head`` and ``elements``: each parses in it as it did in its own version."""
        return head + b"\n".join(elements) + b"\n" + _END
