"""Recording calls: the jit stand-in, the session and its entries, the keys JAX
compiles by, ahead-of-time stages, framework wrappers, what happens between
calls, the buffers a first call shows, and the worker that reads off the
program's path.

It records and schedules: reading the compiled program is :mod:`memscope.compiled`'s,
compiling other donations and policies :mod:`memscope.variants`', deciding the
advice :mod:`memscope.analysis`'. ``from memscope.capturing import capture`` is the
public entry point (also ``memscope.capture()``).
"""

from __future__ import annotations

from memscope.capturing.entry import Entry
from memscope.capturing.jit import MeasuredJit
from memscope.capturing.recorder import capture
from memscope.capturing.session import Session

__all__ = ["Entry", "MeasuredJit", "Session", "capture"]
