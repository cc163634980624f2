"""The search of ``memscope fit``: the largest batch whose peak fits a budget, by
compiling. The line through two sizes proposes a batch; it and the next size up
are compiled to confirm it; where the peak is not linear in the batch, false
position and halving close in, and where the target's compiler refuses a size
as larger than the chip, its own words (how far over) do. The compile itself is
the caller's (:func:`memscope.variants.fit.compile_peak`, the plan's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from memscope.errors import first_line
from memscope.report.function import LINE_TOLERANCE
from memscope.variants.batch import BatchChoice

#: Compiles a search may make before it gives up (and says so).
MAX_COMPILES = 24


class OverCapacity(Exception):
    """The target's compiler refused ``batch``: the program needs more memory
    than the device has (XLA:TPU fails such a compile with RESOURCE_EXHAUSTED).
    ``needs`` is the least it says the program needs (``None``: it does not
    say); ``headline`` its first line; ``excess`` the least it says the program
    is over the device by (``None``: it does not say). The size does not fit,
    whatever the budget."""

    def __init__(self, batch: int, needs: int | None, headline: str,
                 excess: int | None = None) -> None:
        super().__init__(f"batch {batch}: {headline}")
        self.batch, self.needs, self.headline, self.excess = batch, needs, headline, excess


#: XLA:TPU's compiler: "Used 15.75G of 15.75G hbm. Exceeded hbm capacity by 46.5K." --
#: the excess to three figures, where the used and capacity figures are rounded alike
_EXCESS = re.compile(r"Exceeded \w+ capacity by ([\d.]+[KMGTP]?i?B?)")
#: "the total memory required for HLO temporaries (15.75G) exceeds available HBM"
_TEMPORARIES = re.compile(r"memory required for [\w ]+? \(([\d.]+[KMGTP]?i?B?)\)")


def _last_digit(figure: str) -> int | None:
    """The bytes one unit of ``figure``'s last printed digit is ("15.75G": 0.01G)."""
    from memscope.analysis import oom

    number = re.match(r"[\d.]+", figure)
    if number is None:
        return None
    decimals = len(number.group().partition(".")[2])
    return oom.size_bytes(f"{10.0 ** -decimals:.{decimals}f}{figure[number.end():]}")


def over_capacity(batch: int, error: Exception) -> OverCapacity | None:
    """``error`` (a compile's) as :class:`OverCapacity` where it says memory ran
    out, else ``None``."""
    from memscope.analysis import oom

    text = str(error)
    found = oom.parse(text)
    if found is None or (found.used_bytes is None and found.capacity_bytes is None):
        return None  # (memory ran out, but not the device's: the compile failed)
    said = _EXCESS.search(text)
    excess = oom.size_bytes(said.group(1)) if said is not None else None
    if excess is None and found.used_bytes is not None and found.capacity_bytes is not None:
        # "the total memory required for HLO temporaries (18.19G) exceeds available
        # HBM (15.75G)": the temporaries alone, so at least this much over; where
        # the two print alike ("15.75G" and "15.75G"), less than the last digit
        excess = found.used_bytes - found.capacity_bytes
        if excess <= 0:
            figure = _TEMPORARIES.search(text)
            excess = _last_digit(figure.group(1)) if figure is not None else None
    return OverCapacity(batch, found.used_bytes, first_line(found.headline, limit=240),
                        excess)


class _Search:
    """The compiles of one forecast, each size compiled once."""

    def __init__(self, call: Any, choice: BatchChoice, donated: tuple[bool, ...] | None,
                 budget: int | None, compile_peak: Callable[..., int | None]) -> None:
        self.call, self.choice, self.donated, self.budget = call, choice, donated, budget
        self.peaks: dict[int, int | None] = {}
        #: sizes the target's compiler refused as too large, with its words; their
        #: ``peaks`` are a stand-in above the budget, for the search's lines only
        self.refused: dict[int, str] = {}
        #: how far over the device the compiler said a refused size is (where it said)
        self.excess: dict[int, int] = {}
        self.compiles = 0
        self._peak_of = compile_peak

    def peak(self, batch: int) -> int | None:
        if batch not in self.peaks:
            self.compiles += 1
            try:
                self.peaks[batch] = self._peak_of(self.call, self.choice, batch, self.donated)
            except OverCapacity as e:
                self.refused[batch] = e.headline
                if e.excess is not None:
                    self.excess[batch] = e.excess
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
    #: the smallest size compiled above ``largest`` that does not fit (``None``:
    #: none was); ``largest`` + the step where the answer is confirmed
    above: int | None = None


def search(call: Any, choice: BatchChoice, budget: int | None, *,
           compile_peak: Callable[..., int | None],
           donated: tuple[bool, ...] | None = None, known: int | None = None,
           hint: Fraction | None = None, beat: int | None = None) -> Answer:
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
        return _answer(s, None, None, lo or None, _stopped(s, lo, hi, step) or (
            f"batch {b0} does not compile for the target: {s.refused[b0]}"), above=hi)
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
    # The answer is the largest size compiled that fits (below the first that
    # does not), wherever the search stopped; the note says what is unconfirmed.
    note = _stopped(s, lo, hi, step)
    beyond = [b for b in s.peaks if hi is not None and b > hi and s.fits(b)]
    if lo and beyond and note is None:
        note = (f"the peak is not monotone in the batch: batch {max(beyond)}, above "
                f"{hi}, which does not fit, fits too (a compiler that rematerializes "
                "near its memory limit, XLA:GPU's, does so); the answer is the largest "
                "size below the first one found not to fit")
    return _answer(s, fixed, per, lo or None, note, above=hi)


def _stopped(s: _Search, lo: int, hi: int | None, step: int) -> str | None:
    """Where the search stopped before it compiled both the answer and the next
    size up (its compile limit): what it left unconfirmed; else ``None``."""
    if hi is not None and hi == lo + step:
        return None
    if not lo:
        return f"the search stopped after {s.compiles} compiles"
    if hi is None:
        return (f"the search stopped after {s.compiles} compiles, every size compiled "
                f"fitting: {lo} is the largest it compiled, not the largest that fits")
    return (f"the search stopped after {s.compiles} compiles: {lo} fits and {hi} does "
            f"not; the {(hi - lo) // step - 1} sizes between were not compiled")


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
        if hi is not None and hi in s.refused:  # no figure above: the compiler's words
            return _close(s, lo, hi, step)
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


def _close(s: _Search, lo: int, hi: int, step: int) -> tuple[int, int | None]:
    """Narrow [lo fits, hi the target's compiler refused] to one step. XLA:TPU
    says how far over the chip a size is ("Exceeded hbm capacity by 46.5K", or
    the temporaries alone over it): that, over the per-example slope of the
    largest sizes that fit, is how far below the refused size the largest one
    that fits lies. The size there is compiled, and where it fits the next one
    up; where the compiler says nothing, or the guess leaves the bracket, halve."""
    while hi - lo > step and s.compiles < MAX_COMPILES:
        guess = _under_refusal(s, lo, hi, step)
        b = guess if guess is not None else max((lo + hi) // 2 // step * step, lo + step)
        if not s.fits(b):
            hi = b
            continue
        lo = b
        if b == guess and b + step < hi and s.compiles < MAX_COMPILES:
            lo, hi = (b + step, hi) if s.fits(b + step) else (lo, b + step)
    return lo, hi


def _under_refusal(s: _Search, lo: int, hi: int, step: int) -> int | None:
    """Where the refused ``hi``'s excess runs out, in whole steps strictly inside
    (lo, hi); else ``None``. The excess's own slope, between the two smallest
    sizes refused with one, where there are two (the compiler counts the chip
    its own way: its need can grow faster than memscope's peak); else the
    peak's, between the two largest sizes that fit."""
    over = s.excess.get(hi)
    if over is None:
        return None
    said = sorted(b for b in s.excess if b >= hi)[:2]
    fitting = sorted(b for b, p in s.peaks.items() if p is not None and b <= lo and s.fits(b))
    if len(said) == 2 and s.excess[said[1]] > s.excess[said[0]]:
        (b1, p1), (b2, p2) = ((b, s.excess[b]) for b in said)
    elif len(fitting) >= 2:
        (b1, p1), (b2, p2) = ((b, s.peaks[b] or 0) for b in fitting[-2:])
    else:
        return None
    if p2 <= p1:
        return None
    guess = (hi - math.ceil(over * (b2 - b1) / (p2 - p1))) // step * step
    return guess if lo < guess < hi else None


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
            note: str | None, below: int | None = None, above: int | None = None) -> Answer:
    rows = tuple(sorted((b, None if b in s.refused else p) for b, p in s.peaks.items()))
    known = [(b, p) for b, p in rows if p is not None]
    if fixed is not None and per is not None and len(known) >= 2 and known[-1][0] > known[0][0]:
        # The line printed is the one through the smallest and largest sizes
        # compiled; it is the peak's only where every size compiled lies on it.
        (b1, p1), (b2, p2) = known[0], known[-1]
        per = Fraction(p2 - p1, b2 - b1)
        fixed = p1 - per * b1
    off = [(b, p) for b, p in known if fixed is not None and per is not None
           and abs(p - (fixed + per * b)) > LINE_TOLERANCE * p]
    if off and note is None:
        assert fixed is not None and per is not None
        line_fixed, line_per = fixed, per
        b, p = max(off, key=lambda o: abs(o[1] - line_fixed - line_per * o[0]) / o[1])
        note = (f"the peak is not linear in the batch (at {b}: {p} bytes compiled, "
                f"{round(fixed + per * b)} on the line through batch {known[0][0]} and "
                f"{known[-1][0]}): the answer was searched by compiling")
    return Answer(rows=rows, fixed=None if fixed is None else round(fixed),
                  per_example=None if per is None else round(per), linear=not off,
                  largest=largest, compiles=s.compiles, note=note, below=below,
                  refused=tuple(sorted(s.refused.items())),
                  above=above if largest is not None else None)


def local_slope(a: Answer) -> Fraction | None:
    """The per-example slope near the answer: the line through the compiled sizes
    around it, one on each side where there are."""
    rows = [(b, p) for b, p in a.rows if p is not None]
    if a.largest is None or len(rows) < 2:
        return None
    below = [r for r in rows if r[0] <= a.largest - a.largest // 4] or rows[:1]
    (b1, p1), (b2, p2) = below[-1], rows[-1]
    return Fraction(p2 - p1, b2 - b1) if b2 > b1 and p2 > p1 else None
