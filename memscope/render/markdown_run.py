"""The markdown view of a run's report (``memscope run/show --format markdown``),
to paste into a pull request or an issue: the answer and the figures, bounded
like check's (a row per function up to :data:`MAX_ROWS`, the findings of at most
:data:`MAX_MARKDOWN_SECTIONS` functions, each finding's leaves already bounded), so a
model with hundreds of leaves still makes a comment a reader can take in.
Nothing is computed here: the text is the summary's, as the terminal shows it.
"""

from __future__ import annotations

from typing import IO

from memscope.render.text import markdown_cell, markdown_code, markdown_text, where_text
from memscope.report import Report
from memscope.report.units import format_bytes
from memscope.views import run_text
from memscope.views.summary import (
    FIGURES_SHOWN,
    FunctionSummary,
    summarize,
    target_line,
)
from memscope.views.view import View, choose_view

#: Functions given a row of the figures table; the rest are counted.
MAX_ROWS = 20
#: Functions whose findings and advice are listed; the rest are counted.
MAX_MARKDOWN_SECTIONS = 8

_LABELS = {"problem": "**problem:**", "warning": "**warning:**", "info": "note:"}


def render_run_markdown(report: Report, file: IO[str]) -> None:
    """A heading, the environment, the run's high-water mark, the figures table,
    then per function with something to change its findings and advice."""
    summary = summarize(report)
    run = report.run
    title = markdown_code(run.command) if run is not None else "a captured run"
    lines = [f"### memscope: {title}", ""]
    env = report.environment
    about = [f"jax {env.jax}, jaxlib {env.jaxlib}, {env.backend}, {len(env.devices)} "
             f"device{'s' if len(env.devices) != 1 else ''}" if env.backend is not None
             else f"jax {env.jax}, jaxlib {env.jaxlib}: not started"]
    if run is not None:
        about.append(run.ending)
    lines += [markdown_text("; ".join(about)), ""]
    if report.target is not None:
        lines += [markdown_text(target_line(report.target)), ""]
    lines += [f"> {markdown_text(note)}" for note in report.notes]
    if report.notes:
        lines.append("")
    high = report.runtime.run_memory if report.runtime is not None else None
    if high is not None and high.high_water is not None:
        first, *_ = run_text.high_water_lines(high)
        lines += [f"**{markdown_text(first)}**", ""]
    if not summary.functions:
        lines += ["No jitted function was called.", ""]
        file.write("\n".join(lines))
        return
    view = choose_view(report, summary, rows=MAX_ROWS, sections=MAX_MARKDOWN_SECTIONS)
    lines += _figures(summary.functions, view)
    for text, computed in view.peak_rules:
        lines.append(("\\* " if computed else "") + markdown_text(text) + "  ")
    lines.append("")
    lines += _roles(summary.functions, view)
    lines += _sections(summary.functions, view)
    if summary.between:
        lines += ["**Between calls**", ""]
        lines += [f"- {_LABELS[f.severity]} {markdown_text(f.text)}"
                  + (f": {markdown_text(f.leaves)}" if f.leaves else "")
                  for f in summary.between]
        lines.append("")
    lines += ["<sub>Every function in full: `memscope show --detail REPORT.json`; every "
              "leaf: `--leaves` (the report saved with `-o REPORT.json`).</sub>", ""]
    file.write("\n".join(lines))


def _figures(functions: tuple[FunctionSummary, ...], view: View) -> list[str]:
    titles = [label for label, _ in FIGURES_SHOWN]
    lines = ["| function | source | calls | " + " | ".join(titles) + " |",
             "|---|---|---:|" + "---:|" * len(titles)]
    for s in (s for i, s in enumerate(functions) if i in view.rows):
        m = s.memory
        figures = [format_bytes(getattr(m, attr) if m is not None else None)
                   for _, attr in FIGURES_SHOWN]
        if m is not None and m.peak_is_computed:
            figures[-1] += "\\*"
        which = f" ({s.variant_of[0]} of {s.variant_of[1]})" if s.variant_of else ""
        lines.append(f"| {markdown_cell(s.name)}{which} | {markdown_cell(where_text(s.source))} "
                     f"| {s.calls} | " + " | ".join(figures) + " |")
    if len(functions) > MAX_ROWS:
        rest = len(functions) - MAX_ROWS
        lines.append(f"| and {rest} more function{'s' if rest != 1 else ''} | | | "
                     + " | ".join("" for _ in titles) + " |")
    return [*lines, ""]


def _roles(functions: tuple[FunctionSummary, ...], view: View) -> list[str]:
    """What each shown function's peak is made of, one line each."""
    shown = [functions[i] for i in view.rows if functions[i].roles_text]
    if not shown:
        return []
    return [f"- **{markdown_text(s.name)}** {markdown_text(s.roles_text or '')}"
            for s in shown] + [""]


def _sections(functions: tuple[FunctionSummary, ...], view: View) -> list[str]:
    lines = []
    for s in (functions[i] for i in view.sections):
        lines += [f"**{markdown_text(s.name)}** at {markdown_code(where_text(s.source))}: "
                  f"peak {format_bytes(s.peak)} per device", ""]
        lines += [f"- {_LABELS[f.severity]} {markdown_text(f.text)}"
                  + (f": {markdown_text(f.leaves)}" if f.leaves else "") for f in s.findings]
        if s.advice is not None:
            lines.append(f"- **advice:** {markdown_text(s.advice.headline)}: "
                         f"{markdown_text(s.advice.saving)}.")
        if s.remat_advice is not None:
            lines.append(f"- **remat advice:** {markdown_text(s.remat_advice)}.")
        measured = [f"{v.title} {format_bytes(v.memory.peak_bytes if v.memory else None)}"
                    for v in s.variants if v.name != "advised"]
        if measured:
            lines.append(f"- peak with other donations: {markdown_text('; '.join(measured))}.")
        elif s.asked_for and s.remat_advice is None and not s.findings and s.advice is None:
            lines.append("- what the backward pass keeps, and each checkpoint policy: "
                         "the full report.")
        lines.append("")
    if view.unsectioned:
        rest = view.unsectioned
        lines += [f"And {rest} more function{'s' if rest != 1 else ''} with something to "
                  "change: the full report.", ""]
    if not view.sections and not view.unsectioned:
        lines += ["Nothing to change: no unusable, unused or missed donation, no copy.", ""]
    return lines
