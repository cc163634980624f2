"""Text as the renderers write it: user data shown literally, lines wrapped between
words only.

Every piece of user or program data a renderer prints (arguments, error messages,
paths, function names, device kinds, file names) goes through :func:`visible`
first: control characters and escape sequences become visible escapes, so a
terminal never acts on them and a log keeps one record per line. The terminal
console never reads markup (``[bold]`` prints as typed); HTML, markdown, JUnit and
GitHub annotations add their own escaping on top of this one.

No rich here, so the pytest plugin and the command line use it too. Also the
one-line chart (:func:`sparkline`) the terminal views share, and the column
aligner (:func:`aligned`) of every plain-text table.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Sequence
from html import escape
from typing import TYPE_CHECKING

from memscope.report.paths import from_the_package

if TYPE_CHECKING:
    from memscope.views.leaves import LeafGroup

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

#: A size (``39.5 MiB``) is one word: a line never breaks inside it.
_SIZE = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|PiB)\b")
_GLUE = "\u00a0"


def visible(text: str) -> str:
    """``text`` with every control or format character (ESC, NUL, newline, bidi
    overrides) written as an escape: ``"a\\x1b[31m"`` -> ``"a\\\\x1b[31m"``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif unicodedata.category(ch) in ("Zs",):
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def html_text(text: str | None) -> str:
    """User or program text for HTML, shown literally: control characters
    escaped (:func:`visible`), then HTML; ``None`` is ``n/a``."""
    return escape(visible(text if text is not None else "n/a"))


def wrap(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """``text`` broken into lines of at most ``width`` between words only; a word
    (a path, a number, a size) longer than a line gets a line of its own, whole.
    Lines start with ``first`` (default ``indent``), then ``indent``."""
    glued = _SIZE.sub(lambda m: f"{m.group(1)}{_GLUE}{m.group(2)}", text)
    words = glued.split(" ")
    lines: list[str] = []
    line = first if first is not None else indent
    empty = True
    for word in words:
        if not empty and len(line) + 1 + len(word) > width:
            lines.append(line)
            line, empty = indent, True
        line += word if empty else f" {word}"
        empty = False
    lines.append(line)
    return [ln.replace(_GLUE, " ") for ln in lines]


def where_text(source: str | None) -> str:
    """A function's ``path:line`` for a reader: ``optax/_src/base.py:78`` for a
    file of an installed package, the path as recorded otherwise; ``n/a``."""
    if source is None:
        return "n/a"
    return visible(from_the_package(source))


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int],
            indent: str = "") -> list[str]:
    """The header and each row as one line after ``indent``: every cell whole,
    padded to its column's widest (the ``right`` columns to the right), two
    spaces apart, no trailing space."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return [indent + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))
                               ).rstrip() for r in (header, *rows)]


def shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters with ``...`` (whole if it fits)."""
    if len(text) <= limit or limit < 8:
        return text
    keep = limit - 3
    return f"{text[:keep - keep // 2]}...{text[-(keep // 2):]}"


def fates_text(g: LeafGroup, *, fate: Callable[[str], str] = str,
               text: Callable[[str], str] = str) -> str:
    """``not_donated 134 (candidates); at run time: 2 confirmed``: a group's fates in
    words; ``fate`` marks up a fate's name and ``text`` escapes run-time labels (HTML)."""
    parts = []
    for f in g.fates:
        part = f"{fate(f.fate)} {f.leaves}"
        if f.candidates:
            part += (" (candidates)" if f.candidates == f.leaves > 1 else " (candidate)"
                     if f.candidates == f.leaves else f" ({f.candidates} candidates)")
        parts.append(part)
    line = ", ".join(parts)
    if g.observed:
        line += "; at run time: " + ", ".join(f"{n} {text(label)}" for label, n in g.observed)
    return line


_BARS = " ▁▂▃▄▅▆▇█"
_ASCII_BARS = " .:-=+*#%@"


def sparkline(values: Sequence[int], width: int, *, ascii_only: bool = True) -> str:
    """``values`` as one line of ``width`` bars at most (each the largest of its stretch)."""
    if not values:
        return ""
    bars = _ASCII_BARS if ascii_only else _BARS
    step = max(1, -(-len(values) // width))
    cols = [max(values[i:i + step]) for i in range(0, len(values), step)]
    top = max(cols) or 1
    return "".join(bars[round(v / top * (len(bars) - 1))] for v in cols)


def markdown_code(text: str) -> str:
    """``text`` as a code span, fenced by more backticks than it holds in a row."""
    text = visible(text)
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_cell(text: str | None) -> str:
    """``text`` as a code span in a table cell: markdown takes it literally, and a
    pipe, which ends a cell even there, escaped as GitHub's tables read it."""
    return markdown_code(text or "").replace("|", "\\|")


def markdown_text(text: str) -> str:
    """``text`` with what markdown would read as markup escaped (leaf paths hold
    brackets and underscores)."""
    text = visible(text)
    for ch in "\\`*_[]<>|":
        text = text.replace(ch, "\\" + ch)
    return text
