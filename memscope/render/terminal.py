"""The terminal view of a report, with rich: the answer first, one line per group.

First what a reader came for: per function its peak, what is wrong and what to
change with the measured saving. Then the figures, and per function its leaves
grouped by argument and subtree, identical reasons merged, the donation variants
and the terms it used. Every leaf, with its own reason, only with ``leaves``
(``--leaves`` on the command line) and in the JSON report.

Colour and box drawing on a terminal; plain ASCII with no escape codes when the
file is not a terminal or ``NO_COLOR`` is set. Lines break between words only, so
a path, a number or a size is never split and stays greppable in a log. Nothing
from the report is read as markup, and control characters are shown escaped.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import IO

from rich.table import Table
from rich.text import Text

from memscope.errors import first_line
from memscope.render.console import Lines, make_console
from memscope.render.oom import post_mortem_lines
from memscope.render.terminal_leaves import LeafFilter, leaf_detail, remat_section
from memscope.render.text import fates_text, shorten, visible, where_text, wrap
from memscope.report import (
    FunctionReport,
    Memory,
    Report,
)
from memscope.report.paths import bounded_leaves
from memscope.report.units import format_bytes, format_change
from memscope.views import run_text
from memscope.views.leaves import (
    LeafGroup,
)
from memscope.views.summary import (
    FIGURES_SHOWN,
    Finding,
    FunctionSummary,
    ReportSummary,
    library_line,
    summarize,
    summarize_function,
    target_line,
)
from memscope.views.view import choose_view, urgency

#: The widest a group's path is shown in its line (the whole path: --leaves, JSON).
GROUP_PATH_WIDTH = 36

SEVERITY_STYLES = {"problem": "bold red", "warning": "yellow", "info": "dim"}


def render_report(report: Report, file: IO[str], *, width: int | None = None,
                  plain: bool | None = None, leaves: LeafFilter | None = None,
                  detail: bool = False) -> None:
    """Write the answer, the figures, and a section for each function with
    something to change: its arguments, the reasons, JAX's warnings. With
    ``detail`` (implied by ``leaves``) every function's section in full: its
    subtrees, every reason, the donation variants' table and the terms; with
    ``leaves`` its leaves too."""
    detail = detail or leaves is not None
    out = Lines(make_console(file, width=width, plain=plain))
    _header(out, report)
    summary = summarize(report)
    if not report.functions:
        out.line("No jitted function was called.")
        _between(out, summary)
        return
    for line in post_mortem_lines(report):  # a failure is the first finding
        out.para(line, "    ", style="bold red" if line.startswith("OUT OF MEMORY") else "")
    _high_water(out, report, detail)
    view = choose_view(report, summary, rows=None if detail else MAX_FUNCTIONS,
                       sections=MAX_TERMINAL_SECTIONS, sections_bounded=MAX_SECTIONS_BOUNDED,
                       every_section=detail)
    _answer(out, summary, view.answer, detail, notes=not view.bounded)
    _between(out, summary, detail)
    out.line()
    out.table(_figures_table(summary, out, view.rows), "Compiled functions (bytes per device)")
    for text, computed in view.peak_rules:  # "*" marks the peaks memscope computed
        out.para(("* " if computed else "") + visible(text), "  ", style="dim")
    if report.runtime is not None:
        for text in _runtime(report):
            out.para(text, "  ")
    for i in view.sections:
        fn, s = report.functions[i], summary.functions[i]
        out.line()
        _function_section(out, fn, s, detail)
        if leaves is not None and not (s.small and leaves == LeafFilter()):
            leaf_detail(out, fn, leaves)
    out.line()
    if leaves is not None:
        out.para("Everything, every figure and leaf: -o FILE.json", style="dim")
        return
    hidden = (f"Not shown, nothing to change: {shorten(', '.join(view.quiet), 60)}. "
              if view.quiet else "")
    if view.unsectioned:
        hidden += f"{view.unsectioned:,} more functions with something to change: --detail. "
    more = "" if detail else "Every function in full: --detail; "
    out.para(f"{hidden}{more}every leaf: --leaves; everything: -o FILE.json", style="dim")
    libraries = library_line(report)
    if libraries is not None:
        out.para(libraries, style="dim")


def render_function(fn: FunctionReport, file: IO[str], *, width: int | None = None,
                    plain: bool | None = None) -> None:
    """Write one function's report: its answer, then its section (as in
    :func:`render_report`)."""
    out = Lines(make_console(file, width=width, plain=plain))
    s = summarize_function(fn)
    _answer(out, ReportSummary((s,)), (0,))
    out.line()
    _function_section(out, fn, s)


def _header(out: Lines, report: Report) -> None:
    env = report.environment
    kinds = sorted({visible(d.kind) for d in env.devices})
    devices = f"{len(env.devices)} device{'s' if len(env.devices) != 1 else ''}"
    out.line("memscope report", "bold")
    if report.run is not None:
        out.para(f"program: {visible(report.run.command)}", "         ")
        out.para(f"run:     {visible(report.run.ending)}", "         ")
    if env.backend is None:
        out.para(f"jax {visible(env.jax)}, jaxlib {visible(env.jaxlib)}: not started (the "
                 "program did not import JAX)")
    else:
        out.para(f"jax {visible(env.jax)}, jaxlib {visible(env.jaxlib)}, backend "
                 f"{visible(env.backend)}, {devices} ({', '.join(kinds)})")
    if report.target is not None:
        out.para(visible(target_line(report.target)), "  ")
    for note in report.notes:
        out.para(visible(note), "  ")
    if report.merged_from:
        parts = ", ".join(f"{p.process_index} ({visible(p.file)}"
                          + (f", {p.run.outcome}" if p.run else "") + ")"
                          for p in report.merged_from)
        out.para(f"merged from {len(report.merged_from)} processes: {parts}", "  ")
    out.line()


#: Groups of what was alive at the high-water mark named by default (the rest
#: counted; run_text.SHOWN with --detail, all of them in the JSON and HTML).
HIGH_WATER_GROUPS = 2


def _high_water(out: Lines, report: Report, detail: bool = True) -> None:
    """The run's high-water mark, first: what the devices held at the run's largest."""
    run = report.runtime.run_memory if report.runtime is not None else None
    if run is None or run.high_water is None:
        return
    shown = run_text.SHOWN if detail else HIGH_WATER_GROUPS
    for i, text in enumerate(run_text.high_water_lines(run, shown, roles=detail)):
        if i == 0:
            out.line(visible(text), "bold")
        else:
            out.para(visible(text), "      ")
    out.line()


#: The functions the answer and the figures show by default, worst and largest
#: first, the rest counted (all with --detail; every one is in the JSON report).
MAX_FUNCTIONS = 12
#: The function sections shown by default, worst first.
MAX_TERMINAL_SECTIONS = 4
#: ... and where the run had more functions than the answer lists (a test
#: suite, a sweep): there the answer carries the run, and a section of each of
#: a few small functions would only lengthen it. The answer then also leaves
#: out the functions' notes (all with --detail), so that the default report of
#: a public library's test suite stays under 200 lines at 80 columns.
MAX_SECTIONS_BOUNDED = 2


def _answer(out: Lines, summary: ReportSummary, shown: Sequence[int], detail: bool = True,
            notes: bool = True) -> None:
    """Per function in ``shown`` (most urgent first): its peak, what is wrong,
    and what to change (without its notes unless ``notes``); the functions not
    shown counted, by what they have to say."""
    for s in (summary.functions[i] for i in shown):
        where = where_text(s.source)
        variant = f", signature {s.variant_of[0]} of {s.variant_of[1]}" if s.variant_of else ""
        clean = not s.findings and s.advice is None and s.remat_advice is None
        out.para(f"{visible(s.name)} ({where}{variant}): peak {format_bytes(s.peak)} per "
                 f"device{s.host_text}{visible(s.target_text)}"
                 + ("; nothing to change" if clean else ""), "    ")
        for f in s.findings:
            if notes or f.severity != "info":
                _finding(out, f, detail)
        if s.advice is not None:
            a = s.advice
            out.labelled("Advice:", "bold magenta", f"{visible(a.headline)}: {a.saving}.",
                         "    ")
        if s.remat_advice is not None:
            out.labelled("Remat advice:", "bold magenta", f"{visible(s.remat_advice)}.",
                         "    ")
        if s.roles_text:  # what the peak is made of, after what to change
            out.para(visible(s.roles_text), "    ", "  ", style="dim")
    rest = [s for i, s in enumerate(summary.functions) if i not in shown]
    if rest:
        kinds = ("with a problem", "with a warning or advice", "with a note",
                 "with nothing to change")
        counts = [sum(urgency(s) == k for s in rest) for k in range(4)]
        largest = max((s.peak or 0 for s in rest), default=0)
        out.para(f"and {len(rest):,} more functions ("
                 + ", ".join(f"{n:,} {kinds[k]}" for k, n in enumerate(counts) if n)
                 + f"; the largest peak {format_bytes(largest)}): --detail, or -o FILE.json",
                 "    ", style="dim")


#: Findings of the run as a whole shown by default (all with --detail).
MAX_BETWEEN = 6


def _between(out: Lines, summary: ReportSummary, detail: bool = True) -> None:
    if summary.between:
        out.line()
        out.line("Between calls", "bold")
        shown = summary.between if detail else summary.between[:MAX_BETWEEN]
        for f in shown:
            _finding(out, f, detail)
        if len(shown) < len(summary.between):
            out.line(f"  and {len(summary.between) - len(shown):,} more: --detail", "dim")


def _finding(out: Lines, f: Finding, detail: bool = True) -> None:
    label = {"problem": "problem:", "warning": "warning:", "info": "note:"}[f.severity]
    said = f.text if detail or f.brief is None else f.brief
    text = visible(said) + (f": {visible(f.leaves)}" if f.leaves else "")
    out.labelled(label, SEVERITY_STYLES[f.severity], text, "      ")


def _figures_table(summary: ReportSummary, out: Lines, shown: Collection[int]) -> Table:
    table = Table(box=out.box)
    # The calls are in the answer above: the name gets their room.
    table.add_column("function", no_wrap=True)
    for name, _ in FIGURES_SHOWN:
        table.add_column(name, justify="right", no_wrap=True)
    functions = [s for i, s in enumerate(summary.functions) if i in shown]
    rows = []
    for s in functions:
        m = s.memory
        peak = _figure(m, "peak_bytes") + ("*" if m and m.peak_is_computed else "")
        rows.append([*(_figure(m, attr) for _, attr in FIGURES_SHOWN[:-1]), peak])
    # What the figures leave for the name: each column and its 3 characters of border.
    titles = [label for label, _ in FIGURES_SHOWN]
    used = sum(max(len(t), *(len(r[i]) for r in rows)) + 3 for i, t in enumerate(titles))
    room = max(10, out.width - used - 4)
    for s, row in zip(functions, rows, strict=True):
        which = f" {s.variant_of[0]}/{s.variant_of[1]}" if s.variant_of else ""
        table.add_row(shorten(visible(s.name), room - len(which)) + which, *row)
    if len(functions) < len(summary.functions):
        table.add_row(f"{len(summary.functions) - len(functions):,} more", *("" for _ in rows[0]))
    return table


#: Rows of the device-memory timeline shown; the JSON report has every sample.
TIMELINE_ROWS = 12
#: Backends that never keep device memory statistics (``memory_stats()`` is
#: None): the report says nothing of the figures they never have (docs/cli.md).
NO_MEMORY_STATISTICS = ("cpu",)


def _runtime(report: Report) -> list[str]:
    rt = report.runtime
    assert rt is not None
    lines = []
    if (rt.device_memory is None and rt.run_memory is None
            and report.environment.backend not in NO_MEMORY_STATISTICS):
        lines.append(f"Device memory over the run: unavailable "
                     f"({visible(rt.device_memory_note or 'n/a')}).")
    elif rt.device_memory:
        samples = rt.device_memory
        cut = " (cut: later calls not sampled)" if rt.timeline_truncated else ""
        lines.append(f"Device memory over the run (busiest device, after each call, "
                     f"{len(samples)} samples{cut}):")
        step = max(1, -(-len(samples) // TIMELINE_ROWS))
        for s in [*samples[::step], *([samples[-1]] if (len(samples) - 1) % step else [])]:
            lines.append(f"  call {s.call:>6}  {visible(s.function):<24} in use "
                         f"{format_bytes(s.bytes_in_use):>10}  peak "
                         f"{format_bytes(s.peak_bytes_in_use):>10}")
    timeline = rt.live_timeline
    # The run's high-water mark, first in the report, says what the samples found.
    if timeline is not None and timeline.samples and rt.run_memory is None:
        shown = timeline.samples[::max(1, -(-len(timeline.samples) // TIMELINE_ROWS))]
        if timeline.samples[-1] not in shown:
            shown = (*shown, timeline.samples[-1])
        # The last sample is taken at the end, after the last call (its number).
        points = ", ".join(dict.fromkeys(
            f"{s.count:,} at the end" if s.function == "(end)" else
            f"{s.count:,} before call {s.call}" for s in shown))
        lines.append(f"Live arrays over the run ({len(timeline.samples)} samples, "
                     f"{timeline.sample_seconds * 1000:.3g} ms of sampling): {points}")
    live = rt.live_arrays
    if live is not None:  # the largest of them are in the JSON report
        lines.append(f"Live arrays when the program ended: {live.count}, "
                     f"{format_bytes(live.total_bytes)}")
    return lines


#: Merged reasons a function's section shows by default (all with --detail).
REASONS_SHOWN = 2


def _function_section(out: Lines, fn: FunctionReport, s: FunctionSummary,
                      detail: bool = True) -> None:
    calls = f"{fn.calls} call{'s' if fn.calls != 1 else ''}"
    where = f"  processes {', '.join(map(str, fn.processes))}" if fn.processes else ""
    out.console.print(Text.assemble((visible(fn.name), "bold"),
                                    f"  {where_text(fn.source)}  {calls}{where}"),
                      soft_wrap=True)
    which = f" {s.variant_of[0]} of {s.variant_of[1]}" if s.variant_of else ""
    out.para(f"signature{which}: {visible(s.signature)}", "    ", "  ")
    if s.differs:
        out.para(f"differs from its other signatures in: {visible(s.differs)}", "    ", "  ")
    if fn.error:
        out.para(visible(fn.error), "  ", "  ", style="red")
        return
    if fn.devices and fn.devices > 1 and fn.memory and fn.memory.peak_bytes is not None:
        peak = fn.memory.peak_bytes
        out.para(f"runs on {fn.devices} devices; the figures are per device: peak "
                 f"{format_bytes(peak)} each, {format_bytes(peak * fn.devices)} in all",
                 "    ", "  ")
    if s.small and detail:
        leaf_detail(out, fn, LeafFilter(), heading=False)
    else:  # by default each argument and result on one line, its subtrees with --detail
        _groups(out, "inputs", s.input_leaves, s.input_bytes,
                s.inputs if detail else tuple(g for g in s.inputs if g.depth == 0))
        _groups(out, "outputs", s.output_leaves, s.output_bytes,
                s.outputs if detail else _top_level(s.outputs))
    reasons = s.reasons if detail else s.reasons[:REASONS_SHOWN]
    if reasons and not (s.small and detail):
        out.line("  why (identical reasons merged; each leaf's own: --leaves):")
        for r in reasons:
            noun = "leaf" if r.leaves == 1 else "leaves"
            head = (f"{visible(r.group)} ({r.leaves} {noun}, {r.fate}, "
                    f"{format_bytes(r.bytes)}): ")
            example = (visible(r.example) if r.leaves == 1 else
                       f"for example {visible(r.example_path)}: {visible(r.example)}")
            out.para(head + example, "      ", "    ")
        if len(reasons) < len(s.reasons):
            out.line(f"    and {len(s.reasons) - len(reasons)} more: --detail", "dim")
    for note in _notes(fn):
        out.para(note, "      ", "  ")
    if s.variants and detail:
        out.table(_variants_table(s, out), "Donation variants (each compiled and measured)")
        _variant_settings(out, s)
    elif any(v.name != "advised" for v in s.variants):  # the advice line has the advised one
        _variant_lines(out, s)
    if fn.remat is not None:
        remat_section(out, fn.remat)
    if s.terms and detail:
        out.line("  terms:", "dim")
        for term, meaning in s.terms:
            out.para(f"{term}: {meaning}", "      ", "    ", style="dim")


def _groups(out: Lines, title: str, count: int, size: int, groups: tuple[LeafGroup, ...]
            ) -> None:
    if not groups:
        return
    out.line(f"  {title}: {count} {'leaf' if count == 1 else 'leaves'}, {format_bytes(size)}")
    width = min(GROUP_PATH_WIDTH, max(2 * g.depth + len(visible(g.path)) for g in groups))
    for g in groups:
        name = ("  " * g.depth + shorten(visible(g.path), width - 2 * g.depth)).ljust(width)
        noun = "leaf" if g.leaves == 1 else "leaves"
        head = f"    {name}  {g.leaves:>4} {noun:<6}  {format_bytes(g.bytes):>9}  "
        out.para(fates_text(g), " " * len(head), head)



def _variants_table(s: FunctionSummary, out: Lines) -> Table:
    table = Table(box=out.box)
    table.add_column("", no_wrap=True)
    table.add_column("as written", justify="right", no_wrap=True)
    for v in s.variants:
        table.add_column(v.title, justify="right", no_wrap=True)
    for label, attr in FIGURES_SHOWN:
        table.add_row(label, _figure(s.memory, attr),
                      *(_figure(v.memory, attr) for v in s.variants))
    table.add_row("unusable", str(s.unusable),
                  *("n/a" if v.unusable is None else str(v.unusable) for v in s.variants))
    return table


def _top_level(groups: tuple[LeafGroup, ...]) -> tuple[LeafGroup, ...]:
    """The results' groups shown by default: each result, or for one tuple or dict
    result (``result``), its elements (``result[0]``, ``result['loss']``)."""
    if sum(g.depth == 0 for g in groups) == 1:
        return groups
    return tuple(g for g in groups if g.depth == 0)


def _variant_lines(out: Lines, s: FunctionSummary) -> None:
    """The donation variants, one line each (their table: --detail)."""
    out.line("  donation variants (each compiled and measured; the table: --detail):")
    for v in s.variants:
        if v.error:
            text = f"{v.title}: {visible(v.setting)}: {visible(v.error)}"
        else:
            m = v.memory
            unusable = f", {v.unusable} unusable" if v.unusable else ""
            change = (f" ({format_change(m.peak_bytes - s.peak)})"
                      if m is not None and m.peak_bytes is not None and s.peak is not None
                      else "")
            text = (f"{v.title}: {visible(v.setting)}: peak {_figure(m, 'peak_bytes')}"
                    f"{change}, alias {_figure(m, 'alias_bytes')}{unusable}")
        out.para(text, "      ", "    ")


def _variant_settings(out: Lines, s: FunctionSummary) -> None:
    rows: list[tuple[str, str, str | None]] = [("as written", visible(s.setting or "n/a"), None)]
    for v in s.variants:
        text = visible(v.setting)
        if v.same_as_written:
            text += " (as written, not compiled again)"
        if v.unusable_leaves:
            text += f"; unusable: {visible(v.unusable_leaves)}"
        rows.append((v.title, text, v.error))
    width = max(len(title) for title, *_ in rows) + 2
    for title, text, error in rows:
        lines = wrap(text, out.width, " " * (width + 2), f"  {title + ':':<{width}}")
        for ln in lines:
            out.line(ln)
        if error:
            out.para(f"({visible(error)})", " " * (width + 2), " " * (width + 2), style="red")


def _figure(memory: Memory | None, attr: str) -> str:
    return format_bytes(getattr(memory, attr) if memory is not None else None)


def _notes(fn: FunctionReport) -> list[str]:
    notes = []
    warned = [b.path for b in fn.inputs if b.in_warning]
    for text in fn.warnings:
        line = first_line(text)
        if line:
            that = (f" That is: {visible(bounded_leaves(warned))}."
                    if warned and "not usable" in line else "")
            notes.append(f"JAX warned: {visible(line)}{that}")
    if fn.measured is not None:
        mm = fn.measured
        compiled = format_bytes(fn.memory.peak_bytes if fn.memory else None)
        if mm.peak_bytes_in_use_before is None:
            peak = f"process peak so far {format_bytes(mm.peak_bytes_in_use)}"
        elif mm.peak_bytes_in_use > mm.peak_bytes_in_use_before:
            peak = (f"the process peak rose to {format_bytes(mm.peak_bytes_in_use)} during "
                    "the call, its compile included")
        else:
            peak = (f"the call did not raise the process peak "
                    f"({format_bytes(mm.peak_bytes_in_use)}, reached earlier)")
        notes.append(f"device memory at the first call: {format_bytes(mm.bytes_in_use_before)} "
                     f"in use before, {format_bytes(mm.bytes_in_use_after)} after; {peak} "
                     f"(compiled peak {compiled})")
    m = fn.memory
    # The peak's rule (the "*" of the figures) is said once, under the figures table.
    if m is not None and m.host.any_nonzero():
        h = m.host
        source = {"xla": "XLA's host_* figures",
                  "shardings": "the leaves' memory kinds"}.get(h.source or "", "XLA")
        notes.append(f"host memory (not in the device peak; from {source}): held for the "
                     f"call {format_bytes(h.peak_bytes)}: argument "
                     f"{format_bytes(h.argument_bytes)}, output {format_bytes(h.output_bytes)}, "
                     f"alias {format_bytes(h.alias_bytes)}, temp {format_bytes(h.temp_bytes)}")
    if m is not None and m.memory_kind_note:
        notes.append(visible(m.memory_kind_note))
    return notes
