"""Lowering a traced call with another donation, and compiling the lowered variants.

Each variant is the very program JAX traced for the call, lowered again with
another donation (:func:`memscope._compat.stages.with_donation`) for the capture's
target, compiled through the one cached call and read like the program that
ran (:meth:`memscope.compiled.targets.Target.read`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from memscope import _compat
from memscope.compiled.cache import CompileCache, Kept
from memscope.compiled.compile import compile_to_read
from memscope.compiled.dump import Built
from memscope.compiled.held import reading_view
from memscope.compiled.read import CompiledFacts
from memscope.compiled.targets.base import Target

T = TypeVar("T")
R = TypeVar("R")

#: Every JAX setting as the calling thread saw it (:func:`config_snapshot`).
ConfigSnapshot = tuple[tuple[Any, Any], ...]


def config_snapshot() -> ConfigSnapshot:
    """Every JAX setting as the calling thread sees it.

    JAX keeps ``with jax.enable_x64(...)`` and ``with jax.sharding.use_mesh(...)``
    settings per thread, and its lowering reads them; memscope's worker lowers a
    call's variants under the values the call itself ran with
    (:func:`applied_config`).
    """
    return tuple((setting, setting.value) for setting in _compat.hooks.thread_settings())


@contextlib.contextmanager
def applied_config(snapshot: ConfigSnapshot) -> Iterator[None]:
    """Set, for this thread only, each value of ``snapshot`` that differs here."""
    with contextlib.ExitStack() as stack:
        for setting, value in snapshot:
            if not _same(setting.value, value):
                stack.enter_context(_compat.hooks.set_for_thread(setting, value))
        yield


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # values without a plain equality (arrays)
        return False


@dataclass(frozen=True)
class LoweredVariant:
    """A program lowered and waiting for its compile (see :func:`compile_variants`):
    a donation variant, or a call's own program lowered for a target."""

    traced: Any
    lowered: Any
    #: what it is, as progress says it: ``train_step as written``
    what: str | None = None

    @classmethod
    def of(cls, traced: Any, lowered: Any, what: str | None = None) -> LoweredVariant:
        """``traced`` and its ``lowered`` program as kept for the compile and the
        read: holding none of the program's arrays (the constants it closes
        over), whose types alone are compiled."""
        return cls(reading_view(traced), _compat.stages.without_const_args(lowered), what)


def lower_variant(traced: Any, donated: Sequence[bool], target: Target,
                  what: str = "with another donation") -> LoweredVariant:
    """Lower ``traced`` (a call's ``jax.stages.Traced``) for ``target`` as if it
    donated the flat leaves in ``donated``.

    The jaxpr is JAX's cached trace of the call: the function is not traced
    again. JAX's donation warnings for the variant are raised here, as usual;
    the caller decides what to do with them. ``what`` says which donation it
    is, after the function's name, where progress is shown.
    """
    variant = _compat.stages.with_donation(traced, per_call_leaf(traced, tuple(donated)))
    return LoweredVariant.of(variant, target.lower(variant),
                             f"{traced.fun_name} {what}")


def per_call_leaf(traced: Any, donated: tuple[bool, ...]) -> tuple[bool, ...]:
    """Flags per array of the compiled program's call leaves, as flags per flat
    leaf of the call: ``jax.jit`` donates whole arguments, so all or none of a
    hijax value's arrays (one with no array is not donated;
    :func:`memscope._compat.values.high_layout`)."""
    layout = _compat.values.high_layout(traced)
    if layout is None:
        return donated
    flags, start = [], 0
    for value in layout.inputs:
        flags.append(any(donated[start:start + len(value.lo)]))
        start += len(value.lo)
    if start != len(donated):
        raise ValueError("the donation flags do not match the program's arrays")
    return tuple(flags)


def compile_variants(variants: Sequence[LoweredVariant], target: Target, *,
                     shardings: Sequence[Any] = (), workers: int | None = None,
                     pool: Executor | None = None, settings: ConfigSnapshot = (),
                     cache: CompileCache | None = None) -> list[CompiledFacts | Exception]:
    """Compile lowered variants for ``target`` (lowered by :func:`lower_variant`
    for it) and read them; one real XLA compile each, or none where ``cache``
    holds it (:func:`memscope.compiled.compile.compile_to_read`).

    These are programs the user's code never runs, and nothing of them is kept
    in JAX's caches. A variant that fails gives its exception in its place.
    They compile side by side, ``workers`` at a time (default: one per core),
    as XLA compiles outside the GIL: benchmarks/bench_variants.py measured
    this faster than one after the other (docs/performance.md). ``pool`` (at
    least ``workers`` threads) runs the compiles themselves, and only them: the
    reading, Python that holds the GIL, stays on the calling thread. The
    compiles run under the JAX ``settings`` given (see
    :func:`config_snapshot`).
    """
    def compile_one(v: LoweredVariant) -> Any:
        return compile_lowered(v, target, settings, cache)

    def read_one(v: LoweredVariant, compiled: Any) -> CompiledFacts | Exception:
        return read_variant(v, compiled, target, shardings)

    target.expect(len(variants))
    workers = min(len(variants), workers or os.cpu_count() or 1)
    if pool is None and workers <= 1:
        return [read_one(v, compile_one(v)) for v in variants]
    results: list[CompiledFacts | Exception] = []
    for start in range(0, len(variants), max(workers, 1)):
        batch = variants[start:start + workers]
        compiled = side_by_side(compile_one, batch, pool=pool)
        results += [read_one(v, c) for v, c in zip(batch, compiled, strict=True)]
        del compiled  # each executable goes once read
    return results


def side_by_side(fn: Callable[[T], R], items: Sequence[T], *, pool: Executor | None = None
                 ) -> list[R]:
    """``fn`` of each item, in their order, run at once in ``pool``'s threads, or in
    threads made for them (one per core at the most): for XLA's compiles, which
    run outside the GIL."""
    if pool is not None:
        return [f.result() for f in [pool.submit(fn, item) for item in items]]
    workers = max(1, min(len(items), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memscope") as own:
        return list(own.map(fn, items))


def compile_lowered(v: LoweredVariant, target: Target, settings: ConfigSnapshot = (),
                    cache: CompileCache | None = None, *, counted: bool = True
                    ) -> Built | Kept | Exception:
    """The one XLA compile of a lowered variant for ``target`` (outside the GIL),
    or what ``cache`` kept of it (:func:`~memscope.compiled.compile.compile_to_read`,
    a hit ``counted`` as a variant's); its exception where it fails."""
    try:
        with applied_config(settings):
            return compile_to_read(target, v.traced, v.lowered, cache=cache, counted=counted,
                                   what=v.what)
    except Exception as e:  # reported with the variant; the program is unaffected
        return e


def read_variant(v: LoweredVariant, compiled: Built | Kept | Exception, target: Target,
                  shardings: Sequence[Any] = ()) -> CompiledFacts | Exception:
    """The facts of a variant's compile (:func:`compile_lowered`'s result), read
    for ``target``; its exception where the compile or the read failed."""
    if isinstance(compiled, Exception):
        return compiled
    try:
        return target.read(v.traced, v.lowered, compiled, shardings=shardings)
    except Exception as e:
        return e
