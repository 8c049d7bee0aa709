"""The plain ``<url>`` blocks most urlsets are made of, read with one regular expression match each.

Why: expat calls back into Python for every start tag, end tag and run of text. A URL with a lastmod, a
changefreq, a priority, an image and an hreflang link is eight elements, so a 50,000-URL sitemap makes
800,000 callbacks, which cost more than expat's own scanning does. Generated sitemaps (WordPress, Yoast,
Shopify, most CMS plugins) write every ``<url>`` the same canonical way, so one match per block does the
work of those callbacks.

Why it cannot disagree with the exact reader (:mod:`harvester.sitemap.xml_handlers`): the pattern
accepts only a small subset of well-formed XML whose meaning to that reader is fixed. Lower-case local
names (the exact reader ignores prefixes, so ``<img:image>`` or ``<sm:loc>`` are read here too), each end
tag the same name as its start tag, no attributes but a ``rel/hreflang/href`` link, text holding no markup
but the five predefined entities, only characters XML allows, and no ``]]>``. Expat would read such a
block without an error, and the exact reader would build the same entry from it: both go through
:func:`~harvester.sitemap.builders.page_values`. Two patterns: the canonical order (loc, lastmod,
changefreq, priority, images, links), whose one match gives the values; and the same children in any order
and number, images and links interleaved, whose match is then walked child by child, the first value of a
repeated field winning as it does in the exact reader. Any other block (a comment, CDATA, an unknown
element, ``&nbsp;``, a prefixed ``<url>``) does not match and is left to expat. The XML parser also feeds expat a
blank in place of the blocks read here (:func:`blank`: their line breaks, and spaces for the columns),
so that expat's checks of the rest and the line and column of a later error are exactly what they would
have been. A hypothesis test compares both readers on generated and mutated documents.
"""

from __future__ import annotations

import re

from harvester.sitemap.builders import MORE, Fields, hreflang_alternate, image, page_values
from harvester.sitemap.entries import Alternate, Image, PageEntry, ParseReport
from harvester.sitemap.sink import Sink
from harvester.sitemap.values import STRIP_CHARS

# Quantifiers are possessive (*+): whitespace is always followed by "<", text by "<" or "&", so giving
# characters back can never make a match, and not trying keeps a refused block linear and cheap.
_SPACE = r"[ \t\r\n]*+"
# Character data: anything XML 1.0 allows but markup; "&" only as one of the predefined entities. A
# carriage return is allowed here and normalised as XML says (by :func:`_xml_text`).
_CHAR = r"[^<&\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]"
_TEXT = rf"{_CHAR}*+(?:&(?:amp|lt|gt|quot|apos);{_CHAR}*+)*+"
# An attribute value in double quotes; whitespace other than spaces is left to expat, which normalises it.
_ACHAR = r'[^<&"\x00-\x1f\ufffe\uffff]'
_VALUE = rf"{_ACHAR}*+(?:&(?:amp|lt|gt|quot|apos);{_ACHAR}*+)*+"
_IMAGE_FIELDS = "loc|caption|title|geo_location|license"
_IMAGE = (
    rf"<image:image>{_SPACE}"
    rf"(?:<image:(?P<field>{_IMAGE_FIELDS})>{_TEXT}</image:(?P=field)>{_SPACE})+"
    rf"</image:image>{_SPACE}"
)


def _link(value: str) -> str:
    """The canonical hreflang link, its two values matched by ``value`` (captured or not)."""
    return (
        rf'<xhtml:link[ \t\r\n]+rel="alternate"[ \t\r\n]+hreflang="{value}"[ \t\r\n]+href="{value}"{_SPACE}/>'
        rf"{_SPACE}"
    )


_LINK = _link(_VALUE)
_FIELDS = (
    rf"{_SPACE}<url>{_SPACE}"
    rf"<loc>({_TEXT})</loc>{_SPACE}"
    rf"(?:<lastmod>({_TEXT})</lastmod>{_SPACE})?"
    rf"(?:<changefreq>({_TEXT})</changefreq>{_SPACE})?"
    rf"(?:<priority>({_TEXT})</priority>{_SPACE})?"
)
# Each extension is matched twice over: first as the usual single element, captured (one image with only
# its <image:loc>, one link), else as any number of them, read afterwards by _images / _alternates.
_IMAGES = (
    rf"(?:<image:image>{_SPACE}<image:loc>({_TEXT})</image:loc>{_SPACE}</image:image>{_SPACE}(?!<image:image>)"
    rf"|((?:{_IMAGE})*))"
)
_LINKS = rf"(?:{_link(f'({_VALUE})')}(?!<xhtml:link)|((?:{_LINK})*))"
_BLOCK = re.compile(rf"{_FIELDS}{_IMAGES}{_LINKS}</url>")
# The other order generators write (Yoast, among others): the links first, then the images.
_BLOCK_LINKS_FIRST = re.compile(rf"{_FIELDS}{_LINKS}{_IMAGES}</url>")
_IMAGE_FIELD = re.compile(rf"<image:({_IMAGE_FIELDS})>({_TEXT})</image:")
_LINK_VALUES = re.compile(rf'hreflang="({_VALUE})"[ \t\r\n]+href="({_VALUE})"')

# The general block: the same children in any order and number, and any prefix on them (an XML name
# without a colon, then one). Its named groups only make each end tag match its start tag.
_PREFIX = r"(?:[A-Za-z_][A-Za-z0-9_.-]*:)?"
_PAGE_FIELDS = "loc|lastmod|changefreq|priority"
_ANY_LINK = rf'<{_PREFIX}link[ \t\r\n]+rel="alternate"[ \t\r\n]+hreflang="{_VALUE}"[ \t\r\n]+href="{_VALUE}"{_SPACE}/>'
_ANY_BLOCK = re.compile(
    rf"{_SPACE}<url>{_SPACE}"
    rf"(?:(?:<(?P<f>{_PREFIX}(?:{_PAGE_FIELDS}))>{_TEXT}</(?P=f)>"
    rf"|<(?P<i>{_PREFIX}image)>{_SPACE}(?:<(?P<g>{_PREFIX}(?:{_IMAGE_FIELDS}))>{_TEXT}</(?P=g)>{_SPACE})+</(?P=i)>"
    rf"|{_ANY_LINK}){_SPACE})*"  # (not possessive: CPython 3.11's re mishandles groups in a possessive loop)
    r"</url>"
)
# The children of a block _ANY_BLOCK matched, in document order: a field, an image's inside, or a link.
# (Every "<" in a matched block starts a tag, so a scan from tag to tag cannot start inside a value.)
_ANY_CHILD = re.compile(
    rf"<{_PREFIX}({_PAGE_FIELDS})>({_TEXT})<"
    rf"|<{_PREFIX}image>(.*?)</{_PREFIX}image>"
    rf'|<{_PREFIX}link[ \t\r\n]+rel="alternate"[ \t\r\n]+hreflang="({_VALUE})"[ \t\r\n]+href="({_VALUE})"',
    re.DOTALL,
)
_ANY_IMAGE_FIELD = re.compile(rf"<{_PREFIX}({_IMAGE_FIELDS})>({_TEXT})<")


def decode(data: bytes) -> str | None:
    """``data`` as text, if its blocks may be read here: it must be UTF-8, and hold no ``]]>`` (illegal
    in character data; telling which block holds it would cost more than it saves)."""
    try:
        text = data.decode("ascii" if data.isascii() else "utf-8")
    except UnicodeDecodeError:
        return None  # expat will say where
    return text if "]]>" not in text else None


def blank(text: str) -> bytes:
    """What expat is given in place of blocks it did not read: as many line breaks as ``text`` has, then
    as many spaces as ``text`` has characters after its last one. Expat counts lines and columns (in
    characters) and names both in its errors, so an error after this blank is reported where it is in
    the document; and whitespace in the root element means nothing to the reader.
    """
    breaks = text.count("\n")
    last = text.rfind("\n")
    if "\r" in text:  # XML line ends: CR LF and a lone CR are one line break each
        breaks += text.count("\r") - text.count("\r\n")
        last = max(last, text.rfind("\r"))
    if breaks:
        return b"\n" * breaks + b" " * (len(text) - last - 1)
    return b" " * len(text)


def is_plain(text: str) -> bool:
    """Whether ``text``'s values need neither entity expansion nor line-end normalisation."""
    return "&" not in text and "\r" not in text


def _xml_text(text: str) -> str:
    """Character data as expat delivers it: line ends normalised first, then the entities expanded
    (``&amp;`` last, so that ``&amp;lt;`` stays ``&lt;``)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "&" in text:
        text = (
            text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", '"')
            .replace("&apos;", "'")
            .replace("&amp;", "&")
        )
    return text


class PlainUrls:
    """Reads consecutive plain ``<url>`` blocks into the sink, counting them against its limit."""

    __slots__ = ("_links_first", "_report", "_sink")

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._report = sink.report
        self._links_first = False

    def read(self, text: str, start: int, *, plain: bool) -> int:
        """Reads the blocks of ``text`` from ``start`` on, up to the first one that is not plain (or is
        not complete); returns how many characters they span. ``plain``: the text holds no "&" nor
        carriage return, so that no value needs entity expansion or line-end normalisation (the common
        case, checked once per buffer by the caller)."""
        match = _BLOCK.match
        sink, report = self._sink, self._report
        out = sink.out.append
        count, limit = sink.count, sink.max_entries
        at = start
        links_first, general = _BLOCK_LINKS_FIRST.match, _ANY_BLOCK.match
        try:
            while True:
                # The order the last block had is tried first: a document is written one way throughout.
                if not self._links_first and (found := match(text, at)) is not None:
                    url, lastmod, changefreq, priority, image_loc, images_text, _, hreflang, href, links_text = (
                        found.groups()
                    )
                elif (found := links_first(text, at)) is not None:
                    self._links_first = True
                    url, lastmod, changefreq, priority, hreflang, href, links_text, image_loc, images_text, _ = (
                        found.groups()
                    )
                elif self._links_first and (found := match(text, at)) is not None:
                    self._links_first = False
                    url, lastmod, changefreq, priority, image_loc, images_text, _, hreflang, href, links_text = (
                        found.groups()
                    )
                elif (found := general(text, at)) is not None:
                    at = found.end()
                    entry = _any_order(found[0], plain, report)
                    if entry is not None:
                        if count >= limit:
                            raise sink.overflow()
                        count += 1
                        out(entry)
                    continue
                else:
                    break
                if not plain:
                    url = _xml_text(url)
                    lastmod = lastmod and _xml_text(lastmod)
                    changefreq = changefreq and _xml_text(changefreq)
                    priority = priority and _xml_text(priority)
                images: tuple[Image, ...] = ()
                if image_loc is not None:
                    if not plain:
                        image_loc = _xml_text(image_loc)
                    image_loc = image_loc.strip(STRIP_CHARS)
                    if image_loc:
                        images = (Image(image_loc),)
                elif images_text:
                    images = _images(images_text, plain)
                alternates: tuple[Alternate, ...] = ()
                if hreflang is not None:
                    if not plain:
                        hreflang, href = _xml_text(hreflang), _xml_text(href)
                    alternate = hreflang_alternate(hreflang, href)
                    if alternate is not None:
                        alternates = (alternate,)
                elif links_text:
                    alternates = _alternates(links_text, plain)
                entry = page_values(
                    url,
                    lastmod or None,  # an empty element is no value, as with expat (no text, no field)
                    changefreq or None,
                    priority or None,
                    images,
                    (),
                    None,
                    alternates,
                    report,
                )
                at = found.end()
                if entry is not None:
                    if count >= limit:
                        raise sink.overflow()
                    count += 1
                    out(entry)
        finally:
            sink.count = count
        return at - start


def _any_order(block: str, plain: bool, report: ParseReport) -> PageEntry | None:
    """The page of a block the general pattern matched, built as the exact reader builds it: the first
    non-empty text of each field, then the images and the links each in document order, all up to a second
    ``<loc>``."""
    fields: dict[str, str] = {}
    images: list[Image] = []
    alternates: list[Alternate] = []
    for child in _ANY_CHILD.finditer(block, block.index(">") + 1):
        name, text, inside, hreflang, href = child.groups()
        if name is not None:
            if text and name not in fields:
                fields[name] = text if plain else _xml_text(text)
            elif text and name == "loc":
                # A second <loc>: warned of, and nothing after it is the first one's (builders.unusual_page).
                report.warn("repeated_loc")
                break
        elif inside is not None:
            made = _image(_ANY_IMAGE_FIELD.findall(inside), plain)
            if made is not None:
                images.append(made)
        else:
            if not plain:
                hreflang, href = _xml_text(hreflang), _xml_text(href)
            alternate = hreflang_alternate(hreflang, href)
            if alternate is not None:
                alternates.append(alternate)
    get = fields.get
    return page_values(
        get("loc"),
        get("lastmod"),
        get("changefreq"),
        get("priority"),
        tuple(images),
        (),
        None,
        tuple(alternates),
        report,
    )


def _image(found: list[tuple[str, str]], plain: bool) -> Image | None:
    """An image from its (field, text) pairs, the first non-empty text of a field winning."""
    fields: Fields = {}
    for name, text in found:
        if not text:
            continue  # as with expat: an empty element leaves no field
        if not plain:
            text = _xml_text(text)
        if name in fields:
            fields.setdefault(name + MORE, []).append(text)
        else:
            fields[name] = text
    return image(fields)


def _images(block: str, plain: bool) -> tuple[Image, ...]:
    found = (_image(_IMAGE_FIELD.findall(part), plain) for part in block.split("</image:image>")[:-1])
    return tuple(made for made in found if made is not None)


def _alternates(block: str, plain: bool) -> tuple[Alternate, ...]:
    found: list[Alternate] = []
    for hreflang, href in _LINK_VALUES.findall(block):
        if not plain:
            hreflang, href = _xml_text(hreflang), _xml_text(href)
        made = hreflang_alternate(hreflang, href)
        if made is not None:
            found.append(made)
    return tuple(found)
