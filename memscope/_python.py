"""Differences between the Python versions memscope runs on (3.11 to 3.13) that
its capture depends on: not JAX's (those are :mod:`memscope._compat`'s)."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

#: Python 3.13 (PEP 667) made a function frame's ``f_locals`` a live view of its
#: variables; before, it is a dict the frame keeps, filled at each read.
FRAME_LOCALS_ARE_A_VIEW: bool = sys.version_info >= (3, 13)


def frame_locals(frame: types.FrameType) -> list[tuple[str, Any]]:
    """A frame's local variables, read without leaving a reference behind.

    Before Python 3.13 a function frame's ``f_locals`` is a snapshot dict that
    the frame keeps, and with it every value it held at the read (an array the
    program drops later would stay alive until the frame ends): it is emptied
    once read. That touches nothing else: a tracer's write-back
    (``PyFrame_LocalsToFast``) copies only the names the dict holds, and the
    next read fills it again. Module and class frames' ``f_locals`` is their
    namespace itself, read as is.
    """
    if FRAME_LOCALS_ARE_A_VIEW or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        return list(frame.f_locals.items())
    snapshot = frame.f_locals
    try:
        return list(snapshot.items())
    finally:
        snapshot.clear()
