r"""The rarer elements nested in a urlset's ``<url>``: a video's ``<video:tvshow>`` and
``<video:content_segment_loc duration="...">``, ``<mobile:mobile/>``, and a ``<PageMap>`` of ``<DataObject>``\ s
holding ``<Attribute>``\ s, as crawler-commons reads them.

:mod:`harvester.sitemap.xml_handlers` classifies each qualified name once, as a small int; these elements
have the codes from :data:`TV_SHOW` to below :data:`FIRST_FIELD`, so that its handlers reach this module only
for them, never for the elements every sitemap is made of. A TV show collects its fields as an image does (a
dict); the others are set up by :func:`start` and taken in by :func:`end`.
"""

from __future__ import annotations

from harvester.sitemap import builders
from harvester.sitemap.builders import ATTRIBUTES, MOBILE, OBJECTS, PAGEMAP, RARE, SEGMENTS, TVSHOW, Fields

TV_SHOW = 7  # (below SKIP: a plain nested dict, as an image's)
SKIP = 8  # xml_handlers': a nested element whose fields belong to something else (Atom <source>)
SEGMENT = 9
MOBILE_CODE = 10
PAGEMAP_CODE = 11
DATA_OBJECT = 12
ATTRIBUTE = 13
#: xml_handlers' first field code.
FIRST_FIELD = 16

#: The elements, by lower-cased local name.
SUBS = {
    "tvshow": TV_SHOW,
    "content_segment_loc": SEGMENT,
    "mobile": MOBILE_CODE,
    "pagemap": PAGEMAP_CODE,
    "dataobject": DATA_OBJECT,
    "attribute": ATTRIBUTE,
}
TV_SHOW_FIELDS = ("show_title", "video_type", "episode_title", "season_number", "episode_number", "premier_date")

# Keys of what an element holds while it is open.
MARK, DURATION, TYPE, ID, NAME, VALUE = "@mark", "@duration", "@type", "@id", "@name", "@value"


def start(code: int, target: Fields, record: Fields, attrs: dict[str, str], at: int) -> Fields | None:
    """Where the fields of a rarer nested element (above SKIP) go (None: nowhere), ``at`` being where its
    text starts in the entry's character data (``chars`` in xml_handlers). ``<mobile:mobile/>`` and a PageMap
    count only as a ``<url>``'s own children; a PageMap's DataObjects and their Attributes only inside it."""
    if code == SEGMENT:
        return {MARK: at, DURATION: attrs.get("duration")}
    if target is record:
        if code == MOBILE_CODE:
            record[MOBILE] = True
            record.setdefault(RARE, None)
        elif code == PAGEMAP_CODE:
            return {OBJECTS: []}
    elif code == DATA_OBJECT and OBJECTS in target:
        return {TYPE: attrs.get("type"), ID: attrs.get("id"), ATTRIBUTES: {}}
    elif code == ATTRIBUTE and ATTRIBUTES in target:
        name = attrs.get("name")
        if name:
            return {MARK: at, NAME: name, VALUE: attrs.get("value")}
    return None


def end(code: int, nested: Fields, target: Fields, chars: list[str]) -> None:
    """Takes what a rarer nested element collected (``nested``) into the element around it (``target``)."""
    if code == TV_SHOW:
        target.setdefault(TVSHOW, nested)
    elif code in (SEGMENT, ATTRIBUTE):
        mark = nested[MARK]
        text = "".join(chars[mark:])
        del chars[mark:]
        if code == SEGMENT:
            target.setdefault(SEGMENTS, []).append((text, nested[DURATION]))
        else:
            target[ATTRIBUTES][nested[NAME]] = builders.pagemap_value(text, nested[VALUE])
    elif code == DATA_OBJECT:
        target[OBJECTS].append(builders.pagemap_object(nested[TYPE], nested[ID], nested[ATTRIBUTES]))
    elif code == PAGEMAP_CODE and nested[OBJECTS]:
        target.setdefault(PAGEMAP, []).extend(nested[OBJECTS])
        target.setdefault(RARE, None)
