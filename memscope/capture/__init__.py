"""Recording calls: the jit stand-in, the session and its entries, the keys JAX
compiles by, ahead-of-time stages, framework wrappers, what happens between
calls, the buffers a first call shows, and the worker that reads off the
program's path.

It records and schedules: reading the compiled program is :mod:`memscope.compiled`'s,
compiling other donations and policies :mod:`memscope.variants`', deciding the
advice :mod:`memscope.analysis`'. ``from memscope.capture import capture`` is the
public entry point (also ``memscope.capture()``).
"""

from __future__ import annotations

from memscope.capture.entry import Entry
from memscope.capture.jit import MeasuredJit
from memscope.capture.recorder import capture
from memscope.capture.session import Session

__all__ = ["Entry", "MeasuredJit", "Session", "capture"]
