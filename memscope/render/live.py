"""The terminal lines of what is live at the peak (``--buffers``), summary first."""

from __future__ import annotations

from rich.text import Text

from memscope.render.text import sparkline, visible
from memscope.report import FunctionReport, LiveAtPeak, MemoryTimeline
from memscope.report.units import format_bytes
from memscope.views.roles_text import role_lines

#: Source lines (and buffers) at the peak shown in the terminal; JSON and HTML hold more.
TOP_LINES = 5
#: What a line at the peak holds: temporaries, or outputs and constants (held
#: for the whole call, outside the temporary block).
KIND_WORDS = {"temporary": "temporaries, ", "held": "outputs and constants, "}
RULE_TEXT = {"schedule": "the compiled schedule over XLA's buffer assignment",
             "heap_trace": "XLA's heap-simulator trace"}


def live_lines(fn: FunctionReport, *, ascii_only: bool) -> list[Text]:
    """The peak, what holds it by kind, the top source lines there, and the curve."""
    t, live = fn.memory_timeline, fn.live_at_peak
    if t is None or live is None:
        return []
    lines = [Text.assemble(
        ("Live at the peak: ", "bold"), (format_bytes(t.peak_bytes), "bold"),
        f" at step {t.peak_step} of {t.steps} ({visible(t.peak_instruction)}), "
        f"from {RULE_TEXT[t.rule]}")]
    lines.append(Text("  " + _kinds(t, live)))
    if live.roles:
        lines.append(Text("  By role (docs/roles.md):", style="bold"))
        lines += [Text("    " + visible(text)) for text in role_lines(live)]
        lines.append(Text("  By source line:", style="bold"))
    for src in live.by_source[:TOP_LINES]:
        what = KIND_WORDS.get(src.kind or "", "")
        lines.append(Text(f"  {format_bytes(src.bytes):>10}  {visible(src.source or 'n/a')}"
                          f"  ({what}{src.buffers} buffer{'s' if src.buffers != 1 else ''}: "
                          f"{', '.join(src.ops[:3])})"))
    rest = live.by_source[TOP_LINES:]
    if rest:
        lines.append(Text(f"  and {len(rest)} more lines: "
                          f"{format_bytes(sum(s.bytes for s in rest))}", style="dim"))
    lines.append(Text("  memory over program order: "
                      + sparkline([b for _, b in t.points], 50, ascii_only=ascii_only)))
    for note in (t.peak_note, t.trace_note):
        if note:
            lines.append(Text(f"  {note}", style="dim"))
    return lines


def _kinds(t: MemoryTimeline, live: LiveAtPeak) -> str:
    held_other = t.held_bytes - live.argument_bytes
    return (f"arguments {format_bytes(live.argument_bytes)} ({live.arguments}), "
            f"outputs and constants {format_bytes(held_other)}, temporaries "
            f"{format_bytes(t.temp_live_bytes)} live of a "
            f"{format_bytes(t.temp_block_bytes)} block")
