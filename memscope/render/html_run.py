"""The HTML chart of device memory over the run's top-level calls, the
high-water mark marked, and what made it up: listed when the mark is hovered
or clicked.

Every report string is escaped into text or data attributes; :data:`SCRIPT`
holds no report data, it only reads the attributes of the chart it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from memscope.render.html_page import hover_columns
from memscope.render.text import html_text as _t
from memscope.report import HighWater, RunMemory, RunPoint
from memscope.report.units import format_bytes
from memscope.views.run_text import high_water_headline, parts

#: Hovering a call shows its figures; hovering or clicking the high-water mark
#: opens the list of what made it up. It calls :data:`memscope.render.html_live.SCRIPT`'s
#: ``hoverCharts``, which the page includes before it.
SCRIPT = """
hoverCharts('.runchart', '.hwm', 'details.hwmparts');
"""
CSS = (".runchart rect.pt{fill:transparent}.runchart rect.pt:hover{fill:#4e79a722}"
       ".runchart .hwm{cursor:pointer}.runchart .hwm:hover{stroke-width:3}"
       ".runchart .guide{pointer-events:none}details.hwmparts{margin:6px 0}")
_RESIDENT, _TOTAL, _MARK = "#4e79a7", "#1d232b", "#e15759"
_WIDTH, _HEIGHT, _PAD = 760, 220, 60


def run_chart(run: RunMemory, *, ids: str = "", script: bool = True) -> str:
    """The run's section: the answer (the high-water mark), the chart with its
    readout, the mark's parts (collapsed) and how the figures were obtained.
    ``ids`` prefixes its id; without ``script`` (:data:`SCRIPT` is not on the
    page) there is no readout to hover."""
    h = run.high_water
    out = [f'<section id="{ids}run-memory"><h2>Device memory over the run</h2>']
    if h is not None:
        out.append(f'<p class="answer"><b>{_t(high_water_headline(h))}</b> {_t(parts(h))}.</p>')
    else:
        out.append('<p class="answer">High-water mark: n/a (no call was sampled)</p>')
    out.append('<div class="runchart">')
    if run.points:
        out.append(_chart(run.points, h))
    if script:
        out.append('<p class="readout">Hover the chart for a call; hover or click the '
                   "high-water mark for what made it up.</p>")
    if h is not None:
        out.append(_parts(run, h))
    out.append("</div>")
    host = (f"; {_t(format_bytes(run.host_bytes))} more were in host memory at the mark, "
            "not counted" if run.host_bytes else "")
    out.append(f'<p class="dim">Shaded: alive outside the call\'s arguments; line: that '
               f"plus the call's own peak; hollow, dashed: estimated. {run.sampled} of "
               f"{run.calls} calls sampled ({run.sample_seconds * 1000:.3g} ms of sampling) "
               f"on {_t(', '.join(run.devices))}{host}.</p>")
    out.append("</section>")
    return "\n".join(out)


def _chart(points: Sequence[RunPoint], h: HighWater | None) -> str:
    first, last = points[0].call, points[-1].call
    top = max(max(p.total_bytes for p in points), h.bytes if h else 0, 1)
    base = _HEIGHT - 20

    def x(call: int) -> float:
        return _PAD + (call - first) / max(last - first, 1) * (_WIDTH - _PAD)

    def y(size: int) -> float:
        return base - size / top * (_HEIGHT - 40)

    area = " ".join([f"{x(first):.1f},{base}",
                     *(f"{x(p.call):.1f},{y(p.resident_bytes):.1f}" for p in points),
                     f"{x(last):.1f},{base}"])
    return (f'<svg class="runmemory" role="img" aria-label="device memory over the run" '
            f'width="{_WIDTH + 10}" height="{_HEIGHT}">'
            f'<line x1="{_PAD}" y1="{base}" x2="{_WIDTH}" y2="{base}" stroke="#8a96a3"/>'
            f'<polygon class="resident" points="{area}" fill="{_RESIDENT}" '
            f'fill-opacity="0.25" stroke="{_RESIDENT}"/>'
            + "".join(_total_line(points, x, y))
            + "".join(_markers(points, x, y))
            + "".join(_hover_rects(points, x))
            + (_mark(h, x, y) if h is not None else "")
            + f'<text x="0" y="14" font-size="11">{_t(format_bytes(top))}</text>'
            f'<text x="0" y="{base}" font-size="11">0 B</text>'
            f'<text x="{_PAD}" y="{_HEIGHT - 4}" font-size="11">call {first}</text>'
            f'<text x="{_WIDTH - 60}" y="{_HEIGHT - 4}" font-size="11">call {last}</text>'
            "</svg>")


def _total_line(points: Sequence[RunPoint], x: Callable[[int], float],
                y: Callable[[int], float]) -> list[str]:
    """Resident plus the call's peak, point to point; dashed into or out of an estimate."""
    return [f'<line x1="{x(a.call):.1f}" y1="{y(a.total_bytes):.1f}" x2="{x(b.call):.1f}" '
            f'y2="{y(b.total_bytes):.1f}" stroke="{_TOTAL}" stroke-width="1.5"'
            + ("" if a.exact and b.exact else ' stroke-dasharray="4 3"') + "/>"
            for a, b in pairwise(points)]


def _markers(points: Sequence[RunPoint], x: Callable[[int], float],
             y: Callable[[int], float]) -> list[str]:
    """A filled dot per sampled call, a hollow dashed one per estimated call."""
    return [f'<circle class="{"sampled" if p.exact else "estimated"}" cx="{x(p.call):.1f}" '
            f'cy="{y(p.total_bytes):.1f}" r="3" '
            + (f'fill="{_TOTAL}"' if p.exact else
               f'fill="#fff" stroke="{_TOTAL}" stroke-dasharray="2 1"') + "/>"
            for p in points]


def _hover_rects(points: Sequence[RunPoint], x: Callable[[int], float]) -> list[str]:
    """One transparent column per point, as wide as its stretch of the chart."""
    return hover_columns([x(p.call) for p in points], [
        f'data-call="{p.call}" data-bytes="{p.total_bytes}" '
        f'data-label="{_t(_point_text(p))}"' for p in points], _HEIGHT - 20, 3)


def _point_text(p: RunPoint) -> str:
    """``call 12, train_step, sampled: resident 1.0 MiB + peak 2.0 MiB = 3.0 MiB; ...``."""
    how = "sampled" if p.exact else f"estimated from the sample before call {p.from_call}"
    peak = format_bytes(p.peak_bytes) if p.peak_bytes is not None else "n/a"
    text = (f"call {p.call}, {p.function}, {how}: resident {format_bytes(p.resident_bytes)} "
            f"+ peak {peak} = {format_bytes(p.total_bytes)}")
    if p.failed:
        text += " (the call failed)"
    if p.groups:
        text += "; largest: " + ", ".join(f"{label} {format_bytes(b)}" for label, b in p.groups)
    return text


def _mark(h: HighWater, x: Callable[[int], float], y: Callable[[int], float]) -> str:
    cx, cy = x(h.call), y(h.bytes)
    return (f'<line class="guide" x1="{cx:.1f}" y1="20" x2="{cx:.1f}" y2="{_HEIGHT - 20}" '
            f'stroke="{_MARK}" stroke-dasharray="3 3"/>'
            f'<circle class="hwm" cx="{cx:.1f}" cy="{cy:.1f}" r="7" fill="{_MARK}" '
            f'stroke="{_TOTAL}" data-call="{h.call}" data-bytes="{h.bytes}" '
            f'data-label="{_t(high_water_headline(h))} {_t(parts(h))}"><title>high-water mark</title>'
            "</circle>"
            f'<text class="guide" x="{min(cx + 10, _WIDTH - 120):.1f}" y="14" font-size="11" '
            f'fill="{_MARK}">high-water mark</text>')


def _parts(run: RunMemory, h: HighWater) -> str:
    """The mark's groups and the call's largest buffers, then how it was obtained."""
    groups = "".join(
        f'<tr data-bytes="{g.bytes}"><td>{_t(g.label)}</td><td class="n">{g.arrays}</td>'
        f'<td class="n">{_t(format_bytes(g.bytes))}</td><td><code>{_t(g.held_by)}</code></td>'
        f"<td>{_t(g.line)}</td></tr>" for g in h.groups)
    if h.more_groups:
        groups += (f'<tr><td colspan="5">and {h.more_groups} more '
                   f"({_t(format_bytes(h.more_group_bytes))})</td></tr>")
    out = [f"<details class=\"hwmparts\"><summary>What made up the high-water mark: "
           f"{_t(parts(h))}</summary>",
           '<table class="hwmgroups"><thead><tr><th>alive outside the call\'s arguments</th>'
           "<th>arrays</th><th>size</th><th>held by</th><th>assigned at</th></tr></thead>"
           f"<tbody>{groups}</tbody></table>"]
    if h.buffers:
        rows = "".join(
            f'<tr data-bytes="{b.bytes}"><td>{_t(b.kind)}</td><td>{_t(b.argument or b.op)}</td>'
            f"<td><code>{_t(b.shape)}</code></td>"
            f'<td class="n">{_t(format_bytes(b.bytes))}</td><td>{_t(b.source)}</td></tr>'
            for b in h.buffers)
        out.append("<p>The call's largest buffers at its peak:</p>"
                   '<table class="hwmbuffers"><thead><tr><th>kind</th><th>argument or op</th>'
                   "<th>shape</th><th>size</th><th>source</th></tr></thead>"
                   f"<tbody>{rows}</tbody></table>")
    if h.allocator_note:
        out.append(f"<p>{_t(h.allocator_note)}</p>")
    out.append(f'<p class="dim">{_t(run.how)}</p></details>')
    return "".join(out)
