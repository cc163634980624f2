"""The memory timeline and the buffers live at its peak, for the report.

Takes the schedule's :class:`~memscope.compiled.liveness.Liveness` (every backend) and,
where XLA kept heap-simulator traces (GPU, TPU), replays them instead and says
whether the two agree. Relates the peak to memscope's own
(:func:`memscope.report.peak_rule`): the temporary allocation is held whole
for the call, so bytes of it that hold no live buffer at the peak
(fragmentation, or reuse the packing could not exploit) count in that peak and
not in this one.

Pure functions on decoded records; no JAX here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from memscope.analysis import roles
from memscope.compiled.buffers import (
    MAX_DETAIL_ROWS,
    MAX_TIMELINE_POINTS,
    Allocation,
    BufferAssignment,
    LogicalBuffer,
    by_source_line,
    downsample,
    replay,
    source_text,
)
from memscope.compiled.liveness import Liveness
from memscope.report import (
    InputBuffer,
    LiveAtPeak,
    LiveBuffer,
    LiveKind,
    Memory,
    MemoryTimeline,
    OutputBuffer,
    Role,
    SourceLine,
)
from memscope.report.units import format_bytes

#: per HLO parameter number: the argument leaf's path and whether it was donated
Arguments = Mapping[int, tuple[str, bool]]


def memory_view(liveness: Liveness, assignment: BufferAssignment, memory: Memory | None,
                display: Callable[[str], str] = str, inputs: Sequence[InputBuffer] = (),
                outputs: Sequence[OutputBuffer] = (),
                result_outputs: Sequence[int | None] = (),
                hints: Mapping[str, str] | None = None
                ) -> tuple[MemoryTimeline, LiveAtPeak]:
    """The report's ``memory_timeline`` and ``live_at_peak`` of one function.

    ``display`` turns a source path into the path shown; ``inputs`` and
    ``outputs`` are the call's leaves (HLO parameter ``b.parameter``; main
    result ``j`` is output ``result_outputs[j]``), which name the arguments and
    tell each buffer's role (:mod:`memscope.analysis.roles`, first by the
    roles their framework's types say: ``hints``, by input path).
    """
    numbers = [a.parameter for a in liveness.held if a.parameter is not None]
    arguments: Arguments = {b.parameter: (b.path, b.donated) for b in inputs
                            if b.parameter is not None}
    # Arguments passed as one tuple share parameter 0: their leaves go unnamed.
    if len(numbers) != len(set(numbers)):
        arguments = {}
    by_output = roles.paired_results(inputs, outputs)
    role_of = roles.argument_roles(inputs, outputs, by_output, hints)
    given_back = {j: role_of[by_output[o]] for j, o in enumerate(result_outputs)
                  if o is not None and o in by_output}
    result_paths = {j: outputs[o].path for j, o in enumerate(result_outputs)
                    if o is not None and o < len(outputs)}
    held = [_with_role(_held_buffer(a, assignment, display, arguments), a, liveness,
                       assignment, display, role_of, given_back, result_paths)
            for a in liveness.held]
    step_of = _entry_steps(liveness)
    backward_from = roles.backward_start(liveness.step_ops)
    temps = []
    for r in liveness.live:
        if r.buffer in assignment.buffers:
            # A loop's state defined where JAX names nothing (the body's
            # parameter) is named by the loop, at the user's scan line.
            named = liveness.loop_values.get(r.buffer, r.buffer)
            temp = _temp_buffer(assignment.buffers.get(named, assignment.buffers[r.buffer]),
                                r.size, display,
                                step_of(r.start), step_of(r.end))
            temps.append(replace(temp, role=roles.temporary_role(
                temp, r.start, liveness.readers.get(r.buffer, ()), liveness.step_ops,
                backward_from)))
    buffers = sorted((b for b in [*held, *temps] if b is not None),
                     key=lambda b: (-b.bytes, b.instruction))
    by_role, parts = roles.summed(buffers)
    points = downsample(liveness.entry_bytes, MAX_TIMELINE_POINTS)
    timeline = MemoryTimeline(
        rule="schedule", steps=liveness.steps, points=points,
        peak_bytes=liveness.peak_bytes, peak_step=liveness.peak_step,
        peak_instruction=liveness.peak_instruction, held_bytes=liveness.held_bytes,
        temp_block_bytes=liveness.temp_block, temp_live_bytes=liveness.live_temp,
        peak_note=peak_note(liveness, memory, _constant_bytes(liveness.held)))
    traced = _trace_timeline(liveness, assignment, timeline)
    live = LiveAtPeak(
        bytes=sum(b.bytes for b in buffers), buffers=tuple(buffers[:MAX_DETAIL_ROWS]),
        more_buffers=max(0, len(buffers) - MAX_DETAIL_ROWS),
        more_bytes=sum(b.bytes for b in buffers[MAX_DETAIL_ROWS:]),
        by_source=_by_source([b for b in buffers if b.argument is None
                              and b.kind not in ("parameter", "aliased")]),
        argument_bytes=sum(b.bytes for b in buffers if b.kind in ("parameter", "aliased")),
        arguments=sum(1 for b in buffers if b.kind in ("parameter", "aliased")),
        roles=by_role, parts=parts)
    return traced or timeline, live


def _with_role(buffer: LiveBuffer | None, alloc: Allocation, liveness: Liveness,
               assignment: BufferAssignment, display: Callable[[str], str],
               role_of: Mapping[str, Role], given_back: Mapping[int, Role],
               result_paths: Mapping[int, str]) -> LiveBuffer | None:
    """``buffer`` (held for the whole call in ``alloc``) with its role. A
    result's allocation is named by the result it holds when the call returns
    (earlier, XLA may keep temporaries in it: a gradient, before the new
    parameters are written over it)."""
    if buffer is None:
        return None
    if alloc.parameter is not None:
        return replace(buffer, role=role_of.get(buffer.argument or "", "unknown"))
    if alloc.kind == "constant":
        return replace(buffer, role="constants")
    held = [(liveness.results[s.buffer], assignment.buffers[s.buffer]) for s in alloc.slots
            if s.buffer in liveness.results and s.buffer in assignment.buffers]
    if not held:
        return replace(buffer, role=roles.output_role(buffer, None))
    result, found = max(held, key=lambda h: (h[1].size, -h[1].id))
    # Named by the instruction that makes the value, not by the fusion XLA put
    # it in: XLA:TPU fuses the new parameters into the backward pass's dot.
    lb = found.named_by_value()
    named = replace(buffer, shape=lb.shape, dtype=_dtype(lb.shape), instruction=lb.instruction,
                    opcode=lb.opcode, op=lb.op, op_name=lb.op_name,
                    source=source_text(lb, display))
    return replace(named, role=roles.output_role(named, given_back.get(result),
                                                 result_paths.get(result)))


def peak_note(liveness: Liveness, memory: Memory | None, constants: int) -> str:
    """How the schedule's peak relates to memscope's peak (``Memory.peak_bytes``)."""
    ours = format_bytes(liveness.peak_bytes)
    if memory is None or memory.peak_bytes is None:
        return f"schedule peak {ours}; memscope's peak is unknown"
    diff = memory.peak_bytes - liveness.peak_bytes
    if diff == 0:
        return f"schedule peak {ours}, equal to memscope's peak (rule {memory.peak_rule})"
    idle = liveness.temp_block - liveness.live_temp
    if memory.peak_rule == "sum":
        parts = []
        if idle:
            parts.append(f"{format_bytes(idle)} of the temporary block hold no buffer "
                         "live at the peak (it is allocated whole for the call, and "
                         "memscope's peak counts all of it)")
        if constants:
            parts.append(f"{format_bytes(constants)} of constants are counted here, "
                         "not in argument + output - alias + temp")
        rest = diff - idle + constants
        if rest:
            parts.append(f"{format_bytes(abs(rest))} "
                         f"{'more' if rest > 0 else 'less'} there is not explained by "
                         "the buffer assignment")
        return (f"schedule peak {ours}, {format_bytes(abs(diff))} "
                f"{'below' if diff > 0 else 'above'} memscope's peak "
                f"(rule sum: {format_bytes(memory.peak_bytes)}): " + "; ".join(parts))
    figure = ("XLA:TPU's HBM allocations, held for the call" if memory.peak_rule == "hbm"
              else "XLA's peak_memory_in_bytes")
    held = (f"; {format_bytes(idle)} of the temporary block hold no buffer live at the peak"
            if memory.peak_rule == "hbm" and idle else "")
    return (f"schedule peak {ours}, {format_bytes(abs(diff))} "
            f"{'below' if diff > 0 else 'above'} memscope's peak (rule "
            f"{memory.peak_rule}: {figure}, {format_bytes(memory.peak_bytes)}){held}")


def _entry_steps(liveness: Liveness) -> Callable[[int], int]:
    """Flattened time -> entry step (the entry instruction it runs within)."""
    steps = liveness.time_steps
    return lambda t: steps[t] if 0 <= t < len(steps) else t


def _constant_bytes(held: Sequence[Allocation]) -> int:
    return sum(a.size for a in held if a.kind == "constant")


def _held_buffer(alloc: Allocation, assignment: BufferAssignment,
                 display: Callable[[str], str], arguments: Arguments) -> LiveBuffer | None:
    """An allocation held for the whole call, named by its largest buffer."""
    slots = [s for s in alloc.slots if s.buffer in assignment.buffers]
    if not slots:
        return None
    buf = assignment.buffers[max(slots, key=lambda s: (s.size, -s.buffer)).buffer]
    argument, donated = (arguments.get(alloc.parameter, (None, False))
                         if alloc.parameter is not None else (None, None))
    kind: LiveKind = alloc.kind  # type: ignore[assignment]
    return LiveBuffer(kind=kind, bytes=alloc.size, shape=buf.shape, dtype=_dtype(buf.shape),
                      instruction=buf.instruction, opcode=buf.opcode, op=buf.op,
                      op_name=buf.op_name,
                      source=None if alloc.parameter is not None else source_text(buf, display),
                      donated=donated if alloc.parameter is not None else None,
                      argument=argument)


def _temp_buffer(buf: LogicalBuffer, size: int, display: Callable[[str], str],
                 start: int, end: int) -> LiveBuffer:
    return LiveBuffer(kind="temporary", bytes=size, shape=buf.shape, dtype=_dtype(buf.shape),
                      instruction=buf.instruction, opcode=buf.opcode, op=buf.op,
                      op_name=buf.op_name, source=source_text(buf, display),
                      live_from=start, live_to=end)


def _dtype(shape: str) -> str | None:
    """``f32`` of ``f32[4,8]``; ``None`` for a tuple."""
    return None if shape.startswith("(") else shape.split("[", 1)[0]


def _by_source(buffers: Sequence[LiveBuffer]) -> tuple[SourceLine, ...]:
    """The buffers by source line, a line's temporaries apart from the outputs and
    constants defined on it (those are held for the whole call, not in the
    temporary block), largest first."""
    temporaries = [replace(line, kind="temporary") for line in by_source_line(
        (b.source, b.bytes, b.op) for b in buffers if b.kind == "temporary")]
    held = [replace(line, kind="held") for line in by_source_line(
        (b.source, b.bytes, b.op) for b in buffers if b.kind != "temporary")]
    return tuple(sorted((*temporaries, *held), key=lambda line: -line.bytes))


def _trace_timeline(liveness: Liveness, assignment: BufferAssignment,
                    schedule: MemoryTimeline) -> MemoryTimeline | None:
    """Where XLA kept a heap-simulator trace of a temporary allocation: the curve
    replayed from it (over the entry steps its events name), compared with the
    schedule's. ``None`` without a trace."""
    temps = {a.index: a for a in liveness.temp_allocations}
    found = assignment.traces_within(temps)
    if not found:
        return None
    # As XLA's own peak: the trace of the largest temporary allocation, the
    # other allocations held whole.
    trace, simulated = found[0]
    base = liveness.held_bytes + sum(a.size for i, a in temps.items() if i not in simulated)
    step_of = dict(zip(liveness.time_names, liveness.time_steps, strict=True))
    per_step: list[int | None] = [None] * liveness.steps
    peak, peak_step, peak_name, step = -1, 0, "", 0
    for size, event in zip(replay(trace.events).sizes, trace.events, strict=True):
        step = step_of.get(event.instruction, step)
        total = size + base
        per_step[step] = max(per_step[step] or 0, total)
        if total > peak:
            peak, peak_step, peak_name = total, step, event.instruction
    filled, last = [], base
    for value in per_step:  # a step with no event holds what the last one left
        last = value if value is not None else last
        filled.append(last)
    diff = peak - schedule.peak_bytes
    note = (f"XLA's heap-simulator trace and the schedule agree: peak "
            f"{format_bytes(peak)}" if diff == 0 else
            f"XLA's heap-simulator trace peaks {format_bytes(abs(diff))} "
            f"{'above' if diff > 0 else 'below'} the schedule "
            f"({format_bytes(peak)} against {format_bytes(schedule.peak_bytes)}): the "
            "trace simulates each computation's heap as XLA packed it, the schedule "
            "counts every buffer from its definition to its last use")
    return MemoryTimeline(
        rule="heap_trace", steps=liveness.steps,
        points=downsample(filled, MAX_TIMELINE_POINTS), peak_bytes=peak,
        peak_step=peak_step, peak_instruction=peak_name, held_bytes=liveness.held_bytes,
        temp_block_bytes=schedule.temp_block_bytes,
        temp_live_bytes=peak - liveness.held_bytes, peak_note=schedule.peak_note,
        schedule_peak_bytes=schedule.peak_bytes, trace_note=note)
