"""Pure comparisons: a function against a variant of itself, or two saved reports.

No JAX and no printing: reports in, frozen :class:`FunctionDiff` records out, for
``memscope diff`` to render.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memscope.check import gained_unusable, lost_aliases, match_functions
from memscope.report import FunctionReport, InputBuffer, Memory, OutputBuffer, Report, Variant

Verdict = Literal["worse", "better", "changed", "same", "new", "gone", "error"]

#: The memory figures compared, by report field.
FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes")


@dataclass(frozen=True)
class FigureChange:
    name: str
    before: int | None
    after: int | None

    @property
    def change(self) -> int | None:
        return None if self.before is None or self.after is None else self.after - self.before


@dataclass(frozen=True)
class LeafChange:
    """One buffer whose fate (or partner) differs; ``None`` where it does not exist."""

    kind: Literal["input", "output"]
    path: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class FunctionDiff:
    """One function compared before and after (a donation variant, or a newer report)."""

    name: str
    source: str | None
    signature: str
    verdict: Verdict
    before_setting: str | None = None
    after_setting: str | None = None
    figures: tuple[FigureChange, ...] = ()
    leaves: tuple[LeafChange, ...] = ()
    error: str | None = None


def compare_variant(fn: FunctionReport, variant: Variant) -> FunctionDiff:
    """``fn`` as written against ``variant``, both as compiled."""
    if variant.error is not None or variant.memory is None:
        return FunctionDiff(fn.name, fn.source, fn.signature, "error",
                            fn.setting, variant.setting, error=variant.error)
    return _diff(fn, fn.setting, variant.setting, fn.memory, variant.memory,
                 (fn.inputs, fn.outputs), (variant.inputs, variant.outputs))


def compare_reports(old: Report, new: Report) -> tuple[FunctionDiff, ...]:
    """Every function of either report, matched as ``memscope check`` matches them
    (name and signature, then source file), in the new report's order."""
    pairs, gone = match_functions(new.functions, old.functions)
    diffs = []
    for fn, before in pairs:
        if before is None:
            diffs.append(FunctionDiff(fn.name, fn.source, fn.signature, "new",
                                      after_setting=fn.setting))
        else:
            diffs.append(_diff(fn, before.setting, fn.setting, before.memory, fn.memory,
                               (before.inputs, before.outputs), (fn.inputs, fn.outputs)))
    diffs += [FunctionDiff(fn.name, fn.source, fn.signature, "gone", before_setting=fn.setting)
              for fn in gone]
    return tuple(diffs)


Buffers = tuple[Sequence[InputBuffer], Sequence[OutputBuffer]]


def _diff(fn: FunctionReport, before_setting: str | None, after_setting: str | None,
          before: Memory | None, after: Memory | None, old: Buffers,
          new: Buffers) -> FunctionDiff:
    figures = tuple(FigureChange(name, getattr(before, name, None), getattr(after, name, None))
                    for name in FIGURES)
    leaves = _leaf_changes("input", old[0], new[0]) + _leaf_changes("output", old[1], new[1])
    return FunctionDiff(fn.name, fn.source, fn.signature,
                        _verdict(figures, leaves, old[0], new[0]),
                        before_setting, after_setting, figures, leaves)


def _fate(b: InputBuffer | OutputBuffer) -> str:
    partner = b.output if isinstance(b, InputBuffer) else b.input
    return f"{b.fate} {partner}" if partner else b.fate


def _leaf_changes(kind: Literal["input", "output"], old: Sequence[InputBuffer | OutputBuffer],
                  new: Sequence[InputBuffer | OutputBuffer]) -> tuple[LeafChange, ...]:
    before = {b.path: _fate(b) for b in old}
    after = {b.path: _fate(b) for b in new}
    paths = [b.path for b in new] + [b.path for b in old if b.path not in after]
    return tuple(LeafChange(kind, p, before.get(p), after.get(p))
                 for p in paths if before.get(p) != after.get(p))


def _verdict(figures: Sequence[FigureChange], leaves: Sequence[LeafChange],
             old: Sequence[InputBuffer], new: Sequence[InputBuffer]) -> Verdict:
    peak = next(f for f in figures if f.name == "peak_bytes").change
    # The rules of memscope check: an unusable donation gained, or an alias lost.
    if ((peak is not None and peak > 0) or gained_unusable(old, new)
            or lost_aliases(old, new)):
        return "worse"
    if peak is not None and peak < 0:
        return "better"
    if leaves or any(f.change for f in figures):
        return "changed"
    return "same"
