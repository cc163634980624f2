"""A report shown inline, at a prompt and in a notebook: the terminal report in
plain text (no colour, no box drawing) and the HTML report's body as an element
to embed (:func:`memscope.render.html.report_fragment`).

:func:`shown` is what ``repr(report)`` and a notebook's display of a report call
(through :mod:`memscope.report.display`); ``%%memscope`` renders with the rest.
"""

from __future__ import annotations

import io
from typing import Any

from memscope.render.buffers import render_buffers
from memscope.render.html import function_fragment, report_fragment
from memscope.render.terminal import render_function, render_report
from memscope.render.terminal_leaves import LeafFilter
from memscope.report import FunctionReport, Report
from memscope.report.display import Kind


def report_text(report: Report, *, buffers: bool = False,
                leaves: LeafFilter | None = None) -> str:
    """The terminal report as plain text; with ``buffers`` what holds the memory
    (``--buffers``), with ``leaves`` the leaves it selects (``--leaves``)."""
    out = io.StringIO()
    render_report(report, out, plain=True, leaves=leaves)
    if buffers:
        render_buffers(report, out, plain=True)
    return out.getvalue()


def render_inline(kind: Kind, record: Any) -> str:
    """``record`` (a :class:`Report` or :class:`FunctionReport`) as ``kind``:
    ``text`` the terminal report, plain; ``html`` an element to embed.

    Raises:
        TypeError: ``record`` is neither.
    """
    if isinstance(record, Report):
        return report_text(record) if kind == "text" else report_fragment(record)
    if isinstance(record, FunctionReport):
        if kind == "html":
            return function_fragment(record)
        out = io.StringIO()
        render_function(record, out, plain=True)
        return out.getvalue()
    raise TypeError(f"memscope shows a Report or a FunctionReport, not {type(record).__name__}")
