"""How a report shows itself at a prompt and in a notebook: the slot its records ask.

:class:`~memscope.report.Report` and :class:`~memscope.report.FunctionReport`
show as the terminal report in plain text (``repr``, ``print``, IPython's
``_repr_pretty_``) and as the HTML report's body (Jupyter's ``_repr_html_``).
Rendering is :mod:`memscope.render`'s, which the records must not import (data
flows report -> render, tests/test_layout.py), so they ask this slot, and
``memscope/__init__.py`` fills it with :func:`memscope.render.inline.render_inline`,
imported when a record is first shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

#: ``text``: the terminal report, plain; ``html``: an element to embed in a page.
Kind = Literal["text", "html"]

_shown: Callable[[Kind, Any], str] | None = None


def show_with(shown: Callable[[Kind, Any], str] | None) -> None:
    """Show records with ``shown(kind, record)`` from now on (``None``: not at all)."""
    global _shown
    _shown = shown


def shown(kind: Kind, record: Any) -> str | None:
    """``record`` shown as ``kind``; ``None`` where nothing shows records."""
    return None if _shown is None else _shown(kind, record)


def text(record: Any, fallback: str) -> str:
    """``record``'s plain text for ``repr``; ``fallback`` where it cannot be shown
    (a ``repr`` must not raise)."""
    try:
        return shown("text", record) or fallback
    except Exception:
        return fallback
