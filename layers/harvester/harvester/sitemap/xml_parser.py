"""XML sitemaps, indexes and feeds, read as a stream with expat.

Why it is written the way it is:

* Elements are matched on their local name, lower-cased, because real sitemaps use every namespace
  imaginable (none, a wrong one, ``sit:`` prefixes, undeclared ``image:`` prefixes). For the same reason
  expat runs without namespace processing: an undeclared prefix would otherwise be a fatal error.
* Speed (a 50,000-URL sitemap is 400,000 elements): each qualified name is classified once and cached as
  a small int, so an event costs one dict lookup and integer comparisons; character data is delivered
  only inside entries, straight into a list's ``append`` (expat calls it from C, no Python frame); the
  handlers are closures over their state rather than methods, and the common elements are handled inline.
* Most urlsets write every ``<url>`` the same canonical way; :mod:`harvester.sitemap.plain_urls` reads such
  blocks with one regular expression match each instead of ~20 callbacks, and hands anything else back
  to the handlers (:mod:`harvester.sitemap.xml_handlers`). It is an optimisation only: a differential test
  holds both to the same output.
* An entry is emitted at its end tag and never before, so a cut document yields every complete entry and
  never a cut-off URL; per-entry state is dropped as soon as the entry is out.
* Hardening (:mod:`harvester.sitemap.xml_hardening`) as defusedxml's ``forbid_entities`` and
  ``forbid_external``: an entity declaration or a reference to an external DTD ends the parse where it
  stands, so entity expansion (billion laughs) and external entities never happen; a bare DOCTYPE
  (``<!DOCTYPE urlset>``) is read past. With ``allow_doctype`` (crawler-commons' ``allowDocTypeDefinitions``)
  a DOCTYPE is read whatever it declares but entities that would expand: an external DTD is never fetched,
  an external entity never read (a reference to it reads as nothing), and an internal or parameter entity
  still ends the parse. Undeclared entities (``&nbsp;`` from HTML-minded CMSs) are read as HTML's rather
  than stopping the parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html.entities import html5
from typing import Any, ClassVar
from xml.parsers import expat

from defusedxml.common import DefusedXmlException

from harvester.sitemap import xml_hardening
from harvester.sitemap.detect import root_kind
from harvester.sitemap.entries import (
    ParseReport,
    SitemapKind,
)
from harvester.sitemap.plain_urls import PlainUrls, blank, decode, is_plain
from harvester.sitemap.sink import NotASitemap, Sink, Truncated
from harvester.sitemap.xml_handlers import handlers

StartHandler = Callable[[str, dict[str, str]], None]
EndHandler = Callable[[str], None]

_WRONG_ENCODING = expat.errors.codes[expat.errors.XML_ERROR_INCORRECT_ENCODING]
_EXPAT_ENCODINGS = {"utf-8": "UTF-8", "utf-16-le": "UTF-16LE", "utf-16-be": "UTF-16BE"}
#: How much of a document's start is kept in case its declared encoding turns out to be wrong.
_PROLOG_MAX = 64 * 1024

#: Encodings in which the plain-block reader may read a document (the bytes it decodes are expat's).
_UTF8 = "utf-8"  # (expat knows no other name for it: "utf8" is an unknown single-byte encoding to it)
_URL_START = b"<url>"
_BLANKS = re.compile(rb"[ \t\r\n]*")
_URL_END = b"</url>"
#: The most of an unfinished block held back for the plain-block reader, waiting for its end tag; a longer
#: one goes to expat.
_HOLD_MAX = 256 * 1024
#: Pieces the prolog is fed in, one ``>`` each, before the rest goes at once (see _feed_prolog).
_PROLOG_PIECES = 16
#: Blocks the plain-block reader refused before it stops trying on a document (unless it took more).
_MISSES_MAX = 32

#: Errors that, at the end of the input, mean the document stops short (rather than being malformed).
_ENDS_EARLY = frozenset(
    expat.errors.codes[message]
    for message in (
        expat.errors.XML_ERROR_NO_ELEMENTS,
        expat.errors.XML_ERROR_UNCLOSED_TOKEN,
        expat.errors.XML_ERROR_PARTIAL_CHAR,
        expat.errors.XML_ERROR_UNCLOSED_CDATA_SECTION,
    )
)


def _never() -> bool:
    return False


class _RootClosed(Exception):
    """Raised by the root's end tag to stop expat there."""


class XmlParser:
    """Feeds a document to expat and emits its entries to the sink as their end tags go by.

    ``encoding`` is what the first bytes showed (a byte-order mark, UTF-16 zero bytes, else UTF-8); it is
    only used when the document's declaration contradicts its bytes (a UTF-8 file declaring UTF-16), in
    which case the bytes win and the parse restarts once.
    """

    #: Whether plain ``<url>`` blocks may be read without expat's callbacks (tests compare both ways).
    read_plain_blocks: ClassVar[bool] = True

    def __init__(
        self, sink: Sink, report: ParseReport, encoding: str = "utf-8", *, allow_doctype: bool = False
    ) -> None:
        self._sink = sink
        self._report = report
        self._encoding = encoding
        self._allow_doctype = allow_doctype
        self._parser = self._new_parser(None)
        self._root: str | None = None
        # The chunks fed before the current one while no root element has been seen, for that one restart
        # (None: past the cap, past the root, or used).
        self._prolog: bytearray | None = bytearray()
        #: The root element has closed: the document is complete and the rest of the input is ignored.
        self.done = False
        # The plain-block reader (see plain_urls): set once the root says urlset and the bytes are UTF-8.
        self._declared: str | None = None  # the encoding the XML declaration names
        self._plain: PlainUrls | None = None
        self._fed = 0  # bytes given to expat
        # A block may be read next: see _is_clean.
        self._clean = False
        self._idle: Callable[[], bool] = _never
        self._in_cdata = False
        self._held = bytearray()  # input after the last complete block, held back until its </url> arrives
        self._held_blanks = 0  # how much of it is known to be whitespace
        self._hits = self._misses = 0
        self._prolog_pieces = 0

    def _new_parser(self, encoding: str | None) -> Any:
        parser = expat.ParserCreate(encoding)
        parser.buffer_text = True
        parser.buffer_size = 64 * 1024
        parser.StartDoctypeDeclHandler = xml_hardening.forbid_doctype
        parser.EntityDeclHandler = xml_hardening.forbid_entity
        parser.UnparsedEntityDeclHandler = xml_hardening.forbid_unparsed_entity
        parser.ExternalEntityRefHandler = xml_hardening.forbid_external
        if self._allow_doctype:
            parser.StartDoctypeDeclHandler = xml_hardening.allow_doctype
            parser.EntityDeclHandler = xml_hardening.forbid_expanding_entity
            parser.UnparsedEntityDeclHandler = None
            parser.ExternalEntityRefHandler = self._skip_external
        # As if an external DTD existed that nobody reads: an undeclared entity (&nbsp; from an HTML-minded
        # CMS) is then skipped instead of being a fatal error, and nothing can declare one since an entity
        # declaration is refused.
        parser.UseForeignDTD(True)
        parser.SkippedEntityHandler = self._skipped_entity
        parser.StartElementHandler = self._start_root
        parser.XmlDeclHandler = self._xml_declaration
        parser.StartCdataSectionHandler = self._start_cdata
        parser.EndCdataSectionHandler = self._end_cdata
        return parser

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        if self._root is None:
            data = self._feed_prolog(data)
            if not data or self.done:
                return
        if self._plain is not None:
            self._feed_blocks(data)
        else:
            self._parse(data, final=False)

    def _feed_prolog(self, data: bytes) -> bytes:
        """Feeds ``data`` up to the root's start tag and returns the rest.

        The prolog is fed one ``>`` at a time, a handful of pieces, so that the plain-block reader can take
        over right after the root's start tag rather than at the next chunk (a whole small sitemap is one
        chunk).
        """
        start = 0
        while self._root is None and self._prolog_pieces < _PROLOG_PIECES and not self.done:
            end = data.find(b">", start) + 1
            if not end:
                break
            self._prolog_pieces += 1
            self._parse_prolog(data[start:end])
            start = end
        if self._root is None:
            if start < len(data) and not self.done:
                self._parse_prolog(data[start:])
            return b""
        self._clean = self._is_clean()
        return data[start:]

    def _parse_prolog(self, data: bytes) -> None:
        self._parse(data, final=False)
        if self._prolog is not None:  # still before the root element
            if len(self._prolog) + len(data) <= _PROLOG_MAX:
                self._prolog += data
            else:
                self._prolog = None

    def close(self, *, complete: bool) -> None:
        """Ends the parse; a cut download (``complete=False``) is the caller's to report as truncated."""
        if self.done:
            return
        if complete:
            held, self._held = bytes(self._held), bytearray()
            self._parse(held, final=True)
            return
        self.flush()  # what expat would have had: the cut block is its to drop
        if self._root is None:
            raise NotASitemap("not a sitemap: the document ends before its root element")

    def _feed_blocks(self, data: bytes) -> None:
        """Feeds a chunk of a urlset's body, reading plain ``<url>`` blocks without expat's callbacks.

        Expat is given the document in order: blocks read here as their :func:`blank`, anything else as
        it is. Blocks are read here only from a clean point (:meth:`_is_clean`); any other piece goes to
        expat up to the next ``</url>``, after which the point is clean again unless that ``</url>`` was
        inside something (a comment, CDATA, an entry).
        """
        if self._held:
            # Small chunks (a slow network) must not copy the held block once per chunk: append until
            # its end tag is in (or it is too long to wait for).
            seen = len(self._held)
            self._held += data
            if (
                self._held.find(_URL_END, max(0, seen - len(_URL_END) + 1)) < 0
                and len(self._held) <= _HOLD_MAX
                and self._looks_like_block(self._held, self._held_blanks)
            ):
                return
            buf, self._held = bytes(self._held), bytearray()
        else:
            buf = data
        last = buf.rfind(_URL_END)
        text = decode(buf[: last + len(_URL_END)]) if last >= 0 else None
        ascii_only = text is not None and len(text) == last + len(_URL_END)
        plain = text is not None and is_plain(text)
        pos = at = 0  # where the rest starts: in buf (bytes) and in text (characters)
        while pos < len(buf) and not self.done:
            if self._plain is None:  # given up on this document
                self._parse(buf[pos:], final=False)
                return
            if self._clean and text is not None and at < len(text):
                took = self._plain.read(text, at, plain=plain)
                if took:
                    self._hits += 1
                    size = took if ascii_only else len(text[at : at + took].encode())
                    self._parse(blank(text[at : at + took]), final=False)
                    pos, at = pos + size, at + took
                    continue
                self._misses += 1
                if self._misses > _MISSES_MAX and self._misses > self._hits:
                    self._plain = None  # a document written another way: expat reads the rest
            cut = buf.find(_URL_END, pos)
            if cut < 0:
                rest = buf[pos:]
                if self._clean and len(rest) <= _HOLD_MAX and self._looks_like_block(rest):
                    self._held = bytearray(rest)  # the start of a block, perhaps plain: wait for its end
                else:  # something else (the root's end tag): expat's at once
                    self._parse(rest, final=False)
                    self._clean = False
                return
            cut += len(_URL_END)
            piece = buf[pos:cut]
            self._parse(piece, final=False)
            if text is not None:
                at += len(piece) if ascii_only else len(piece.decode())
            pos = cut
            self._clean = self._is_clean()

    def _is_clean(self) -> bool:
        """Whether a plain block may be read next, as the handlers would read it: expat has read every
        byte it was given (nothing pending: no unfinished tag, comment or reference), it is not inside a
        CDATA section (whose text it takes as it comes), and no entry is open."""
        return self._parser.CurrentByteIndex == self._fed and not self._in_cdata and self._idle()

    def _looks_like_block(self, data: bytes | bytearray, start: int = 0) -> bool:
        """Whether ``data`` (from ``start``, where the blanks known so far end) may be the start of a
        ``<url>`` block: blanks, then "<url>" or the start of it."""
        end = _BLANKS.match(data, start).end()  # type: ignore[union-attr]  # (matches the empty string)
        self._held_blanks = end
        return _URL_START.startswith(data[end : end + len(_URL_START)])

    def flush(self) -> None:
        """Gives expat what was held back, before the parse is stopped from outside (a size limit, a
        broken gzip stream): what the held bytes say (an error, an entry) came first in the document."""
        if self._held and not self.done:
            held, self._held = bytes(self._held), bytearray()
            self._parse(held, final=False)

    def _parse(self, data: bytes, *, final: bool) -> None:
        self._fed += len(data)
        try:
            self._parser.Parse(data, final)
        except _RootClosed:
            self.done = True  # whatever follows the root element is not read, however it is chunked
        except expat.ExpatError as exc:
            if self._root is None:
                if exc.code == _WRONG_ENCODING and self._prolog is not None:
                    self._restart(data, final)
                    return
                raise NotASitemap(f"not a sitemap: XML error before the root element: {exc}") from None
            elif final and exc.code in _ENDS_EARLY:
                raise Truncated(f"document ends before </{self._root}> ({exc})") from None
            else:
                raise Truncated(f"XML syntax error: {exc}") from None
        except DefusedXmlException as exc:
            raise NotASitemap(f"not a sitemap: {xml_hardening.in_words(exc)}") from None
        except (ValueError, LookupError) as exc:
            # pyexpat's own refusals, e.g. "multi-byte encodings are not supported" for Shift_JIS.
            if self._root is None:
                raise NotASitemap(f"not a sitemap: {exc}") from None
            raise Truncated(f"XML error: {exc}") from None

    def _restart(self, data: bytes, final: bool) -> None:
        """Parses again from the start, overriding the declared encoding with the one the bytes show.

        The declaration is the document's first thing, so the error comes in the first chunks: the ones
        before the current one are in ``_prolog``.
        """
        self._report.warn("wrong_declared_encoding")
        fed, self._prolog = bytes(self._prolog or b"") + data, None
        self._parser = self._new_parser(_EXPAT_ENCODINGS.get(self._encoding, "UTF-8"))
        self._declared = self._encoding  # what the parser now reads, whatever the declaration said
        self._fed = 0
        self._parse(fed, final=final)

    def _xml_declaration(self, version: str | None, encoding: str | None, standalone: int) -> None:
        if self._declared is None:
            self._declared = encoding

    def _start_cdata(self) -> None:
        self._in_cdata = True

    def _end_cdata(self) -> None:
        self._in_cdata = False

    def _skip_external(self, context: str | None, base: str | None, sysid: str | None, pubid: str | None) -> int:
        """``allow_doctype``: a reference to an external entity reads as nothing (crawler-commons' resolver
        of empty entities); nothing is fetched or opened."""
        if context is not None or sysid is not None or pubid is not None:
            self._report.warn("external_entity")
        return 1

    def _skipped_entity(self, name: str, is_parameter_entity: bool) -> None:
        self._report.warn("undefined_entity")
        text = html5.get(name + ";")
        collect = self._parser.CharacterDataHandler
        if text and collect is not None:
            collect(text)

    def _start_root(self, name: str, attrs: dict[str, str]) -> None:
        kind = root_kind(name.rpartition(":")[2])
        if kind is None:
            raise NotASitemap(f"not a sitemap: root element <{name}>")
        self._root = name
        self._prolog = None
        self._report.kind = kind
        start, end, self._idle = handlers(kind, self._parser, name, self._sink, self._report, self._ended)
        self._parser.StartElementHandler = start
        self._parser.EndElementHandler = end
        utf8 = self._encoding == "utf-8" and (self._declared or _UTF8).lower() == _UTF8
        if kind is SitemapKind.URLSET and utf8 and self.read_plain_blocks:
            self._plain = PlainUrls(self._sink)
        start(name, attrs)

    def _ended(self) -> None:
        raise _RootClosed
