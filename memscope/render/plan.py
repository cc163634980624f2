"""``memscope fit --plan``'s output: the winning setting first, then one row per
setting, best first, and why each row without a batch has none.

Plain text, JSON, markdown and one self-contained HTML page, from the same
cells; nothing is computed here (the order and the winner are the plan's).
"""

from __future__ import annotations

import dataclasses
import json
from typing import IO

from memscope.render import html_page
from memscope.render.fit import budget_text
from memscope.render.text import aligned, markdown_cell, markdown_code, markdown_text, visible
from memscope.render.text import html_text as _t
from memscope.report import FitPlan, PlanRow
from memscope.report.units import format_bytes, format_bytes_apart

#: The schema of ``memscope fit --plan --format json``.
PLAN_SCHEMA = "memscope.fit-plan/1"

COLUMNS = ("setting", "batch", "peak at batch", "FLOPs/example", "FLOPs vs written",
           "host at batch")
PEAK_RULE = ("peak: memscope's rule (XLA's peak where it gives one, at least argument + "
             "output - alias + temp)")


def table(p: FitPlan) -> list[tuple[str, ...]]:
    """One row of cells per setting, in :data:`COLUMNS`' order; the peaks with
    enough digits to read apart from the budget and from each other."""
    peaks = format_bytes_apart([p.budget_bytes, *(r.peak_bytes if r.largest else None
                                                  for r in p.rows)])[1:]
    return [_cells(r, peak) for r, peak in zip(p.rows, peaks, strict=True)]


def _cells(row: PlanRow, peak: str) -> tuple[str, ...]:
    batch = (str(row.largest) if row.largest is not None
             else f"< {row.below}" if row.below is not None else "n/a")
    flops = "n/a" if row.flops_per_example is None else f"{row.flops_per_example:.3g}"
    ratio = "n/a" if row.flops_ratio is None else f"{row.flops_ratio:.2f}x"
    host = "n/a" if row.host_bytes is None else format_bytes(row.host_bytes)
    return (row.setting, batch, peak, flops, ratio, host)


def plan_headline(p: FitPlan) -> list[str]:
    """The answer: the winner, its batch against the program as written, its code."""
    written = next((r for r in p.rows if r.kind == "written"), None)
    top = p.rows[0] if p.winner is not None else None
    if top is None:
        return [f"No setting fits {format_bytes(p.budget_bytes)} at any batch compiled."]
    against = ("" if written is None or top is written
               else f" (as written: {_batch(written)})")
    lines = [f"Best: {top.setting}: batch {top.largest}{against}, "
             f"FLOPs {_ratio_words(top)} the program as written at batch {p.batch}"]
    lines.append(f"  {p.winner_code}")
    return lines


def budget_line(p: FitPlan) -> str:
    text = "Budget per device: " + budget_text(p.budget_bytes, p.memory_bytes, p.held_bytes,
                                                p.held_note, p.memory_source)
    return text + (f"; compiled for {p.target}" if p.target else "")


def cost_line(p: FitPlan) -> str:
    cached = f" ({p.cached} more read from memscope's cache)" if p.cached else ""
    flops = p.flops_rule or "XLA's cost_analysis() of each compiled step"
    return (f"{p.compiles} compiles{cached} in {p.seconds:.1f} s; nothing ran on the "
            f"device. {PEAK_RULE}. FLOPs: {flops}.")


def notes(p: FitPlan) -> list[tuple[str, str]]:
    """(setting, why) for each row that has a note."""
    return [(r.setting, r.note) for r in p.rows if r.note]


def render_plan_text(p: FitPlan, file: IO[str]) -> None:
    """The plan as plain text: the answer, the table, the notes, the cost."""
    lines = [f"memscope fit --plan: {visible(p.function)} ({visible(p.source or 'n/a')})",
             visible(budget_line(p)), *(visible(x) for x in plan_headline(p)),
             f"batch axis: {visible(p.choice_note or p.argument)}; now {p.batch}, "
             f"step {p.step}", ""]
    lines += aligned(COLUMNS, [[visible(c) for c in row] for row in table(p)],
                     right=range(1, len(COLUMNS)))
    for extra in (p.batch_note, p.compile_note):
        if extra:
            lines += ["", f"note: {visible(extra)}"]
    if notes(p):
        lines += ["", "notes:"]
        lines += [f"  {visible(s)}: {visible(n)}" for s, n in notes(p)]
    lines += ["", visible(cost_line(p))]
    file.write("\n".join(lines) + "\n")


def render_plan_json(p: FitPlan, file: IO[str], *, outcome: str) -> None:
    """The plan as JSON (schema ``memscope.fit-plan/1``)."""
    data = {"schema": PLAN_SCHEMA, "program_outcome": outcome, **dataclasses.asdict(p)}
    file.write(json.dumps(data, indent=2) + "\n")


def render_plan_markdown(p: FitPlan, file: IO[str]) -> None:
    """The plan as markdown (a pull request's comment, a notebook's cell)."""
    head = plan_headline(p)
    lines = [f"### memscope fit --plan: {markdown_text(p.function)}"
             + (f" at {markdown_code(p.source)}" if p.source else ""), "",
             markdown_text(budget_line(p)), "", f"**{markdown_text(head[0])}**"]
    if len(head) > 1:
        lines += ["", markdown_code(head[1].strip())]
    lines += ["", "| " + " | ".join(COLUMNS) + " |",
              "|---|" + "---:|" * (len(COLUMNS) - 1)]
    lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in table(p)]
    if notes(p):
        lines += [""] + [f"- **{markdown_text(s)}**: {markdown_text(n)}" for s, n in notes(p)]
    for extra in (p.batch_note, p.compile_note):
        if extra:
            lines += ["", f"Note: {markdown_text(extra)}"]
    lines += ["", markdown_text(cost_line(p)), ""]
    file.write("\n".join(lines))


#: The plan's own rules, after the shared ones (:data:`memscope.render.html_page.CSS`).
_CSS = """
.best{background:#eef7f1;border-left:4px solid #16794a;padding:6px 10px;margin:10px 0}
table{margin:8px 0 12px}tr.winner td{font-weight:600}tr.none td{color:#5b6673}
"""


def render_plan_html(p: FitPlan, file: IO[str]) -> None:
    """The plan as one self-contained HTML page: no script, no network."""
    head = plan_headline(p)
    best = f"<div class=\"best\"><b>{_t(head[0])}</b>"
    if len(head) > 1:
        best += f"<br><code>{_t(head[1].strip())}</code>"
    best += "</div>"
    rows = []
    for i, (r, row) in enumerate(zip(p.rows, table(p), strict=True)):
        kind = "winner" if i == 0 and p.winner is not None else (
            "none" if r.largest is None else "")
        tds = "".join(("<td class=\"n\">" if j else "<td>") + f"{_t(c)}</td>"
                      for j, c in enumerate(row))
        rows.append(f"<tr class=\"{kind}\" title=\"{_t(r.code or '')}\">{tds}</tr>")
    why = "".join(f"<li><b>{_t(s)}</b>: {_t(n)}</li>" for s, n in notes(p))
    title = f"memscope fit --plan: {p.function}"
    body = [
        f"<h1>{_t(title)}</h1>",
        f"<div class=\"meta\">{_t(p.source or 'n/a')} · {_t(budget_line(p))} · batch axis: "
        f"{_t(p.choice_note or p.argument)}; now {p.batch}, step {p.step}</div>{best}",
        "<table id=\"plan\"><thead><tr>" + "".join(f"<th>{_t(c)}</th>" for c in COLUMNS)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>",
        *([f"<h2>Notes</h2><ul>{why}</ul>"] if why else []),
        *(f"<p>{_t(x)}</p>" for x in (p.batch_note, p.compile_note) if x),
        f"<p class=\"meta\">{_t(cost_line(p))}</p>"]
    file.write(html_page.document(title, body, css=_CSS))


def _batch(r: PlanRow) -> str:
    if r.largest is not None:
        return str(r.largest)
    return f"under {r.below}" if r.below is not None else "none fits"


def _ratio_words(r: PlanRow) -> str:
    if r.flops_ratio is None:
        return "n/a against"
    return f"{r.flops_ratio:.2f}x"
