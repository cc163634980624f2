"""Sizes as people read them: IEC units (KiB, MiB, GiB), ``n/a`` for unknown."""

from __future__ import annotations

_IEC = ("KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: int | None) -> str:
    """``1536`` -> ``1.5 KiB``; ``None`` (not measured) -> ``n/a``; never a fake 0."""
    if n is None:
        return "n/a"
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _IEC:
        value /= 1024
        if abs(value) < 1024 or unit == _IEC[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def format_change(n: int | None) -> str:
    """A signed difference: ``+1.5 KiB``, ``-4 B``, ``0 B``; ``None`` -> ``n/a``."""
    if n is None:
        return "n/a"
    return ("+" if n > 0 else "") + format_bytes(n)
