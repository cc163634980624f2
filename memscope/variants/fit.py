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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, TypeVar

import jax

from memscope import _compat
from memscope.compiled.read import CompiledFacts, compiled_memory
from memscope.errors import MemscopeError
from memscope.report import FitRow, Forecast
from memscope.variants.compile import lower_variant
from memscope.variants.donation import Argument
from memscope.variants.donations import VariantFacts

#: Compiles a search may make before it gives up (and says so).
MAX_COMPILES = 24


@dataclass(frozen=True)
class KeptCall:
    """A call in shapes: the jit object JAX made, the call's arguments with every
    array as a ``jax.ShapeDtypeStruct`` (shape, dtype, sharding), and its dynamic
    top-level arguments in JAX's terms. Enough to compile it again at other
    shapes; no array is kept."""

    jitted: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    arguments: tuple[Argument, ...]



class Recorded(Protocol):
    """What the fit needs of a recorded call (a capture's entry)."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str | None: ...
    @property
    def facts(self) -> CompiledFacts | None: ...
    @property
    def variants(self) -> Sequence[VariantFacts]: ...
    @property
    def call(self) -> KeptCall | None: ...


E = TypeVar("E", bound=Recorded)


@dataclass(frozen=True)
class BatchChoice:
    """The arguments whose leaves are resized, each on its axis (``axes``, one
    per argument), from which size."""

    arguments: tuple[Argument, ...]
    axes: tuple[int, ...]
    size: int
    step: int
    inferred: bool
    note: str

    @property
    def label(self) -> str:
        return ", ".join(a.label for a in self.arguments)

    @property
    def axis(self) -> int:
        """The first argument's axis (``note`` says each where they differ)."""
        return self.axes[0] if self.axes else 0

    @property
    def specs(self) -> str:
        """The choice as ``ARG:AXIS`` specs: ``x:0, y:0``."""
        return ", ".join(f"{_spec_name(a)}:{axis}" for a, axis in zip(self.arguments,
                                                                     self.axes, strict=True))


def choose_function(entries: Sequence[E], name: str | None) -> E:
    """The entry called ``name`` (its largest-peak signature), else the one with
    the largest peak.

    Raises:
        MemscopeError: no entry can be compiled again, or none is called ``name``.
    """
    kept = [e for e in entries if e.call is not None]
    if name is not None:
        named = [e for e in kept if e.name == name]
        if not named:
            known = ", ".join(sorted({e.name for e in kept})) or "none"
            raise MemscopeError(f"no jitted function called {name!r} was captured "
                                f"(captured: {known}); give one with --function NAME")
        kept = named
    if not kept:
        raise MemscopeError("no jitted call was captured that memscope can compile again")
    return max(kept, key=lambda e: _peak(e) or -1)


def _peak(entry: Recorded) -> int | None:
    return entry.facts.memory.peak_bytes if entry.facts is not None else None


def choose_batch(entry: Recorded, specs: Sequence[str] = ()) -> BatchChoice:
    """The batch axis: each of ``specs`` (``ARG[:AXIS]``, an argument's name or
    position), resized together, else axis 0 of the arguments that are not state
    (not donated, and not of the shapes the function returns), at their most
    common leading size.

    Raises:
        MemscopeError: a spec names no argument or axis, names one argument
            twice, or the named arguments differ in size; no axis can be inferred.
    """
    call = entry.call
    assert call is not None
    shapes = _leaf_shapes(call)
    if specs:
        return _given_batch(call, specs, shapes)
    data = _data_arguments(entry, shapes)
    lead = [_leading(shapes[i]) for i in range(len(shapes))]
    leading = [n for a in data for i in a.leaves if (n := lead[i]) is not None]
    if not leading:
        raise MemscopeError(f"{entry.name}: no argument that is not state has an array to "
                            "take a batch axis from; give one with --batch ARG[:AXIS]")
    size = max(set(leading), key=leading.count)
    chosen_args = tuple(a for a in data if any(lead[i] == size for i in a.leaves))
    state = [a.label for a in call.arguments if a.has_arrays and a not in data]
    why = (f"{', '.join(a.label for a in chosen_args)}, axis 0 (inferred: the arguments "
           "that are not state" + (f"; state: {', '.join(state)}" if state else "") + ")")
    return _with_step(call, chosen_args, (0,) * len(chosen_args), size, True, why)


def _given_batch(call: KeptCall, specs: Sequence[str],
                 shapes: list[tuple[int, ...] | None]) -> BatchChoice:
    """The choice ``--batch`` gives: each ``ARG[:AXIS]`` at its most common size
    along that axis, all at one size."""
    chosen: list[tuple[Argument, int, int]] = []
    for spec in specs:
        argument, axis = _parse_batch(spec, call.arguments)
        if any(argument is a for a, _, _ in chosen):
            raise MemscopeError(f"--batch {spec}: {argument.label} is named twice; "
                                "give each argument once")
        sizes = [shape[axis] for i in argument.leaves
                 if (shape := shapes[i]) is not None and len(shape) > axis]
        if not sizes:
            raise MemscopeError(f"--batch {spec}: {argument.label} has no array with an "
                                f"axis {axis}")
        chosen.append((argument, axis, max(set(sizes), key=sizes.count)))
    if len({size for _, _, size in chosen}) > 1:
        said = ", ".join(f"{_spec_name(a)}:{axis} is {size}" for a, axis, size in chosen)
        raise MemscopeError(f"--batch {' --batch '.join(specs)}: {said}; the arguments "
                            "resized together must have one batch size")
    arguments = tuple(a for a, _, _ in chosen)
    axes = tuple(axis for _, axis, _ in chosen)
    note = (f"{', '.join(a.label for a in arguments)}, axis {axes[0]} (given)"
            if len(set(axes)) == 1 else
            ", ".join(f"{a.label} axis {axis}" for a, axis, _ in chosen) + " (given)")
    return _with_step(call, arguments, axes, chosen[0][2], False, note)


def _data_arguments(entry: Recorded, shapes: list[tuple[int, ...] | None]) -> list[Argument]:
    """The arguments with arrays that are not state: not donated, and not all of
    the shapes the function returns."""
    call = entry.call
    assert call is not None
    outputs = _output_shapes(entry)
    donated = _donated(entry)
    return [a for a in call.arguments if a.has_arrays
            and not any(donated.get(i, False) for i in a.leaves)
            and not all(shapes[i] is None or shapes[i] in outputs for i in a.leaves)]


def _spec_name(a: Argument) -> str:
    """How ``--batch`` names the argument: its name, else its position."""
    return a.name if a.name is not None else str(a.position)


def _leading(shape: tuple[int, ...] | None) -> int | None:
    return shape[0] if shape else None


def _parse_batch(spec: str, arguments: Sequence[Argument]) -> tuple[Argument, int]:
    name, _, axis_text = spec.partition(":")
    try:
        axis = int(axis_text) if axis_text else 0
    except ValueError:
        raise MemscopeError(f"--batch {spec}: AXIS must be a whole number") from None
    for a in arguments:
        if name == a.name or (name.isdigit() and a.position == int(name)):
            return a, axis
    labels = ", ".join(a.name or str(a.position) for a in arguments)
    raise MemscopeError(f"--batch {spec}: no argument {name!r}; the arguments are {labels}")


def _leaf_shapes(call: KeptCall) -> list[tuple[int, ...] | None]:
    """The shape of each dynamic flat leaf, in :class:`Argument` numbering."""
    shapes: list[tuple[int, ...] | None] = [None] * sum(len(a.leaves) for a in call.arguments)
    for a in call.arguments:
        for i, leaf in zip(a.leaves, jax.tree_util.tree_leaves(_value(call, a)), strict=True):
            shapes[i] = tuple(leaf.shape) if isinstance(leaf, jax.ShapeDtypeStruct) else None
    return shapes


def _value(call: KeptCall, a: Argument) -> Any:
    return call.args[a.position] if a.position is not None else call.kwargs[a.name or ""]


def _output_shapes(entry: Recorded) -> set[tuple[int, ...]]:
    if entry.facts is None:
        return set()
    return {leaf.shape for leaf in entry.facts.program.outputs}


def _donated(entry: Recorded) -> dict[int, bool]:
    if entry.facts is None:
        return {}
    return dict(enumerate(entry.facts.program.donated))


def _with_step(call: KeptCall, chosen: tuple[Argument, ...], axes: tuple[int, ...],
               size: int, inferred: bool, note: str) -> BatchChoice:
    """The choice, with the step its shardings allow: a batch must split evenly
    over the devices the batch axis is sharded across."""
    step = 1
    for a, axis in zip(chosen, axes, strict=True):
        for leaf in jax.tree_util.tree_leaves(_value(call, a)):
            if (isinstance(leaf, jax.ShapeDtypeStruct) and len(leaf.shape) > axis
                    and leaf.shape[axis] == size and leaf.sharding is not None):
                shard = leaf.sharding.shard_shape(leaf.shape)[axis]
                step = math.lcm(step, max(size // max(shard, 1), 1))
    return BatchChoice(chosen, axes, size, step, inferred, note)


def resized(call: KeptCall, choice: BatchChoice, batch: int) -> tuple[tuple[Any, ...],
                                                                      dict[str, Any]]:
    """The call's arguments with the batch axis at ``batch``."""
    def resize(leaf: Any, axis: int) -> Any:
        if (isinstance(leaf, jax.ShapeDtypeStruct) and len(leaf.shape) > axis
                and leaf.shape[axis] == choice.size):
            shape = list(leaf.shape)
            shape[axis] = batch
            return jax.ShapeDtypeStruct(tuple(shape), leaf.dtype, sharding=leaf.sharding,
                                        weak_type=leaf.weak_type)
        return leaf

    args, kwargs = list(call.args), dict(call.kwargs)
    for a, axis in zip(choice.arguments, choice.axes, strict=True):
        value = jax.tree_util.tree_map(lambda leaf, axis=axis: resize(leaf, axis),
                                       _value(call, a))
        if a.position is not None:
            args[a.position] = value
        else:
            kwargs[a.name or ""] = value
    return tuple(args), kwargs


def compile_peak(call: KeptCall, choice: BatchChoice, batch: int,
                 donated: tuple[bool, ...] | None = None, accelerator: Any = None
                 ) -> int | None:
    """The function's peak at ``batch`` by memscope's rule: one XLA compile, with
    the function's own donation or the flat leaves in ``donated``; for the
    ``accelerator`` (:class:`memscope.compiled.tpu.TpuTarget`) when given."""
    args, kwargs = resized(call, choice, batch)
    try:
        traced = call.jitted.trace(*args, **kwargs)
    except Exception as e:  # the user's function, at shapes it was never called with
        raise NotCompiled(batch, "trace", e) from e
    try:
        if donated is not None:
            variant = lower_variant(traced, donated, accelerator)
            traced, lowered = variant.traced, variant.lowered
        elif accelerator is not None:
            lowered = accelerator.lower(traced)
        else:
            lowered = _compat.lower(traced)
        if accelerator is not None:
            return accelerator.memory(traced, lowered, accelerator.compile(lowered)).peak_bytes
        compiled = _compat.compile_to_read(lowered, sizes=True)
    except Exception as e:
        raise NotCompiled(batch, "compile", e) from e
    return compiled_memory(traced, lowered, compiled).peak_bytes


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
    said = ", ".join(f"{_spec_name(a)}:{axis} is {choice.size}" for a, axis in sharing)
    every = [*zip(choice.arguments, choice.axes, strict=True), *sharing]
    flags = " ".join(f"--batch {_spec_name(a)}" + (f":{axis}" if axis else "")
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
    shapes = _leaf_shapes(call)
    found = []
    for a in _data_arguments(entry, shapes):
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
        self.compiles = 0
        self._compile = compile_peak

    def peak(self, batch: int) -> int | None:
        if batch not in self.peaks:
            self.compiles += 1
            self.peaks[batch] = self._compile(self.call, self.choice, batch, self.donated)
        return self.peaks[batch]

    def fits(self, batch: int) -> bool:
        p = self.peak(batch)
        return p is not None and self.budget is not None and p <= self.budget

    def bounds(self) -> tuple[int, int | None]:
        """The largest size compiled that fits (0: none) and the smallest that
        does not (``None``: none compiled)."""
        fit = [b for b in self.peaks if self.fits(b)]
        over = [b for b in self.peaks if not self.fits(b)]
        return max(fit, default=0), min(over, default=None)


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


def search(call: KeptCall, choice: BatchChoice, budget: int | None, *,
           donated: tuple[bool, ...] | None = None, known: int | None = None,
           hint: Fraction | None = None,
           compile_peak: Callable[..., int | None] = compile_peak) -> Answer:
    """The largest batch whose peak fits ``budget``, confirmed by compiling it and
    the next size up. ``known`` is the peak at the captured size, when read already
    (it then costs no compile); ``hint`` a per-example slope to start from instead
    of compiling twice the captured size. ``compile_peak`` is the one compile."""
    s = _Search(call, choice, donated, budget, compile_peak)
    b0, step = choice.size, choice.step
    if known is not None:
        s.peaks[b0] = known
    p1 = s.peak(b0)
    if p1 is None:
        return _answer(s, None, None, None, "memory_analysis() gave no figures")
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
    return _answer(s, fixed, per, largest, note)


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
            note: str | None) -> Answer:
    rows = tuple(sorted(s.peaks.items()))
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
                  largest=largest, compiles=s.compiles, note=note)


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
             accelerator: Any = None) -> Forecast:
    """The forecast for ``entry`` as written and with the advised donation (when
    the capture compiled one), each confirmed by compiling (for ``accelerator``,
    a :class:`memscope.compiled.tpu.TpuTarget`, when given).

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
    peak = functools.partial(compile_peak, accelerator=accelerator)
    try:
        written = search(call, choice, budget, known=_peak(entry), compile_peak=peak)
        if advised is not None and advised.facts is not None:
            fix = search(call, choice, budget, donated=advised.facts.program.donated,
                         known=advised.facts.memory.peak_bytes, hint=_local_slope(written),
                         compile_peak=peak)
    except NotCompiled as failed:
        raise MemscopeError(not_compiled_line(entry, choice, failed)) from None
    by_batch = dict(fix.rows) if fix is not None else {}
    rows = tuple(FitRow(b, p, by_batch.get(b)) for b, p in written.rows)
    rows += tuple(FitRow(b, None, p) for b, p in (fix.rows if fix else ())
                  if b not in dict(written.rows))
    return Forecast(
        function=entry.name, source=entry.source, argument=choice.label, axis=choice.axis,
        batch=choice.size, step=choice.step, budget_bytes=budget,
        rows=tuple(sorted(rows, key=lambda r: r.batch)), fixed_bytes=written.fixed,
        per_example_bytes=written.per_example, linear=written.linear,
        largest=written.largest, advised_largest=fix.largest if fix else None,
        advised_setting=advised.setting if advised is not None else None,
        compiles=written.compiles + (fix.compiles if fix else 0),
        seconds=time.perf_counter() - start, note=written.note, inferred=choice.inferred,
        choice_note=choice.note, memory_bytes=memory, held_bytes=held)
