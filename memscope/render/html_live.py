"""What is live at a function's peak, in its HTML section: first memory by role
at the peak (a bar, its legend, each role's largest parts), then the chart of
memory over program order, the peak marked, and the buffers live there:
listed when the peak is hovered or clicked.

Every report string is escaped into text or data attributes; :data:`SCRIPT`
holds no report data, it only reads the attributes of the chart it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memscope.render.html_page import hover_columns
from memscope.render.text import html_text as _t
from memscope.report import ROLE_WORDS, FunctionReport, LiveAtPeak, MemoryTimeline
from memscope.report.units import format_bytes
from memscope.views.roles_text import PARTS_PER_ROLE, part_where, percent, shape_text

#: ``hoverCharts(chart, mark, list)``, shared with the run's chart
#: (:mod:`memscope.render.html_run`): in each element matching ``chart``,
#: hovering a point (``rect.pt``) shows its ``data-label`` in the ``.readout``;
#: hovering or clicking the ``mark`` shows the mark's label and opens the
#: ``list``. Here: the peak marker opens the list of the buffers live there.
SCRIPT = """
function hoverCharts(chartSelector, markSelector, listSelector) {
  document.querySelectorAll(chartSelector).forEach(function (chart) {
    var readout = chart.querySelector('.readout');
    chart.querySelectorAll('rect.pt').forEach(function (pt) {
      pt.addEventListener('mouseenter', function () {
        readout.textContent = pt.dataset.label;
      });
    });
    var mark = chart.querySelector(markSelector);
    var list = chart.querySelector(listSelector);
    if (!mark || !list) return;
    function open() {
      readout.textContent = mark.dataset.label;
      list.open = true;
    }
    mark.addEventListener('mouseenter', open);
    mark.addEventListener('click', open);
  });
}
hoverCharts('.livechart', '.peak', 'details.peaklist');
"""
CSS = (".livechart rect.pt{fill:transparent}.livechart rect.pt:hover{fill:#e1575922}"
       ".livechart .peak{cursor:pointer}.readout{font-variant-numeric:tabular-nums}"
       ".roles .key{display:inline-block;width:10px;height:10px;margin-right:4px}"
       ".roles ul{list-style:none;padding:0;margin:4px 0}"
       ".roles li{display:inline-block;margin-right:14px;cursor:default}"
       ".rolebar text{font-size:11px;pointer-events:none}"
       "table.roleparts td{padding:1px 8px}table.roleparts tr.more td{color:#5b6673}")
#: One colour per role (Tableau 10, the charts' palette); "cannot be told" grey.
ROLE_COLOURS = {"parameters": "#4e79a7", "optimizer": "#f28e2b", "model_state": "#76b7b2",
                "batch": "#59a14f", "gradients": "#e15759", "activations": "#edc948",
                "collectives": "#b07aa1", "outputs": "#ff9da7", "constants": "#9c755f",
                "temporaries": "#bab0ac", "unknown": "#6b6b6b"}
#: The roles whose colour is light enough for dark text on it; white on the rest.
LIGHT_ROLES = frozenset({"optimizer", "model_state", "activations", "outputs",
                         "temporaries"})
#: The bar's width and height in pixels.
BAR_WIDTH, BAR_HEIGHT = 760, 22
#: A wide character of a segment's 11px label, so a label drawn fits its segment.
LABEL_CHAR_PX = 7
_NONE = "this report has no memory timeline (no buffer assignment was read)"
_RULE = {"schedule": "the compiled schedule over XLA's buffer assignment",
         "heap_trace": "XLA's heap-simulator trace"}


def live_section(fn: FunctionReport, *, script: bool = True) -> list[str]:
    """Memory by role at the peak, the chart, the readout, the peak's buffers
    (collapsed) and the notes; without ``script`` (:data:`SCRIPT` is not on
    the page) nothing to hover."""
    t, live = fn.memory_timeline, fn.live_at_peak
    out = ["<h3>Memory over program order, and what is live at the peak</h3>"]
    if t is None or live is None or not t.points:
        return [*out, f'<p class="dim">n/a: {_t(fn.memory_timeline_note or _NONE)}</p>']
    out.extend(roles_view(live))
    out.append('<div class="livechart">')
    out.append(_chart(t, fn.name))
    hover = (" Hover the chart for a step; hover or click the peak marker for the "
             "buffers live there." if script else "")
    out.append(f'<p class="readout">Peak {_t(format_bytes(t.peak_bytes))} at step '
               f"{t.peak_step} of {t.steps} (<code>{_t(t.peak_instruction)}</code>), from "
               f"{_RULE[t.rule]}.{hover}</p>")
    out.extend(_peak_list(live))
    out.append("</div>")
    for note in (t.peak_note, t.trace_note):
        if note:
            out.append(f'<p class="dim">{_t(note)}</p>')
    return out


def roles_view(live: LiveAtPeak) -> list[str]:
    """Memory by role at the peak, to take in at a glance: one bar with a
    segment per role as wide as its bytes (hover: the exact bytes), a legend,
    and a table of each role's largest parts (docs/roles.md); nothing where
    the report has no roles."""
    if not live.roles or live.bytes <= 0:
        return []
    unknown = live.role_bytes("unknown")
    told = (f"; {_t(format_bytes(unknown))} ({_t(percent(unknown, live.bytes))}) "
            "<b>cannot be told</b>" if unknown else "")
    return ['<div class="roles"><p><b>Memory by role at the peak</b>: '
            f"{_t(format_bytes(live.bytes))} live{told} (how each role is decided: "
            "docs/roles.md)</p>", _role_bar(live), _role_legend(live), _role_parts(live),
            "</div>"]


def _exact(size: int, whole: int) -> str:
    return f"{size:,} bytes, {percent(size, whole)}"


def _role_bar(live: LiveAtPeak) -> str:
    """The bar: each segment named inside it where the name fits."""
    x, rects, labels = 0.0, [], []
    for r in live.roles:
        width = r.bytes / live.bytes * BAR_WIDTH
        words = ROLE_WORDS[r.role]
        rects.append(
            f'<rect class="role" data-role="{_t(r.role)}" data-bytes="{r.bytes}" '
            f'x="{x:.3f}" y="0" width="{width:.3f}" height="{BAR_HEIGHT}" '
            f'fill="{ROLE_COLOURS[r.role]}"><title>{_t(words)}: '
            f"{_t(format_bytes(r.bytes))} ({_t(_exact(r.bytes, live.bytes))}, "
            f"{r.buffers} buffer{'s' if r.buffers != 1 else ''})</title></rect>")
        share = percent(r.bytes, live.bytes)
        label = next((s for s in (f"{words} {share}", share)
                      if len(s) * LABEL_CHAR_PX + 8 <= width), None)
        if label is not None:
            ink = "#1d232b" if r.role in LIGHT_ROLES else "#fff"
            labels.append(f'<text x="{x + 4:.1f}" y="{BAR_HEIGHT / 2 + 4:.0f}" '
                          f'fill="{ink}">{_t(label)}</text>')
        x += width
    return (f'<svg class="rolebar" role="img" aria-label="memory by role at the peak" '
            f'width="{BAR_WIDTH}" height="{BAR_HEIGHT}">{"".join(rects + labels)}</svg>')


def _role_legend(live: LiveAtPeak) -> str:
    return "<ul>" + "".join(
        f'<li class="role-{_t(r.role)}" title="{_t(_exact(r.bytes, live.bytes))}">'
        f'<span class="key" style="background:{ROLE_COLOURS[r.role]}"></span>'
        f"{_t(ROLE_WORDS[r.role])} <b>{_t(format_bytes(r.bytes))}</b> "
        f"({_t(percent(r.bytes, live.bytes))})</li>" for r in live.roles) + "</ul>"


def _role_parts(live: LiveAtPeak) -> str:
    """Per role, its :data:`PARTS_PER_ROLE` largest parts (where, op, size),
    then how many more and their bytes."""
    rows = []
    for r in live.roles:
        own = live.parts_of(r.role)
        shown, more = own[:PARTS_PER_ROLE], own[PARTS_PER_ROLE:]
        span = len(shown) + (1 if more else 0)
        head = (f'<td rowspan="{span}"><span class="key" '
                f'style="background:{ROLE_COLOURS[r.role]}"></span>'
                f"{_t(ROLE_WORDS[r.role])}</td>")
        for i, p in enumerate(shown):
            count = f"{p.buffers} buffers" if p.buffers > 1 else ""
            detail = ", ".join(s for s in (shape_text(p.shape), count, f"{p.bytes:,} bytes") if s)
            rows.append(
                f'<tr data-role="{_t(r.role)}" data-bytes="{p.bytes}">{head if i == 0 else ""}'
                f"<td>{_t(part_where(p.where, p.op))}</td><td>{_t(p.op)}</td>"
                f'<td class="n" title="{_t(detail)}">{_t(format_bytes(p.bytes))}</td></tr>')
        if more:
            rest = sum(p.bytes for p in more)
            rows.append(f'<tr class="more"><td colspan="2">and {len(more)} more</td>'
                        f'<td class="n" title="{rest:,} bytes">{_t(format_bytes(rest))}'
                        "</td></tr>")
    return ('<table class="roleparts"><thead><tr><th>role</th><th>where</th><th>op</th>'
            f"<th>size</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _chart(t: MemoryTimeline, name: str) -> str:
    width, height, pad = 760, 200, 60
    last = max(t.steps - 1, 1)
    top = max(max(b for _, b in t.points), 1)

    def x(step: int) -> float:
        return pad + step / last * (width - pad)

    def y(size: int) -> float:
        return height - 20 - size / top * (height - 40)

    coords = " ".join(f"{x(s):.1f},{y(b):.1f}" for s, b in t.points)
    return (f'<svg class="memtimeline" role="img" aria-label="memory over program order '
            f'of {_t(name)}" width="{width + 10}" height="{height}">'
            f'<line x1="{pad}" y1="{height - 20}" x2="{width}" y2="{height - 20}" '
            'stroke="#8a96a3"/>'
            f'<polyline points="{coords}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>'
            + "".join(_hover_rects(t.points, x, height))
            + f'<circle class="peak" cx="{x(t.peak_step):.1f}" cy="{y(t.peak_bytes):.1f}" '
            f'r="6" fill="#e15759" data-step="{t.peak_step}" data-bytes="{t.peak_bytes}" '
            f'data-label="peak: step {t.peak_step}, {_t(format_bytes(t.peak_bytes))}, '
            f'{_t(t.peak_instruction)}"><title>peak</title></circle>'
            f'<text x="0" y="14" font-size="11">{_t(format_bytes(top))}</text>'
            f'<text x="{pad}" y="{height - 4}" font-size="11">step 0</text>'
            f'<text x="{width - 60}" y="{height - 4}" font-size="11">step {last}</text>'
            "</svg>")


def _hover_rects(points: Sequence[tuple[int, int]], x: Callable[[int], float],
                 height: int) -> list[str]:
    """One transparent column per point, as wide as its stretch of the chart."""
    return hover_columns([x(s) for s, _ in points], [
        f'data-step="{step}" data-bytes="{size}" '
        f'data-label="step {step}: {_t(format_bytes(size))}"' for step, size in points],
        height - 20, 2)


def _peak_list(live: LiveAtPeak) -> list[str]:
    more = (f"; {live.more_buffers} more ({_t(format_bytes(live.more_bytes))}) not listed"
            if live.more_buffers else "")
    rows = "".join(
        f'<tr data-bytes="{b.bytes}"><td>{_t(b.kind)}</td>'
        f"<td>{_t(ROLE_WORDS.get(b.role or '', ''))}</td>"
        f"<td>{_t(b.argument or b.source)}</td><td>{_t(b.op)}</td>"
        f"<td><code>{_t(b.shape)}</code></td>"
        f'<td class="n">{_t(format_bytes(b.bytes))}</td>'
        f"<td>{'' if b.donated is None else ('donated' if b.donated else 'not donated')}</td>"
        f"<td><code>{_t(b.instruction)}</code></td>"
        f"<td>{'' if b.live_from is None else f'{b.live_from}-{b.live_to}'}</td></tr>"
        for b in live.buffers)
    lines = "".join(
        f'<tr><td>{_t(s.source)}</td><td class="n">{_t(format_bytes(s.bytes))}</td>'
        f'<td class="n">{s.buffers}</td><td>{_t(", ".join(s.ops))}</td></tr>'
        for s in live.by_source)
    return [
        f'<details class="peaklist"><summary>Live at the peak: '
        f"{_t(format_bytes(live.bytes))} in {len(live.buffers) + live.more_buffers} "
        f"buffers{more}</summary>",
        "<table class=\"live\"><thead><tr><th>kind</th><th>role</th><th>argument or source</th>"
        "<th>op"
        "</th><th>shape</th><th>size</th><th>donated</th><th>instruction</th>"
        f"<th>live over steps</th></tr></thead><tbody>{rows}</tbody></table>",
        f"<p>Arguments: {_t(format_bytes(live.argument_bytes))} in {live.arguments}. "
        "The rest by source line:</p>",
        "<table class=\"livelines\"><thead><tr><th>source</th><th>size</th><th>buffers"
        f"</th><th>ops</th></tr></thead><tbody>{lines}</tbody></table></details>"]
