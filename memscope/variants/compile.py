"""Lowering a traced call with another donation, and compiling the lowered variants.

Each variant is the very program JAX traced for the call, lowered again with
another donation (:func:`memscope._compat.with_donation`), compiled and read
like the program that ran (:func:`memscope.compiled.read.read_stages`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from memscope import _compat
from memscope.compiled.cache import CompileCache, Fresh, Kept
from memscope.compiled.dump import Built, compile_dumped
from memscope.compiled.read import CompiledFacts, read_stages


@dataclass(frozen=True)
class LoweredVariant:
    """A donation variant lowered and waiting for its compile (see :func:`compile_variants`)."""

    traced: Any
    lowered: Any


def lower_variant(traced: Any, donated: Sequence[bool], accelerator: Any = None
                  ) -> LoweredVariant:
    """Lower ``traced`` (a call's ``jax.stages.Traced``) as if it donated the flat
    leaves in ``donated``; for ``accelerator`` (a
    :class:`memscope.compiled.targets.Target`) when given.

    The jaxpr is JAX's cached trace of the call: the function is not traced
    again. JAX's donation warnings for the variant are raised here, as usual;
    the caller decides what to do with them.
    """
    variant = _compat.with_donation(traced, tuple(donated))
    lowered = _compat.lower(variant) if accelerator is None else accelerator.lower(variant)
    # What is kept for its compile and read holds none of the program's arrays
    # (the constants it closes over): only their types are compiled.
    return LoweredVariant(_compat.reading_view(variant), _compat.without_const_args(lowered))


def compile_variants(variants: Sequence[LoweredVariant], *, shardings: Sequence[Any] = (),
                     workers: int | None = None, pool: Executor | None = None,
                     settings: _compat.ConfigSnapshot = (), accelerator: Any = None,
                     cache: CompileCache | None = None) -> list[CompiledFacts | Exception]:
    """Compile lowered variants and read them; one real XLA compile each.

    These are programs the user's code never runs, and nothing of them is kept
    in JAX's caches. A variant that fails gives its exception in its place.
    They compile side by side, ``workers`` at a time (default: one per core),
    as XLA compiles outside the GIL: benchmarks/bench_variants.py measured
    this faster than one after the other (docs/performance.md). ``pool`` (at
    least ``workers`` threads) runs the compiles themselves, and only them: the
    reading, Python that holds the GIL, stays on the calling thread. The
    compiles run under the JAX ``settings`` given (see
    :func:`memscope._compat.config_snapshot`); for ``accelerator`` (lowered by
    :func:`lower_variant` for it) when given; those ``cache`` holds are read
    from it instead.
    """
    def compile_one(v: LoweredVariant) -> Any:
        return compile_lowered(v, settings, accelerator, cache)

    def read_one(v: LoweredVariant, compiled: Any) -> CompiledFacts | Exception:
        return read_compiled(v, compiled, shardings, accelerator)

    workers = min(len(variants), workers or os.cpu_count() or 1)
    if pool is None and workers <= 1:
        return [read_one(v, compile_one(v)) for v in variants]
    results: list[CompiledFacts | Exception] = []
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=workers,
                                                          thread_name_prefix="memscope"))
        for start in range(0, len(variants), max(workers, 1)):
            batch = variants[start:start + workers]
            compiled = [f.result() for f in [pool.submit(compile_one, v) for v in batch]]
            results += [read_one(v, c) for v, c in zip(batch, compiled, strict=True)]
            del compiled  # each executable goes once read
    return results


def compile_lowered(v: LoweredVariant, settings: _compat.ConfigSnapshot = (),
                    accelerator: Any = None, cache: CompileCache | None = None) -> Any:
    """The one XLA compile of a lowered variant (outside the GIL), or its exception;
    with a ``cache``, what it kept of an identical compile (a :class:`Kept`)
    where it has one, else the compile to keep there once read (a :class:`Fresh`).

    Where ``memory_analysis()`` carries no buffer assignment (XLA:GPU), the
    compile is made with XLA's dump, which holds it (a :class:`Built`): one
    compile, read and kept like any other."""
    try:
        with _compat.applied_config(settings):
            if accelerator is not None:
                return accelerator.compile(v.lowered)
            dumped = not _compat.assignment_in_memory_analysis(v.lowered)
            if cache is None and not dumped:
                return _compat.compile_to_read(v.lowered)
            options = _compat.options_to_read()
            key, kept = (None, None) if cache is None else cache.find(v.lowered, options)
            if kept is not None:
                return kept
            compiled = (compile_dumped(v.lowered, options) if dumped
                        else _compat.compile_uncached(v.lowered, options))
            return compiled if key is None or cache is None else Fresh(compiled, key, cache)
    except Exception as e:  # reported with the variant; the program is unaffected
        return e


def read_compiled(v: LoweredVariant, compiled: Any, shardings: Sequence[Any] = (),
                  accelerator: Any = None) -> CompiledFacts | Exception:
    """The facts of a variant's executable (:func:`compile_lowered`'s result).

    A compile made to be kept is read from the pieces kept of it, as a later
    run reads them from the cache: the figures come from the same bytes either way."""
    if isinstance(compiled, Exception):
        return compiled
    try:
        if accelerator is not None:
            return accelerator.read(v.traced, v.lowered, compiled, shardings=shardings)
        if isinstance(compiled, Fresh):
            kept = compiled.cache.keep(compiled.key, compiled.compiled)
            compiled = compiled.compiled if kept is None else kept
        if isinstance(compiled, Kept | Built):
            executable = compiled.compiled if isinstance(compiled, Built) else compiled
            return read_stages(v.traced, v.lowered, executable, shardings=shardings,
                               module=compiled.module, assignment=compiled.assignment)
        return read_stages(v.traced, v.lowered, compiled, shardings=shardings)
    except Exception as e:
        return e
