"""What a sitemap's XML may declare, as defusedxml's ``forbid_entities`` and ``forbid_external`` rule it: the
expat handlers that refuse an entity declaration or an external DTD before anything expands or is read, and
the looser set ``allow_doctype`` installs (crawler-commons' ``allowDocTypeDefinitions``: any DOCTYPE read
past, an external DTD never fetched, an external entity read as nothing; an internal or parameter entity
still refused).
"""

from __future__ import annotations

from defusedxml.common import (
    DefusedXmlException,
    DTDForbidden,
    EntitiesForbidden,
    ExternalReferenceForbidden,
)

from harvester.sitemap.sink import NotASitemap


def forbid_doctype(name: str, sysid: str | None, pubid: str | None, has_internal_subset: bool) -> None:
    """A DOCTYPE alone is harmless (``<!DOCTYPE urlset>``, element declarations): it is read past. What could
    hurt is refused: an external DTD (a URL or file the document would have read), and any entity
    declaration in the internal subset (``forbid_entity``, before anything expands)."""
    allow_doctype(name, sysid, pubid, has_internal_subset)  # (an HTML page is refused either way)
    if sysid is not None or pubid is not None:
        raise DTDForbidden(name, sysid, pubid)


def allow_doctype(name: str, sysid: str | None, pubid: str | None, has_internal_subset: bool) -> None:
    """``allow_doctype``: any DOCTYPE of a sitemap is read past, its external DTD named but never fetched
    (expat reads no external subset: parameter entities are not parsed)."""
    if name and name.rpartition(":")[2].lower() == "html":
        raise NotASitemap("not a sitemap: root element <html> (an HTML page)")


def forbid_expanding_entity(
    name: str,
    is_parameter_entity: bool,
    value: str | None,
    base: str | None,
    sysid: str | None,
    pubid: str | None,
    notation_name: str | None,
) -> None:
    """``allow_doctype``: an entity whose reference would expand (an internal one: its value; a parameter
    one: declarations) ends the parse; an external general entity is declared, and never read."""
    if value is not None or is_parameter_entity:
        raise EntitiesForbidden(name, value, base, sysid, pubid, notation_name)


def in_words(exc: DefusedXmlException) -> str:
    """What a refused construct is, in words (defusedxml's own text is the exception's repr)."""
    if isinstance(exc, EntitiesForbidden):
        return (
            f"it declares an entity (<!ENTITY {exc.name} ...>), which is never read: entities are how XML"
            " bombs (billion laughs) and external-file reads work"
        )
    if isinstance(exc, DTDForbidden):
        return (
            f"it names an external DTD ({exc.sysid or exc.pubid}), which is never fetched; the allow_doctype"
            " reading rule (harvest: --allow-doctype) reads such a document without it"
        )
    return f"a forbidden XML construct ({type(exc).__name__})"


def forbid_entity(
    name: str,
    is_parameter_entity: bool,
    value: str | None,
    base: str | None,
    sysid: str | None,
    pubid: str | None,
    notation_name: str | None,
) -> None:
    raise EntitiesForbidden(name, value, base, sysid, pubid, notation_name)


def forbid_unparsed_entity(
    name: str, base: str | None, sysid: str | None, pubid: str | None, notation_name: str | None
) -> None:
    raise EntitiesForbidden(name, None, base, sysid, pubid, notation_name)


def forbid_external(context: str | None, base: str | None, sysid: str | None, pubid: str | None) -> int:
    if context is None and sysid is None and pubid is None:
        return 1  # the "foreign DTD" of UseForeignDTD: accept it, read nothing
    raise ExternalReferenceForbidden(context, base, sysid, pubid)
