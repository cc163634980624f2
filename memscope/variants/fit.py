"""Will it fit? A captured function's peak at other batch sizes, by compiling.

A captured call is kept in shapes (:class:`KeptCall`). Here its
batch axis is resized, the function is traced, lowered and compiled for those
shapes (``jax.ShapeDtypeStruct`` arguments with the same shardings: nothing
runs on a device), and ``memory_analysis()`` gives the peak by memscope's rule
(:func:`memscope.report.peak_rule`). The answer is found by compiling, never by
extrapolation alone: the line through two sizes proposes a batch, and the
batch and the next size up are compiled to confirm it; where the peak is not
linear in the batch, a bisection of compiles finds it.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import jax

from memscope import _frameworks
from memscope.compiled.cache import CompileCache
from memscope.compiled.compile import compile_to_read
from memscope.compiled.targets.base import Target
from memscope.compiled.targets.here import HereTarget
from memscope.errors import MemscopeError, first_line
from memscope.report import FitRow, Forecast
from memscope.variants.compile import lower_variant
from memscope.variants.donation import Argument
from memscope.variants.remat import silenced

#: Compiles a search may make before it gives up (and says so).
MAX_COMPILES = 24


from memscope.variants.batch import (  # noqa: E402, I001  (re-exported: fit's public names)
    BatchChoice as BatchChoice,
    KeptCall as KeptCall,
    Recorded as Recorded,
    data_arguments,
    leaf_shapes,
    recorded_peak,
    spec_name,
    choose_batch as choose_batch,
    choose_function as choose_function,
)


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


class OverCapacity(Exception):
    """The target's compiler refused ``batch``: the program needs more memory
    than the device has (XLA:TPU fails such a compile with RESOURCE_EXHAUSTED).
    ``needs`` is the least it says the program needs (``None``: it does not
    say); ``headline`` its first line. The size does not fit, whatever the budget."""

    def __init__(self, batch: int, needs: int | None, headline: str) -> None:
        super().__init__(f"batch {batch}: {headline}")
        self.batch, self.needs, self.headline = batch, needs, headline


def over_capacity(batch: int, error: Exception) -> OverCapacity | None:
    """``error`` (a compile's) as :class:`OverCapacity` where it says memory ran
    out, else ``None``."""
    from memscope.analysis import oom

    found = oom.parse(str(error))
    if found is None or (found.used_bytes is None and found.capacity_bytes is None):
        return None  # (memory ran out, but not the device's: the compile failed)
    return OverCapacity(batch, found.used_bytes, first_line(found.headline, limit=240))


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


class _Search:
    """The compiles of one forecast, each size compiled once."""

    def __init__(self, call: KeptCall, choice: BatchChoice, donated: tuple[bool, ...] | None,
                 budget: int | None, compile_peak: Callable[..., int | None]) -> None:
        self.call, self.choice, self.donated, self.budget = call, choice, donated, budget
        self.peaks: dict[int, int | None] = {}
        #: sizes the target's compiler refused as too large, with its words; their
        #: ``peaks`` are a stand-in above the budget, for the search's lines only
        self.refused: dict[int, str] = {}
        self.compiles = 0
        self._peak_of = compile_peak

    def peak(self, batch: int) -> int | None:
        if batch not in self.peaks:
            self.compiles += 1
            try:
                self.peaks[batch] = self._peak_of(self.call, self.choice, batch, self.donated)
            except OverCapacity as e:
                self.refused[batch] = e.headline
                self.peaks[batch] = max(e.needs or 0, (self.budget or 0) + 1)
        return self.peaks[batch]

    def fits(self, batch: int) -> bool:
        p = self.peak(batch)
        return (p is not None and self.budget is not None and p <= self.budget
                and batch not in self.refused)

    def bounds(self) -> tuple[int, int | None]:
        """The smallest size compiled that does not fit (``None``: none
        compiled) and the largest below it that fits (0: none). Below, not
        overall: where the peak is not monotone in the batch (a compiler that
        rematerializes near its limit), a size above one that does not fit may fit."""
        hi = min((b for b in self.peaks if not self.fits(b)), default=None)
        fit = [b for b in self.peaks if self.fits(b) and (hi is None or b < hi)]
        return max(fit, default=0), hi


@dataclass(frozen=True)
class Answer:
    """What one search found (see :class:`memscope.report.Forecast`)."""

    rows: tuple[tuple[int, int | None], ...]
    fixed: int | None
    per_example: int | None
    linear: bool
    largest: int | None
    compiles: int
    note: str | None
    #: the search stopped at ``beat``: this size was compiled and does not fit
    below: int | None = None
    #: sizes the target's compiler refused as too large (by batch: its words);
    #: their ``rows`` peaks are ``None``
    refused: tuple[tuple[int, str], ...] = ()


def search(call: KeptCall, choice: BatchChoice, budget: int | None, *,
           donated: tuple[bool, ...] | None = None, known: int | None = None,
           hint: Fraction | None = None, beat: int | None = None,
           compile_peak: Callable[..., int | None] = compile_peak) -> Answer:
    """The largest batch whose peak fits ``budget``, confirmed by compiling it and
    the next size up. ``known`` is the peak at the captured size, when read already
    (it then costs no compile); ``hint`` a per-example slope to start from instead
    of compiling twice the captured size. ``compile_peak`` is the one compile.

    ``beat`` is a batch found for another setting: it is compiled first, and
    where it does not fit the search stops there (:attr:`Answer.below`, no
    ``largest``): this setting cannot fit as many. Where it fits and the next
    size up does not, it is the answer; else the search goes on from there."""
    s = _Search(call, choice, donated, budget, compile_peak)
    b0, step = choice.size, choice.step
    if known is not None:
        s.peaks[b0] = known
    p1 = s.peak(b0)
    if p1 is None:
        return _answer(s, None, None, None, "memory_analysis() gave no figures")
    if b0 in s.refused:  # no line to draw: halve down from the captured size
        lo, hi = _bisect(s, 0, b0, step)
        largest = lo if lo and hi == lo + step else None
        return _answer(s, None, None, largest, f"batch {b0} does not compile for the "
                       f"target: {s.refused[b0]}")
    if beat is not None and budget is not None:
        if not s.fits(beat):
            return _answer(s, None, None, None, f"does not fit at batch {beat}, which "
                           "another setting fits", below=beat)
        s.fits(beat + step)
        hint = _through(s) or hint
    per = hint if hint is not None else _slope(s, b0, p1)
    if per is None:
        return _answer(s, None, None, None, "memory_analysis() gave no figures")
    fixed = p1 - per * b0
    if budget is None:
        return _answer(s, fixed, per, None, "no budget: give --memory SIZE")
    if per <= 0:
        return _answer(s, fixed, per, None, "the peak does not grow with the batch")
    lo, hi = _interpolate(s, b0, p1, per, step)
    largest = lo if lo and hi == lo + step else None
    note = None if hi is None or hi == lo + step else (
        f"the search stopped after {s.compiles} compiles")
    beyond = [b for b in s.peaks if hi is not None and b > hi and s.fits(b)]
    if largest is not None and beyond:
        note = (f"the peak is not monotone in the batch: batch {max(beyond)}, above "
                f"{hi}, which does not fit, fits too (a compiler that rematerializes "
                "near its memory limit, XLA:GPU's, does so); the answer is the largest "
                "size below the first one found not to fit")
    return _answer(s, fixed, per, largest, note)


def _through(s: _Search) -> Fraction | None:
    """The per-example slope between the smallest and largest sizes compiled,
    where the peak grows between them."""
    known = sorted((b, p) for b, p in s.peaks.items() if p is not None)
    if len(known) < 2 or known[-1][1] <= known[0][1]:
        return None
    (b1, p1), (b2, p2) = known[0], known[-1]
    return Fraction(p2 - p1, b2 - b1)


def _slope(s: _Search, b0: int, p0: int) -> Fraction | None:
    """Bytes per example between the captured size and twice it, or further out
    where the peak does not grow yet (a batch padded to a multiple)."""
    b = 2 * b0
    while True:
        p = s.peak(b)
        if p is None:
            return None
        if p > p0 or b >= b0 << 10:
            return Fraction(p - p0, b - b0)
        b *= 2


def _interpolate(s: _Search, b0: int, p0: int, per: Fraction, step: int
                 ) -> tuple[int, int | None]:
    """Narrow [lo fits, hi does not] to one step by compiling: each guess is where
    the line through the nearest sizes compiled meets the budget. The first
    guess and the next size up are compiled, so a linear peak ends after one
    guess; later guesses compile one size each.

    A peak padded to tiles, or one that jumps, meets the line on one side only,
    and plain interpolation creeps up on the answer from that side. Each round
    an end of the bracket stays put, the line is drawn as if that end were half
    as far from the budget (the Illinois rule of false position), so the guesses
    close in from both sides."""
    assert s.budget is not None
    budget = s.budget
    point, slope = (b0, Fraction(p0)), per
    kept = [0, 0]  # rounds in a row that the bracket's low and high end stayed put
    first = True
    while s.compiles < MAX_COMPILES:
        guess = max(int((budget - point[1]) / slope) + point[0], step) // step * step
        lo, hi = s.bounds()
        guess = min(max(guess, lo + step), hi - step) if hi is not None else max(guess,
                                                                                 lo + step)
        if hi is not None and guess <= lo:
            break
        before = (lo, hi)
        s.fits(guess)
        if first:
            s.fits(guess + step)
            first = False
        lo, hi = s.bounds()
        if hi is not None and hi == lo + step:
            break
        if hi is not None and hi in s.refused:  # no figure above: no line, halve
            return _bisect(s, lo, hi, step)
        known = sorted((b, p) for b, p in s.peaks.items() if p is not None)
        below = [(b, p) for b, p in known if b <= lo]
        above = [(b, p) for b, p in known if hi is not None and b >= hi]
        near = (below[-1:] + above[:1]) if above else known[-2:]
        if len(near) < 2 or near[1][0] == near[0][0] or near[1][1] <= near[0][1]:
            return _bisect(s, lo, hi, step, _reach(s, lo, slope, step))
        (b1, q1), (b2, q2) = near
        if not above or before[1] is None:
            point, slope = (b1, Fraction(q1)), Fraction(q2 - q1, b2 - b1)
            continue
        kept = [kept[0] + 1 if lo == before[0] else 0, kept[1] + 1 if hi == before[1] else 0]
        under = Fraction(q1 - budget, 2 ** kept[0])  # <= 0: b1 fits
        over = Fraction(q2 - budget, 2 ** kept[1])   # > 0: b2 does not
        point, slope = (b1, budget + under), (over - under) / (b2 - b1)
    return s.bounds()


def _reach(s: _Search, lo: int, slope: Fraction, step: int) -> int | None:
    """How far above ``lo`` the line through it meets the budget, in whole steps
    (at least one); ``None`` where the line says nothing."""
    peak = s.peaks.get(lo)
    if not lo or peak is None or s.budget is None or slope <= 0:
        return None
    return max(int((s.budget - peak) / slope) // step * step, step)


def _bisect(s: _Search, lo: int, hi: int | None, step: int,
            reach: int | None = None) -> tuple[int, int | None]:
    """Narrow [lo fits, hi does not] to one step by halving (the peak is not
    monotone enough to interpolate). With no size known too large it first grows
    from ``lo``: by ``reach`` (where the line says the budget is met), the
    stride doubled each time it still fits; without one, to twice ``lo``. A
    peak flat just under the budget (padded to tiles) is so bracketed in a
    compile or two, not halved down to from twice its size."""
    stride = reach if reach is not None else max(lo, step)
    while hi is None and s.compiles < MAX_COMPILES:  # no size known too large: grow
        b = lo + stride
        if s.fits(b):
            lo, stride = b, 2 * stride
        else:
            hi = b
    while hi is not None and hi - lo > step and s.compiles < MAX_COMPILES:
        mid = max((lo + hi) // 2 // step * step, lo + step)
        if s.fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def _answer(s: _Search, fixed: Fraction | None, per: Fraction | None, largest: int | None,
            note: str | None, below: int | None = None) -> Answer:
    rows = tuple(sorted((b, None if b in s.refused else p) for b, p in s.peaks.items()))
    off = [(b, p) for b, p in rows if p is not None and fixed is not None and per is not None
           and p != fixed + per * b]
    if off and note is None:
        b, p = off[0]
        assert fixed is not None and per is not None
        note = (f"the peak is not linear in the batch (at {b}: {p} bytes compiled, "
                f"{round(fixed + per * b)} on the line): the answer was searched by "
                "compiling")
    return Answer(rows=rows, fixed=None if fixed is None else round(fixed),
                  per_example=None if per is None else round(per), linear=not off,
                  largest=largest, compiles=s.compiles, note=note, below=below,
                  refused=tuple(sorted(s.refused.items())))


def _local_slope(a: Answer) -> Fraction | None:
    """The per-example slope near the answer: the line through the compiled sizes
    around it, one on each side where there are."""
    rows = [(b, p) for b, p in a.rows if p is not None]
    if a.largest is None or len(rows) < 2:
        return None
    below = [r for r in rows if r[0] <= a.largest - a.largest // 4] or rows[:1]
    (b1, p1), (b2, p2) = below[-1], rows[-1]
    return Fraction(p2 - p1, b2 - b1) if b2 > b1 and p2 > p1 else None


def forecast(entry: Recorded, choice: BatchChoice, budget: int | None, *,
             memory: int | None = None, held: int | None = None,
             target: Target | None = None, cache: CompileCache | None = None) -> Forecast:
    """The forecast for ``entry`` as written and with the advised donation (when
    the capture compiled one), each confirmed by compiling for ``target`` (this
    machine by default), through ``cache`` where given.

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
    peak = functools.partial(compile_peak, target=target, cache=cache)
    flops: dict[int, float | None] = {}

    def written_peak(call: KeptCall, choice: BatchChoice, batch: int,
                     donated: tuple[bool, ...] | None = None) -> int | None:
        found, flops[batch] = compile_point(call, choice, batch, donated, target, cache)
        return found

    try:
        written = search(call, choice, budget, known=recorded_peak(entry),
                         compile_peak=written_peak)
        if advised is not None and advised.facts is not None:
            fix = search(call, choice, budget, donated=advised.facts.program.donated,
                         known=advised.facts.memory.peak_bytes, hint=_local_slope(written),
                         compile_peak=peak)
    except NotCompiled as failed:
        raise MemscopeError(not_compiled_line(entry, choice, failed)) from None
    by_batch = dict(fix.rows) if fix is not None else {}
    too_large = dict(written.refused)
    advised_too_large = dict(fix.refused) if fix is not None else {}
    rows = tuple(FitRow(b, p, by_batch.get(b), refused=b in too_large,
                        advised_refused=b in advised_too_large) for b, p in written.rows)
    rows += tuple(FitRow(b, None, p, advised_refused=b in advised_too_large)
                  for b, p in (fix.rows if fix else ()) if b not in dict(written.rows))
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
        choice_note=choice.note, memory_bytes=memory, held_bytes=held,
        batch_note=compute_note(flops.items()))


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
