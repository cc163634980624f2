"""The one call every compile memscope only reads goes through: a donation
variant, a checkpoint policy, one of ``fit``'s sizes, a function compiled for
a ``--target``, XLA's dump of a function whose ``memory_analysis()`` lacks its
buffer assignment; for any target (:mod:`memscope.compiled.targets`), through
memscope's cache of them (:mod:`memscope.compiled.cache`)."""

from __future__ import annotations

from typing import Any

from memscope import _compat
from memscope.compiled.cache import CompileCache, Kept, memory_stats_fields
from memscope.compiled.dump import Built
from memscope.compiled.read import compiled_memory
from memscope.compiled.targets.base import Target
from memscope.compiled.targets.here import HereTarget


def compile_to_read(target: Target, traced: Any, lowered: Any, *, sizes: bool = False,
                    options: dict[str, Any] | None = None, cache: CompileCache | None = None,
                    counted: bool = True, what: str | None = None) -> Built | Kept:
    """``lowered`` (``traced`` lowered by ``target.lower``) compiled for
    ``target`` to be read: with the target's XLA options for a compile that
    only reads (:meth:`~memscope.compiled.targets.Target.options`; ``sizes``:
    one of ``fit``'s sizes) unless ``options`` are given.

    With a ``cache``, what it kept of an identical compile where it has one
    (counted on the target, and in the cache's :attr:`~CompileCache.hits`
    where ``counted``); else the compile, kept there where its pieces read
    back as it (:func:`reads_back`) and returned as kept, so that a compile's
    figures come from the same bytes whether made now or read in a run again.
    Nothing of the compile is kept in JAX's caches. While it runs the target
    counts it as compiling ``what`` (by default the function's name:
    :meth:`~memscope.compiled.targets.Target.progress`).

    Raises:
        Exception: what the target's compiler raises.
    """
    with target.compiling(what or _function_name(traced)):
        return _compile_to_read(target, traced, lowered, sizes, options, cache, counted)


def _compile_to_read(target: Target, traced: Any, lowered: Any, sizes: bool,
                     options: dict[str, Any] | None, cache: CompileCache | None,
                     counted: bool) -> Built | Kept:
    asked = target.options(lowered, sizes=sizes) if options is None else options
    key = None if cache is None else cache.key(lowered, asked, target.identity)
    if cache is not None and key is not None:
        kept = cache.load(key, counted=counted)
        if kept is not None:
            target.count_hit(kept)
            return kept
    built = target.compile(lowered, asked)
    if cache is None or key is None:
        return built
    kept = Kept.of(built)
    if kept is None or not reads_back(traced, lowered, built, kept) or not cache.store(key, kept):
        return built
    return kept


def _function_name(traced: Any) -> str:
    """The traced function's name (``jax.stages.Traced.fun_name``), else "a program"."""
    try:
        return str(traced.fun_name)
    except Exception:  # none given (XLA's dump of a lowering), or not a Traced
        return "a program"


def reads_back(traced: Any, lowered: Any, built: Built, kept: Kept) -> bool:
    """Whether the figures read from ``kept`` are those of the compile it was
    taken from: ``memory_analysis()``'s, by memory kind (where ``traced`` is
    given; else as XLA gives them)."""
    try:
        if traced is None:
            return kept.fields == memory_stats_fields(built.compiled.memory_analysis())
        return (compiled_memory(traced, lowered, built.compiled, module=built.module)
                == compiled_memory(traced, lowered, kept, module=kept.module))
    except Exception:  # a compile whose figures cannot be read twice is not kept
        return False


def compile_again_dumped(lowered: Any, cache: CompileCache | None) -> tuple[Built | Kept, str]:
    """``lowered`` (a function's own lowering, whose compile's
    ``memory_analysis()`` lacks the buffer assignment) compiled once more with
    XLA's dump, as JAX compiles it (XLA's default options), through ``cache``;
    and whether it was ``"compiled"`` or ``"kept"`` (read from the cache). It
    is compiled from the lowering parsed apart
    (:func:`memscope._compat.stages.lowered_apart`): JAX's caches keep nothing of it."""
    here = HereTarget(dump=True)
    compiled = compile_to_read(here, None, _compat.stages.lowered_apart(lowered), options={},
                               cache=cache, counted=False)
    return compiled, "compiled" if here.compiles else "kept"
