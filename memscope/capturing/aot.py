"""Calls through JAX's ahead-of-time stages: ``jitted.lower(x).compile()(x)``.

A jit object made under :func:`memscope.capturing.capture` hands out stand-ins for
its ``Traced``, ``Lowered`` and ``Compiled`` stages. They forward everything to
JAX's own (``isinstance`` included); the ``Compiled`` one also counts its
top-level calls, and reads its executable at the first: the very program the
user compiled and runs. Nothing of the arguments is kept but their shapes,
dtypes and shardings (and static arguments, while the stage itself lives).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from memscope import _compat
from memscope.capturing import keys, reading
from memscope.capturing.entry import Entry
from memscope.capturing.observe import (
    addresses,
    leaf_sharding,
    observe,
    watch_refs,
    watched_call,
    written_back_seen,
)
from memscope.compiled.read import CompiledHandles
from memscope.errors import described
from memscope.program import sites


class Stage:
    """A transparent stand-in for one of JAX's stages, made by a measured jit:
    ``origin`` is its :class:`~memscope.capturing.calls.CallRecorder`."""

    def __init__(self, real: Any, origin: Any, call: tuple[tuple[Any, ...], dict[str, Any]],
                 traced: Any = None) -> None:
        self._memscope_real = real
        self._memscope_origin = origin
        self._memscope_call = call  # (args, kwargs) with arrays as ShapeDtypeStructs
        self._memscope_traced = traced

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(stage, jax.stages.Compiled) holds
        return type(self._memscope_real)

    def __getattr__(self, name: str) -> Any:
        try:
            real = self.__dict__["_memscope_real"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(real, name)

    def __repr__(self) -> str:
        return repr(self._memscope_real)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._memscope_real(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``Traced.lower``: a stand-in for the ``Lowered`` it gives."""
        lowered = self._memscope_real.lower(*args, **kwargs)
        return Stage(lowered, self._memscope_origin, self._memscope_call,
                     traced=self._memscope_real)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        """``Lowered.compile``: a measured stand-in for the ``Compiled`` it gives."""
        compiled = self._memscope_real.compile(*args, **kwargs)
        return Compiled(compiled, self._memscope_origin, self._memscope_call,
                        traced=self._memscope_traced, lowered=self._memscope_real)


class Compiled(Stage):
    """A ``jax.stages.Compiled`` whose top-level calls are counted under its own entry."""

    def __init__(self, real: Any, origin: Any,
                 call: tuple[tuple[Any, ...], dict[str, Any]], *, traced: Any, lowered: Any) -> None:
        super().__init__(real, origin, call, traced)
        self._memscope_lowered = lowered
        self._memscope_entry: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        origin = self._memscope_origin
        session = origin.session
        real = self._memscope_real
        if not session.records(jax.tree_util.tree_leaves((args, kwargs))):
            return real(*args, **kwargs)
        entry = self._memscope_entry
        if entry is None:
            try:
                return self._first_call(args, kwargs)
            except BaseException as e:
                e.with_traceback(_user_frames(e.__traceback__))
                raise
        if entry.watch_next:  # the first call's buffers showed a miss
            out = watched_call(entry, lambda: real(*args, **kwargs),
                               keys.program_leaves(jax.tree_util.tree_leaves((args, kwargs))))
        else:
            out = real(*args, **kwargs)
        entry.calls += 1
        session.device.sample(session.calls + 1, entry.name)
        session.count_call()
        return out

    def _first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        origin = self._memscope_origin
        session = origin.session
        values = jax.tree_util.tree_leaves((args, kwargs))
        leaves = keys.program_leaves(values)
        # (a pending input: see CallRecorder._run_first)
        before = [addresses(x, wait=origin.spec.donates) for x in leaves]
        out = self._memscope_real(*args, **kwargs)
        observation = observe(before, leaves, out)
        call_args, call_kwargs = self._memscope_call
        try:
            entry = origin.describe(keys.call_key(origin.spec, call_args, call_kwargs)[0],
                                  call_args, call_kwargs, out)
        except Exception as e:
            entry = Entry(name=origin.name, source=origin.source,
                          signature="(?)", spec=origin.spec,
                          error=f"could not describe the call: {described(e)}")
        entry.watched_refs, _ = watch_refs(leaves, None)
        entry.library = origin.library
        origin.stamp(entry)
        shardings = [leaf_sharding(x) for x in leaves]
        handles = None
        try:
            traced = self._memscope_traced
            if traced is None:
                traced = origin.jitted.trace(*call_args, **call_kwargs)
            handles = CompiledHandles(_compat.stages.without_call_arrays(traced), self._memscope_lowered,
                                      self._memscope_real)
        except Exception as e:  # never let the measurement break the program
            entry.error = f"could not read the compiled program: {described(e)}"
        if handles is not None:
            observation = written_back_seen(observation, handles, values)
        session.observed(entry, observation)
        entry.calls = 1
        self._memscope_entry = session.add(("aot", id(self)), entry)
        if handles is not None and self._memscope_entry is entry:
            # The read and the variants, off the program's path (memscope.capturing.worker).
            reading.schedule(session, entry, origin.fun, handles, shardings)
        session.device.sample(session.calls + 1, entry.name)
        session.count_call()
        return out


def abstract_call(args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with each array as a ``ShapeDtypeStruct`` (shape, dtype,
    sharding, weak type) and each ``jax.Ref`` as its abstract value (JAX traces
    a call given one): enough to trace the call again, keeping no array alive."""
    def abstract(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding,
                                        weak_type=getattr(x, "weak_type", False))
        if isinstance(x, np.ndarray):  # what a data loader yields: traced as an array
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        if _compat.values.is_ref(x):
            return jax.typeof(x)
        return x

    return jax.tree_util.tree_map(abstract, (args, kwargs))


def _user_frames(tb: Any) -> Any:
    return sites.without_own_frames(tb)
