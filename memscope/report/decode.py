"""JSON in: a generic decoder from parsed JSON to the report's frozen dataclasses, checking every type."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, get_args, get_origin

from memscope.errors import ReportFormatError

#: Integers a report may hold: what fits in a signed 64-bit integer, as in XLA.
INT_RANGE = (-2**63, 2**63 - 1)
#: The only integer fields that may be negative; every size, count, index,
#: shape and step is at least 0.
_SIGNED_FIELDS = frozenset({"exit_code", "donate_argnums"})

Decoder = typing.Callable[[Any], Any]
_DECODERS: dict[tuple[Any, bool], Decoder] = {}


class _Invalid(Exception):
    """A value that does not fit its field; ``path`` grows as it travels up."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def _decode(tp: Any, value: Any, where: str) -> Any:
    """Decode JSON ``value`` as type ``tp``; errors name the offending field."""
    try:
        return _decoder(tp)(value)
    except _Invalid as e:
        raise ReportFormatError(f"{where}{''.join(reversed(e.path))}: {e.message}") from None


def _decoder(tp: Any, signed: bool = False) -> Decoder:
    """The decoder of type ``tp``, built once per type: reading a large report
    walks its data, not Python's type hints, once per object."""
    key = (tp, signed)
    found = _DECODERS.get(key)
    if found is None:
        found = _DECODERS[key] = _build_decoder(tp, signed)
    return found


def _build_decoder(tp: Any, signed: bool) -> Decoder:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if origin in (types.UnionType, typing.Union):
        (inner_type,) = (o for o in get_args(tp) if o is not type(None))
        inner = _decoder(inner_type, signed)
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        return _tuple_decoder(get_args(tp), signed)
    if origin is Literal:
        allowed = get_args(tp)

        def literal(value: Any) -> Any:
            if not isinstance(value, str | int) or value not in allowed:
                raise _Invalid(f"{_shown(value)} is not one of {list(allowed)}")
            return value
        return literal
    if tp is int:
        low = INT_RANGE[0] if signed else 0

        def integer(value: Any) -> Any:
            if type(value) is not int:
                raise _Invalid(f"expected int, got {type(value).__name__}")
            if not low <= value <= INT_RANGE[1]:
                bound = "a signed 64-bit integer" if signed else "0 to 2**63-1"
                raise _Invalid(f"{_shown(value)} is out of range (expected {bound})")
            return value
        return integer

    def plain(value: Any) -> Any:
        if type(value) is not tp:
            raise _Invalid(f"expected {tp.__name__}, got {type(value).__name__}")
        return value
    return plain


def _dataclass_decoder(tp: Any) -> Decoder:
    hints = typing.get_type_hints(tp)
    fields = dataclasses.fields(tp)
    # Filled in on first use: a dataclass may refer to itself through its fields.
    decoders: list[tuple[str, Any, Decoder]] = []

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid("expected an object")
        if not decoders:
            decoders.extend((f.name, f, _decoder(hints[f.name], f.name in _SIGNED_FIELDS))
                            for f in fields)
        attributes = {}
        for name, f, decoder in decoders:
            if name in value:
                try:
                    attributes[name] = decoder(value[name])
                except _Invalid as e:
                    e.path.append(f".{name}")
                    raise
            elif f.default is not dataclasses.MISSING:
                attributes[name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                attributes[name] = f.default_factory()
            else:
                raise _Invalid(f"missing field {name!r}")
        # Every field is decoded and checked above; filling the instance directly
        # skips the frozen dataclass's per-field __setattr__ (the report classes
        # define no __post_init__).
        obj = object.__new__(tp)
        obj.__dict__.update(attributes)
        return obj
    return decode


def _tuple_decoder(args: tuple[Any, ...], signed: bool) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0], signed)

        def variable(value: Any) -> Any:
            if not isinstance(value, list):
                raise _Invalid("expected a list")
            try:
                return tuple([item(v) for v in value])
            except _Invalid as e:
                e.path.append(f"[{_failing(item, value)}]")
                raise
        return variable
    items = [_decoder(a, signed) for a in args]

    def fixed(value: Any) -> Any:
        if not isinstance(value, list) or len(value) != len(items):
            raise _Invalid(f"expected a list of {len(items)} items")
        try:
            return tuple([d(v) for d, v in zip(items, value, strict=True)])
        except _Invalid as e:
            e.path.append(f"[{next(i for i, (d, v) in enumerate(zip(items, value, strict=True)) if _fails(d, v))}]")
            raise
    return fixed


def _fails(decoder: Decoder, value: Any) -> bool:
    try:
        decoder(value)
    except _Invalid:
        return True
    return False


def _failing(decoder: Decoder, values: list[Any]) -> int:
    """The index of the first item ``decoder`` rejects (looked for only on error)."""
    return next(i for i, v in enumerate(values) if _fails(decoder, v))


def _shown(value: Any) -> str:
    """``value`` for an error message, cut short (an integer of 400 digits)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 \
        else f"an integer of {len(str(abs(value)))} digits"
    return text if len(text) <= 60 else text[:57] + "..."
