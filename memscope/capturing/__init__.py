"""Recording calls: the jit stand-in, the session and its entries, the keys JAX
compiles by, ahead-of-time stages, framework wrappers, what happens between
calls, the buffers a first call shows, and the worker that reads off the
program's path.

It records and schedules: reading the compiled program is :mod:`memscope.compiled`'s,
compiling other donations and policies :mod:`memscope.variants`', deciding the
advice :mod:`memscope.analysis`'. ``from memscope.capturing import capture`` is the
public entry point (also ``memscope.capture()``).

Importing this package imports no JAX: :mod:`memscope.capturing.deferred` sets a
capture up when the program imports JAX itself; the names below load JAX when
first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memscope.capturing.entry import Entry
    from memscope.capturing.jit import MeasuredJit
    from memscope.capturing.recorder import capture
    from memscope.capturing.session import Session

__all__ = ["Entry", "MeasuredJit", "Session", "capture"]

_LAZY = {"Entry": "memscope.capturing.entry", "MeasuredJit": "memscope.capturing.jit",
         "capture": "memscope.capturing.recorder", "Session": "memscope.capturing.session"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memscope.capturing' has no attribute {name!r}")
