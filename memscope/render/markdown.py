"""The markdown view of a check, for pull-request comments and GitHub's step summary."""

from __future__ import annotations

from typing import IO

from memscope.check.records import CheckResult, FunctionVerdict
from memscope.render import STATUS_LABELS
from memscope.render._check_text import against, environment_note
from memscope.render.text import markdown_cell, markdown_code, markdown_text, visible
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
            heading = f"**{markdown_text(fn.name)}**"
            if fn.shown_signature:
                heading += f" {markdown_code(fn.shown_signature)}"
            if fn.source:
                heading += f" at {markdown_code(fn.source)}"
            lines += ["", heading, ""]
            lines += [f"- **FAIL** {markdown_text(p)}" for p in fn.problems]
            lines += [f"- note: {markdown_text(n)}" for n in fn.notes]
    lines += ["", f"**{markdown_text(result.summary)}**", ""]
    file.write("\n".join(lines))


def _row(fn: FunctionVerdict) -> str:
    peak = fn.figure("peak") if fn.figures else None
    cells = [markdown_cell(fn.name), markdown_cell(fn.shown_signature) if fn.shown_signature else "",
             format_bytes(peak.baseline) if peak else "n/a",
             format_bytes(peak.now) if peak else "n/a",
             format_change(peak.change, peak.percent) if peak else "n/a",
             f"**{STATUS_LABELS[fn.status]}**" if fn.failed else STATUS_LABELS[fn.status]]
    return "| " + " | ".join(cells) + " |"
