"""``memscope fix``'s output: refusals and notes, the diff, and the measurement after.

Renderers take the records :mod:`memscope.fix.plan` made and a file; they compute
nothing. Refusals and notes are one line each (``memscope fix: ...``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from memscope.fix.plan import Check, FixPlan
from memscope.render.text import visible
from memscope.report.units import format_bytes

#: Leaves named per function that is not as advised, before "and N more".
LISTED_LEAVES = 5


def render_problems(plan: FixPlan, err: TextIO) -> None:
    """One line per refusal and per note."""
    for refusal in plan.refusals:
        err.write(f"memscope fix: refused: {visible(refusal)}\n")
    for note in plan.notes:
        err.write(f"memscope fix: note: {visible(note)}\n")


def render_fix_diff(plan: FixPlan, out: TextIO) -> None:
    """The unified diff of every edit, as ``patch -p1`` or ``git apply`` take it."""
    out.write(plan.diff)


def render_checks(checks: Sequence[Check], out: TextIO) -> None:
    """Per function: the peak before, predicted and measured after, and the advised
    leaves' fates now."""
    for check in checks:
        f = check.function
        head = (f"{visible(f.name)} ({visible(f.jit_site)}): peak "
                f"{format_bytes(f.peak_before)} -> {format_bytes(check.peak_after)} "
                f"(advice predicted {format_bytes(f.peak_predicted)})")
        if check.error is not None:
            out.write(f"{head}; {visible(check.error)}\n")
            continue
        count = len(f.leaves)
        if not check.not_aliased:
            out.write(f"{head}; all {count} advised leaves aliased\n")
            continue
        shown = ", ".join(f"{visible(leaf)} ({fate})"
                          for leaf, fate in check.not_aliased[:LISTED_LEAVES])
        more = len(check.not_aliased) - LISTED_LEAVES
        tail = f" and {more} more" if more > 0 else ""
        why = f"; {visible(check.not_aliased[0][0])}: {visible(check.why)}" if check.why else ""
        out.write(f"{head}; {check.aliased} of {count} advised leaves aliased; not "
                  f"aliased: {shown}{tail}{why}\n")
