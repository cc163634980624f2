"""The advised donation's compile, lowered while JAX compiles the call and
compiled as soon as JAX's call returns.

A short program (a CI smoke run, a notebook cell) often ends soon after its
largest function's first call: compiled after memscope has read that call's
program, the advised variant keeps the report waiting for one more compile as
long as the program's own. So, for the first large signatures of a run,
memscope predicts the advised donation from what is known before anything is
compiled (the traced program's input and output avals, and which outputs are
inputs returned as they are), lowers that variant in its worker while JAX
compiles the call, and starts its compile the moment JAX's call returns, before
reading the call's program. Not beside JAX's compile: two compiles at once hold
both their memory (the 8-layer transformer's step, about 250 MiB each, set the
training run's peak RSS at 1.32 times python's), and share the cores XLA
compiles on either way: XLA:CPU runs most of a compile in its own thread pool,
at the program's priority whatever the calling thread's.

The prediction only schedules work early: what the report says is decided, as
before, on the compiled program (:mod:`memscope.variants.donation_variants`), and the
early compile is used only where the donation decided there is the very one
predicted. Otherwise it is dropped and counted, and the advised variant is
compiled as usual. docs/performance.md says what it saves.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memscope import _compat
from memscope.report.function import MEANINGFUL_SAVING
from memscope.variants import jaxpr_facts
from memscope.variants.compile import (
    ConfigSnapshot,
    LoweredVariant,
    applied_config,
    compile_lowered,
    lower_variant,
)
from memscope.variants.donation import Argument, Donation, Spelling, advised
from memscope.variants.donation_variants import Host, TracedSource

#: A call is predicted only if its arguments hold at least this many array
#: leaves and bytes (a model's parameters, a batch), and its traced program at
#: least :data:`MIN_EQUATIONS` equations: a small program compiles in well under
#: a second, and its variant hides behind the program anyway.
MIN_LEAVES = 2
MIN_BYTES = 1 << 18
MIN_EQUATIONS = 100


@dataclass
class EarlyVariant:
    """The predicted advised variant of one call: its flat donation ``mask``
    (``None``: none predicted), and, once the worker has lowered it, the
    lowering, JAX's warnings for it and the future of its compile
    (:func:`compile_lowered`'s result). For a ``--target``, also the call's own
    program compiled for the target (``own``), begun at once: beside JAX's
    compile of the call, in the worker's low-priority threads."""

    mask: tuple[bool, ...] | None
    lowered: LoweredVariant | None = None
    own_lowered: LoweredVariant | None = None
    own: Future[Any] | None = None
    warnings: tuple[str, ...] = ()
    compile: Future[Any] | None = None
    used: bool = False
    #: the call's variants wait for the program's end (foreign lowering rules)
    deferred: bool = False
    ready: threading.Event = field(default_factory=threading.Event)
    #: set once JAX's call has returned (or raised): the variant's compile begins
    #: then, not beside JAX's compile of the call, whose memory it would add to
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, mask: tuple[bool, ...]) -> bool:
        """Whether this is the variant of ``mask``, lowered and compiling (the
        worker runs the job that starts it before the call's reading)."""
        self.ready.wait(5)  # set already, unless the worker skipped the job (cancelled)
        return (self.compile is not None and self.lowered is not None
                and self.mask is not None and mask == self.mask)

    def settle(self, hurry: Callable[[], bool]) -> None:
        """Wait for the compile begun, if one was, without taking it (what is
        read of the call meanwhile would add its memory to the compile's), or
        until ``hurry()``: the program has ended and the report waits."""
        self.ready.wait(5)
        while self.compile is not None and not hurry():
            if futures.wait([self.compile], timeout=0.05).done:
                return

    def take(self) -> Any:
        """The compile's result (waiting for it), marking the variant used."""
        self.used = True
        assert self.compile is not None
        return self.compile.result()

    def take_own(self) -> tuple[LoweredVariant, Any] | None:
        """The call's own program lowered for the target and its compile's result
        (waiting for it), where it was begun early; ``None`` where not."""
        self.ready.wait(5)
        if self.own is None or self.own_lowered is None:
            return None
        found = self.own_lowered, self.own.result()
        self.own, self.own_lowered = None, None
        return found

    def drop(self) -> bool:
        """Let go of an unused compile; whether the variant's was started. One
        already running is waited for (in the worker thread, which the report
        waits for): nothing of a capture, its program's constants included,
        outlives it. So is the call's own compile for the target, if not taken."""
        started = self.compile is not None
        for future in (self.compile, self.own):
            if future is not None and not future.cancel():  # cancelled: never runs
                future.result()
        self.compile, self.lowered, self.own, self.own_lowered = None, None, None, None
        return started


def worth_tracing(leaves: Sequence[Any]) -> bool:
    """Whether a call's arguments are large enough to predict for (before tracing)."""
    arrays = [x for x in leaves if _is_array(x)]
    return len(arrays) >= MIN_LEAVES and sum(_bytes(x) for x in arrays) >= MIN_BYTES


def predict(traced: Any, leaves: Sequence[Any], arguments: Sequence[Argument],
            style: Spelling) -> tuple[bool, ...] | None:
    """The flat donation mask the advice will likely ask for, or ``None`` where
    no prediction is made: the function donates already (what it donates that no
    output can take is known only once compiled), touches Refs or other effects,
    keeps arguments in host memory, is too small (:data:`MIN_EQUATIONS`), or
    has no candidate worth a compile."""
    closed = traced.jaxpr
    jaxpr = closed.jaxpr
    n = len(leaves)
    if (any(_compat.stages.traced_donation(traced)) or closed.effects
            or sum(len(a.leaves) for a in arguments) != n or len(jaxpr.invars) < n
            or jaxpr_facts.count_equations(closed, MIN_EQUATIONS) < MIN_EQUATIONS):
        return None
    invars = jaxpr.invars[len(jaxpr.invars) - n:]
    if any(_memory_kind(x) not in (None, "device") for x in leaves):
        return None
    # As memscope.analysis.advice.candidates on the compiled program: an output
    # that is an input returned as it is (JAX copies it) takes that input first;
    # the others, free outputs of their shape and dtype in order.
    outs = list(zip(jaxpr.outvars, closed.out_avals, strict=True))
    free: dict[tuple[Any, ...], deque[int]] = defaultdict(deque)
    for j, (_, aval) in enumerate(outs):
        free[_key(aval)].append(j)
    chosen: set[int] = set()
    position = {id(v): i for i, v in enumerate(invars)}
    for j, (var, aval) in enumerate(outs):
        i = position.get(id(var))
        if i is not None and _is_array(leaves[i]) and j in free[_key(aval)]:
            free[_key(aval)].remove(j)
            chosen.add(i)
    # An argument the program never reads is pruned from it (keep_unused=False).
    read = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
    for i, var in enumerate(invars):
        queue = free[_key(var.aval)]
        if i not in chosen and id(var) in read and _is_array(leaves[i]) and queue:
            queue.popleft()
            chosen.add(i)
    held = sum(_bytes(invars[i].aval) for i in chosen)
    least_peak = sum(_bytes(v.aval) for v in invars) + sum(_bytes(a) for _, a in outs)
    if not chosen or held < MEANINGFUL_SAVING * least_peak:
        return None
    donation = advised(arguments, Donation(frozenset()), chosen).closest(arguments, style)
    return tuple(donation.leaf_mask(arguments, n))


def start(early: EarlyVariant, traced_now: TracedSource, host: Host,
          settings: ConfigSnapshot) -> None:
    """Lower the predicted variant and start its compile in the worker's
    low-priority compile threads (a job for the worker thread). ``traced_now()``
    is a context giving the call's traced program, with its arrays, for the
    lowering; ``None`` once the program let go of them (the variant is then not
    lowered)."""
    try:
        with traced_now() as traced:
            if (traced is None or host.worker.cancelled
                    or jaxpr_facts.lowers_with_foreign_rules(traced.jaxpr)):
                return  # (lowering runs the program's own rules: not while it runs)
            _start_own(early, traced, host, settings)
            if early.mask is None:
                return
            with (host.recording_warnings(emit=False) as warnings,
                  applied_config(settings)):
                lowered = lower_variant(traced, early.mask, host.target,
                                        "with the advised donation")
        early.lowered, early.warnings = lowered, tuple(warnings)
        pool = host.worker.compiler_for(host.target.runs_here)
        host.target.expect()
        early.compile = pool.submit(_unless_cancelled, host, early, lowered, settings)
    except Exception:  # the advised variant is then compiled as usual
        early.lowered, early.compile = None, None
    finally:
        early.ready.set()


def _start_own(early: EarlyVariant, traced: Any, host: Host,
               settings: ConfigSnapshot) -> None:
    """For a ``--target``: the call's own program lowered for it, its compile
    begun at once (the reading takes it: :meth:`EarlyVariant.take_own`). An
    accelerator's compile holds no device memory of the program's, and XLA's
    compile of the call here and the target's run side by side, the target's
    at the program's priority (:meth:`~memscope.variants.donation_variants.VariantThread.compiler_for`); where this fails,
    the reading compiles it."""
    if host.target.runs_here:
        return
    try:
        with host.recording_warnings(emit=False), applied_config(settings):
            lowered = host.target.lower(traced)
        own = LoweredVariant.of(traced, lowered, f"{traced.fun_name} as written")
        host.target.expect()
        early.own = host.worker.compiler_for(False).submit(
            compile_lowered, own, host.target, settings, host.cache, counted=False)
        early.own_lowered = own
    except Exception:
        early.own, early.own_lowered = None, None


def _unless_cancelled(host: Host, early: EarlyVariant, lowered: LoweredVariant,
                      settings: ConfigSnapshot) -> Any:
    """The compile, once JAX's call has returned, unless the report stopped
    waiting for variants (Ctrl-C) before it began: the process then ends without it."""
    early.released.wait()
    if host.worker.cancelled:
        return RuntimeError("not compiled: the run was interrupted")
    return compile_lowered(lowered, host.target, settings, cache=host.cache)


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def _memory_kind(x: Any) -> str | None:
    try:
        return x.sharding.memory_kind
    except AttributeError:
        return None


def _key(aval: Any) -> tuple[Any, ...]:
    return (tuple(getattr(aval, "shape", ())), str(getattr(aval, "dtype", "")))


def _bytes(aval: Any) -> int:
    """Bytes of an array or aval (:func:`memscope._compat.values.leaf_nbytes`: a PRNG
    key by its physical representation, as the compiled program's figures);
    0 for anything without a shape and dtype JAX knows."""
    try:
        return _compat.values.leaf_nbytes(tuple(aval.shape), aval.dtype)
    except Exception:
        return 0
