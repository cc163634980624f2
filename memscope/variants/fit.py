"""Will it fit? A captured function's peak at other batch sizes, by compiling.

A captured call is kept in shapes (:class:`KeptCall`). Here its
batch axis is resized, the function is traced, lowered and compiled for those
shapes (``jax.ShapeDtypeStruct`` arguments with the same shardings: nothing
runs on a device), and ``memory_analysis()`` gives the peak by memscope's rule
(:func:`memscope.report.peak_rule`). The answer is found by compiling, never by
extrapolation alone (the search over sizes: :mod:`memscope.variants.search`).
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol

import jax

from memscope import _frameworks
from memscope.compiled.cache import CompileCache
from memscope.compiled.compile import compile_to_read
from memscope.compiled.targets.base import Target
from memscope.compiled.targets.here import HereTarget
from memscope.errors import MemscopeError
from memscope.progress import SILENT, ProgressStep, Reporter
from memscope.report import FitRow, Forecast
from memscope.variants.batch import BatchChoice as BatchChoice  # (fit's public names)
from memscope.variants.batch import KeptCall as KeptCall
from memscope.variants.batch import Recorded as Recorded
from memscope.variants.batch import choose_batch as choose_batch
from memscope.variants.batch import choose_function as choose_function
from memscope.variants.batch import data_arguments, leaf_shapes, recorded_peak, spec_name
from memscope.variants.compile import lower_variant
from memscope.variants.donation import Argument
from memscope.variants.remat import silenced
from memscope.variants.search import MAX_COMPILES as MAX_COMPILES
from memscope.variants.search import Answer as Answer
from memscope.variants.search import OverCapacity as OverCapacity
from memscope.variants.search import local_slope
from memscope.variants.search import over_capacity as over_capacity
from memscope.variants.search import search as search


def resized(call: KeptCall, choice: BatchChoice, batch: int) -> tuple[tuple[Any, ...],
                                                                      dict[str, Any]]:
    """The call's arguments with the batch axis at ``batch``."""
    values = call.values()
    new: dict[int, Any] = {}
    for a, axis in zip(choice.arguments, choice.axes, strict=True):
        for i in a.leaves:
            leaf = values[i]
            if (isinstance(leaf, jax.ShapeDtypeStruct) and len(leaf.shape) > axis
                    and leaf.shape[axis] == choice.size):
                shape = list(leaf.shape)
                shape[axis] = batch
                new[i] = jax.ShapeDtypeStruct(tuple(shape), leaf.dtype, sharding=leaf.sharding,
                                              weak_type=leaf.weak_type)
    return call.with_values(new)


def retrace(call: KeptCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's jit object traced at ``args``/``kwargs``, as the framework that
    made it would trace it (``nnx.jit``'s function reads the call's graph nodes
    from the context its own call opens: :func:`memscope._frameworks.retrace_context`)."""
    jitted = call.function()
    if jitted is None:
        raise RuntimeError("the program let go of the function")
    with _frameworks.retrace_context(call.fun):
        return jitted.trace(*args, **kwargs)


class Compiles:
    """Tells ``progress`` of fit's compiles as they begin: the function, the
    setting and the batch, the target, and how many of the ``total`` settings
    are done (their searches ended; in the plan's first round, their first
    compiles, side by side). Called from any thread."""

    def __init__(self, progress: Reporter, function: str, target: Target, total: int) -> None:
        self.progress, self.function, self.total = progress, function, total
        self.where = target.name
        self.done = 0
        self._lock = threading.Lock()

    def compiling(self, setting: str, batch: int) -> None:
        """``setting`` (``as written``, ``with dots_saveable``) begins compiling
        at ``batch``."""
        self.say(f"compiling {self.function} {setting} at batch {batch} for {self.where}")

    def say(self, what: str) -> None:
        """``what`` is being done now."""
        with self._lock:  # (told in order: a count never goes back)
            self.progress(ProgressStep(what, self.done, self.total))

    def finished(self, what: str | None = None) -> None:
        """One more done; ``what`` is being done now, where given."""
        with self._lock:
            self.done += 1
            if what is not None:
                self.progress(ProgressStep(what, self.done, self.total))


def compile_peak(call: KeptCall, choice: BatchChoice, batch: int,
                 donated: tuple[bool, ...] | None = None, target: Target | None = None,
                 cache: CompileCache | None = None) -> int | None:
    """The function's peak at ``batch`` by memscope's rule: one XLA compile (or
    one ``cache`` kept), with the function's own donation or the flat leaves in
    ``donated``; for ``target`` (this machine by default)."""
    return compile_point(call, choice, batch, donated, target, cache)[0]


def compile_point(call: KeptCall, choice: BatchChoice, batch: int,
                  donated: tuple[bool, ...] | None = None, target: Target | None = None,
                  cache: CompileCache | None = None) -> tuple[int | None, float | None]:
    """:func:`compile_peak`'s compile: the peak, and the step's FLOPs from the
    compile's own ``cost_analysis()`` (``None`` where it counts none). What the
    function prints or warns while it is traced again is not the program's."""
    target = target if target is not None else HereTarget()
    args, kwargs = resized(call, choice, batch)
    with warnings.catch_warnings(), silenced():
        warnings.simplefilter("ignore")
        try:
            traced = retrace(call, args, kwargs)
        except Exception as e:  # the user's function, at shapes it was never called with
            raise NotCompiled(batch, "trace", e) from e
        try:
            if donated is not None:
                variant = lower_variant(traced, donated, target)
                traced, lowered = variant.traced, variant.lowered
            else:
                lowered = target.lower(traced)
            compiled = compile_to_read(target, traced, lowered, sizes=True, cache=cache,
                                       counted=False)
        except Exception as e:
            raise over_capacity(batch, e) or NotCompiled(batch, "compile", e) from e
    flops = read_flops(lambda: target.flops(traced, compiled))
    return target.memory(traced, lowered, compiled).peak_bytes, flops


def read_flops(read: Callable[[], float | None]) -> float | None:
    """The FLOPs ``read()`` gives; ``None`` where it fails or gives no finite count
    (a FLOPs count that cannot be read is unknown, not a failed compile)."""
    try:
        value = read()
    except Exception:
        return None
    return value if value is not None and math.isfinite(value) else None


def compute_note(points: Iterable[tuple[int, float | None]]) -> str | None:
    """Where the step's FLOPs grow by less than half as much as the batch from
    the smallest size compiled to the largest: the batch resized is not all the
    step computes on (MaxText's loss slices its data to the configured batch),
    so a larger batch there buys input bytes, not examples."""
    known = sorted((b, f) for b, f in points if f)
    if len(known) < 2:
        return None
    (b0, f0), (b1, f1) = known[0], known[-1]
    if b1 <= 2 * b0 or f1 / f0 >= 0.5 * b1 / b0:
        return None
    return (f"the step's FLOPs grow {f1 / f0:.2f}x from batch {b0} to {b1} ({b1 / b0:.0f}x "
            "the examples): it computes on only part of what was resized (a step that "
            "slices its input to a configured batch, as MaxText's does); the batches "
            "here count input bytes, not examples: give the axis it computes on with "
            "--batch, or size the batch in the program's own configuration")


#: How a step loops over the resized axis (:func:`loops_over_resized`): ``"map"``,
#: a loop over it that carries nothing from one trip to the next (``lax.map``:
#: each element computed apart, as examples are); ``"recurrence"``, only loops
#: that carry state from each trip to the next (an RNN's ``lax.scan`` over time)
Loop = Literal["map", "recurrence"]


def loops_over_resized(call: KeptCall, choice: BatchChoice) -> Loop | None:
    """How the step loops over the resized axis (``None``: it does not): a
    ``scan`` (``lax.map``, ``lax.scan``, a ``fori_loop`` of fixed bounds, each an
    XLA ``while``) whose trip count doubles when the batch does, read exactly
    from the step traced at the captured size and twice it, loops paired in
    program order. XLA's ``cost_analysis()`` counts a ``while`` body once,
    whatever its trip count, so the FLOPs of such a step are no evidence of
    what it computes on."""
    b0 = choice.size
    try:
        with warnings.catch_warnings(), silenced():
            warnings.simplefilter("ignore")
            small, large = [_scans(retrace(call, *resized(call, choice, b)).jaxpr)
                            for b in (b0, 2 * b0)]
    except Exception:  # (a size it does not trace at says nothing of loops)
        return None
    if len(small) != len(large):
        return None
    over = [carries for (m, carries), (n, _) in zip(small, large, strict=True) if n == 2 * m]
    if not over:
        return None
    # (under grad, the backward loop of a lax.map carries the parameters'
    # gradients: a map is told by its forward loop, which carries nothing)
    return "recurrence" if all(over) else "map"


def axis_note(call: KeptCall, choice: BatchChoice, loop: Loop | None) -> str:
    """Why the batch axis is the one chosen (:attr:`BatchChoice.note`); where it
    was inferred and the step loops over it (``loop``: :func:`loops_over_resized`),
    that too. A loop that carries state from one trip to the next (a recurrence)
    is often over time (an RNN's), and the examples then lie along another
    axis, which ``--batch`` names: memscope keeps its rule and says so."""
    if not choice.inferred or loop is None:
        return choice.note
    if loop == "map":
        return (f"{choice.note}; the step maps over this axis (a loop that carries "
                "nothing from one element to the next, as lax.map over examples)")
    shapes = leaf_shapes(call)
    seconds = {shape[1] for a in choice.arguments for i in a.leaves
               if (shape := shapes[i]) is not None and len(shape) > 1}
    other = (" --batch ".join(f"{spec_name(a)}:1" for a in choice.arguments)
             if len(seconds) == 1 else "ARG:AXIS")
    return (f"{choice.note}; the step carries state along this axis from one step to "
            f"the next (a lax.scan with a carry, as an RNN's over time): where it is "
            f"time, not the examples, give the examples' axis with --batch {other}")


def _scans(jaxpr: Any) -> list[tuple[int, bool]]:
    """Each ``scan`` in ``jaxpr`` and the jaxprs inside its equations (a
    ``jit``'s, a ``cond``'s branches, a loop's body), in program order: its trip
    count (a scan inside a scan counts its trips times the outer one's) and
    whether it carries anything from one trip to the next. A carry is an output
    of the scan shaped as its body's; a stacked output has the trips' axis
    before the body's shape (read from the avals, alike on every JAX: JAX 0.12
    has no ``num_carry`` parameter)."""
    found: list[tuple[int, bool]] = []

    def walk(j: Any, times: int) -> None:
        j = getattr(j, "jaxpr", j)  # a ClosedJaxpr's Jaxpr
        for eqn in getattr(j, "eqns", ()):
            inner = times
            if eqn.primitive.name == "scan" and isinstance(eqn.params.get("length"), int):
                inner = times * eqn.params["length"]
                body = getattr(eqn.params.get("jaxpr"), "jaxpr", eqn.params.get("jaxpr"))
                found.append((inner, any(
                    getattr(v.aval, "shape", None) == getattr(out.aval, "shape", ())
                    for v, out in zip(getattr(body, "outvars", ()), eqn.outvars,
                                      strict=False))))
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        walk(sub, inner)

    walk(jaxpr, 1)
    return found


class NotCompiled(Exception):
    """The function could not be traced (``stage`` ``"trace"``) or lowered and
    compiled (``"compile"``) at ``batch``; ``error`` is why."""

    def __init__(self, batch: int, stage: str, error: Exception) -> None:
        super().__init__(f"{stage} at batch {batch}: {error}")
        self.batch, self.stage, self.error = batch, stage, error


def not_compiled_line(entry: Recorded, choice: BatchChoice, failed: NotCompiled) -> str:
    """One line for a forecast that could not compile the function at another
    size: which function, the size, what was resized and, where other arguments
    (not state) have the batch size along some axis, which and what to pass."""
    call = entry.call
    assert call is not None
    head = f"{entry.name} does not {failed.stage} at batch {failed.batch}"
    sharing = _sharing(entry, choice)
    if not sharing:
        why = str(failed.error).strip().splitlines()
        return (f"{head} with {choice.label} resized ({choice.specs}): "
                f"{type(failed.error).__name__}: {why[0] if why else 'n/a'}")
    names = ", ".join(a.label for a, _ in sharing)
    said = ", ".join(f"{spec_name(a)}:{axis} is {choice.size}" for a, axis in sharing)
    every = [*zip(choice.arguments, choice.axes, strict=True), *sharing]
    flags = " ".join(f"--batch {spec_name(a)}" + (f":{axis}" if axis else "")
                     for a, axis in every)
    text = (f"{head} with only {choice.label} resized: {names} "
            f"{'shares' if len(sharing) == 1 else 'share'} the batch axis ({said} too); "
            f"pass {flags}")
    if not choice.inferred:
        try:
            inferred = choose_batch(entry)
        except MemscopeError:
            return text
        if {id(a) for a, _ in every} <= {id(a) for a in inferred.arguments}:
            text += f", or leave --batch out (inferred: {inferred.specs})"
    return text


def _sharing(entry: Recorded, choice: BatchChoice) -> list[tuple[Argument, int]]:
    """The arguments that are not state, not resized, with a leaf of the batch
    size along some axis: each with the first such axis."""
    call = entry.call
    assert call is not None
    shapes = leaf_shapes(call)
    found = []
    for a in data_arguments(entry, shapes):
        if any(a is b for b in choice.arguments):
            continue
        axes = [axis for i in a.leaves if (shape := shapes[i]) is not None
                for axis, n in enumerate(shape) if n == choice.size]
        if axes:
            found.append((a, min(axes)))
    return found


def forecast(entry: Recorded, choice: BatchChoice, budget: int | None, *,
             memory: int | None = None, held: int | None = None,
             target: Target | None = None, cache: CompileCache | None = None,
             progress: Reporter = SILENT) -> Forecast:
    """The forecast for ``entry`` as written and with the advised donation (when
    the capture compiled one), each confirmed by compiling for ``target`` (this
    machine by default), through ``cache`` where given; ``progress`` is told of
    each compile.

    Raises:
        MemscopeError: the function does not trace or compile at a size tried
            (:func:`not_compiled_line` says which and what to pass).
    """
    call = entry.call
    assert call is not None
    start = time.perf_counter()
    advised = next((v for v in entry.variants if v.name == "advised" and v.facts is not None
                    and not v.same_as_written), None)
    fix = None
    target = target if target is not None else HereTarget()
    steps = Compiles(progress, entry.name, target, 1 if advised is None else 2)
    flops: dict[int, float | None] = {}

    def written_peak(call: KeptCall, choice: BatchChoice, batch: int,
                     donated: tuple[bool, ...] | None = None) -> int | None:
        steps.compiling("as written", batch)
        found, flops[batch] = compile_point(call, choice, batch, donated, target, cache)
        return found

    def advised_peak(call: KeptCall, choice: BatchChoice, batch: int,
                     donated: tuple[bool, ...] | None = None) -> int | None:
        steps.compiling("with the advised donation", batch)
        return compile_peak(call, choice, batch, donated, target, cache)

    try:
        written = search(call, choice, budget, known=recorded_peak(entry),
                         compile_peak=written_peak)
        steps.finished()
        if advised is not None and advised.facts is not None:
            fix = search(call, choice, budget, donated=advised.facts.program.donated,
                         known=advised.facts.memory.peak_bytes, hint=local_slope(written),
                         compile_peak=advised_peak)
    except NotCompiled as failed:
        raise MemscopeError(not_compiled_line(entry, choice, failed)) from None
    by_batch = dict(fix.rows) if fix is not None else {}
    too_large = dict(written.refused)
    advised_too_large = dict(fix.refused) if fix is not None else {}
    rows = tuple(FitRow(b, p, by_batch.get(b), refused=b in too_large,
                        advised_refused=b in advised_too_large) for b, p in written.rows)
    rows += tuple(FitRow(b, None, p, advised_refused=b in advised_too_large)
                  for b, p in (fix.rows if fix else ()) if b not in dict(written.rows))
    loops = loops_over_resized(call, choice)
    batch_note = None if loops else compute_note(flops.items())  # (a loop's FLOPs:
    # its body's, counted once whatever its trips, are no evidence)
    note = written.note
    if (too_large or advised_too_large) and note is None:
        b, words = sorted({**advised_too_large, **too_large}.items())[0]
        which = "as written" if b in too_large else "with the advised donation"
        note = f"the compiler refused batch {b} ({which}) as too large: {words}"
    return Forecast(
        function=entry.name, source=entry.source, argument=choice.label, axis=choice.axis,
        batch=choice.size, step=choice.step, budget_bytes=budget,
        rows=tuple(sorted(rows, key=lambda r: r.batch)), fixed_bytes=written.fixed,
        per_example_bytes=written.per_example, linear=written.linear,
        largest=written.largest, advised_largest=fix.largest if fix else None,
        advised_setting=advised.setting if advised is not None else None,
        compiles=written.compiles + (fix.compiles if fix else 0),
        seconds=time.perf_counter() - start, note=note, inferred=choice.inferred,
        choice_note=axis_note(call, choice, loops), memory_bytes=memory, held_bytes=held,
        batch_note=batch_note,
        confirmed=written.largest is None or written.above == written.largest + choice.step,
        above=None if written.above == (written.largest or 0) + choice.step else written.above)


class Failed(Recorded, Protocol):
    """A recorded call that may have run out of memory (a capture's entry)."""

    @property
    def failure(self) -> str | None: ...
    @property
    def failure_memory(self) -> tuple[int, int | None] | None: ...


def forecast_failures(entries: Iterable[Failed]) -> dict[int, Forecast]:
    """For each call that ran out of memory on a device with a limit: the largest
    batch that fits it, by compiling (after the program has ended), by the
    ``id`` of its entry. An entry whose fit could not be found is left out: its
    post-mortem says n/a."""
    found: dict[int, Forecast] = {}
    for entry in entries:
        in_use, limit = entry.failure_memory or (0, None)
        if entry.failure is None or entry.call is None or entry.facts is None or limit is None:
            continue
        held = max(in_use - (entry.facts.memory.argument_bytes or 0), 0)
        try:
            choice = choose_batch(entry)
            found[id(entry)] = forecast(entry, choice, limit - held, memory=limit, held=held)
        except Exception:
            continue
    return found
