"""The base of the records and messages: a msgspec Struct that is validated where input enters.

A Struct is defined in C and decoded by msgspec in C: no validation library to import and no validators to
build, which every handler's cold start would pay for; and a stored record is read in C too.

The split of duties that follows from it:

- **Input is validated where it enters**: :meth:`Model.model_validate_json` (an SQS body, a stored record)
  and :meth:`Model.model_validate` (a dict from a flag, a configuration, the Python API) check types,
  constraints (``Annotated[int, Meta(ge=0)]``) and unknown fields, and convert (a string to a datetime, a
  list to a tuple, a value to its enum). Leniently, as pydantic's lax mode does: ``"5"`` or ``5.0`` for an
  int, ``"0.5"`` for a float, ``"false"`` for a bool (msgspec's ``strict=False``), so a message or a
  configuration written for pydantic's rules is accepted. A failure is a :class:`ValidationError` naming
  the field (``Expected `int` >= 1 - at `$.max_depth```).
- **A rule that must hold wherever a value is built** is in the class's ``__post_init__``, which msgspec
  runs on decoding and on every construction alike (so it stays cheap); its complaint names the field the
  same way (:func:`invalid`).
- **The engine's own constructions are not validated again**: it builds records from values it typed and
  checked already (a screened URL, a parsed lastmod), with a plain constructor call.

The methods have pydantic's names (``model_validate``, ``model_copy``, ``model_dump``...), so code written
for pydantic models, the Python API's users' included, reads the records unchanged.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from copy import deepcopy
from datetime import datetime
from functools import cache
from typing import Annotated, Any, Self

import msgspec
from msgspec import Meta, Struct
from msgspec.structs import asdict, replace

#: What a record or message that is not valid raises (a ValueError).
ValidationError = msgspec.ValidationError

#: A count, a size, an offset: checked where input enters.
NonNegative = Annotated[int, Meta(ge=0)]


def invalid(field: str, reason: str, error: type[ValueError] = ValueError) -> ValueError:
    """A rule's complaint about ``field`` worded as msgspec words its own (``reason - at `$.field```), so
    that every refusal names the field the same way (the command line turns it into its flag)."""
    return error(f"{reason} - at `$.{field}`")


@cache
def _decoder(kind: type[Model]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(kind, strict=False)


class Model(Struct, kw_only=True, forbid_unknown_fields=True):
    """A record or message (subclasses say ``kw_only=True`` again: msgspec does not inherit it)."""

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray | memoryview) -> Self:
        """The value of a JSON body, validated (a :class:`ValidationError` when it is not one, or not JSON)."""
        try:
            return _decoder(cls).decode(data)
        except ValidationError:
            raise
        except msgspec.DecodeError as exc:  # (not JSON at all: the same refusal, as pydantic's is)
            raise ValidationError(f"invalid JSON: {exc}") from None

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        """``value`` (a mapping of the fields, or the value itself) validated and converted."""
        if type(value) is cls:
            return value
        return msgspec.convert(value, type=cls, strict=False)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update``'s fields changed (not validated: the engine's own values)."""
        return replace(deepcopy(self) if deep else self, **(update or {}))

    def model_dump(
        self,
        *,
        mode: str = "python",
        include: Collection[str] | None = None,
        exclude: Collection[str] | None = None,
        exclude_none: bool = False,
        exclude_defaults: bool = False,
    ) -> dict[str, Any]:
        """The fields as a dict (nested records as dicts; ``mode="json"``: as JSON would give them back)."""
        values = _fields_of(self, include, exclude, exclude_none, exclude_defaults)
        return msgspec.to_builtins(values) if mode == "json" else values

    def model_dump_json(
        self,
        *,
        include: Collection[str] | None = None,
        exclude: Collection[str] | None = None,
        exclude_none: bool = False,
        exclude_defaults: bool = False,
        indent: int | None = None,
    ) -> str:
        if include is None and exclude is None and not exclude_none and not exclude_defaults:
            body = msgspec.json.encode(self)
        else:
            fields = _fields_of(self, include, exclude, exclude_none, exclude_defaults)
            body = msgspec.json.encode(fields)
        if indent is not None:
            body = msgspec.json.format(body, indent=indent)
        return body.decode()


def _fields_of(
    record: Struct,
    include: Collection[str] | None = None,
    exclude: Collection[str] | None = None,
    exclude_none: bool = False,
    exclude_defaults: bool = False,
) -> dict[str, Any]:
    values = asdict(record)  # (in C, rather than a loop over the fields here)
    if include is not None or exclude is not None:
        values = {
            name: value
            for name, value in values.items()
            if (include is None or name in include) and (exclude is None or name not in exclude)
        }
    if exclude_none:
        values = {name: value for name, value in values.items() if value is not None}
    if exclude_defaults:
        defaults = _defaults(type(record))
        values = {name: value for name, value in values.items() if name not in defaults or value != defaults[name]}
    for name, value in values.items():
        if type(value) not in _SCALARS:
            values[name] = _plain(value, exclude_none)
    return values


#: Values that are never containers of records (most of a record's fields): left as they are.
_SCALARS = frozenset((str, int, float, bool, type(None), datetime))


def _plain(value: Any, exclude_none: bool) -> Any:
    """Nested records as dicts (their None fields left out too when asked), the rest as it is."""
    if isinstance(value, Struct):
        return _fields_of(value, exclude_none=exclude_none)
    if isinstance(value, dict):
        return {key: _plain(item, exclude_none) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(item, exclude_none) for item in value)
    return value


@cache
def _defaults(kind: type[Struct]) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for info in msgspec.structs.fields(kind):
        if info.default is not msgspec.NODEFAULT:
            defaults[info.name] = info.default
        elif info.default_factory is not msgspec.NODEFAULT:
            defaults[info.name] = info.default_factory()
    return defaults
