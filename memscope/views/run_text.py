"""The run's high-water mark in words, for every renderer (pure text, no markup)."""

from __future__ import annotations

from memscope.report.memory import ROLE_WORDS
from memscope.report.paths import from_the_package
from memscope.report.run_memory import HighWater, ResidentGroup, RunMemory
from memscope.report.units import format_bytes
from memscope.views.roles_text import LINE_ROLES, percent

#: Resident groups and buffers named on the terminal; the rest are counted.
SHOWN = 4


def high_water_headline(h: HighWater) -> str:
    """``Run's high-water mark: 14.0 MiB on cpu:0 at call 21, eval_step (train.py:88),
    sampled``."""
    where = f" ({from_the_package(h.line)})" if h.line else ""
    how = ("sampled" if h.exact else f"estimated from the sample before call {h.from_call}")
    return (f"Run's high-water mark: {format_bytes(h.bytes)} on {h.device} at call "
            f"{h.call}, {h.function}{where}, {how}")


def parts(h: HighWater) -> str:
    """``= 4.1 KiB alive outside its arguments + 14.0 MiB its own peak (rule sum)``."""
    rule = f" (rule {h.peak_rule})" if h.peak_rule else ""
    if h.call_peak_bytes is None:
        return (f"= {format_bytes(h.resident_bytes)} alive outside its arguments + n/a its "
                "own peak (its compiled program was not read)")
    return (f"= {format_bytes(h.resident_bytes)} alive outside its arguments + "
            f"{format_bytes(h.call_peak_bytes)} its own peak{rule}")


def group_text(g: ResidentGroup) -> str:
    """``train_step result[0]: 52 arrays, 13.2 MiB, held by `state` (train.py:40)``."""
    noun = "array" if g.arrays == 1 else "arrays"
    held = ""
    if g.held_by:
        held = f", held by {g.held_by}" + (f" (assigned at {g.line})" if g.line else "")
    return f"{g.label}: {g.arrays} {noun}, {format_bytes(g.bytes)}{held}"


def high_water_lines(run: RunMemory, shown: int = SHOWN, roles: bool = True) -> list[str]:
    """The high-water mark: the answer, its parts and how many calls were
    sampled, then what was alive (the call's largest buffers are in the JSON
    and the HTML report, and under ``--buffers``); with ``roles``, the call's
    peak by role."""
    h = run.high_water
    if h is None:
        return []
    host = (f"; {format_bytes(run.host_bytes)} more in host memory, not counted"
            if run.host_bytes else "")
    lines = [f"{high_water_headline(h)} ({run.sampled} of {run.calls} calls)", f"  {parts(h)}{host}"]
    if roles and h.call_roles:
        total = sum(r.bytes for r in h.call_roles)
        lines.append(f"  its own peak by role ({format_bytes(total)} live at the schedule's): "
                     + ", ".join(f"{ROLE_WORDS[r.role]} {percent(r.bytes, total)}"
                                 for r in h.call_roles[:LINE_ROLES]))
    groups = list(h.groups)
    for g in groups[:shown]:
        lines.append("  alive: " + group_text(g))
    more = len(groups) - shown + h.more_groups
    if more > 0:
        extra = sum(g.bytes for g in groups[shown:]) + h.more_group_bytes
        lines.append(f"  alive: and {more} more group{'s' if more != 1 else ''} "
                     f"({format_bytes(extra)})")
    return lines
