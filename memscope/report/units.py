"""Sizes as people read and write them.

Out: IEC units (KiB, MiB, GiB), ``n/a`` for unknown. In: :func:`parse_size`
takes binary (``KiB``, ``MiB``, ``GiB``, ``TiB``) and decimal (``KB``, ``MB``,
``GB``, ``TB``) units with their true meanings, and :func:`parse_percent` takes
``"5%"``. Both live here, not in the check, so the command line, the config file
and the pytest marker read sizes and percentages the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from memscope.errors import MemscopeError

_IEC = ("KiB", "MiB", "GiB", "TiB", "PiB")

#: Every unit parse_size accepts (matched without regard to case), in bytes.
SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4,
    "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
}
_UNITS_BY_LOWER = {unit.lower(): factor for unit, factor in SIZE_UNITS.items()}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_SIZE = re.compile(rf"{_NUMBER}\s*([A-Za-z]*)")
_PERCENT = re.compile(rf"{_NUMBER}\s*%")


def format_bytes(n: int | None) -> str:
    """``1536`` -> ``1.5 KiB``; ``None`` (not measured) -> ``n/a``; never a fake 0."""
    return _with_decimals(n, 1)


def format_bytes_apart(values: Sequence[int | None]) -> list[str]:
    """Each of ``values`` as :func:`format_bytes` would write it, with as many
    decimals (up to 3) as it takes for different values to read differently;
    in whole bytes (``67,108,480 B``) where even 3 do not tell them apart."""
    known = [v for v in values if v is not None]
    if not known or max(abs(v) for v in known) < 1024:
        return [format_bytes(v) for v in values]
    distinct = len(set(known))
    # Values of the largest one's order are written in its unit, so that a
    # peak just over a budget never reads as 1.0 GiB beside 1024.0 MiB.
    largest = max(abs(v) for v in known)
    for decimals in (1, 2, 3):
        texts = [_with_decimals(v, decimals, largest if v is not None and 2 * abs(v) >= largest
                                else None) for v in values]
        if len({t for t, v in zip(texts, values, strict=True) if v is not None}) == distinct:
            return texts
    return ["n/a" if v is None else f"{v:,} B" for v in values]


def _with_decimals(n: int | None, decimals: int, like: int | None = None) -> str:
    """``n`` in the unit :func:`format_bytes` gives ``like`` (by default ``n``)."""
    if n is None:
        return "n/a"
    scale = abs(n if like is None else like)
    if scale < 1024:
        return f"{n} B"
    value, size = float(n), float(scale)
    for unit in _IEC:
        value /= 1024
        size /= 1024
        if size < 1024 or unit == _IEC[-1]:
            return f"{value:.{decimals}f} {unit}"
    raise AssertionError("unreachable")


def format_change(delta: int | None, percent: float | None = None) -> str:
    """``+1.0 MiB (+12.5%)``, ``-512 B``, ``0 B``; ``n/a`` when unknown."""
    if delta is None:
        return "n/a"
    text = ("+" if delta > 0 else "") + format_bytes(delta)
    if percent is not None and delta:
        text += f" ({percent:+.1f}%)"
    return text


def parse_size(text: str) -> int:
    """``"2 GiB"`` -> ``2147483648``; ``"2 GB"`` -> ``2000000000``; ``"512"`` -> ``512``.

    A number (fractions allowed, rounded to the nearest byte) and an optional
    unit from :data:`SIZE_UNITS`, in any case, with or without a space. A bare
    number is bytes.

    Raises:
        MemscopeError: anything else (a negative number, an unknown unit), naming the text.
    """
    match = _SIZE.fullmatch(text.strip())
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in _UNITS_BY_LOWER):
        raise MemscopeError(f"not a size: {text!r} (write e.g. \"512 MiB\", \"2 GiB\" or "
                            f"\"2 GB\"; units: {', '.join(SIZE_UNITS)})")
    return round(float(match.group(1)) * _UNITS_BY_LOWER[unit or "b"])


def parse_percent(text: str) -> float:
    """``"5%"`` -> ``5.0``; the ``%`` is required, so a size is never read as one.

    Raises:
        MemscopeError: not a non-negative number followed by ``%``, naming the text.
    """
    match = _PERCENT.fullmatch(text.strip())
    if match is None or not math.isfinite(float(match.group(1))):
        raise MemscopeError(f"not a percentage: {text!r} (write e.g. \"5%\")")
    return float(match.group(1))
