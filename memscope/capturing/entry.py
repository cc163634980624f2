"""One jitted function at one signature, as recorded while a capture runs."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from memscope.analysis.fates import Fates
from memscope.analysis.observed import Observation
from memscope.capturing import wrappers
from memscope.capturing.keys import JitSpec
from memscope.compiled.read import (
    CompiledFacts,
)
from memscope.report import (
    LiveArrays,
    MeasuredMemory,
    Memory,
    MemoryLimit,
    Remat,
)
from memscope.variants.donation import Argument, Spelling, as_written
from memscope.variants.donation_variants import VariantFacts
from memscope.variants.fit import KeptCall


@dataclass
class Entry:
    """One jitted function at one signature, as observed during a capture.

    Mutable while the capture runs (``calls`` grows); turned into a frozen
    :class:`memscope.report.FunctionReport` by :mod:`memscope.assemble.function`.
    """

    name: str
    source: str | None
    signature: str
    spec: JitSpec
    calls: int = 0
    facts: CompiledFacts | None = None
    #: its buffers' fates, classified once when ``facts`` were read (the
    #: variants plan from them, the report reads them)
    fates: Fates | None = None
    #: with ``--target``: the figures of the program compiled here, which ran
    #: (``facts`` are then the target's)
    memory_here: Memory | None = None
    #: with ``--target``: its peak compiled without the target's memory limit
    #: too, where the target checked (:meth:`~memscope.compiled.targets.Target.limit_check`)
    memory_limit: MemoryLimit | None = None
    warnings: tuple[str, ...] = ()
    error: str | None = None
    #: the call's top-level dynamic arguments, and how the user spells donation
    arguments: tuple[Argument, ...] = ()
    style: Spelling = "argnames"
    #: the call as the user wrote it, when a framework's wrapper made the jit
    wrapper: wrappers.Wrapped | None = None
    variants: list[VariantFacts] = field(default_factory=list)
    #: the first call's buffers, as integers
    observation: Observation | None = None
    #: the next call's, where the first call deleted an input whose buffer no
    #: output took (:func:`memscope.analysis.observed.misses`)
    observation_again: Observation | None = None
    #: observe the next call (set once the first call's buffers are read)
    watch_next: bool = False
    #: why the first call's buffers were not observed, where they could not be
    not_observed: str | None = None
    #: weak references to the Refs the first call observed (per input, ``None``
    #: for a non-Ref; then the closed-over ones), read again at the run's end
    watched_refs: tuple[weakref.ref[Any] | None, ...] = ()
    watched_closed: tuple[weakref.ref[Any] | None, ...] = ()
    measured: MeasuredMemory | None = None
    #: the installed package that defines the function, when it is not the user's
    library: str | None = None
    #: what JAX keys the executable on (:func:`memscope.capturing.keys.call_key`), for
    #: explaining a recompile; holds no array
    key: Any = None
    #: seconds JAX spent compiling at the first call (its monitoring events)
    compile_seconds: float | None = None
    #: the number of the top-level call that first ran this signature
    first_call: int | None = None
    #: the flat leaves the jit object donates (JAX's order)
    donated: tuple[int, ...] = ()
    #: each leaf's sharding as spelled, read off the program's path
    shardings: tuple[str | None, ...] = ()
    #: the out-of-memory error a call of it ended in, as JAX's text
    failure: str | None = None
    #: where it failed: "call" (running) or "compile"
    failed_in: str | None = None
    #: jax.live_arrays() and device memory when it failed
    failure_live: LiveArrays | None = None
    failure_memory: tuple[int, int | None] | None = None
    #: the jit object and its call with arrays as ShapeDtypeStructs, kept when the
    #: session keeps calls (``memscope fit``) or the call ran out of memory
    call: KeptCall | None = None
    #: residuals and measured checkpoint policies (see :mod:`memscope.variants.remat`)
    remat: Remat | None = None
    #: the user's line that made the jit, its file's SHA-256 then, and the first
    #: call's line (``path:line``; ``None``: not in the user's code)
    jit_site: str | None = None
    jit_file_sha256: str | None = None
    call_site: str | None = None
    #: per flat output leaf: its result's top-level element (``result[0]``) and
    #: (shape, dtype), from the first call (:mod:`memscope.capturing.residency`)
    output_tops: list[str] | None = None
    output_shapes: list[tuple[tuple[int, ...], Any]] | None = None
    #: weak references to the first call's array leaves (``None`` for others),
    #: until the signature's next call compares its own with them
    first_leaves: tuple[weakref.ref[Any] | None, ...] | None = None
    #: flat leaves the next call was given again, the very array of the first
    #: call: the caller keeps them (a synthetic batch, a constant table), so they
    #: are not to be donated; by leaf, the number of that call
    passed_again: dict[int, int] = field(default_factory=dict)
    #: what the pending reading and variants hold of the program, until done
    #: (:mod:`memscope.capturing.hold`)
    hold: Any = None
    #: why the variants (advice, checkpoint policies) were not measured, where
    #: they were asked for; ``None`` otherwise
    not_measured: str | None = None

    def remember_leaves(self, leaves: Sequence[Any]) -> None:
        """Keep weak references to the first call's array leaves (never the arrays)."""
        refs: list[weakref.ref[Any] | None] = []
        for x in leaves:
            try:
                refs.append(weakref.ref(x) if isinstance(x, jax.Array) else None)
            except TypeError:  # an array type without weak references
                refs.append(None)
        self.first_leaves = tuple(refs)

    def compare_leaves(self, leaves: Sequence[Any], call: int) -> None:
        """At the signature's next call: which leaves are the first call's very
        arrays (:attr:`passed_again`); the weak references go."""
        first, self.first_leaves = self.first_leaves, None
        if first is None or len(first) != len(leaves):
            return
        donated = set(self.donated)  # (passed again, JAX itself refuses a deleted array)
        for i, (ref, x) in enumerate(zip(first, leaves, strict=True)):
            if ref is not None and i not in donated and ref() is x:
                self.passed_again[i] = call

    @property
    def setting(self) -> str | None:
        """The donation as written, in jax.jit's keywords; ``None`` if unknown."""
        if self.facts is None or (sum(len(a.leaves) for a in self.arguments)
                                  != len(self.facts.program.donated)):
            return None
        return as_written(self.arguments, self.facts.program.donated).setting(
            self.arguments, self.style)
