"""The run's high-water mark in words, for every renderer (pure text, no markup)."""

from __future__ import annotations

from memscope.report.run_memory import HighWater, ResidentGroup, RunMemory
from memscope.report.units import format_bytes

#: Resident groups and buffers named on the terminal; the rest are counted.
SHOWN = 4


def headline(h: HighWater) -> str:
    """``Run's high-water mark: 14.0 MiB on cpu:0 at call 21, eval_step (train.py:88)``."""
    where = f" ({h.line})" if h.line else ""
    how = ("sampled just before the call" if h.exact else
           f"estimated from the sample before call {h.from_call}")
    return (f"Run's high-water mark: {format_bytes(h.bytes)} on {h.device} at call "
            f"{h.call}, {h.function}{where}, {how}")


def parts(h: HighWater) -> str:
    """``= 4.1 KiB alive outside the call's arguments + 14.0 MiB its own peak (rule sum)``."""
    rule = f" (rule {h.peak_rule})" if h.peak_rule else ""
    return (f"= {format_bytes(h.resident_bytes)} alive outside the call's arguments + "
            f"{format_bytes(h.call_peak_bytes)} the call's own peak{rule}")


def group_text(g: ResidentGroup) -> str:
    """``train_step result[0]: 52 arrays, 13.2 MiB, held by `state` (train.py:40)``."""
    noun = "array" if g.arrays == 1 else "arrays"
    held = ""
    if g.held_by:
        held = f", held by {g.held_by}" + (f" (assigned at {g.line})" if g.line else "")
    return f"{g.label}: {g.arrays} {noun}, {format_bytes(g.bytes)}{held}"


def high_water_lines(run: RunMemory, shown: int = SHOWN) -> list[str]:
    """The high-water mark: the answer, its parts, what was alive, the call's
    largest buffers, the allocator's own figure, and how it was obtained."""
    h = run.high_water
    if h is None:
        return []
    lines = [headline(h), "  " + parts(h)]
    groups = list(h.groups)
    for g in groups[:shown]:
        lines.append("  alive: " + group_text(g))
    more = len(groups) - shown + h.more_groups
    if more > 0:
        extra = sum(g.bytes for g in groups[shown:]) + h.more_group_bytes
        lines.append(f"  alive: and {more} more group{'s' if more != 1 else ''} "
                     f"({format_bytes(extra)})")
    if h.buffers:
        buffers = "; ".join(
            f"{b.kind} {b.shape} {format_bytes(b.bytes)}"
            + (f" at {b.source}" if b.source else "")
            + (f" ({b.argument})" if b.argument else f" ({b.op})" if b.op else "")
            for b in h.buffers[:3])
        lines.append(f"  the call's largest buffers at its peak: {buffers}")
    if h.allocator_note:
        lines.append("  " + h.allocator_note)
    host = (f"; {format_bytes(run.host_bytes)} more were in host memory, not counted"
            if run.host_bytes else "")
    lines.append(f"  {run.sampled} of {run.calls} calls sampled "
                 f"({run.sample_seconds * 1000:.3g} ms of sampling){host}; the run over "
                 "time: --trace FILE (Perfetto), the HTML report")
    return lines
