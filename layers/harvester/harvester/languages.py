"""Which language a URL or an hreflang names: trafilatura's ``target_lang`` rules (courlan's ``lang_filter``).

A URL marks a language by a first path segment that is a language code, with a region or not (``/de/``,
``/en_GB/``, ``/pt-br/``), counted only when the URL has one or two such segments (more: none is trusted),
and by a host whose first label is one (``de.example.com``, the rest of the host long enough to be a site's:
courlan's strict test). Each mark of the language scores 1, each mark of another -1; a URL is of another
language when its score is below 0, so a URL that marks none is kept. Where courlan asks Babel whether a
segment is a locale, the segment's language is looked up in ISO 639-1 (the region is not checked).
"""

from __future__ import annotations

import re

#: ISO 639-1: the two-letter language codes.
LANGUAGES = frozenset(
    """
    aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy
    da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht
    hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky
    la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny
    oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss
    st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo
    za zh zu
    """.split()  # noqa: SIM905 (a table to read)
)

# courlan.filters: PATH_LANG_FILTER, ALL_PATH_LANGS (trailing slash), HOST_LANG_FILTER.
_FIRST_SEGMENT = re.compile(r"https?://[^/]+/([a-z]{2})(?:[_-][a-z]{2,3})?(?:/|\Z)", re.IGNORECASE)
_SEGMENTS = re.compile(r"/([a-z]{2})(?:[_-][a-z]{2})?/", re.IGNORECASE)
_HOST = re.compile(r"https?://([a-z]{2})\.[^./]{4,}\.[^./]+(?:\.[^./]+)?/", re.IGNORECASE)


def _score(lang: str, code: str) -> int:
    code = code.lower()
    if code not in LANGUAGES:
        return 0
    return 1 if code == lang else -1


def url_score(url: str, lang: str) -> int:
    """How strongly ``url`` marks ``lang`` (positive), another language (negative), or none (0)."""
    score = 0
    first = _FIRST_SEGMENT.match(url)
    if first is not None:
        segments = _SEGMENTS.findall(url)
        if len(segments) == 1:
            score += _score(lang, first[1])
        elif len(segments) == 2:
            score += sum(_score(lang, code) for code in segments)
    host = _HOST.match(url)
    if host is not None:
        score += _score(lang, host[1])
    return score


def other_language(url: str, lang: str) -> bool:
    """Whether ``url`` is clearly another language's than ``lang`` (its marks score below 0)."""
    return url_score(url, lang) < 0


def hreflang_is(hreflang: str, lang: str) -> bool:
    """Whether an hreflang (``de``, ``de-AT``, ``de_CH``; any case) is of ``lang``."""
    value = hreflang.strip().lower()
    return value == lang or value.startswith((f"{lang}-", f"{lang}_"))
