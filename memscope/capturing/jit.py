"""The jit stand-in: a captured ``jax.jit`` object, to every caller JAX's own.

Inside :func:`memscope.capturing.capture`, every jit object JAX makes is handed
back inside a :class:`MeasuredJit`: a transparent stand-in that forwards every
attribute to the real jit object and hands each call to its
:class:`~memscope.capturing.calls.CallRecorder`, which records it. This module
changes only with the jit object's protocol (what it forwards to JAX's object,
how it copies, pickles and binds); what a call records is
:mod:`memscope.capturing.calls`'.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

from memscope import _compat
from memscope.capturing.calls import CallRecorder
from memscope.capturing.session import Session
from memscope.program import sites

# memscope's own frames are never the user's source line (see _compat). Once a
# process: this runs once, at the module's import (JAX would keep a folder
# given twice twice).
_compat.hooks.exclude_from_source_info(sites.OWN_ROOT)


class MeasuredJit:
    """A ``jax.jit`` object that also reports its calls to a :class:`Session`
    (through its :class:`~memscope.capturing.calls.CallRecorder`).

    Every attribute (``lower``, ``trace``, ``eval_shape``, ``clear_cache``,
    ``__wrapped__``, the function's own attributes) reads through to the jit
    object JAX made, so code that uses them behaves as without memscope.

    The stand-in's ``__dict__`` starts as a copy of the jit object's (what
    ``functools.wraps`` put there: ``__wrapped__``, ``__name__``, ``__doc__``, and
    any attribute the user's function carries), so that those attributes read
    as on JAX's object. memscope's own state sits beside them, two names
    prefixed ``_memscope_`` (the jit object, its recorder): no user's attribute
    nor JAX's is spelled so, and :meth:`__getattr__` (reached only for names not in that
    ``__dict__``) forwards all others to the jit object. The stand-ins of the
    ahead-of-time stages (:mod:`memscope.capturing.aot`) follow the same rule.
    """

    def __init__(self, jitted: Any, fun: Callable[..., Any], session: Session,
                 options: dict[str, Any] | None = None, *,
                 named_after: Callable[..., Any] | None = None) -> None:
        self.__dict__.update(getattr(jitted, "__dict__", {}))
        self._memscope_jitted = jitted
        self._memscope_calls = CallRecorder(jitted, fun, session, options,
                                            named_after=named_after)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set on the wrapper: the jit object's methods.
        try:
            jitted = self.__dict__["_memscope_jitted"]
        except KeyError:  # mid-construction (copy, pickle): nothing to forward to yet
            raise AttributeError(name) from None
        return getattr(jitted, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # A jitted function stored on a class binds like a method, as jax.jit's does.
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return repr(self._memscope_jitted)

    # The jit object's own protocol, answered by it: to every caller (pickling,
    # copying, checkpointing libraries, isinstance) the stand-in is JAX's object.

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(f, jaxlib's PjitFunction), as without memscope
        return type(self.__dict__.get("_memscope_jitted", self))

    def __dir__(self) -> list[str]:
        return dir(self._memscope_jitted)

    def __getstate__(self) -> Any:
        return self._memscope_jitted.__getstate__()

    def __setstate__(self, state: Any) -> None:
        self._memscope_jitted.__setstate__(state)

    def __reduce__(self) -> Any:
        # Pickled as the jit object it stands for: where that pickles, this does,
        # and where it does not, the error is the same.
        return self._memscope_jitted.__reduce__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._memscope_jitted.__reduce_ex__(protocol)

    def clear_cache(self) -> None:
        """``jitted.clear_cache()``; memscope lets go of its own references to the
        function's compiled programs and traces too (a reading in progress ends
        first), so the executables the program cleared are freed."""
        self._memscope_jitted.clear_cache()
        self._memscope_calls.let_go()

    def __copy__(self) -> MeasuredJit:
        return self._like(copy.copy(self._memscope_jitted))

    def __deepcopy__(self, memo: dict[int, Any]) -> MeasuredJit:
        return self._like(copy.deepcopy(self._memscope_jitted, memo))

    def for_session(self, session: Session) -> MeasuredJit:
        """A stand-in for the same jit object recording into ``session`` (one that
        an earlier capture made, called in a later one: a later notebook cell)."""
        twin = object.__new__(MeasuredJit)
        twin.__dict__.update(self.__dict__,
                             _memscope_calls=self._memscope_calls.for_session(session))
        return twin

    def _like(self, jitted: Any) -> MeasuredJit:
        """A stand-in for a copy of the jit object, recording into the same session."""
        twin = object.__new__(MeasuredJit)
        twin.__dict__.update(self.__dict__, _memscope_jitted=jitted,
                             _memscope_calls=self._memscope_calls.like(jitted))
        return twin

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jitted.trace``: JAX's ``Traced``, in a stand-in whose compiled calls count."""
        return self._memscope_calls.stage(self._memscope_jitted.trace(*args, **kwargs),
                                          args, kwargs, traced=True)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jitted.lower``: JAX's ``Lowered``, in a stand-in whose compiled calls count."""
        return self._memscope_calls.stage(self._memscope_jitted.lower(*args, **kwargs),
                                          args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # pytest: the user's frames only
        try:
            return self._memscope_calls.call(args, kwargs)
        except BaseException as e:
            # The user's traceback shows their call, not memscope's frames.
            e.with_traceback(sites.without_own_frames(e.__traceback__))
            raise
