"""The report as one self-contained HTML file: inline style and script, no network.

The answer first (per function: peak, findings, advice), the run's device memory
over its calls (:mod:`memscope.render.html_run`), then one collapsible section
per function with its leaves by argument, the merged reasons, the
donation variants, the terms it uses, and a table of every leaf that sorts by
size and filters by fate and path text in the page
(:mod:`memscope.render.html_leaves`). Every string from the report
is shown literally (control characters escaped, then HTML-escaped); the script
holds no report data, it only reads the table it is given.

The same body, as one element to embed in a page of another's (a notebook's
output, :func:`report_fragment`): its style scoped to it, its ids its own, and
no script (notebooks strip scripts from outputs they do not trust), so what
collapses is ``<details>`` and the leaf table lists its first rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO

from memscope.errors import first_line
from memscope.render import html_leaves, html_live, html_page, html_run
from memscope.render.text import fates_text
from memscope.render.text import html_text as _t
from memscope.report import (
    BufferBreakdown,
    FunctionReport,
    LiveSample,
    Memory,
    Report,
)
from memscope.report.units import format_bytes
from memscope.views import remat_text
from memscope.views.leaves import LeafGroup
from memscope.views.summary import (
    FunctionSummary,
    ReportSummary,
    summarize,
    summarize_function,
)

#: The report's own rules, after the shared ones (:data:`memscope.render.html_page.CSS`).
_CSS = """
h2{font-size:18px;margin:32px 0 4px;border-top:2px solid #dde3ea;padding-top:14px}
h3{font-size:15px;margin:18px 0 6px}.warn{color:#8a5a00}
.fate-aliased,.fate-reuses_input{color:#16794a}.fate-donor{color:#0f6c85}
.fate-unusable{color:#b3261e;font-weight:600}.fate-copy_of_input{color:#8a5a00}
.fate-pruned,.fate-ref_unused{color:#8a96a3}
.fate-ref_updated,.fate-ref_read,.fate-ref_written{color:#16794a}svg{display:block;margin:6px 0}
.answer{margin:6px 0 14px}.answer ul{margin:4px 0;padding-left:22px}
li.problem{color:#b3261e}li.warning{color:#8a5a00}li.info{color:#5b6673}
.advice{background:#f6f0fa;border-left:4px solid #8e44ad;padding:6px 10px;margin:6px 0}
details.fn{border:1px solid #dde3ea;border-radius:6px;margin:14px 0;padding:0 14px}
details.fn>summary{cursor:pointer;padding:10px 0;font-size:16px}
details.fn[open]>summary{border-bottom:1px solid #dde3ea;margin-bottom:8px}
td.d1{padding-left:26px}dl.terms dt{font-weight:600;float:left;clear:left;margin-right:6px}
dl.terms dd{margin:0 0 2px}.controls{margin:6px 0}.controls input{width:280px}
table.leaves th button{font:inherit;border:0;background:none;cursor:pointer;padding:0}
table.leaves td.reason{max-width:560px;color:#3a4450;font-size:12px}
"""

#: Colours of the figures in each function's chart.
FIGURE_COLOURS = (("argument", "argument_bytes", "#4e79a7"),
                  ("output", "output_bytes", "#59a14f"),
                  ("alias", "alias_bytes", "#b07aa1"),
                  ("temp", "temp_bytes", "#f28e2b"),
                  ("peak", "peak_bytes", "#e15759"))
#: With at most this many functions, each section starts open.
OPEN_SECTIONS = 3


#: The element an embedded report is in (:func:`report_fragment`); its style is scoped to it.
FRAGMENT_CLASS = "memscope-report"
#: An embedded report's own look: its page's, less the page's margins, smaller headings.
_FRAGMENT_CSS = ("body{margin:0;padding:0;max-width:none}h1{font-size:17px}"
                 "h2{font-size:15px;margin:20px 0 4px}")
#: Numbers the ids of embedded reports: several in one notebook never share one.
_FRAGMENTS = itertools.count(1)


@dataclass(frozen=True)
class _Page:
    """Where the body goes: a page of memscope's own (its script runs there), or
    embedded (no script; ``ids`` prefixes every id, sections start closed)."""

    script: bool = True
    ids: str = ""


def render_html(report: Report, file: IO[str]) -> None:
    """Write ``report`` to ``file`` as a complete HTML document."""
    file.write(html_page.document(
        _title(report), _body(report, _Page()), css=_CSS + html_live.CSS + html_run.CSS,
        script=html_leaves.SCRIPT + html_live.SCRIPT + html_run.SCRIPT))


def report_fragment(report: Report) -> str:
    """``report`` as one ``<div>`` to embed in another page (a notebook's output):
    the page's body, answer first, with its style scoped to the element, ids of
    its own, no script and no resource from elsewhere; every function's section
    starts closed."""
    page = _Page(script=False, ids=f"memscope{next(_FRAGMENTS)}-")
    return _embedded(_body(report, page))


def function_fragment(fn: FunctionReport) -> str:
    """One function's report as one ``<div>`` to embed (see :func:`report_fragment`):
    its answer, then its section, open."""
    page = _Page(script=False, ids=f"memscope{next(_FRAGMENTS)}-")
    s = summarize_function(fn)
    return _embedded([*_answer(ReportSummary((s,)), page), *_function(fn, s, 0, True, page)])


def _embedded(parts: list[str]) -> str:
    css = scoped(html_page.CSS + _CSS + html_live.CSS + html_run.CSS + _FRAGMENT_CSS,
                 f".{FRAGMENT_CLASS}")
    return "\n".join([f'<div class="{FRAGMENT_CLASS}"><style>{css}</style>', *parts, "</div>"])


def scoped(css: str, root: str) -> str:
    """``css`` (plain rules, no at-rules) applying only inside ``root``: each
    selector prefixed with it, ``body`` becoming ``root`` itself."""
    rules = []
    for rule in css.split("}"):
        selectors, brace, declarations = rule.partition("{")
        if not brace:
            continue
        prefixed = (root if sel.strip() == "body" else f"{root} {sel.strip()}"
                    for sel in selectors.split(","))
        rules.append(f"{','.join(prefixed)}{{{declarations.strip()}}}")
    return "".join(rules)


def _title(report: Report) -> str:
    title = "memscope report"
    if report.run is not None:
        title += f": {report.run.command if report.run.cell else report.run.program}"
    return title


def _body(report: Report, page: _Page) -> list[str]:
    """The report's body, the page's and the embedded one's: the answer first."""
    parts = [f"<h1>{_t(_title(report))}</h1>", *_header(report)]
    summary = summarize(report)
    if not report.functions:
        parts.append("<p>No jitted function was called.</p>")
        parts.extend(_run_memory(report, page))
        parts.extend(_between(report, summary, page))
        return parts
    parts.extend(_answer(summary, page))
    parts.extend(_run_memory(report, page))
    parts.extend(_between(report, summary, page))
    parts.append(_figures_table(report, page))
    opened = page.script and len(report.functions) <= OPEN_SECTIONS
    for i, (fn, s) in enumerate(zip(report.functions, summary.functions, strict=True)):
        parts.extend(_function(fn, s, i, opened, page))
    return parts


def _header(report: Report) -> list[str]:
    env = report.environment
    out = []
    if report.run is not None:
        out.append(f'<p class="meta">program <code>{_t(report.run.command)}</code>; '
                   f"run {_t(report.run.ending)}</p>")
    kinds = ", ".join(sorted({d.kind for d in env.devices}))
    out.append(f'<p class="meta">jax {_t(env.jax)}, jaxlib {_t(env.jaxlib)}, '
               f"backend {_t(env.backend or 'not started')}, {len(env.devices)} device(s) "
               f"({_t(kinds)}); memscope {_t(report.memscope_version)}. "
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


def _answer(summary: ReportSummary, page: _Page) -> list[str]:
    """Per function: its peak, what is wrong, and what to change, before any table."""
    out = [f'<section id="{page.ids}answer"><h2>What to look at</h2>']
    for i, s in enumerate(summary.functions):
        calls = f"{s.calls} call{'s' if s.calls != 1 else ''}"
        which = f", signature {s.variant_of[0]} of {s.variant_of[1]}" if s.variant_of else ""
        out.append(f'<div class="answer"><b><a href="#{page.ids}fn{i}">{_t(s.name)}</a></b>: peak '
                   f"{_t(format_bytes(s.peak))} per device{_t(s.host_text)} ({_t(s.source)}, "
                   f"{calls}{which})")
        items = [f'<li class="{f.severity}">{_t(f.text)}'
                 + (f": <code>{_t(f.leaves)}</code>" if f.leaves else "") + "</li>"
                 for f in s.findings]
        if items:
            out.append(f"<ul>{''.join(items)}</ul>")
        if s.advice is not None:
            a = s.advice
            out.append(f'<p class="advice"><b>Advice:</b> <code>{_t(a.headline)}</code>: '
                       f'{_t(a.saving)}. <span class="dim">{_t(a.caveat)}</span></p>')
        if s.remat_advice is not None:
            out.append(f'<p class="advice"><b>Remat advice:</b> {_t(s.remat_advice)}.</p>')
        if s.advice is None and s.remat_advice is None and not s.findings:
            out.append("<p>Nothing to change: no unusable, unused or missed donation, "
                       "no copy.</p>")
        out.append("</div>")
    out.append("</section>")
    return out


def _figures_table(report: Report, page: _Page) -> str:
    rows = []
    for i, fn in enumerate(report.functions):
        m = fn.memory
        figures = [getattr(m, attr) if m else None for _, attr, _ in FIGURE_COLOURS]
        rows.append([f'<a href="#{page.ids}fn{i}">{_t(fn.name)}</a>', _t(fn.source), str(fn.calls),
                     *(_t(format_bytes(f)) for f in figures)])
    rules = "".join(f'<p class="dim">{_t(t)}</p>' for t, _ in report.peak_rule_notes())
    return "<h3>Compiled functions</h3>" + _table(
        ["function", "source", "calls", *(n for n, _, _ in FIGURE_COLOURS)], rows,
        numeric=range(2, 8)) + rules


def _function(fn: FunctionReport, s: FunctionSummary, i: int, opened: bool,
              page: _Page) -> list[str]:
    calls = f"{fn.calls} call{'s' if fn.calls != 1 else ''}"
    problems = f", {s.problems} problem{'s' if s.problems != 1 else ''}" if s.problems else ""
    out = [f'<details class="fn" id="{page.ids}fn{i}"{" open" if opened else ""}><summary>'
           f"<b>{_t(fn.name)}</b> peak {_t(format_bytes(s.peak))}{problems}</summary>",
           f'<p class="meta"><code>{_t(fn.source)}</code>, {calls}; donation as written '
           f"<code>{_t(fn.setting)}</code></p>",
           f"<p>Signature{_variant_of(s)}: <code>{_t(s.signature)}</code></p>",
           f"<details><summary>full signature</summary><code>{_t(fn.signature)}</code>"
           "</details>"]
    if s.differs:
        out.append(f"<p>Differs from its other signatures in: <code>{_t(s.differs)}</code></p>")
    if fn.error:
        out.append(f'<p class="warn">{_t(fn.error)}</p>')
    if fn.memory is not None:
        out.append(_figures_chart(fn.memory, fn.name))
        out.extend(_host_memory(fn.memory))
    out.extend(_groups(s))
    out.extend(_reasons(fn, s))
    out.extend(_variants(s))
    out.extend(_remat(fn))
    out.extend(_terms(s))
    out.extend(html_leaves.leaf_table(fn, script=page.script))
    out.extend(html_live.live_section(fn, script=page.script))
    out.extend(_buffers(fn))
    out.append("</details>")
    return out


def _host_memory(m: Memory) -> list[str]:
    """The program's host memory, apart from the device figures above it."""
    out = []
    if m.host.any_nonzero():
        h = m.host
        out.append(f"<p>Host memory (not in the device peak): held for the call "
                   f"{_t(format_bytes(h.peak_bytes))}; argument "
                   f"{_t(format_bytes(h.argument_bytes))}, output "
                   f"{_t(format_bytes(h.output_bytes))}, alias {_t(format_bytes(h.alias_bytes))}"
                   f", temp {_t(format_bytes(h.temp_bytes))}.</p>")
    if m.memory_kind_note:
        out.append(f'<p class="dim">{_t(m.memory_kind_note)}</p>')
    return out


def _variant_of(s: FunctionSummary) -> str:
    return f" {s.variant_of[0]} of {s.variant_of[1]}" if s.variant_of else ""


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
            f"{_t(format_bytes(value))}</text>")
    height = len(values) * row + 4
    return (f'<svg class="figures" role="img" aria-label="memory figures of {_t(name)}" '
            f'width="{label_w + bar_w + 90}" height="{height}">{"".join(rows)}</svg>')


def _fates_text(g: LeafGroup) -> str:
    return fates_text(g, fate=lambda f: f'<span class="fate-{_t(f)}">{_t(f)}</span>', text=_t)


def _groups(s: FunctionSummary) -> list[str]:
    out = []
    for title, count, size, groups in (("Inputs", s.input_leaves, s.input_bytes, s.inputs),
                                       ("Outputs", s.output_leaves, s.output_bytes, s.outputs)):
        if not groups:
            continue
        rows = [[f'<span class="d{g.depth}">{_t(g.path)}</span>', str(g.leaves),
                 _t(format_bytes(g.bytes)), _fates_text(g)] for g in groups]
        out.append(f"<h3>{title} by argument: {count} leaves, {_t(format_bytes(size))}</h3>")
        out.append(_table(["argument / subtree", "leaves", "size", "fates"], rows,
                          numeric=[1, 2]).replace('<td><span class="d1">',
                                                  '<td class="d1"><span class="d1">'))
    return out


def _reasons(fn: FunctionReport, s: FunctionSummary) -> list[str]:
    out = [f'<p class="warn">JAX warned: {_t(line)}</p>'
           for line in map(first_line, fn.warnings) if line]
    if not s.reasons:
        return out
    items = []
    for r in s.reasons:
        noun = "leaf" if r.leaves == 1 else "leaves"
        example = (_t(r.example) if r.leaves == 1 else
                   f"for example <code>{_t(r.example_path)}</code>: {_t(r.example)}")
        items.append(f"<li><code>{_t(r.group)}</code> ({r.leaves} {noun}, "
                     f"{_t(r.fate)}, {_t(format_bytes(r.bytes))}): {example}</li>")
    return [*out, "<h3>Why (identical reasons merged; each leaf's own: the leaf table)</h3>",
            f"<ul>{''.join(items)}</ul>"]


def _variants(s: FunctionSummary) -> list[str]:
    if not s.variants:
        return []
    headers = ["", "as written", *(_t(v.title) for v in s.variants)]
    rows = [[label, _t(format_bytes(getattr(s.memory, attr, None) if s.memory else None)),
             *(_t(format_bytes(getattr(v.memory, attr) if v.memory else None))
               for v in s.variants)] for label, attr, _ in FIGURE_COLOURS]
    rows.append(["unusable", str(s.unusable),
                 *("n/a" if v.unusable is None else str(v.unusable) for v in s.variants)])
    settings = [f"<li>as written: <code>{_t(s.setting)}</code></li>"]
    for v in s.variants:
        extra = " (as written, not compiled again)" if v.same_as_written else ""
        if v.unusable_leaves:
            extra += f"; unusable: <code>{_t(v.unusable_leaves)}</code>"
        if v.error:
            extra += f' <span class="warn">({_t(v.error)})</span>'
        settings.append(f"<li>{_t(v.title)}: <code>{_t(v.setting)}</code>{extra}</li>")
    return ["<h3>Donation variants (each compiled and measured)</h3>",
            _table(headers, rows, numeric=range(1, len(headers))),
            f"<ul>{''.join(settings)}</ul>"]


def _remat(fn: FunctionReport) -> list[str]:
    """What the backward pass keeps, by source line, and the policies measured."""
    r = fn.remat
    if r is None:
        return []
    out = ["<h3>Backward pass: residuals and checkpoint policies</h3>"]
    if r.error is not None:
        return [*out, f'<p class="warn">could not trace it again: {_t(r.error)}</p>']
    for d in r.differentiations:
        rows, more = remat_text.residual_lines(d)
        out.append(f"<p>{_t(remat_text.differentiation_line(d))}</p>")
        out.append(_table(["source line", "bytes", "values", "primitives"],
                          [[_t(c) for c in row] for row in rows], numeric=range(1, 3)))
        if more:
            out.append(f'<p class="dim">{_t(more)}</p>')
    if r.variants:
        host = remat_text.offloads(r)
        out.append(_table(["policy", "peak", *(["host"] if host else []), "FLOPs",
                           "against as written"],
                          [[_t(p.policy), _t(p.peak), *([_t(p.host)] if host else []),
                            _t(p.flops), _t(p.change)]
                           for p in remat_text.policy_rows(r)],
                          numeric=range(1, 4 if host else 3)))
    if r.offload_note is not None:
        out.append(f'<p class="warn">{_t(r.offload_note)}</p>')
    why = remat_text.no_advice(r)
    if why is not None:
        out.append(f'<p class="dim">{_t(why)}</p>')
    return out


def _terms(s: FunctionSummary) -> list[str]:
    if not s.terms:
        return []
    items = "".join(f"<dt>{_t(term)}</dt><dd>{_t(meaning)}</dd>"
                    for term, meaning in s.terms)
    return [f'<h3>Terms</h3><dl class="terms">{items}</dl>']


def _buffers(fn: FunctionReport) -> list[str]:
    b = fn.buffers
    if b is None:
        return ['<p class="dim">What holds the memory: n/a (no buffer assignment in this '
                "report)</p>"]
    out = ["<h3>What holds the memory</h3>",
           _table(["allocation kind", "count", "size"],
                  [[_t(g.kind), str(g.count), _t(format_bytes(g.bytes))]
                   for g in b.allocations], numeric=[1, 2])]
    if b.reconciled:
        out.append(f"<p>Temporary allocations: {_t(format_bytes(b.temp_bytes))}, "
                   "equal to XLA's temp figure.</p>")
    else:
        out.append(f'<p class="warn">Temporary allocations: '
                   f"{_t(format_bytes(b.temp_bytes))}. "
                   f"{_t(b.reconcile_note or '')}</p>")
    if b.temp_buffers:
        more = (f" ({b.more_buffers} more, {_t(format_bytes(b.more_bytes))}, not listed)"
                if b.more_buffers else "")
        out.append(f"<h3>Largest temporary buffers{more}</h3>")
        out.append(_table(
            ["source", "op", "shape", "size", "instruction", "offset"],
            [[_t(t.source or "n/a"), _t(t.op), _t(t.shape),
              _t(format_bytes(t.bytes)), _t(t.instruction), str(t.offset)]
             for t in b.temp_buffers], numeric=[3, 5]))
        out.append("<h3>Temporary buffers by source line</h3>")
        out.append(_table(
            ["source", "size", "buffers", "ops"],
            [[_t(line.source or "n/a"), _t(format_bytes(line.bytes)),
              str(line.buffers), _t(", ".join(line.ops))] for line in b.by_source],
            numeric=[1, 2]))
        out.append('<p class="dim">Buffers reuse memory over program order, so per-line '
                   "sums can exceed the allocation.</p>")
    out.extend(_timeline(fn, b))
    return out


def _timeline(fn: FunctionReport, b: BufferBreakdown) -> list[str]:
    out = ["<h3>Memory over program order</h3>"]
    if b.timeline is None:
        return [*out, f'<p class="dim">n/a: {_t(b.timeline_note or "unknown")}</p>']
    out.append(_timeline_chart(b.timeline, fn.name))
    peak = f"Replayed peak {_t(format_bytes(b.replayed_peak))}"
    if fn.memory is not None and fn.memory.xla_peak_bytes is not None:
        peak += f"; XLA's peak {_t(format_bytes(fn.memory.xla_peak_bytes))}"
    out.append(f"<p>{peak}.</p>")
    if b.timeline_note:
        out.append(f'<p class="warn">{_t(b.timeline_note)}</p>')
    if b.live_at_peak:
        out.append(_table(["live at the peak: source", "op", "shape", "size"],
                          [[_t(t.source or "n/a"), _t(t.op), _t(t.shape),
                            _t(format_bytes(t.bytes))] for t in b.live_at_peak],
                          numeric=[3]))
    return out


def _run_memory(report: Report, page: _Page) -> list[str]:
    """The run's device memory over its calls, when the run was sampled."""
    run = report.runtime.run_memory if report.runtime is not None else None
    return ([html_run.run_chart(run, ids=page.ids, script=page.script)]
            if run is not None else [])


def _between(report: Report, summary: ReportSummary, page: _Page) -> list[str]:
    """What happened between calls, and the live arrays over the run as a chart."""
    timeline = report.runtime.live_timeline if report.runtime is not None else None
    if not summary.between and (timeline is None or not timeline.samples):
        return []
    out = [f'<section id="{page.ids}between"><h2>Between calls</h2>']
    items = [f'<li class="{f.severity}">{_t(f.text)}</li>' for f in summary.between]
    if items:
        out.append(f"<ul>{''.join(items)}</ul>")
    if timeline is not None and timeline.samples:
        out.append(f'<h3>Live arrays over the run</h3><p class="dim">sampled '
                   f"{_t(timeline.sampling)}: {len(timeline.samples)} samples, "
                   f"{timeline.sample_seconds * 1000:.3g} ms of sampling</p>")
        out.append(_live_chart(timeline.samples))
    out.append("</section>")
    return out


def _live_chart(samples: Sequence[LiveSample]) -> str:
    """The count of live arrays after each sampled call."""
    width, height, pad = 760, 180, 40
    last = max(samples[-1].call, 1)
    top = max(s.count for s in samples) or 1
    coords = " ".join(f"{pad + s.call / last * (width - pad):.1f},"
                      f"{height - 20 - s.count / top * (height - 40):.1f}" for s in samples)
    return (f'<svg class="timeline" role="img" aria-label="live arrays over the run" '
            f'width="{width + 10}" height="{height}">'
            f'<line x1="{pad}" y1="{height - 20}" x2="{width}" y2="{height - 20}" '
            f'stroke="#8a96a3"/>'
            f'<polyline points="{coords}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>'
            f'<text x="0" y="14" font-size="11">{top:,} arrays</text>'
            f'<text x="{pad}" y="{height - 4}" font-size="11">call 0</text>'
            f'<text x="{width - 60}" y="{height - 4}" font-size="11">call {last}</text>'
            "</svg>")


def _timeline_chart(points: Sequence[tuple[int, int]], name: str) -> str:
    width, height, pad = 760, 180, 40
    last = max(points[-1][0], 1)
    top = max(size for _, size in points) or 1
    coords = " ".join(f"{pad + step / last * (width - pad):.1f},"
                      f"{height - 20 - size / top * (height - 40):.1f}"
                      for step, size in points)
    return (f'<svg class="timeline" role="img" aria-label="memory over program order of '
            f'{_t(name)}" width="{width + 10}" height="{height}">'
            f'<line x1="{pad}" y1="{height - 20}" x2="{width}" y2="{height - 20}" '
            f'stroke="#8a96a3"/>'
            f'<polyline points="{coords}" fill="none" stroke="#e15759" stroke-width="1.5"/>'
            f'<text x="0" y="14" font-size="11">{_t(format_bytes(top))}</text>'
            f'<text x="{pad}" y="{height - 4}" font-size="11">step 0</text>'
            f'<text x="{width - 60}" y="{height - 4}" font-size="11">step {last}</text>'
            "</svg>")
