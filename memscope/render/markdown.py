"""The markdown view of a check, for pull-request comments and GitHub's step summary."""

from __future__ import annotations

import re
from typing import IO

from memscope.check.records import CheckResult, FunctionVerdict
from memscope.render import STATUS_LABELS
from memscope.render._check_text import against, environment_note
from memscope.render.text import visible
from memscope.report.units import format_bytes, format_change


def render_check_markdown(result: CheckResult, file: IO[str]) -> None:
    """A heading, the environment note, the table, each failing function's reasons, the summary."""
    verdict = "FAIL" if result.failed else "PASS"
    lines = [f"### memscope check: {verdict}", "",
             f"Checked against {visible(against(result, code='`'))}.", ""]
    if result.environment:
        lines += [f"> **{visible(environment_note(result))}**", ""]
    lines += ["| function | signature | peak baseline | peak now | change | verdict |",
              "|---|---|---:|---:|---:|---|"]
    lines += [_row(fn) for fn in result.functions]
    for fn in result.functions:
        if fn.problems or fn.notes:
            heading = f"**{_text(fn.name)}**"
            if fn.shown_signature:
                heading += f" {_code(fn.shown_signature)}"
            if fn.source:
                heading += f" at {_code(fn.source)}"
            lines += ["", heading, ""]
            lines += [f"- **FAIL** {_text(p)}" for p in fn.problems]
            lines += [f"- note: {_text(n)}" for n in fn.notes]
    lines += ["", f"**{_text(result.summary)}**", ""]
    file.write("\n".join(lines))


def _row(fn: FunctionVerdict) -> str:
    peak = fn.figure("peak") if fn.figures else None
    cells = [_cell(fn.name), _cell(fn.shown_signature) if fn.shown_signature else "",
             format_bytes(peak.baseline) if peak else "n/a",
             format_bytes(peak.now) if peak else "n/a",
             format_change(peak.change, peak.percent) if peak else "n/a",
             f"**{STATUS_LABELS[fn.status]}**" if fn.failed else STATUS_LABELS[fn.status]]
    return "| " + " | ".join(cells) + " |"


def _cell(text: str | None) -> str:
    # In a code span, so markdown takes it literally; a pipe ends a table cell even
    # there, so it is escaped as GitHub's tables read it.
    return _code(text or "").replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as a code span, fenced by more backticks than it holds in a row."""
    text = visible(text)
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _text(text: str) -> str:
    # Leaf paths hold brackets and underscores that markdown would eat.
    text = visible(text)
    for ch in "\\`*_[]<>|":
        text = text.replace(ch, "\\" + ch)
    return text
