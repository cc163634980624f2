"""What holds the memory: XLA's buffer assignment, decoded and attributed to the user's code.

``memory_analysis()`` carries the compiled program's ``BufferAssignmentProto``:
its allocations (parameters, outputs, temporaries, constants, thread-local
scratch) and the logical buffers packed into each, at an offset. Each logical
buffer is defined by one HLO instruction, whose metadata names the JAX op
(``jit(f)/dot_general``) and the user's source line. This module decodes that
proto with protobuf (the schema in :mod:`memscope.compiled._hlo_schema`), attributes each
buffer, and replays the heap-simulator traces XLA records on GPU and TPU.

Pure functions on bytes and decoded protos; no JAX here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from google.protobuf.message import DecodeError

from memscope.compiled._hlo_schema import message_class
from memscope.report import (
    AllocationGroup,
    AllocationKind,
    BufferBreakdown,
    Memory,
    SourceLine,
    TempBuffer,
)
from memscope.report.units import format_bytes

BufferAssignmentProto = message_class("BufferAssignmentProto")
_ExecutableAndOptions = message_class("ExecutableAndOptionsProto")
_CompilationResult = message_class("CompilationResultProto")

ALLOCATION_KINDS: tuple[AllocationKind, ...] = get_args(AllocationKind)
#: The report lists this many of the largest temporary buffers and source lines
#: (plus totals of the rest), so that reports of big models stay small.
MAX_DETAIL_ROWS = 50
#: Why there is no timeline where XLA kept no heap-simulator trace.
NO_TRACE_NOTE = ("XLA recorded no heap-simulator trace for this program (it does not on "
                 "CPU), so memory over program order is unknown; the temporaries share "
                 "one allocation, where buffers at overlapping offsets are never live "
                 "together")
#: The replayed timeline keeps at most this many points (each the largest of its
#: stretch of program order, so the peak is kept).
MAX_TIMELINE_POINTS = 400

# XLA's PrimitiveType (xla_data.proto), as HLO text spells each type.
_TYPES = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32",
    9: "u64", 10: "f16", 11: "f32", 12: "f64", 13: "tuple", 14: "opaque", 15: "c64",
    16: "bf16", 17: "token", 18: "c128", 19: "f8e5m2", 20: "f8e4m3fn", 21: "s4", 22: "u4",
    23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2",
    28: "f8e4m3", 29: "f8e3m4", 30: "f4e2m1fn", 31: "f8e8m0fnu",
}
# HeapSimulatorTrace.Event.Kind
_ALLOC, _FREE, _SHARE_WITH = 0, 1, 2


class BufferDecodeError(ValueError):
    """The bytes are not a buffer assignment memscope can read."""


@dataclass(frozen=True)
class LogicalBuffer:
    """One value XLA placed in an allocation, and the code that defines it.

    ``op_name`` is JAX's name for the op (``jit(f)/dot_general``); ``source_file``
    and ``source_line`` are the user's line as JAX recorded it (absolute path).
    """

    id: int
    size: int
    instruction: str
    opcode: str
    shape: str
    op_name: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    #: the defining instruction's id, and the shape index it defines
    instruction_id: int = 0
    shape_index: tuple[int, ...] = ()
    #: JAX's name and the user's line of the instruction that makes the value
    #: itself, where XLA fused it into another one that names the fusion
    #: (:func:`_fused_value`); ``None`` where they are the defining instruction's
    value: ValueName | None = None

    @property
    def op(self) -> str:
        """The JAX primitive (last part of ``op_name``), else the HLO opcode.

        A fusion's metadata may join several names with ``;``; the first is the
        op XLA kept the fusion's metadata from.
        """
        if self.op_name:
            return self.op_name.split(";", 1)[0].rsplit("/", 1)[-1]
        return self.opcode

    def named_by_value(self) -> LogicalBuffer:
        """This buffer named by the instruction that makes its value (a fusion's
        root, or the element of its root tuple), not by the fusion's own
        metadata: XLA:TPU names a fusion by the dot it fused, so the new
        parameters fused into the backward pass's dot read as that dot."""
        if self.value is None:
            return self
        return replace(self, op_name=self.value.op_name, source_file=self.value.source_file,
                       source_line=self.value.source_line, value=None)


@dataclass(frozen=True)
class ValueName:
    """JAX's op name and the user's source line of one HLO instruction."""

    op_name: str
    source_file: str | None
    source_line: int | None


@dataclass(frozen=True)
class Slot:
    """A logical buffer at ``offset`` in an allocation."""

    buffer: int
    offset: int
    size: int


@dataclass(frozen=True)
class Allocation:
    index: int
    size: int
    kind: AllocationKind
    #: XLA's memory colour; 0 is the device's default memory
    color: int
    parameter: int | None
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class HeapEvent:
    kind: Literal["alloc", "free", "share"]
    buffer: int
    size: int
    instruction: str = ""
    #: for ``share``: the buffer whose memory this one reuses
    canonical: int | None = None


@dataclass(frozen=True)
class HeapTrace:
    allocation: int
    events: tuple[HeapEvent, ...]


@dataclass(frozen=True)
class BufferAssignment:
    """The decoded buffer assignment of one compiled module."""

    allocations: tuple[Allocation, ...]
    buffers: Mapping[int, LogicalBuffer]
    traces: tuple[HeapTrace, ...]

    def of_kind(self, kind: str, *, color: int | None = 0) -> list[Allocation]:
        return [a for a in self.allocations
                if a.kind == kind and (color is None or a.color == color)]

    def traces_within(self, allocations: Mapping[int, Allocation]
                      ) -> list[tuple[HeapTrace, frozenset[int]]]:
        """The heap-simulator traces (with events) that simulate only some of
        ``allocations`` (by index), each with the allocations it simulates, the
        largest first. A trace simulates the allocations its buffers live in:
        XLA:CPU's names the temporary block it fills, XLA:GPU's another
        allocation (an H200, JAX 0.11.2: a 4-byte thread-local one)."""
        holder = {s.buffer: a.index for a in self.allocations for s in a.slots}
        found = []
        for t in self.traces:
            held = frozenset({holder[e.buffer] for e in t.events if e.buffer in holder}
                             or {t.allocation})
            if t.events and held <= allocations.keys():
                found.append((t, held))
        return sorted(found, key=lambda f: -sum(allocations[i].size for i in f[1]))


def allocation_kind(alloc: Any) -> AllocationKind:
    """XLA's own classification (``BufferAllocation::IsPreallocatedTempBuffer`` and
    ``PopulateBufferStatsFromAllocations``): a parameter that may live out is
    aliased; temporaries are what is none of parameter, live-out, thread-local,
    constant."""
    if alloc.is_entry_computation_parameter:
        return "aliased" if alloc.maybe_live_out else "parameter"
    if alloc.maybe_live_out:
        return "output"
    if alloc.is_thread_local:
        return "thread_local"
    if alloc.is_constant:
        return "constant"
    return "temporary"


def embedded_buffer_assignment(payloads: Sequence[bytes]) -> bytes | None:
    """The serialized ``BufferAssignmentProto`` inside a serialized executable.

    ``payloads`` are the candidates for PJRT's ``ExecutableAndOptionsProto``
    (:func:`memscope._compat.executables.serialized_executable_payloads`); the first whose
    executable holds a non-empty assignment wins. What it returns is checked
    like ``memory_analysis()``'s own: against the module by
    :func:`read_buffer_assignment`, and against the figures by the reconciliation.
    """
    for data in payloads:
        outer, inner = _ExecutableAndOptions(), _CompilationResult()
        try:
            outer.ParseFromString(data)
            inner.ParseFromString(outer.serialized_executable)
        except DecodeError:
            continue
        if inner.buffer_assignment:
            return bytes(inner.buffer_assignment)
    return None


def read_buffer_assignment(serialized: bytes, module: Any) -> BufferAssignment:
    """Decode ``serialized`` (a ``BufferAssignmentProto``) against ``module``.

    ``module`` is the decoded ``HloModuleProto`` of the same executable
    (:func:`memscope.compiled.hlo.parse_module`); its instructions give each logical
    buffer its name, opcode, shape, JAX op name and source line.

    Raises:
        BufferDecodeError: the bytes do not parse, or name instructions the module lacks.
    """
    proto = BufferAssignmentProto()
    try:
        proto.ParseFromString(serialized)
    except DecodeError as e:
        raise BufferDecodeError(f"the buffer assignment does not parse: {e}") from None
    instructions = {instr.id: instr for comp in module.computations
                    for instr in comp.instructions}
    roots = {comp.id: comp.root_id for comp in module.computations}
    frames = _SourceFrames(module.stack_frame_index)
    buffers: dict[int, LogicalBuffer] = {}
    for lb in proto.logical_buffers:
        instr = instructions.get(lb.defined_at.instruction_id)
        if instr is None:
            raise BufferDecodeError(
                f"logical buffer {lb.id} is defined by instruction "
                f"{lb.defined_at.instruction_id}, which the module does not have")
        file, line = frames.source(instr.metadata)
        buffers[lb.id] = LogicalBuffer(
            id=lb.id, size=lb.size, instruction=instr.name, opcode=instr.opcode,
            shape=_shape_text(_subshape(instr.shape, lb.defined_at.shape_index)),
            op_name=instr.metadata.op_name or None, source_file=file, source_line=line,
            instruction_id=instr.id, shape_index=tuple(lb.defined_at.shape_index),
            value=_fused_value(instr, lb.defined_at.shape_index, instructions, roots, frames))
    allocations = tuple(
        Allocation(index=a.index, size=a.size, kind=allocation_kind(a), color=a.color,
                   parameter=a.parameter_number if a.is_entry_computation_parameter
                   else None,
                   slots=tuple(Slot(s.logical_buffer_id, s.offset, s.size)
                               for s in a.assigned))
        for a in proto.buffer_allocations)
    traces = tuple(_trace(t, buffers) for t in proto.heap_simulator_traces)
    return BufferAssignment(allocations=allocations, buffers=buffers, traces=traces)


def _fused_value(instr: Any, index: Sequence[int], instructions: Mapping[int, Any],
                 roots: Mapping[int, int], frames: _SourceFrames) -> ValueName | None:
    """The name of the instruction inside fusion ``instr`` that makes its output
    at shape ``index``: the fused computation's root, or the element of its root
    tuple, where JAX named it (``jit(f)/add``) and not as the fusion; else ``None``.

    XLA keeps one instruction's metadata for a whole fusion (XLA:TPU: the dot
    it fused the rest into), while each fused instruction keeps its own."""
    if instr.opcode != "fusion" or len(instr.called_computation_ids) != 1:
        return None
    node = instructions.get(roots.get(instr.called_computation_ids[0], -1))
    for i in index:
        if node is None or node.opcode != "tuple" or not 0 <= i < len(node.operand_ids):
            return None
        node = instructions.get(node.operand_ids[i])
    if node is None:
        return None
    name = node.metadata.op_name
    # XLA's own names (``multiply.5``) have no JAX scope: not the value's maker.
    if "/" not in name or name == instr.metadata.op_name:
        return None
    file, line = frames.source(node.metadata)
    return ValueName(name, file, line)


class _SourceFrames:
    """Source lines from metadata: the module's stack-frame index (newer XLA), else
    the metadata's own ``source_file``/``source_line``."""

    def __init__(self, index: Any) -> None:
        self._files = list(index.file_names)
        self._locations = list(index.file_locations)
        self._frames = list(index.stack_frames)

    def source(self, metadata: Any) -> tuple[str | None, int | None]:
        frame_id = metadata.stack_frame_id
        if 0 < frame_id <= len(self._frames):  # ids are 1-based; 0 is "none"
            # The innermost frame: JAX already dropped its own frames, so this
            # is the user's line that called the op.
            loc_id = self._frames[frame_id - 1].file_location_id
            if 0 < loc_id <= len(self._locations):
                loc = self._locations[loc_id - 1]
                if 0 < loc.file_name_id <= len(self._files):
                    return self._files[loc.file_name_id - 1], loc.line or None
        if metadata.source_file:
            return metadata.source_file, metadata.source_line or None
        return None, None


def _subshape(shape: Any, index: Sequence[int]) -> Any:
    for i in index:
        if i >= len(shape.tuple_shapes):
            break
        shape = shape.tuple_shapes[i]
    return shape


def _shape_text(shape: Any) -> str:
    """``f32[512,1024]`` as HLO text writes it (without the layout)."""
    if shape.tuple_shapes:
        return "(" + ", ".join(_shape_text(s) for s in shape.tuple_shapes) + ")"
    name = _TYPES.get(shape.element_type, f"type{shape.element_type}")
    return f"{name}[{','.join(str(d) for d in shape.dimensions)}]"


def _trace(trace: Any, buffers: Mapping[int, LogicalBuffer]) -> HeapTrace:
    kinds = {_ALLOC: "alloc", _FREE: "free", _SHARE_WITH: "share"}
    events = []
    for e in trace.events:
        buf = buffers.get(e.buffer_id)
        events.append(HeapEvent(
            kind=kinds.get(e.kind, "alloc"),  # type: ignore[arg-type]
            buffer=e.buffer_id, size=buf.size if buf is not None else 0,
            instruction=e.instruction_name,
            canonical=e.share_with_canonical_id if e.kind == _SHARE_WITH else None))
    return HeapTrace(allocation=trace.buffer_allocation_index, events=tuple(events))


# ------------------------------------------------------------------ replay --


@dataclass(frozen=True)
class Replay:
    """Memory of one heap-simulator trace over program order.

    ``sizes[i]`` is the heap's size after event ``i``; ``peak_step`` the first
    event at the peak; ``live_at_peak`` the buffers holding memory there.
    """

    sizes: tuple[int, ...]
    peak: int
    peak_step: int
    live_at_peak: tuple[int, ...]


def replay(events: Iterable[HeapEvent]) -> Replay:
    """Replay a heap-simulator trace.

    ``alloc`` takes the buffer's size; ``share`` reuses the memory of its
    canonical buffer (no new bytes); the memory is given back when the last
    buffer sharing it is freed, as XLA's heap simulator and XProf's memory
    viewer count it.
    """
    holders: dict[int, int] = {}  # canonical buffer -> buffers alive in its memory
    canonical_of: dict[int, int] = {}
    size_of: dict[int, int] = {}
    heap = peak = 0
    peak_step = -1
    live_at_peak: tuple[int, ...] = ()
    sizes = []
    for step, e in enumerate(events):
        if e.kind == "alloc":
            canonical_of[e.buffer] = e.buffer
            size_of[e.buffer] = e.size
            holders[e.buffer] = holders.get(e.buffer, 0) + 1
            if holders[e.buffer] == 1:
                heap += e.size
        elif e.kind == "share":
            canonical = e.canonical if e.canonical is not None else e.buffer
            canonical = canonical_of.get(canonical, canonical)
            canonical_of[e.buffer] = canonical
            if canonical not in size_of:
                size_of[canonical] = e.size
            holders[canonical] = holders.get(canonical, 0) + 1
            if holders[canonical] == 1:
                heap += size_of[canonical]
        else:
            canonical = canonical_of.pop(e.buffer, e.buffer)
            left = holders.get(canonical, 0) - 1
            if left <= 0:
                holders.pop(canonical, None)
                heap -= size_of.get(canonical, e.size)
            else:
                holders[canonical] = left
        sizes.append(heap)
        if heap > peak:
            peak, peak_step = heap, step
            live_at_peak = tuple(holders)
    return Replay(sizes=tuple(sizes), peak=peak, peak_step=peak_step,
                  live_at_peak=live_at_peak)


def downsample(sizes: Sequence[int], points: int) -> tuple[tuple[int, int], ...]:
    """At most ``points`` (step, bytes) pairs: each bucket keeps its largest size,
    so the peak survives."""
    if not sizes:
        return ()
    bucket = max(1, -(-len(sizes) // points))
    out = []
    for start in range(0, len(sizes), bucket):
        chunk = sizes[start:start + bucket]
        best = max(range(len(chunk)), key=chunk.__getitem__)
        out.append((start + best, chunk[best]))
    return tuple(out)


def source_text(buffer: LogicalBuffer, display: Callable[[str], str]) -> str | None:
    """``path:line`` of the buffer's source, the path shown through ``display``."""
    if buffer.source_file is None:
        return None
    line = f":{buffer.source_line}" if buffer.source_line else ""
    return f"{display(buffer.source_file)}{line}"


# --------------------------------------------------------------- breakdown --


def breakdown(assignment: BufferAssignment, memory: Memory | None,
              display: Callable[[str], str] = str) -> BufferBreakdown:
    """Summarize ``assignment`` for the report: allocations by kind, the largest
    temporaries with their op and source line, per-line totals, the check against
    ``memory`` (XLA's own figures) and the replayed timeline where XLA kept one.

    ``display`` turns a source path into the path shown (relative to the
    working directory, say).
    """
    groups = []
    for kind in ALLOCATION_KINDS:
        allocs = [a for a in assignment.allocations if a.kind == kind]
        if allocs:
            groups.append(AllocationGroup(kind=kind, count=len(allocs),
                                          bytes=sum(a.size for a in allocs)))
    temps = assignment.of_kind("temporary")
    temp_bytes = sum(a.size for a in temps)
    slots = sorted(((a, s) for a in temps for s in a.slots),
                   key=lambda pair: (-pair[1].size, pair[1].buffer))
    listed = [_temp_buffer(assignment.buffers[s.buffer], a, s, display)
              for a, s in slots[:MAX_DETAIL_ROWS] if s.buffer in assignment.buffers]
    reconciled, note = reconcile(assignment, memory)
    timeline, timeline_note, peak, live = _timeline(assignment, memory, display)
    return BufferBreakdown(
        allocations=tuple(groups), temp_bytes=temp_bytes, temp_buffers=tuple(listed),
        more_buffers=max(0, len(slots) - len(listed)),
        more_bytes=sum(s.size for _, s in slots[len(listed):]),
        by_source=_by_source(assignment, slots, display),
        reconciled=reconciled, reconcile_note=note, timeline=timeline,
        timeline_note=timeline_note, replayed_peak=peak, live_at_peak=live)


def reconcile(assignment: BufferAssignment, memory: Memory | None
              ) -> tuple[bool | None, str | None]:
    """Do the temporary allocations add up to XLA's ``temp_size_in_bytes``?

    XLA counts as temp every allocation that is not a parameter, not live out,
    not thread-local and not a constant, in the device's memory (colour 0).
    Returns (agrees, why not); (None, why) when there is no figure to check.
    """
    if memory is None or memory.temp_bytes is None:
        return None, "XLA reported no temp figure to check against"
    temp = sum(a.size for a in assignment.of_kind("temporary"))
    if temp == memory.temp_bytes:
        return True, None
    reasons = []
    other = sum(a.size for a in assignment.of_kind("temporary", color=None)) - temp
    if other:
        reasons.append(f"{format_bytes(other)} of temporaries are in another memory "
                       "space (XLA counts those as host temp)")
    for kind, what in (("constant", "constants"), ("thread_local", "thread-local scratch")):
        size = sum(a.size for a in assignment.of_kind(kind, color=None))
        if size:
            reasons.append(f"{format_bytes(size)} of {what} are not counted as temp")
    why = "; ".join(reasons) or "the buffer assignment and the figures disagree"
    return False, (f"decoded temporary allocations add to {format_bytes(temp)}, XLA's "
                   f"temp figure is {format_bytes(memory.temp_bytes)}: {why}")


def _temp_buffer(buf: LogicalBuffer, alloc: Allocation, slot: Slot,
                 display: Callable[[str], str]) -> TempBuffer:
    return TempBuffer(instruction=buf.instruction, opcode=buf.opcode, shape=buf.shape,
                      bytes=slot.size, op=buf.op, op_name=buf.op_name,
                      source=source_text(buf, display), allocation=alloc.index,
                      offset=slot.offset)


def _by_source(assignment: BufferAssignment, slots: Sequence[tuple[Allocation, Slot]],
               display: Callable[[str], str]) -> tuple[SourceLine, ...]:
    found = ((assignment.buffers.get(slot.buffer), slot.size) for _, slot in slots)
    return by_source_line((source_text(buf, display), size, buf.op)
                          for buf, size in found if buf is not None)


def by_source_line(buffers: Iterable[tuple[str | None, int, str | None]]
                   ) -> tuple[SourceLine, ...]:
    """``(source, bytes, op)`` of each buffer grouped by source line, largest first
    (ties by name), each line's ops largest first; the first :data:`MAX_DETAIL_ROWS`."""
    lines: dict[str | None, list[Any]] = {}
    for source, size, op in buffers:
        entry = lines.setdefault(source, [0, 0, {}])
        entry[0] += size
        entry[1] += 1
        entry[2][op] = entry[2].get(op, 0) + size
    ranked = sorted(lines.items(), key=lambda kv: (-kv[1][0], kv[0] or ""))
    return tuple(SourceLine(source=src, bytes=total, buffers=count,
                            ops=tuple(sorted(ops, key=lambda o: -ops[o])))
                 for src, (total, count, ops) in ranked[:MAX_DETAIL_ROWS])


def _timeline(assignment: BufferAssignment, memory: Memory | None,
              display: Callable[[str], str]
              ) -> tuple[tuple[tuple[int, int], ...] | None, str | None, int | None,
                         tuple[TempBuffer, ...]]:
    """Replay the trace of the largest device-memory allocation XLA simulated.

    Each point, and the replayed peak, adds what lives through the whole program
    and is not in that trace: every other device allocation (parameters,
    outputs, constants).
    """
    device = {a.index: a for a in assignment.allocations if a.color == 0}
    found = assignment.traces_within(device)
    if not found:
        return None, NO_TRACE_NOTE, None, ()
    result = replay(found[0][0].events)
    traced = set().union(*(held for _, held in found))
    fixed = sum(a.size for a in device.values()
                if a.index not in traced and a.kind != "thread_local")
    peak = result.peak + fixed
    slot_of = {s.buffer: (a, s) for a in assignment.allocations for s in a.slots}
    live = []
    known = [b for b in result.live_at_peak if b in assignment.buffers]
    for b in sorted(known, key=lambda b: -assignment.buffers[b].size)[:MAX_DETAIL_ROWS // 5]:
        if b in slot_of:
            a, s = slot_of[b]
            live.append(_temp_buffer(assignment.buffers[b], a, s, display))
    note = None
    if memory is not None and memory.xla_peak_bytes is not None \
            and memory.xla_peak_bytes != peak:
        note = (f"the replayed peak ({format_bytes(peak)}) differs from XLA's "
                f"peak figure ({format_bytes(memory.xla_peak_bytes)})")
    timeline = downsample([size + fixed for size in result.sizes], MAX_TIMELINE_POINTS)
    return timeline, note, peak, tuple(live)
