"""The terminal view of what holds the memory (``--buffers``), with rich."""

from __future__ import annotations

from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memscope.render.console import make_console
from memscope.render.live import live_lines
from memscope.render.text import sparkline, visible
from memscope.report import BufferBreakdown, FunctionReport, Report
from memscope.report.units import format_bytes

#: Rows of each table in the terminal (the report may hold more; the HTML shows all).
TERMINAL_ROWS = 10
KIND_TITLES = {"parameter": "parameter", "aliased": "aliased", "output": "output",
               "temporary": "temporary", "constant": "constant",
               "thread_local": "thread-local"}


def render_buffers(report: Report, file: IO[str], *, width: int | None = None,
                   plain: bool | None = None) -> None:
    """Write, per function, its allocations, largest temporaries, the source lines
    that hold them, and memory over program order where known."""
    console = make_console(file, width=width, plain=plain)
    table_box = box.ASCII if console.no_color else box.ROUNDED
    for fn in report.functions:
        console.print()
        buffers_section(console, fn, table_box)


def buffers_section(console: Console, fn: FunctionReport, table_box: box.Box) -> None:
    console.print(Text.assemble(("What holds the memory: ", "bold"), (visible(fn.name), "bold"),
                                f"  {visible(fn.source or 'n/a')}"))
    b = fn.buffers
    if b is None:
        why = fn.error or "this report has no buffer assignment (jaxlib gave none)"
        console.print(Text(f"buffer assignment: n/a ({visible(why)})", style="dim"),
                      overflow="fold")
        return
    # The answer first: what is live at the peak.
    for line in live_lines(fn, ascii_only=console.no_color):
        console.print(line, overflow="fold")
    console.print(_allocations_line(b), overflow="fold")
    if b.temp_buffers:
        console.print(_temp_table(b, table_box))
        console.print(_source_table(b, table_box))
    for line in _notes(fn, b, ascii_only=console.no_color):
        console.print(line, overflow="fold")


def _allocations_line(b: BufferBreakdown) -> Text:
    parts = [f"{KIND_TITLES[g.kind]} {format_bytes(g.bytes)}"
             + (f" ({g.count})" if g.count != 1 else "") for g in b.allocations]
    return Text("allocations: " + ", ".join(parts))


def _temp_table(b: BufferBreakdown, table_box: box.Box) -> Table:
    shown = b.temp_buffers[:TERMINAL_ROWS]
    rest = len(b.temp_buffers) - len(shown) + b.more_buffers
    title = "Largest temporary buffers"
    if rest:
        rest_bytes = sum(t.bytes for t in b.temp_buffers[len(shown):]) + b.more_bytes
        title += f" ({rest} more: {format_bytes(rest_bytes)})"
    table = Table(title=title, box=table_box, title_justify="left")
    table.add_column("source", overflow="fold")
    table.add_column("op", overflow="fold")
    table.add_column("shape", overflow="fold")
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("instruction", overflow="fold")
    for t in shown:
        table.add_row(visible(t.source or "n/a"), t.op, t.shape, format_bytes(t.bytes),
                      t.instruction)
    return table


def _source_table(b: BufferBreakdown, table_box: box.Box) -> Table:
    table = Table(title="Temporary buffers by source line", box=table_box,
                  title_justify="left")
    table.add_column("source", overflow="fold")
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("buffers", justify="right", no_wrap=True)
    table.add_column("ops", overflow="fold")
    for line in b.by_source[:TERMINAL_ROWS]:
        table.add_row(visible(line.source or "n/a"), format_bytes(line.bytes), str(line.buffers),
                      ", ".join(line.ops))
    return table


def _notes(fn: FunctionReport, b: BufferBreakdown, *, ascii_only: bool) -> list[Text]:
    notes = []
    figure = fn.memory.temp_bytes if fn.memory is not None else None
    if b.reconciled:
        notes.append(Text(f"temporary allocations: {format_bytes(b.temp_bytes)}, equal to "
                          f"XLA's temp figure."))
    else:
        notes.append(Text(f"temporary allocations: {format_bytes(b.temp_bytes)}; XLA's temp "
                          f"figure: {format_bytes(figure)}. {b.reconcile_note or ''}".rstrip(),
                          style="yellow"))
    if b.temp_buffers:
        notes.append(Text("Buffers reuse memory over program order, so per-line sums can "
                          "exceed the allocation.", style="dim"))
    if b.timeline is None:
        if fn.memory_timeline is None:  # else the schedule's curve is shown above
            notes.append(Text(f"memory over program order: n/a ({b.timeline_note})",
                              style="dim"))
        return notes
    peak = f"replayed peak {format_bytes(b.replayed_peak)}"
    if fn.memory is not None and fn.memory.xla_peak_bytes is not None:
        peak += f", XLA's peak {format_bytes(fn.memory.xla_peak_bytes)}"
    notes.append(Text(f"memory over program order ({peak}):"))
    notes.append(Text("  " + sparkline([size for _, size in b.timeline], 60,
                                      ascii_only=ascii_only)))
    if b.timeline_note:
        notes.append(Text(b.timeline_note, style="yellow"))
    if b.live_at_peak:
        live = ", ".join(f"{t.op} {t.shape} {format_bytes(t.bytes)} ({t.source or 'n/a'})"
                         for t in b.live_at_peak[:5])
        notes.append(Text(f"live at the peak: {live}"))
    return notes
