"""Records built from values that already have their fields' types and passed their rules, without
validating them again: on the per-URL path that validation cost more than everything else done for a
listed URL. Only for values the parser and the URL screen typed and checked (a screened URL, a parsed
lastmod, a clamped priority) or a validated record's; tests/engine/test_records.py checks that each model's
trusted build is what ``model_validate`` builds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__


def trusted_builder(model: type[M]) -> Callable[[dict[str, Any]], M]:
    """``build(fields)``: a ``model`` from ``fields`` (which must hold every required field), the others at
    their defaults, in the fields' order (so it serialises as a validated one does); a default made by a
    factory (a dict) is made again for each record, never shared."""
    template: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for name, field in model.model_fields.items():
        template[name] = None if field.is_required() or field.default_factory else field.default
        if field.default_factory is not None:
            factories[name] = field.default_factory  # type: ignore[assignment]

    def build(fields: dict[str, Any]) -> M:
        record = _new(model)
        values = template.copy()
        for name, factory in factories.items():
            if name not in fields:
                values[name] = factory()
        values.update(fields)
        _set(record, "__dict__", values)
        _set(record, "__pydantic_fields_set__", set(fields))
        _set(record, "__pydantic_extra__", None)
        _set(record, "__pydantic_private__", None)
        return record

    return build
