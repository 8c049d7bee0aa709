"""Line-based documents: plain-text sitemaps, and the line splitting robots.txt shares with them.

A text sitemap is one URL a line, but the files met in practice also hold titles, blank lines, comments
and HTML fragments; those lines are skipped and counted, never fatal. Lines arrive split across network
reads and the text across multi-byte characters, so decoding is incremental and the unfinished last line
waits for the next chunk. A line is only complete once its line break (or a complete end of input) has
arrived, which is what keeps a cut download from producing a cut URL.
"""

from __future__ import annotations

import codecs

from harvester.sitemap.entries import PageEntry, ParseReport
from harvester.sitemap.sink import Sink
from harvester.sitemap.values import STRIP_CHARS
from harvester.url_rules import schemeless

#: A line longer than this is no URL (the protocol's limit is 2,048 characters); it is dropped as it
#: streams in rather than held in memory whole.
MAX_LINE = 64 * 1024
#: The decoding error handler of lines: a byte that is not text in the document's encoding becomes its
#: percent-escape (``/s\xff.xml`` → ``/s%FF.xml``), the URL the site wrote, where U+FFFD would make one
#: it never wrote (``/s%EF%BF%BD.xml``).
PERCENT_ESCAPE = "harvester.percent-escape"


def _percent_escape(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "".join(f"%{byte:02X}" for byte in error.object[error.start : error.end]), error.end


codecs.register_error(PERCENT_ESCAPE, _percent_escape)


class LineReader:
    """Decodes bytes incrementally and returns the lines each chunk completes."""

    def __init__(self, encoding: str, report: ParseReport) -> None:
        self._decoder = codecs.getincrementaldecoder(encoding)(errors=PERCENT_ESCAPE)
        self._report = report
        self._pending = ""
        self._overlong = False  # the current (unfinished) line already passed MAX_LINE and is being dropped

    def feed(self, data: bytes) -> list[str]:
        return self._split(self._decoder.decode(data))

    def close(self, *, complete: bool) -> list[str]:
        """The last lines; an unterminated last line counts only when the input is known to be complete."""
        lines = self._split(self._decoder.decode(b"", final=complete))
        if complete and self._pending and not self._overlong:
            lines.append(self._pending)
        self._pending = ""
        return lines

    def _split(self, text: str) -> list[str]:
        cut = max(text.rfind("\n"), text.rfind("\r"))
        if cut < 0:
            if not self._overlong:
                self._pending += text
                self._check_length()
            return []
        if self._overlong:
            # The text up to the first line break ends the overlong line; drop it.
            first = min(i for i in (text.find("\n"), text.find("\r")) if i >= 0)
            text, cut = text[first + 1 :], cut - first - 1
            self._overlong = False
            if cut < 0:
                self._pending = text
                self._check_length()
                return []
        lines = (self._pending + text[: cut + 1]).splitlines()
        self._pending = text[cut + 1 :]
        self._check_length()
        if any(len(line) > MAX_LINE for line in lines):
            # A long line that arrived in one chunk is dropped as if it had streamed in.
            kept = [line for line in lines if len(line) <= MAX_LINE]
            for _ in range(len(lines) - len(kept)):
                self._report.warn("line_too_long")
            lines = kept
        return lines

    def _check_length(self) -> None:
        if len(self._pending) > MAX_LINE:
            self._pending = ""
            self._overlong = True
            self._report.warn("line_too_long")


def looks_like_http_url(value: str) -> bool:
    """An absolute http(s) URL with something after the scheme and no blanks inside."""
    head = value[:8].lower()
    if head.startswith("https://"):
        rest = value[8:]
    elif head.startswith("http://"):
        rest = value[7:]
    else:
        return False
    return bool(rest) and not any(c.isspace() for c in rest)


class LineParser:
    """A document read line by line; subclasses say what one complete line means."""

    def __init__(self, sink: Sink, report: ParseReport, encoding: str) -> None:
        self._sink = sink
        self._report = report
        self._lines = LineReader(encoding, report)

    def feed(self, data: bytes) -> None:
        for line in self._lines.feed(data):
            self._line(line)

    def close(self, *, complete: bool) -> None:
        for line in self._lines.close(complete=complete):
            self._line(line)

    def _line(self, line: str) -> None:
        raise NotImplementedError


class TextParser(LineParser):
    """A plain-text sitemap: each line that is an http(s) URL becomes a page; with ``schemeless``, also each
    line that may be one written without its scheme (``harvester.url_rules.schemeless``), for the job's URL
    repair to give it the sitemap's."""

    def __init__(self, sink: Sink, report: ParseReport, encoding: str, *, schemeless: bool = False) -> None:
        super().__init__(sink, report, encoding)
        self._schemeless = schemeless

    def _line(self, line: str) -> None:
        value = line.strip(STRIP_CHARS)
        if not value:
            return
        if looks_like_http_url(value) or (self._schemeless and schemeless(value)):
            self._sink.emit(PageEntry(value))
        else:
            self._report.warn("not_a_url")
