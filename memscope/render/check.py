"""The terminal view of a check, with rich: one row per function, then the reasons."""

from __future__ import annotations

from typing import IO

from rich.table import Table
from rich.text import Text

from memscope.check.records import CheckResult, FunctionVerdict
from memscope.render import STATUS_LABELS
from memscope.render._check_text import against, environment_note
from memscope.render.console import Lines, make_console
from memscope.render.text import shorten, visible
from memscope.report.units import format_bytes, format_change

STATUS_STYLES = {"pass": "green", "fail": "bold red", "not_called": "bold red",
                 "new": "cyan", "vanished": "yellow", "unchecked": "dim"}


def render_check(result: CheckResult, file: IO[str], *, width: int | None = None,
                 plain: bool | None = None) -> None:
    """Write the check table, each failing function's reasons, and the summary line."""
    out = Lines(make_console(file, width=width, plain=plain))
    out.para(f"memscope check against {visible(against(result))}", "  ", style="bold")
    if result.environment:
        style = "bold red" if result.environment_failed else "yellow"
        out.para(visible(environment_note(result)), "  ", style=style)
    out.table(_table(result, out))
    for fn in result.functions:
        if fn.problems or fn.notes:
            out.line()
            _details(out, fn)
    out.line()
    style = "bold red" if result.failed else "bold green"
    out.para(visible(result.summary), "  ", style=style)


def _table(result: CheckResult, out: Lines) -> Table:
    """One row per function. The figures and the verdict keep their width (a
    verdict is never cut); the function's name and signature are shortened to
    what they leave (whole: below, and in JSON)."""
    table = Table(title="Peak bytes per device", box=out.box, title_justify="left")
    cells = []
    for fn in result.functions:
        peak = fn.figure("peak") if fn.figures else None
        cells.append((fn, (format_bytes(peak.baseline) if peak else "n/a",
                           format_bytes(peak.now) if peak else "n/a",
                           format_change(peak.change, peak.percent) if peak else "n/a",
                           STATUS_LABELS[fn.status])))
    names = ("baseline", "now", "change", "verdict")
    widths = [max([len(name), *(len(row[i]) for _, row in cells)])
              for i, name in enumerate(names)]
    table.add_column("function", no_wrap=True)
    for name, width in zip(names, widths, strict=True):
        table.add_column(name, justify="left" if name == "verdict" else "right",
                         no_wrap=True, min_width=width)
    room = max(12, out.width - 4 - 3 * len(names) - sum(widths))  # less borders, padding
    for fn, (baseline, now, change, verdict) in cells:
        label = Text(shorten(visible(fn.name), room))
        if fn.shown_signature:
            label.append(f"\n{shorten(visible(fn.shown_signature), room)}", "dim")
        table.add_row(label, baseline, now, change, Text(verdict, STATUS_STYLES[fn.status]))
    return table


def _details(out: Lines, fn: FunctionVerdict) -> None:
    heading = visible(fn.name)
    for part in (fn.shown_signature, fn.source):
        if part:
            heading += f"  {visible(part)}"
    out.para(heading, "    ", style="bold")
    # Each reason wraps under itself, not under its label, between words only.
    for problem in fn.problems:
        out.labelled("FAIL", "bold red", visible(problem), "       ")
    for note in fn.notes:
        out.labelled("note", "", visible(note), "       ")
