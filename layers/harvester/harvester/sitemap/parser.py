"""The sitemap parser the engine feeds: bytes in as they arrive, entries out as they complete.

One push parser covers every format because the fetcher cannot know in advance what it is downloading:
the body decides (gzip magic, then XML or lines, then the root element), never the URL or the
Content-Type. It is a push parser rather than a reader over a file-like object so that the fetcher keeps
control of the connection: it can stop downloading the moment :attr:`SitemapParser.finished` says the rest
would be thrown away (a limit, a fatal error, or the end of the root element).

The pipeline for each chunk: gzip magic check → bounded inflation or byte counting (``max_bytes`` of
uncompressed input, whichever way it came) → :class:`~harvester.sitemap.detect.Sniffer` → the format
parser, which hands entries to a :class:`~harvester.sitemap.sink.Sink` that enforces ``max_entries``.
"""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from harvester.inflate import BoundedInflater, DecompressionError, is_gzip
from harvester.limits import SITEMAP_MAX_BYTES, SITEMAP_MAX_ENTRIES
from harvester.sitemap.detect import Sniffed, Sniffer, is_robots_url
from harvester.sitemap.entries import OVER_WARN_SIZE, Entry, ParseReport, SitemapKind
from harvester.sitemap.robots import RobotsParser
from harvester.sitemap.sink import NotASitemap, Sink, StopParsing, Truncated
from harvester.sitemap.text import TextParser
from harvester.sitemap.xml_parser import XmlParser
from harvester.words import size

#: Read size for local files.
FILE_CHUNK = 256 * 1024


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Holds off the cyclic garbage collector while a chunk is parsed.

    A large chunk (a whole sitemap handed to :func:`parse_bytes`) creates tens of thousands of entries, five
    container objects per URL with an image and an hreflang link, that all stay alive: the worst case for
    CPython's generational collector, which keeps running full collections over a heap that only grows.
    Entries hold no reference cycles, so nothing is lost by collecting once afterwards; Mercurial's
    ``util.nogc`` does the same for its large containers. A thread that enters while another has the
    collector paused finds it disabled and leaves switching it back on to the thread that disabled it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _FormatParser(Protocol):
    def feed(self, data: bytes) -> None: ...

    def close(self, *, complete: bool) -> None: ...


class SitemapParser:
    """Streaming parser for one fetched document (sitemap, index, feed, text list or robots.txt).

    ``feed`` never raises for anything the document contains: problems end up in :attr:`report`
    (``error`` when the document is not a sitemap at all, ``truncated`` when it is one but was cut short,
    by a limit, a syntax error or the download) and every entry completed before the problem is kept.
    """

    def __init__(
        self,
        url: str,
        *,
        max_entries: int = SITEMAP_MAX_ENTRIES,
        max_bytes: int = SITEMAP_MAX_BYTES,
        robots: bool | None = None,
        allow_doctype: bool = False,
        warn_bytes: int = 0,
        schemeless: bool = False,
    ) -> None:
        self.url = url
        #: Whether a non-XML body is a robots.txt. The caller may know better than the URL's path: a
        #: robots.txt redirected to ``/seo/robots`` still declares its sitemaps.
        self.robots = is_robots_url(url) if robots is None else robots
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        #: Read a document with a DOCTYPE, entities still refused (``XmlParser``'s ``allow_doctype``).
        self.allow_doctype = allow_doctype
        #: Past this many uncompressed bytes (0: never), the report warns ``over_warn_size``, once.
        self.warn_bytes = warn_bytes
        self._warn_at = warn_bytes or max_bytes  # (the limit ends the parse before the test could pass it)
        #: A text sitemap's lines without a scheme are entries too, for the screen to repair.
        self.schemeless = schemeless
        self.report = ParseReport()
        self._sink = Sink(self.report, max_entries)
        self._head = b""  # the first bytes, held until gzip can be told from the rest
        self._started = False
        self._inflater: BoundedInflater | None = None
        self._decoded = 0
        self._sniffer = Sniffer()
        self._format: _FormatParser | None = None
        self._xml: XmlParser | None = None
        self._stopped = False
        self._closed = False

    @property
    def finished(self) -> bool:
        """True once more input would be ignored: a limit, a fatal error, the end of the XML root, close."""
        return self._stopped or self._closed or (self._xml is not None and self._xml.done)

    @property
    def bytes_decoded(self) -> int:
        """Uncompressed bytes read so far (what ``max_bytes`` bounds)."""
        return self._decoded

    def feed(self, chunk: bytes) -> list[Entry]:
        """The entries that ``chunk`` completes, in document order."""
        if chunk and not self.finished:
            with _gc_paused():
                try:
                    self._feed(chunk)
                except StopParsing as stop:
                    self._stop(stop)
        return self._sink.take()

    def close(self, *, complete: bool = True) -> list[Entry]:
        """Ends the document. ``complete=False`` says the download was cut: an unfinished last entry is
        dropped and the sitemap is marked truncated."""
        if not self.finished:
            try:
                self._close(complete)
            except StopParsing as stop:
                self._stop(stop)
        self._closed = True
        return self._sink.take()

    # The pipeline.

    def _feed(self, chunk: bytes) -> None:
        if not self._started:
            self._head += chunk
            if len(self._head) < len(b"\x1f\x8b"):
                return
            chunk, self._head = self._head, b""
            self._begin(chunk)
        if self._inflater is None:
            self._plain(chunk)
        else:
            self._inflate(chunk)

    def _begin(self, head: bytes) -> None:
        self._started = True
        if is_gzip(head):
            # A gzipped body whatever the URL says; one that only claims to be (.gz, not gzip) reads as is.
            self._inflater = BoundedInflater(limit=self.max_bytes)

    def _plain(self, chunk: bytes) -> None:
        room = self.max_bytes - self._decoded
        if len(chunk) > room:
            if room > 0:
                self._decoded += room
                if self._decoded > self._warn_at:
                    self._large()
                self._to_format(chunk[:room])
            self._over_size()
            return
        self._decoded += len(chunk)
        if self._decoded > self._warn_at:
            self._large()
        self._to_format(chunk)

    def _inflate(self, chunk: bytes) -> None:
        inflater = self._inflater
        assert inflater is not None
        try:
            for piece in inflater.feed(chunk):
                self._decoded += len(piece)
                if self._decoded > self._warn_at:
                    self._large()
                self._to_format(piece)
                if self.finished:
                    return
        except DecompressionError as exc:
            self._flush()
            if self.finished:
                return  # the document ended before the gzip stream broke
            raise Truncated(f"gzip: {exc}") from None
        if inflater.limit_reached:
            self._over_size()

    def _large(self) -> None:
        """The document inflated past ``warn_bytes``: warned once, read on (Scrapy's DOWNLOAD_WARNSIZE)."""
        self.report.warn(OVER_WARN_SIZE)
        self._warn_at = self.max_bytes

    def _over_size(self) -> None:
        self._flush()
        if not self.finished:
            raise Truncated(f"larger than {size(self.max_bytes)} uncompressed")

    def _flush(self) -> None:
        """Before the parse is stopped from here (a limit, a broken gzip stream), the format parser reads
        what it holds back: what those bytes say came first in the document."""
        if self._xml is not None:
            self._xml.flush()

    def _to_format(self, data: bytes) -> None:
        form = self._format
        if form is None:
            verdict = self._sniffer.feed(data)
            if verdict is None:
                return
            form, data = self._choose_format(verdict), verdict.data
        form.feed(data)

    def _choose_format(self, verdict: Sniffed) -> _FormatParser:
        form: _FormatParser
        if verdict.is_xml:
            form = self._xml = XmlParser(self._sink, self.report, verdict.encoding, allow_doctype=self.allow_doctype)
        elif self.robots:
            self.report.kind = SitemapKind.ROBOTS
            form = RobotsParser(self.url, self._sink, self.report, verdict.encoding)
        else:
            self.report.kind = SitemapKind.TEXT
            form = TextParser(self._sink, self.report, verdict.encoding, schemeless=self.schemeless)
        self._format = form
        return form

    def _close(self, complete: bool) -> None:
        cut_reason = "download cut before the end of the document"
        if not self._started:
            head, self._head = self._head, b""
            self._started = True
            self._plain(head)
        if self._inflater is not None:
            try:
                for piece in self._inflater.finish():
                    self._decoded += len(piece)
                    if self._decoded > self._warn_at:
                        self._large()
                    self._to_format(piece)
            except DecompressionError as exc:
                self._flush()
                raise Truncated(f"gzip: {exc}") from None
            if self._inflater.limit_reached:
                self._over_size()
            if complete and not self._inflater.complete:
                complete, cut_reason = False, "gzip stream ends before its end marker"
        form = self._format
        if form is None:
            verdict = self._sniffer.close()
            if verdict is None:
                raise NotASitemap("empty document")
            form = self._choose_format(verdict)
            form.feed(verdict.data)
        form.close(complete=complete)
        if not complete and not self.finished:
            raise Truncated(cut_reason)

    def _stop(self, stop: StopParsing) -> None:
        self._stopped = True
        if isinstance(stop, NotASitemap) or self.report.kind is None:
            self.report.error = stop.reason
        else:
            self.report.truncated = stop.reason


def parse_bytes(
    url: str,
    data: bytes,
    *,
    max_entries: int = SITEMAP_MAX_ENTRIES,
    max_bytes: int = SITEMAP_MAX_BYTES,
    allow_doctype: bool = False,
    warn_bytes: int = 0,
) -> tuple[list[Entry], ParseReport]:
    """A whole body at once; the same rules and results as feeding it in pieces."""
    parser = SitemapParser(
        url, max_entries=max_entries, max_bytes=max_bytes, allow_doctype=allow_doctype, warn_bytes=warn_bytes
    )
    entries = parser.feed(data)
    entries += parser.close()
    return entries, parser.report


def parse_file(
    path: str | os.PathLike[str],
    *,
    max_entries: int = SITEMAP_MAX_ENTRIES,
    max_bytes: int = SITEMAP_MAX_BYTES,
    allow_doctype: bool = False,
    warn_bytes: int = 0,
) -> tuple[Iterator[Entry], ParseReport]:
    """A local file, opened here and read lazily: the report is final once the iterator is exhausted.

    A file that cannot be opened raises here, as ``open`` does (``FileNotFoundError``,
    ``IsADirectoryError``, ``PermissionError``: an ``OSError`` naming the path); what the file holds is the
    report's (``error``, ``truncated``), as for any sitemap. The file name stands in for the URL, so that a
    file called ``robots.txt`` is read as one. The file is closed once the entries are read, or the iterator
    closed or collected.
    """
    file = Path(path)
    handle = file.open("rb")
    parser = SitemapParser(
        file.name, max_entries=max_entries, max_bytes=max_bytes, allow_doctype=allow_doctype, warn_bytes=warn_bytes
    )
    entries = _read(handle, parser)
    weakref.finalize(entries, handle.close)  # (closes it too when the entries are never read)
    return entries, parser.report


def _read(handle: BinaryIO, parser: SitemapParser) -> Generator[Entry, None, None]:
    with handle:
        while not parser.finished:
            chunk = handle.read(FILE_CHUNK)
            if not chunk:
                break
            yield from parser.feed(chunk)
    yield from parser.close()
