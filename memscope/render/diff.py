"""The terminal view of ``memscope diff``: figures side by side, and changed fates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO

from rich import box
from rich.table import Table
from rich.text import Text

from memscope.compare import FunctionDiff
from memscope.render.terminal import make_console
from memscope.units import format_bytes, format_change

VERDICT_STYLES = {"worse": "bold red", "better": "green", "changed": "yellow",
                  "same": "dim", "new": "cyan", "gone": "magenta", "error": "bold red"}


def render_diff(title: str, diffs: Sequence[FunctionDiff], file: IO[str], *,
                before: str = "before", after: str = "after",
                width: int | None = None, plain: bool | None = None) -> None:
    """One section per function: the settings, the figures, the fates that change."""
    console = make_console(file, width=width, plain=plain)
    table_box = box.ASCII if console.no_color else box.ROUNDED
    console.print(Text(title, style="bold"), overflow="fold")
    if not diffs:
        console.print("Nothing to compare.")
    for d in diffs:
        console.print()
        console.print(Text.assemble((d.name, "bold"), f"  {d.source or 'n/a'}  ",
                                    (d.verdict, VERDICT_STYLES[d.verdict])), overflow="fold")
        console.print(Text(f"signature {d.signature}", style="dim"), overflow="fold")
        if d.before_setting is not None or d.after_setting is not None:
            console.print(f"  {before}: {d.before_setting or 'n/a'}", overflow="fold")
            console.print(f"  {after}: {d.after_setting or 'n/a'}", overflow="fold")
        if d.error:
            console.print(Text(d.error, style="red"), overflow="fold")
        for problem in d.problems:
            console.print(Text(f"  worse: {problem}", style="red"), overflow="fold")
        for note in d.notes:
            console.print(Text(f"  note: {note}", style="dim"), overflow="fold")
        if d.figures:
            console.print(_figures(d, table_box, before, after))
        if d.leaves:
            console.print(_leaves(d, table_box, before, after))
        elif d.figures:
            console.print("No buffer changes its fate.")


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


def _leaves(d: FunctionDiff, table_box: box.Box, before: str, after: str) -> Table:
    table = Table(title="Buffers whose fate changes", box=table_box, title_justify="left")
    table.add_column("buffer", overflow="fold")
    table.add_column(before, overflow="fold")
    table.add_column(after, overflow="fold")
    for leaf in d.leaves:
        table.add_row(leaf.path, leaf.before or "(absent)", leaf.after or "(absent)")
    return table
