"""Pure comparisons: a function against a variant of itself, or two saved reports.

No JAX and no printing: reports in, frozen :class:`FunctionDiff` records out, for
``memscope diff`` to render.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from memscope.check.judge import judge
from memscope.check.pairing import pair_functions, signature_changes
from memscope.check.peak import PartChange, peak_changes
from memscope.check.records import Tolerances
from memscope.report import FunctionReport, InputBuffer, OutputBuffer, Report, Variant
from memscope.report.paths import argument_of, bounded_leaves
from memscope.views.leaves import parenthesized, short_signature

Verdict = Literal["worse", "better", "changed", "same", "new", "gone", "error"]

#: The memory figures compared, by report field.
MEMORY_FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes")


@dataclass(frozen=True)
class FigureDiff:
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
class ChangeGroup:
    """Leaves of one argument (or result) whose fate changes the same way: a count,
    a few named, the rest in ``FunctionDiff.leaves``."""

    kind: Literal["input", "output"]
    argument: str
    before: str
    after: str
    leaves: int
    examples: str


@dataclass(frozen=True)
class FunctionDiff:
    """One function compared before and after (a donation variant, or a newer report)."""

    name: str
    source: str | None
    signature: str
    verdict: Verdict
    before_setting: str | None = None
    after_setting: str | None = None
    figures: tuple[FigureDiff, ...] = ()
    leaves: tuple[LeafChange, ...] = ()
    error: str | None = None
    #: why it is ``worse``, and what else was noticed (``memscope check``'s lines)
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: the signature abbreviated per argument
    short_signature: str | None = None
    #: the bytes live at the schedule's peak before and after, and the buffers
    #: there that changed, largest change first (:func:`memscope.check.peak.peak_changes`;
    #: ``None``: a report without roles); the changes add up to the difference
    peak_before: int | None = None
    peak_after: int | None = None
    peak_changes: tuple[PartChange, ...] | None = None

    @property
    def groups(self) -> tuple[ChangeGroup, ...]:
        """The changed leaves grouped by argument and by the fates before and after."""
        return change_groups(self.leaves)


def change_groups(leaves: Sequence[LeafChange]) -> tuple[ChangeGroup, ...]:
    """``leaves`` by (kind, argument, fate before, fate after), in order of appearance;
    a fate's partner is left out, so that 100 leaves aliased each to its own output
    are one group."""
    def fate(text: str | None) -> str:
        return "(absent)" if text is None else text.split(" ")[0]

    grouped: dict[tuple[Literal["input", "output"], str, str, str], list[str]] = {}
    for leaf in leaves:
        key = (leaf.kind, argument_of(leaf.path), fate(leaf.before), fate(leaf.after))
        grouped.setdefault(key, []).append(leaf.path)
    return tuple(ChangeGroup(kind, arg, before, after, len(paths), bounded_leaves(paths))
                 for (kind, arg, before, after), paths in grouped.items())


def diffs_json(old: str, new: str, diffs: Sequence[FunctionDiff]) -> str:
    """``memscope diff OLD.json NEW.json -o FILE``'s JSON: each function's
    figures, fates and peak changes, as the terminal shows them
    (docs/report-format.md, "The diff")."""
    return json.dumps({"schema": "memscope.diff/1", "old": old, "new": new,
                       "functions": [dataclasses.asdict(d) for d in diffs]}, indent=1) + "\n"


def compare_variant(fn: FunctionReport, variant: Variant,
                    tolerances: Tolerances | None = None) -> FunctionDiff:
    """``fn`` as written against ``variant``, both as compiled."""
    if variant.error is not None or variant.memory is None:
        return FunctionDiff(fn.name, fn.source, fn.signature, "error",
                            fn.setting, variant.setting, error=variant.error,
                            short_signature=short_signature(fn))
    after = FunctionReport(fn.name, fn.source, fn.calls, fn.signature, variant.memory,
                           variant.inputs, variant.outputs,
                           live_at_peak=variant.live_at_peak)
    return _diff(fn, after, fn.setting, variant.setting, tolerances)


def compare_reports(old: Report, new: Report, tolerances: Tolerances | None = None
                    ) -> tuple[FunctionDiff, ...]:
    """Every function of either report, paired and judged as ``memscope check``
    pairs and judges them (:func:`memscope.check.judge.pair_functions`,
    :func:`memscope.check.judge.judge`), in the new report's order."""
    pairing = pair_functions(new.functions, old.functions)
    diffs = []
    for fn, before in pairing.pairs:
        if before is not None:
            diff = _diff(before, fn, before.setting, fn.setting, tolerances)
            moved = pairing.moved.get(id(fn))
            diffs.append(replace(diff, notes=(moved, *diff.notes)) if moved else diff)
        elif id(fn) in pairing.unpaired:
            diffs.append(FunctionDiff(fn.name, fn.source, fn.signature, "worse",
                                      after_setting=fn.setting,
                                      problems=(pairing.unpaired[id(fn)],),
                                      short_signature=short_signature(fn)))
        else:
            diffs.append(FunctionDiff(fn.name, fn.source, fn.signature, "new",
                                      after_setting=fn.setting,
                                      short_signature=short_signature(fn)))
    diffs += [FunctionDiff(fn.name, fn.source, fn.signature, "gone", before_setting=fn.setting,
                           short_signature=short_signature(fn))
              for fn in pairing.vanished]
    return tuple(diffs)


def _diff(before: FunctionReport, after: FunctionReport, before_setting: str | None,
          after_setting: str | None, tolerances: Tolerances | None) -> FunctionDiff:
    figures = tuple(FigureDiff(name, getattr(before.memory, name, None),
                                 getattr(after.memory, name, None)) for name in MEMORY_FIGURES)
    leaves = (_leaf_changes("input", before.inputs, after.inputs)
              + _leaf_changes("output", before.outputs, after.outputs))
    problems, notes = judge(before, after, tolerances or Tolerances())
    changed = signature_changes(before, after)
    if changed:
        notes.insert(0, f"paired with the old signature {parenthesized(short_signature(before))}; its "
                        f"signature changed: {'; '.join(changed)}")
    then, now = before.live_at_peak, after.live_at_peak
    return FunctionDiff(after.name, after.source, after.signature,
                        _verdict(figures, leaves, problems),
                        before_setting, after_setting, figures, leaves,
                        problems=tuple(problems), notes=tuple(notes),
                        short_signature=short_signature(after),
                        peak_before=then.bytes if then is not None else None,
                        peak_after=now.bytes if now is not None else None,
                        peak_changes=peak_changes(then, now))


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


def _verdict(figures: Sequence[FigureDiff], leaves: Sequence[LeafChange],
             problems: Sequence[str]) -> Verdict:
    # memscope check's rules: what it fails is worse; a lower peak is better.
    if problems:
        return "worse"
    peak = next(f for f in figures if f.name == "peak_bytes").change
    if peak is not None and peak < 0:
        return "better"
    if leaves or any(f.change for f in figures):
        return "changed"
    return "same"
