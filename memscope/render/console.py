"""The plain-text console every terminal view writes through: rich for colour
and box-drawn tables on a terminal, plain ASCII otherwise, and lines wrapped
between words by memscope itself (:func:`memscope.render.text.wrap`), never by
rich, so a path, a number or a size is never split."""

from __future__ import annotations

import os
from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memscope.render.text import aligned, wrap

#: Width when writing to a pipe or file and COLUMNS is not set.
PIPE_WIDTH = 120


def make_console(file: IO[str], *, width: int | None = None,
                 plain: bool | None = None) -> Console:
    """A console on ``file``; ``plain`` defaults to "not a terminal, or NO_COLOR set".

    It never reads markup: ``[bold]`` in a path or an argument prints as typed, and
    it writes to ``file`` even in a notebook (where rich would display instead).
    """
    if plain is None:
        # no-color.org: only a non-empty NO_COLOR turns colour off
        plain = not file.isatty() or bool(os.environ.get("NO_COLOR"))
    if width is None and not file.isatty() and "COLUMNS" not in os.environ:
        width = PIPE_WIDTH  # logs do not wrap; rich's 80 would fold every path
    return Console(file=file, width=width, force_terminal=not plain,
                   no_color=plain, color_system=None if plain else "auto",
                   highlight=False, emoji=False, markup=False, soft_wrap=False,
                   force_jupyter=False)


class Lines:
    """Lines onto a console, wrapped between words at its width, never by rich."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.width = console.width
        self.box = box.ASCII if console.no_color else box.ROUNDED

    def line(self, text: str | Text = "", style: str = "") -> None:
        self.console.print(Text(text, style) if isinstance(text, str) else text,
                           soft_wrap=True)

    def para(self, text: str, indent: str = "", first: str = "", style: str = "") -> None:
        for ln in wrap(text, self.width, indent, first):
            self.line(ln, style)

    def labelled(self, label: str, style: str, text: str, indent: str) -> None:
        """``  label: text`` with the label styled, wrapped under ``indent``."""
        lines = wrap(f"{label} {text}", self.width, indent, "  ")
        self.console.print(Text.assemble("  ", (label, style), lines[0][len(label) + 2:]),
                           soft_wrap=True)
        for ln in lines[1:]:
            self.line(ln)

    def table(self, table: Table, title: str = "") -> None:
        # The title on a line of its own: rich would wrap it to the table's width.
        if title:
            self.line(title, "italic")
        self.console.print(table)


def columns(out: Lines, header: list[str], rows: list[list[str]], right: set[int]) -> None:
    """Aligned columns (:func:`~memscope.render.text.aligned`), every cell whole: a
    list, one line per row, never wrapped; the header dim."""
    first, *lines = aligned(header, rows, right, indent="    ")
    out.line(first, "dim")
    for line in lines:
        out.line(line)
