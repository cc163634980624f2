"""The report as one self-contained HTML file: inline CSS and SVG, no script, no
network. Every string from the report is escaped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import IO

from memscope.report import BufferBreakdown, FunctionReport, Memory, Report
from memscope.units import format_bytes

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;
max-width:1180px;color:#1d232b;background:#fff;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 4px;
border-top:2px solid #dde3ea;padding-top:14px}h3{font-size:15px;margin:18px 0 6px}
.meta,.dim{color:#5b6673}.warn{color:#8a5a00}code{font-size:12.5px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #dde3ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f6f9}td.n{text-align:right;font-variant-numeric:tabular-nums}
.fate-aliased,.fate-reuses_input{color:#16794a}.fate-donor{color:#0f6c85}
.fate-unusable{color:#b3261e;font-weight:600}.fate-copy_of_input{color:#8a5a00}
.fate-pruned{color:#8a96a3}svg{display:block;margin:6px 0}
"""

#: Colours of the figures in each function's chart.
FIGURE_COLOURS = (("argument", "argument_bytes", "#4e79a7"),
                  ("output", "output_bytes", "#59a14f"),
                  ("alias", "alias_bytes", "#b07aa1"),
                  ("temp", "temp_bytes", "#f28e2b"),
                  ("peak", "peak_bytes", "#e15759"))


def render_html(report: Report, file: IO[str]) -> None:
    """Write ``report`` to ``file`` as a complete HTML document."""
    title = "memscope report"
    if report.run is not None:
        title += f": {report.run.target}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>", *_header(report)]
    if not report.functions:
        parts.append("<p>No jitted function was called.</p>")
    else:
        parts.append(_summary(report))
        for i, fn in enumerate(report.functions):
            parts.extend(_function(fn, i))
    parts.append("</body></html>")
    file.write("\n".join(parts))
    file.write("\n")


def _header(report: Report) -> list[str]:
    env = report.environment
    out = []
    if report.run is not None:
        out.append(f'<p class="meta">target <code>{escape(report.run.command)}</code>; '
                   f"run {escape(report.run.ending)}</p>")
    kinds = ", ".join(sorted({d.kind for d in env.devices}))
    out.append(f'<p class="meta">jax {escape(env.jax)}, jaxlib {escape(env.jaxlib)}, '
               f"backend {escape(env.backend)}, {len(env.devices)} device(s) "
               f"({escape(kinds)}); memscope {escape(report.memscope_version)}. "
               "Bytes are per device.</p>")
    return out


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]],
           numeric: Iterable[int] = ()) -> str:
    """A table of already-escaped cells; ``numeric`` columns align right."""
    right = set(numeric)
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in right else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary(report: Report) -> str:
    rows = []
    for i, fn in enumerate(report.functions):
        m = fn.memory
        figures = [getattr(m, attr) if m else None for _, attr, _ in FIGURE_COLOURS]
        rows.append([f'<a href="#fn{i}">{escape(fn.name)}</a>',
                     escape(fn.source or "n/a"), str(fn.calls),
                     *(escape(format_bytes(f)) for f in figures)])
    rules = "".join(f'<p class="dim">{escape(t)}</p>' for t in report.peak_rule_texts())
    return "<h3>Compiled functions</h3>" + _table(
        ["function", "source", "calls", *(n for n, _, _ in FIGURE_COLOURS)], rows,
        numeric=range(2, 8)) + rules


def _function(fn: FunctionReport, i: int) -> list[str]:
    calls = f"{fn.calls} call{'s' if fn.calls != 1 else ''}"
    out = [f'<h2 id="fn{i}">{escape(fn.name)}</h2>',
           f'<p class="meta"><code>{escape(fn.source or "n/a")}</code>, {calls}, '
           f"signature <code>{escape(fn.signature)}</code>; donation "
           f"<code>{escape(fn.setting or 'n/a')}</code></p>"]
    if fn.error:
        out.append(f'<p class="warn">{escape(fn.error)}</p>')
    if fn.memory is not None:
        out.append(_figures_chart(fn.memory, fn.name))
    out.extend(_fates(fn))
    out.extend(_buffers(fn))
    return out


def _figures_chart(m: Memory, name: str) -> str:
    """Horizontal bars of argument, output, alias, temp and peak."""
    values = [(label, getattr(m, attr), colour) for label, attr, colour in FIGURE_COLOURS]
    top = max((v for _, v, _ in values if v), default=0) or 1
    row, label_w, bar_w = 24, 80, 560
    rows = []
    for k, (label, value, colour) in enumerate(values):
        y = k * row
        width = max(1, round(value / top * bar_w)) if value else 0
        rows.append(
            f'<text x="0" y="{y + 16}" font-size="12">{label}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{width}" height="16" fill="{colour}"/>'
            f'<text x="{label_w + width + 6}" y="{y + 16}" font-size="12">'
            f"{escape(format_bytes(value))}</text>")
    height = len(values) * row + 4
    return (f'<svg class="figures" role="img" aria-label="memory figures of {escape(name)}" '
            f'width="{label_w + bar_w + 90}" height="{height}">{"".join(rows)}</svg>')


def _fates(fn: FunctionReport) -> list[str]:
    if not fn.inputs and not fn.outputs:
        return []

    def fate(f: str) -> str:
        return f'<span class="fate-{escape(f)}">{escape(f)}</span>'

    rows = [[escape(b.path), escape(_shape(b.shape)), escape(b.dtype),
             escape(format_bytes(b.bytes)), "yes" if b.donated else "no", fate(b.fate),
             escape(b.output or ("candidate" if b.candidate else ""))] for b in fn.inputs]
    rows += [[escape(o.path), escape(_shape(o.shape)), escape(o.dtype),
              escape(format_bytes(o.bytes)), "", fate(o.fate), escape(o.input or "")]
             for o in fn.outputs]
    out = ["<h3>Buffers and their fates</h3>",
           _table(["buffer", "shape", "dtype", "size", "donated", "fate", "partner"], rows,
                  numeric=[3])]
    out += [f'<p class="warn">JAX warned: {escape(w.strip().splitlines()[0])}</p>'
            for w in fn.warnings if w.strip()]
    out += [f"<p><b>{escape(b.path)}</b> ({escape(b.fate)}): {escape(b.reason)}</p>"
            for b in fn.inputs if b.reason]
    if fn.advice is not None:
        a = fn.advice
        out.append(f"<p><b>Advice:</b> jit {escape(fn.name)} with "
                   f"<code>{escape(a.setting)}</code> (adds {escape(', '.join(a.add))}); "
                   f"peak {escape(format_bytes(a.peak_before))} &rarr; "
                   f"{escape(format_bytes(a.peak_after))} (measured). "
                   f'<span class="dim">{escape(a.caveat)}</span></p>')
    return out


def _buffers(fn: FunctionReport) -> list[str]:
    b = fn.buffers
    if b is None:
        return ['<p class="dim">What holds the memory: n/a (no buffer assignment in this '
                "report)</p>"]
    out = ["<h3>What holds the memory</h3>",
           _table(["allocation kind", "count", "size"],
                  [[escape(g.kind), str(g.count), escape(format_bytes(g.bytes))]
                   for g in b.allocations], numeric=[1, 2])]
    if b.reconciled:
        out.append(f"<p>Temporary allocations: {escape(format_bytes(b.temp_bytes))}, "
                   "equal to XLA's temp figure.</p>")
    else:
        out.append(f'<p class="warn">Temporary allocations: '
                   f"{escape(format_bytes(b.temp_bytes))}. "
                   f"{escape(b.reconcile_note or '')}</p>")
    if b.temp_buffers:
        more = (f" ({b.more_buffers} more, {escape(format_bytes(b.more_bytes))}, not listed)"
                if b.more_buffers else "")
        out.append(f"<h3>Largest temporary buffers{more}</h3>")
        out.append(_table(
            ["source", "op", "shape", "size", "instruction", "offset"],
            [[escape(t.source or "n/a"), escape(t.op), escape(t.shape),
              escape(format_bytes(t.bytes)), escape(t.instruction), str(t.offset)]
             for t in b.temp_buffers], numeric=[3, 5]))
        out.append("<h3>Temporary buffers by source line</h3>")
        out.append(_table(
            ["source", "size", "buffers", "ops"],
            [[escape(line.source or "n/a"), escape(format_bytes(line.bytes)),
              str(line.buffers), escape(", ".join(line.ops))] for line in b.by_source],
            numeric=[1, 2]))
        out.append('<p class="dim">Buffers reuse memory over program order, so per-line '
                   "sums can exceed the allocation.</p>")
    out.extend(_timeline(fn, b))
    return out


def _timeline(fn: FunctionReport, b: BufferBreakdown) -> list[str]:
    out = ["<h3>Memory over program order</h3>"]
    if b.timeline is None:
        return [*out, f'<p class="dim">n/a: {escape(b.timeline_note or "unknown")}</p>']
    out.append(_timeline_chart(b.timeline, fn.name))
    peak = f"Replayed peak {escape(format_bytes(b.replayed_peak))}"
    if fn.memory is not None and fn.memory.xla_peak_bytes is not None:
        peak += f"; XLA's peak {escape(format_bytes(fn.memory.xla_peak_bytes))}"
    out.append(f"<p>{peak}.</p>")
    if b.timeline_note:
        out.append(f'<p class="warn">{escape(b.timeline_note)}</p>')
    if b.live_at_peak:
        out.append(_table(["live at the peak: source", "op", "shape", "size"],
                          [[escape(t.source or "n/a"), escape(t.op), escape(t.shape),
                            escape(format_bytes(t.bytes))] for t in b.live_at_peak],
                          numeric=[3]))
    return out


def _timeline_chart(points: Sequence[tuple[int, int]], name: str) -> str:
    width, height, pad = 760, 180, 40
    last = max(points[-1][0], 1)
    top = max(size for _, size in points) or 1
    coords = " ".join(f"{pad + step / last * (width - pad):.1f},"
                      f"{height - 20 - size / top * (height - 40):.1f}"
                      for step, size in points)
    return (f'<svg class="timeline" role="img" aria-label="memory over program order of '
            f'{escape(name)}" width="{width + 10}" height="{height}">'
            f'<line x1="{pad}" y1="{height - 20}" x2="{width}" y2="{height - 20}" '
            f'stroke="#8a96a3"/>'
            f'<polyline points="{coords}" fill="none" stroke="#e15759" stroke-width="1.5"/>'
            f'<text x="0" y="14" font-size="11">{escape(format_bytes(top))}</text>'
            f'<text x="{pad}" y="{height - 4}" font-size="11">step 0</text>'
            f'<text x="{width - 60}" y="{height - 4}" font-size="11">step {last}</text>'
            "</svg>")


def _shape(shape: tuple[int, ...]) -> str:
    return f"({','.join(map(str, shape))}{',' if len(shape) == 1 else ''})"

