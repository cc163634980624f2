"""The terminal view of ``memscope diff``: figures side by side, and changed fates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO

from rich import box
from rich.table import Table
from rich.text import Text

from memscope.check.compare import FunctionDiff
from memscope.render.console import Lines, make_console
from memscope.render.text import visible
from memscope.report.units import format_bytes, format_change

#: Up to this many changed leaves are listed one by one; more are grouped.
MAX_LEAF_ROWS = 16

VERDICT_STYLES = {"worse": "bold red", "better": "green", "changed": "yellow",
                  "same": "dim", "new": "cyan", "gone": "magenta", "error": "bold red"}


def render_diff(title: str, diffs: Sequence[FunctionDiff], file: IO[str], *,
                before: str = "before", after: str = "after",
                width: int | None = None, plain: bool | None = None) -> None:
    """One section per function: the settings, the figures, the fates that change."""
    out = Lines(make_console(file, width=width, plain=plain))
    console = out.console
    table_box = out.box
    out.para(visible(title), "  ", style="bold")
    if not diffs:
        out.line("Nothing to compare.")
    for d in diffs:
        out.line()
        console.print(Text.assemble((visible(d.name), "bold"),
                                    f"  {visible(d.source or 'n/a')}  ",
                                    (d.verdict, VERDICT_STYLES[d.verdict])), soft_wrap=True)
        out.para(f"signature: {visible(d.short_signature or d.signature)}", "    ", "  ",
                 style="dim")
        if d.before_setting is not None or d.after_setting is not None:
            out.para(f"{before}: {visible(d.before_setting or 'n/a')}", "    ", "  ")
            out.para(f"{after}: {visible(d.after_setting or 'n/a')}", "    ", "  ")
        if d.error:
            out.para(visible(d.error), "  ", "  ", style="red")
        _peak(out, d)
        for problem in d.problems:
            out.labelled("worse:", "red", visible(problem), "    ")
        for note in d.notes:
            out.labelled("note:", "dim", visible(note), "    ")
        if d.figures:
            out.table(_figures(d, table_box, before, after))
        if len(d.leaves) > MAX_LEAF_ROWS:
            _groups(out, d, before, after)
        elif d.leaves:
            out.table(_leaves(d, table_box, before, after))
        elif d.figures:
            out.line("No buffer changes its fate.")


#: Changes at the peak listed one by one; the rest are summed.
MAX_PEAK_ROWS = 5


def _peak(out: Lines, d: FunctionDiff) -> None:
    """What changed among the buffers live at the peak, largest first."""
    if not d.peak_changes:
        return
    change = (d.peak_after or 0) - (d.peak_before or 0)
    out.para(f"at the peak: {format_bytes(d.peak_before)} -> {format_bytes(d.peak_after)} "
             f"live ({format_change(change)}), by the buffers that changed:", "    ", "  ")
    for c in d.peak_changes[:MAX_PEAK_ROWS]:
        out.para(visible(c.text()), "        ", "    ")
    rest = d.peak_changes[MAX_PEAK_ROWS:]
    if rest:
        out.para(f"and {len(rest)} more ({format_change(sum(c.change for c in rest))})",
                 "        ", "    ", style="dim")


def _figures(d: FunctionDiff, table_box: box.Box, before: str, after: str) -> Table:
    table = Table(box=table_box)
    table.add_column("bytes per device", no_wrap=True)
    for name in (before, after, "change"):
        table.add_column(name, justify="right", no_wrap=True)
    for f in d.figures:
        change = f.change
        style = "" if not change else ("red" if change > 0 else "green")
        table.add_row(f.name.removesuffix("_bytes"), format_bytes(f.before),
                      format_bytes(f.after), Text(format_change(change), style))
    return table


def _groups(out: Lines, d: FunctionDiff, before: str, after: str) -> None:
    out.para(f"{len(d.leaves)} buffers change their fate ({before} -> {after}), by argument "
             "(each leaf: the JSON report, -o):", "  ")
    for g in d.groups:
        noun = "leaf" if g.leaves == 1 else "leaves"
        out.para(f"{g.kind} {visible(g.argument)}: {g.leaves} {noun} {g.before} -> {g.after}: "
                 f"{visible(g.examples)}", "      ", "  ")


def _leaves(d: FunctionDiff, table_box: box.Box, before: str, after: str) -> Table:
    table = Table(title="Buffers whose fate changes", box=table_box, title_justify="left")
    table.add_column("buffer", overflow="fold")
    table.add_column(before, overflow="fold")
    table.add_column(after, overflow="fold")
    for leaf in d.leaves:
        table.add_row(visible(leaf.path), visible(leaf.before or "(absent)"),
                      visible(leaf.after or "(absent)"))
    return table
