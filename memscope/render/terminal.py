"""The terminal view of a report, with rich.

Colour and box drawing on a terminal; plain ASCII with no escape codes when the
file is not a terminal or ``NO_COLOR`` is set, so logs and CI output read well.
"""

from __future__ import annotations

import os
from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memscope.report import FunctionReport, InputBuffer, Memory, OutputBuffer, Report
from memscope.units import format_bytes, format_change

#: Width when writing to a pipe or file and COLUMNS is not set.
PIPE_WIDTH = 120

FATE_STYLES = {
    "aliased": "green", "reuses_input": "green", "donor": "cyan",
    "unusable": "bold red", "copy_of_input": "yellow", "pruned": "dim",
    "not_donated": "", "new": "",
}

FATE_MEANINGS = {
    "aliased": "donated, and the named output is written into its buffer",
    "donor": "donated without a fixed output; XLA may reuse it (partner shown if it did)",
    "unusable": "donated, but no output could take its buffer: it stays allocated",
    "pruned": "never read by the computation, so dropped from the compiled program",
    "not_donated": "not donated: the buffer stays allocated for the caller",
    "reuses_input": "written into the named donated input's buffer",
    "copy_of_input": "a copy of a non-donated input, returned unchanged",
    "new": "a fresh buffer",
}


def make_console(file: IO[str], *, width: int | None = None,
                 plain: bool | None = None) -> Console:
    """A console on ``file``; ``plain`` defaults to "not a terminal, or NO_COLOR set"."""
    if plain is None:
        # no-color.org: only a non-empty NO_COLOR turns colour off
        plain = not file.isatty() or bool(os.environ.get("NO_COLOR"))
    if width is None and not file.isatty() and "COLUMNS" not in os.environ:
        width = PIPE_WIDTH  # logs do not wrap; rich's 80 would fold every path
    return Console(file=file, width=width, force_terminal=not plain,
                   no_color=plain, color_system=None if plain else "auto",
                   highlight=False, emoji=False, soft_wrap=False)


def render_report(report: Report, file: IO[str], *, width: int | None = None,
                  plain: bool | None = None) -> None:
    """Write the summary table, then each function's buffer table and notes."""
    console = make_console(file, width=width, plain=plain)
    table_box = box.ASCII if console.no_color else box.ROUNDED
    _header(console, report)
    if not report.functions:
        console.print("No jitted function was called.")
        return
    console.print(_summary_table(report, table_box))
    for text in report.peak_rule_texts():
        console.print(Text(text, style="dim"), overflow="fold")
    if report.runtime is not None:
        for line in _runtime(report):
            console.print(line, overflow="fold")
    fates = set()
    for fn in report.functions:
        console.print()
        _function_section(console, fn, table_box)
        fates |= {b.fate for b in fn.inputs} | {b.fate for b in fn.outputs}
    console.print()
    for fate, meaning in FATE_MEANINGS.items():
        if fate in fates:
            console.print(Text.assemble((f"{fate}", FATE_STYLES[fate]), f": {meaning}"))


def _header(console: Console, report: Report) -> None:
    env = report.environment
    kinds = sorted({d.kind for d in env.devices})
    devices = f"{len(env.devices)} device{'s' if len(env.devices) != 1 else ''}"
    console.print(Text("memscope report", style="bold"))
    if report.run is not None:
        console.print(f"target: {report.run.command}")
        console.print(f"run:    {report.run.ending}")
    console.print(f"jax {env.jax}, jaxlib {env.jaxlib}, backend {env.backend}, "
                  f"{devices} ({', '.join(kinds)})")
    if report.merged_from:
        parts = ", ".join(f"{p.process_index} ({p.file}"
                          + (f", {p.run.outcome}" if p.run else "") + ")"
                          for p in report.merged_from)
        console.print(f"merged from {len(report.merged_from)} processes: {parts}",
                      overflow="fold")
    console.print()


def _summary_table(report: Report, table_box: box.Box) -> Table:
    table = Table(title="Compiled functions (bytes per device)", box=table_box,
                  title_justify="left")
    table.add_column("function / source", overflow="fold")
    for name in ("calls", "argument", "output", "alias", "temp", "peak"):
        table.add_column(name, justify="right", no_wrap=True)
    for fn in report.functions:
        m = fn.memory
        figures = ((m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes,
                    m.peak_bytes) if m else (None,) * 5)
        peak = format_bytes(figures[4]) + ("*" if m and m.peak_is_computed else "")
        where = Text.assemble(fn.name, "\n", (fn.source or "n/a", "dim"))
        table.add_row(where, str(fn.calls), *(format_bytes(f) for f in figures[:4]), peak)
    return table


#: Rows of the device-memory timeline shown; the JSON report has every sample.
TIMELINE_ROWS = 12


def _runtime(report: Report) -> list[Text]:
    rt = report.runtime
    assert rt is not None
    lines = []
    if rt.device_memory is None:
        lines.append(Text(f"Device memory over the run: unavailable ({rt.device_memory_note})."))
    elif rt.device_memory:
        samples = rt.device_memory
        cut = " (cut: later calls not sampled)" if rt.timeline_truncated else ""
        lines.append(Text(f"Device memory over the run (busiest device, after each call, "
                          f"{len(samples)} samples{cut}):"))
        step = max(1, -(-len(samples) // TIMELINE_ROWS))
        for s in [*samples[::step], *([samples[-1]] if (len(samples) - 1) % step else [])]:
            lines.append(Text(f"  call {s.call:>6}  {s.function:<24} in use "
                              f"{format_bytes(s.bytes_in_use):>10}  peak "
                              f"{format_bytes(s.peak_bytes_in_use):>10}"))
    live = rt.live_arrays
    if live is not None:
        largest = "; ".join(f"{a.dtype}{_shape(a.shape)} {format_bytes(a.bytes)}"
                            + (f" on {a.sharding}" if a.sharding else "")
                            for a in live.largest[:3])
        lines.append(Text(f"Live arrays when the target ended: {live.count}, "
                          f"{format_bytes(live.total_bytes)}"
                          + (f"; largest: {largest}" if largest else "")))
    return lines


def _function_section(console: Console, fn: FunctionReport, table_box: box.Box) -> None:
    calls = f"{fn.calls} call{'s' if fn.calls != 1 else ''}"
    where = f"  processes {', '.join(map(str, fn.processes))}" if fn.processes else ""
    console.print(Text.assemble((fn.name, "bold"), f"  {fn.source or 'n/a'}  {calls}{where}"))
    console.print(Text(f"signature {fn.signature}", style="dim"), overflow="fold")
    if fn.error:
        console.print(Text(fn.error, style="red"))
        return
    if fn.devices and fn.devices > 1 and fn.memory and fn.memory.peak_bytes is not None:
        peak = fn.memory.peak_bytes
        console.print(f"runs on {fn.devices} devices; the figures are per device: peak "
                      f"{format_bytes(peak)} each, {format_bytes(peak * fn.devices)} in all")
    console.print(_buffer_table(fn, table_box))
    if _sharded(fn):
        console.print(_sharding_table(fn, table_box))
    for note in _notes(fn):
        console.print(note, overflow="fold")
    if fn.variants:
        console.print(_variants_table(fn, table_box))
        for line in _variant_settings(fn):
            console.print(line, overflow="fold")
    for line in _advice(fn):
        console.print(line, overflow="fold")


def _buffers(fn: FunctionReport) -> list[InputBuffer | OutputBuffer]:
    return [*fn.inputs, *fn.outputs]


def _sharded(fn: FunctionReport) -> bool:
    return any(b.device_bytes is not None and b.device_bytes != b.bytes for b in _buffers(fn))


def _sharding_table(fn: FunctionReport, table_box: box.Box) -> Table:
    table = Table(title="Each buffer on one device", box=table_box, title_justify="left")
    table.add_column("buffer", overflow="fold")
    table.add_column("shard shape", no_wrap=True)
    table.add_column("per device", justify="right", no_wrap=True)
    table.add_column("sharding", overflow="fold")
    for b in _buffers(fn):
        table.add_row(b.path, _shape(b.shard_shape) if b.shard_shape is not None else "n/a",
                      format_bytes(b.device_bytes), b.sharding or "n/a")
    return table


def _buffer_table(fn: FunctionReport, table_box: box.Box) -> Table:
    at_run_time = any(b.observed not in (None, "n/a") for b in fn.inputs)
    table = Table(box=table_box)
    table.add_column("buffer", overflow="fold")
    for name in ("shape", "dtype"):
        table.add_column(name, no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("donated", no_wrap=True)
    table.add_column("fate", no_wrap=True)
    table.add_column("partner", overflow="fold")
    if at_run_time:
        table.add_column("at run time", no_wrap=True)

    for b in fn.inputs:
        partner = b.output or ("candidate" if b.candidate else "")
        table.add_row(b.path, _shape(b.shape), b.dtype, format_bytes(b.bytes),
                      "yes" if b.donated else "no", Text(b.fate, FATE_STYLES[b.fate]),
                      Text(partner, "magenta" if b.candidate else ""),
                      *([_observed(b)] if at_run_time else []))
    if fn.inputs and fn.outputs:
        table.add_section()
    for o in fn.outputs:
        table.add_row(o.path, _shape(o.shape), o.dtype, format_bytes(o.bytes),
                      "", Text(o.fate, FATE_STYLES[o.fate]), o.input or "")
    return table


#: Column titles of the variants, in the order they are shown.
VARIANT_TITLES = {"none": "no donation", "all": "donate all", "advised": "advised",
                  "requested": "requested"}
FIGURES = (("argument", "argument_bytes"), ("output", "output_bytes"),
           ("alias", "alias_bytes"), ("temp", "temp_bytes"), ("peak", "peak_bytes"))


def _variants_table(fn: FunctionReport, table_box: box.Box) -> Table:
    variants = sorted(fn.variants, key=lambda v: list(VARIANT_TITLES).index(v.name))
    title = "Donation variants (each compiled and measured)"
    # One variant (the default advice) makes a narrow table: keep its title on one line.
    table = Table(title=title, box=table_box, title_justify="left", min_width=len(title))
    table.add_column("", no_wrap=True)
    table.add_column("as written", justify="right", no_wrap=True)
    for v in variants:
        table.add_column(VARIANT_TITLES[v.name], justify="right", no_wrap=True)
    for label, attr in FIGURES:
        table.add_row(label, _figure(fn.memory, attr),
                      *(_figure(v.memory, attr) for v in variants))
    table.add_row("unusable", str(len(_unusable(fn.inputs))),
                  *("n/a" if v.memory is None else str(len(_unusable(v.inputs)))
                    for v in variants))
    return table


def _variant_settings(fn: FunctionReport) -> list[Text]:
    variants = sorted(fn.variants, key=lambda v: list(VARIANT_TITLES).index(v.name))
    rows: list[tuple[str, str, str, str | None]] = [
        ("as written", fn.setting or "n/a", "", None)]
    for v in variants:
        extra = " (as written, not compiled again)" if v.same_as_written else ""
        unusable = _unusable(v.inputs)
        if unusable:
            extra += f"; unusable: {', '.join(unusable)}"
        rows.append((VARIANT_TITLES[v.name], v.setting, extra, v.error))
    width = max(len(title) for title, *_ in rows) + 2
    lines = []
    for title, setting, extra, error in rows:
        line = Text(f"  {title + ':':<{width}}{setting}{extra}")
        if error:
            line.append(f" ({error})", "red")
        lines.append(line)
    return lines


def _figure(memory: Memory | None, attr: str) -> str:
    return format_bytes(getattr(memory, attr) if memory is not None else None)


def _unusable(inputs: tuple[InputBuffer, ...]) -> list[str]:
    return [b.path for b in inputs if b.fate == "unusable"]


def _advice(fn: FunctionReport) -> list[Text]:
    a = fn.advice
    if a is None:
        return []
    count = sum(b.candidate for b in fn.inputs)
    peak = f"peak {format_bytes(a.peak_before)} -> {format_bytes(a.peak_after)}"
    if a.peak_before is not None and a.peak_after is not None:
        peak += f" ({format_change(a.peak_after - a.peak_before)}, measured)"
    return [
        Text.assemble(("Advice: ", "bold magenta"), f"jit {fn.name} with ",
                      (a.setting, "bold"), f" (adds {', '.join(a.add)})."),
        Text(f"  {count} candidate {'leaves' if count != 1 else 'leaf'}, "
             f"{format_bytes(a.candidate_bytes)}; {peak}."),
        Text(f"  {a.caveat}", style="dim"),
    ]


def _observed(b: InputBuffer) -> Text:
    if b.observed in (None, "n/a"):
        return Text("")
    state = "" if b.deleted is None else (", deleted" if b.deleted else ", alive")
    return Text(f"{b.observed}{state}", "green" if b.observed == "confirmed" else "")


def _shape(shape: tuple[int, ...]) -> str:
    return f"({','.join(map(str, shape))}{',' if len(shape) == 1 else ''})"


def _notes(fn: FunctionReport) -> list[Text]:
    notes = []
    warned = [b.path for b in fn.inputs if b.in_warning]
    for text in fn.warnings:
        first = text.strip().splitlines()[0]
        line = Text.assemble(("JAX warned: ", "yellow"), first)
        if warned and "not usable" in first:
            line.append(f" That is: {', '.join(warned)}.")
        notes.append(line)
    for b in fn.inputs:
        if b.reason is not None:
            notes.append(Text.assemble((f"{b.path}", "bold"), f" ({b.fate}): {b.reason}"))
        elif b.fate == "unusable" and not b.in_warning:
            notes.append(_unusable_note(b))
        elif b.fate == "donor":
            used = (f"XLA reused it for {b.output}." if b.output else
                    "XLA did not use it, so it stays allocated.")
            notes.append(Text(f"{b.path} was offered to XLA as an optional donor "
                              f"(no output of its shape and dtype was left); {used}"))
    for finding in fn.findings:
        notes.append(Text.assemble(("Run time disagrees: ", "bold red"), finding))
    if fn.measured is not None:
        mm = fn.measured
        notes.append(Text(f"device memory at the first call: {format_bytes(mm.bytes_in_use_before)} "
                          f"in use before, {format_bytes(mm.bytes_in_use_after)} after; process "
                          f"peak so far {format_bytes(mm.peak_bytes_in_use)} (compiled peak "
                          f"{format_bytes(fn.memory.peak_bytes if fn.memory else None)})"))
    m = fn.memory
    if m is not None and m.peak_is_computed and m.peak_rule_text:
        notes.append(Text(f"* {m.peak_rule_text}."))
    if m is not None and m.host.any_nonzero():
        h = m.host
        notes.append(Text(f"host memory: argument {format_bytes(h.argument_bytes)}, "
                          f"output {format_bytes(h.output_bytes)}, "
                          f"alias {format_bytes(h.alias_bytes)}, "
                          f"temp {format_bytes(h.temp_bytes)}"))
    return notes


def _unusable_note(b: InputBuffer) -> Text:
    return Text(f"{b.path} was donated but no output could take its buffer "
                "(JAX did not warn in this run: the function was lowered before).")
