"""The terminal view of a check, with rich: one row per function, then the reasons."""

from __future__ import annotations

from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memscope.check import CheckResult, FunctionVerdict
from memscope.render import STATUS_LABELS
from memscope.render._check_text import against, environment_note
from memscope.render.terminal import make_console
from memscope.units import format_bytes, format_change

STATUS_STYLES = {"pass": "green", "fail": "bold red", "not_called": "bold red",
                 "new": "cyan", "vanished": "yellow", "unchecked": "dim"}


def render_check(result: CheckResult, file: IO[str], *, width: int | None = None,
                 plain: bool | None = None) -> None:
    """Write the check table, each failing function's reasons, and the summary line."""
    console = make_console(file, width=width, plain=plain)
    console.print(Text(f"memscope check against {against(result)}", style="bold"))
    if result.environment:
        style = "bold red" if result.environment_failed else "yellow"
        console.print(Text(environment_note(result), style=style), overflow="fold")
    console.print(_table(result, box.ASCII if console.no_color else box.ROUNDED))
    for fn in result.functions:
        if fn.problems or fn.notes:
            console.print()
            _details(console, fn)
    console.print()
    style = "bold red" if result.failed else "bold green"
    console.print(Text(result.summary, style=style), overflow="fold")


def _table(result: CheckResult, table_box: box.Box) -> Table:
    table = Table(title="Peak bytes per device", box=table_box, title_justify="left")
    table.add_column("function", overflow="fold")
    for name in ("baseline", "now", "change"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for fn in result.functions:
        peak = fn.figure("peak") if fn.figures else None
        label = Text(fn.name)
        if fn.signature:
            label.append(f"\n{fn.signature}", "dim")
        table.add_row(
            label, format_bytes(peak.baseline) if peak else "n/a",
            format_bytes(peak.now) if peak else "n/a",
            format_change(peak.change, peak.percent) if peak else "n/a",
            Text(STATUS_LABELS[fn.status], STATUS_STYLES[fn.status]))
    return table


def _details(console: Console, fn: FunctionVerdict) -> None:
    heading = Text(fn.name, "bold")
    for part in (fn.signature, fn.source):
        if part:
            heading.append(f"  {part}")
    console.print(heading, overflow="fold")
    # A grid, so that a long reason wraps under itself, not under its label.
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for problem in fn.problems:
        grid.add_row(Text("  FAIL", "bold red"), problem)
    for note in fn.notes:
        grid.add_row("  note", note)
    console.print(grid)
