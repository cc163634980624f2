"""The terminal's views on request: every leaf of a function (``--leaves``,
``--path``, ``--fate``), and what its backward pass keeps with the checkpoint
policies measured (``--remat``). Each a list of whole cells, one line per item."""

from __future__ import annotations

from rich.table import Table

from memscope.render.console import Lines, columns
from memscope.render.text import visible
from memscope.report import (
    FunctionReport,
    InputBuffer,
    OutputBuffer,
    Remat,
    is_host_kind,
)
from memscope.report.units import format_bytes
from memscope.views import remat_text
from memscope.views.leaves import (
    LeafFilter,
    fate_label,
    leaf_reason,
    observed_label,
    select_leaves,
)


def _shape(shape: tuple[int, ...]) -> str:
    return f"({','.join(map(str, shape))}{',' if len(shape) == 1 else ''})"


def leaf_detail(out: Lines, fn: FunctionReport, which: LeafFilter,
                 heading: bool = True) -> None:
    inputs, outputs = select_leaves(fn, which.pattern, which.fate)
    chosen = []
    if which.pattern is not None:
        chosen.append(f"under or matching {visible(which.pattern)}")
    if which.fate is not None:
        chosen.append(f"fate {visible(which.fate)}")
    scope = f" ({', '.join(chosen)})" if chosen else ""
    if heading:
        out.line()
        out.para(f"leaves of {visible(fn.name)}{scope}: {len(inputs)} of "
                 f"{len(fn.inputs) + len(fn.closed_over_refs)} "
                 f"inputs, {len(outputs)} of {len(fn.outputs)} outputs", "    ", "  ",
                 style="bold")
    at_run_time = any(b.observed not in (None, "n/a") for b in inputs)
    header = ["leaf", "shape", "dtype", "size", "donated", "fate", "partner"]
    if at_run_time:
        header.append("at run time")
    closed = {id(b) for b in fn.closed_over_refs}
    rows = [_input_row(b, at_run_time, closed_over=id(b) in closed) for b in inputs]
    rows += [[visible(o.path), _shape(o.shape), o.dtype, format_bytes(o.bytes), "",
              o.fate, visible(o.input or ""), *([""] if at_run_time else [])] for o in outputs]
    both: list[InputBuffer | OutputBuffer] = [*inputs, *outputs]
    if any(is_host_kind(b.memory_kind) for b in both):  # where each leaf lives
        header.append("memory")
        rows = [[*row, visible(b.memory_kind or "device")] for row, b in zip(rows, both, strict=True)]
    if rows:
        columns(out, header, rows, right={3})
    sharded = [b for b in both
               if b.device_bytes is not None and b.device_bytes != b.bytes]
    if sharded:
        out.line("  each sharded leaf on one device:")
        columns(out, ["leaf", "shard shape", "per device", "sharding"],
                 [[visible(b.path),
                   _shape(b.shard_shape) if b.shard_shape is not None else "n/a",
                   format_bytes(b.device_bytes), visible(b.sharding or "n/a")]
                  for b in sharded], right={2})
    for b in inputs:
        reason = leaf_reason(b)
        if reason is not None:
            out.para(f"{visible(b.path)} ({fate_label(b)}): {visible(reason)}", "      ",
                     "    ")


def _input_row(b: InputBuffer, at_run_time: bool, *, closed_over: bool = False
               ) -> list[str]:
    partner = ("closed over" if closed_over else
               b.output or ("candidate" if b.candidate else ""))
    row = [visible(b.path), _shape(b.shape), b.dtype, format_bytes(b.bytes),
           "yes" if b.donated else "no", fate_label(b), visible(partner)]
    if at_run_time:
        row.append(observed_label(b))
    return row





def remat_section(out: Lines, remat: Remat) -> None:
    """What the backward pass keeps, by source line, and the policies measured."""
    out.line("  backward pass:")
    if remat.error is not None:
        out.para(f"could not trace it again: {visible(remat.error)}", "      ", "    ",
                 style="red")
        return
    for d in remat.differentiations:
        out.para(visible(remat_text.differentiation_line(d)), "      ", "    ")
        rows, more = remat_text.residual_lines(d)
        columns(out, ["source line", "bytes", "values", "primitives"],
                 [[visible(c) for c in row] for row in rows], {1, 2})
        if more:
            out.line(f"      {more}", "dim")
    if remat.current_policies or remat.uses_scan:
        used = ", ".join(remat.current_policies) or "no checkpoint"
        out.para(f"already uses: {visible(used)}" + (", scan" if remat.uses_scan else ""),
                 "      ", "    ")
    if remat.variants:
        table = Table(box=out.box)
        host = remat_text.offloads(remat)
        titles = ("policy", "peak", *(("host",) if host else ()), "FLOPs", "against as written")
        for title in titles:
            table.add_column(title, justify="left" if title in ("policy", "against as written")
                             else "right", no_wrap=title != "against as written")
        for row in remat_text.policy_rows(remat):
            table.add_row(row.policy, row.peak, *((row.host,) if host else ()), row.flops,
                          visible(row.change))
        out.table(table, "Checkpoint policies (each compiled and measured)")
    if remat.offload_note is not None:
        out.para(visible(remat.offload_note), "      ", "    ", style="red")
    if remat.flops_rule is not None and remat.variants:
        out.para(f"FLOPs: {visible(remat.flops_rule)}", "      ", "    ", style="dim")
    why = remat_text.no_advice(remat)
    if why is not None:
        out.para(why, "      ", "    ", style="dim")
