"""The out-of-memory post-mortem, as plain lines: the first thing a report says.

No rich here and nothing computed: each line comes from the function's
:class:`~memscope.report.OutOfMemory` and its own figures, buffers and advice.
"""

from __future__ import annotations

from memscope.render.text import visible
from memscope.report import Forecast, FunctionReport, OutOfMemory, Report
from memscope.report.units import format_bytes

#: Buffers and live arrays listed in the post-mortem.
LISTED = 5


def post_mortem_lines(report: Report) -> list[str]:
    """The post-mortem of every function that ran out of memory; none when none did."""
    lines: list[str] = []
    for fn in report.functions:
        if fn.out_of_memory is not None:
            lines += _function_lines(fn)
    return lines


def _requested(o: OutOfMemory) -> str:
    if o.requested_text is None:
        return format_bytes(o.requested_bytes)
    if o.requested_bytes is None:  # XLA rounded it, and no compiled allocation matches
        return f"{o.requested_text} (as XLA rounded it)"
    return f"{format_bytes(o.requested_bytes)} (XLA printed {o.requested_text}: the " \
           "compiled allocation of that size)"


def _function_lines(fn: FunctionReport) -> list[str]:
    o = fn.out_of_memory
    assert o is not None
    where = "compiling it" if o.failed_in == "compile" else "a call"
    # No signature: a real one lists hundreds of leaves (the JSON has it).
    lines = [f"OUT OF MEMORY: {visible(fn.name)} ({visible(fn.source or 'n/a')}): "
             f"{where} failed",
             f"  {visible(o.error)}",
             f"  XLA tried to allocate: {_requested(o)}"]
    peak = fn.memory.peak_bytes if fn.memory is not None else None
    limit = o.device_limit_bytes if o.device_limit_bytes is not None else o.xla_capacity_bytes
    lines.append(f"  compiled peak: {format_bytes(peak)} per device, against a device limit "
                 f"of {format_bytes(limit)}; in use when it failed: "
                 f"{format_bytes(o.bytes_in_use)}")
    if o.xla_used_bytes is not None:
        lines.append(f"  XLA's compiler needed {format_bytes(o.xla_used_bytes)} of "
                     f"{format_bytes(o.xla_capacity_bytes)}")
    lines += _buffer_lines(fn)
    if o.live_arrays is not None:
        live = o.live_arrays
        lines.append(f"  live arrays when it failed: {live.count}, "
                     f"{format_bytes(live.total_bytes)}"
                     + (": largest " + ", ".join(
                         f"{visible(a.dtype)}{list(a.shape)} {format_bytes(a.bytes)}"
                         for a in live.largest[:LISTED]) if live.largest else ""))
    lines += _fit_lines(o.forecast)
    a = fn.advice
    if a is not None and a.setting is not None and a.peak_after is not None:
        lines.append(f"  donating as advised ({visible(a.setting)}) brings the peak "
                     f"to {format_bytes(a.peak_after)}")
    return lines


def _buffer_lines(fn: FunctionReport) -> list[str]:
    o = fn.out_of_memory
    assert o is not None
    shown, whose = ((o.largest_buffers, "compiled") if o.largest_buffers
                    else (o.listed_buffers, "XLA's message"))
    if not shown:
        return ["  largest buffers: n/a (no buffer assignment was read)"]
    return [f"  largest buffers ({whose}):",
            *(f"    {format_bytes(b.bytes):>10}  {visible(b.op or 'n/a')}  "
              f"{visible(b.shape or 'n/a')}  {visible(b.source or 'n/a')}"
              for b in shown[:LISTED])]


def _fit_lines(f: Forecast | None) -> list[str]:
    if f is None:
        return ["  what would fit: n/a (memscope fit SCRIPT --memory SIZE forecasts it)"]
    if f.largest is None:
        return [f"  what would fit: no batch of {visible(f.argument)} (axis {f.axis}) fits "
                f"{format_bytes(f.budget_bytes)}"]
    return [f"  what would fit: batch {f.largest} of {visible(f.argument)} (axis {f.axis}, "
            f"now {f.batch}) under {format_bytes(f.budget_bytes)}"]
