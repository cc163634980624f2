"""memscope: device memory and buffer donation of JAX programs, per jitted function.

The public API::

    with memscope.capture() as session:   # record every jax.jit called inside
        train()
    report = memscope.build_report(session.entries, run=None)

    fn_report = memscope.analyze(jitted_fn, *args)   # one call, one FunctionReport
    report = memscope.load_report("report.json")

In IPython or Jupyter, ``%load_ext memscope`` adds the ``%%memscope`` cell magic
(:mod:`memscope.notebook`); a report shows itself as the terminal report
(``repr``) and, in a notebook, as the HTML report's body (``_repr_html_``).

Importing memscope does not import JAX; the names that need it load on first use.

PYTEST_DONT_REWRITE: ``memscope run -m pytest`` imports memscope before pytest
starts, and pytest would then warn that it cannot rewrite the asserts of its
plugin's package (an error under ``filterwarnings = error``); memscope has no
test asserts to rewrite.
"""

from __future__ import annotations

import importlib
from typing import Any

from memscope.errors import MemscopeError, ReportFormatError
from memscope.report import (
    SCHEMA,
    FunctionReport,
    InputBuffer,
    Memory,
    OutputBuffer,
    Report,
    load_report,
    save_report,
)
from memscope.report import display as _display
from memscope.version import __version__

__all__ = [
    "SCHEMA",
    "FunctionReport",
    "InputBuffer",
    "Memory",
    "MemscopeError",
    "OutputBuffer",
    "Report",
    "ReportFormatError",
    "__version__",
    "analyze",
    "build_report",
    "capture",
    "load_report",
    "save_report",
    "target",
]

_LAZY = {"analyze": "memscope.flow", "build_report": "memscope.assemble.run",
         "capture": "memscope.capturing", "target": "memscope.flow"}


def _shown(kind: _display.Kind, record: Any) -> str:
    # The renderers are imported when a report is first shown, not with memscope.
    from memscope.render.inline import render_inline

    return render_inline(kind, record)


_display.show_with(_shown)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext memscope``: the ``%%memscope`` and ``%memscope`` magics."""
    from memscope.notebook import register_magics

    register_magics(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext memscope``: the magics go again."""
    from memscope.notebook import unregister_magics

    unregister_magics(ipython)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memscope' has no attribute {name!r}")
