"""The memory records of one compiled program: its figures, what holds its buffers, what is live at its peak; arrays alive."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from memscope.report.units import format_bytes

#: How ``Memory.peak_bytes`` was obtained: XLA's ``peak_memory_in_bytes`` (``xla``),
#: or argument + output - alias + temp (``sum``), see :func:`peak_rule`; on a TPU
#: target, the HBM allocations of XLA's buffer assignment (``hbm``), see
#: :func:`hbm_peak_rule`.
PeakRule = Literal["xla", "sum", "hbm"]
AllocationKind = Literal["parameter", "aliased", "output", "temporary", "constant",
                         "thread_local"]


def is_host_kind(kind: str | None) -> bool:
    """True for JAX's host memory kinds (``pinned_host``, ``unpinned_host``)."""
    return kind is not None and kind.endswith("_host")


@dataclass(frozen=True)
class HostMemory:
    """The program's host memory (arguments, outputs and temporaries placed in a
    host memory kind), zero on most programs.

    ``source`` says where the figures come from: ``xla`` (``memory_analysis()``'s
    ``host_*`` fields, filled by XLA:GPU and TPU) or ``shardings`` (the leaves of
    a host memory kind, where XLA counted them in its device fields: XLA:CPU).
    ``peak_bytes`` is argument + output - alias + temp, held for the whole call.
    """

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    peak_bytes: int | None = None
    source: Literal["xla", "shardings"] | None = None

    def any_nonzero(self) -> bool:
        return any(v for v in (self.argument_bytes, self.output_bytes, self.alias_bytes,
                               self.temp_bytes, self.generated_code_bytes))


@dataclass(frozen=True)
class Memory:
    """What XLA's ``memory_analysis()`` says of one compiled program, per device.

    ``peak_bytes`` is memscope's one definition of the peak: the bytes the
    device holds at the program's high-water mark, by :func:`peak_rule`.
    ``xla_peak_bytes`` is XLA's own ``peak_memory_in_bytes`` (``None`` where
    this jaxlib reports none), ``peak_rule`` names the rule that gave
    ``peak_bytes`` and ``peak_rule_text`` says it in one line.
    ``peak_is_computed`` is true where ``peak_bytes`` is not XLA's figure.
    """

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    peak_bytes: int | None = None
    peak_is_computed: bool = False
    host: HostMemory = field(default_factory=HostMemory)
    xla_peak_bytes: int | None = None
    peak_rule: PeakRule | None = None
    peak_rule_text: str | None = None
    #: where the device figures leave out host-memory leaves XLA counted in them
    #: (XLA:CPU), what was moved and why; else ``None``
    memory_kind_note: str | None = None


def peak_rule(argument: int | None, output: int | None, alias: int | None,
              temp: int | None, xla_peak: int | None
              ) -> tuple[int | None, PeakRule | None, str | None]:
    """The peak of one compiled program: ``(peak_bytes, rule, text)``.

    At the start of a call the device holds the arguments, the outputs that do
    not alias an argument and the temporary allocation all at once: XLA
    allocates every temporary block for the whole execution (XLA:CPU and GPU
    both). So the peak is at least argument + output - alias + temp. XLA's
    ``peak_memory_in_bytes`` replays its heap-simulator traces; XLA:CPU records
    none, so there it is argument + output - alias, the temporaries left out;
    on XLA:GPU it counts the temporaries live at once, a little less than the
    temporary allocation (seen on an H100: 37 KiB less for the transformer
    sample). The peak is the larger of the two; ``None`` only when both are
    unknown. The text says which of those XLA's figure left out.
    """
    parts = (None if None in (argument, output, alias, temp)
             else argument + output - alias + temp)  # type: ignore[operator]
    if parts is None:
        if xla_peak is None:
            return None, None, None
        return xla_peak, "xla", "peak: XLA's peak_memory_in_bytes (its parts are unknown)"
    if xla_peak is None:
        return parts, "sum", ("peak = argument + output - alias + temp "
                              "(this jaxlib reports no peak)")
    if xla_peak >= parts:
        return xla_peak, "xla", ("peak: XLA's peak_memory_in_bytes, at least "
                                 "argument + output - alias + temp")
    held = parts - temp  # type: ignore[operator]
    # XLA:CPU records no heap-simulator trace: its figure is the held allocations
    # (constants too), no temporaries. XLA:GPU's has most of them live at once.
    if xla_peak - held < temp / 2:  # type: ignore[operator]
        why = "leaves out the temporaries, which are held for the whole call"
    else:
        why = ("counts the temporaries live at once in its heap simulation; the whole "
               "temporary allocation is held for the call")
    # No figure of this function's in the text: one line says it for every
    # function it applies to (XLA's own figure is each one's xla_peak_bytes).
    return parts, "sum", f"peak = argument + output - alias + temp; XLA's own peak {why}"


def host_figures(host: HostMemory, source: Literal["xla", "shardings"]) -> HostMemory:
    """``host`` with its peak (argument + output - alias + temp, ``None`` if a part
    is unknown) and ``source`` (``None`` where it holds nothing)."""
    parts = (host.argument_bytes, host.output_bytes, host.alias_bytes, host.temp_bytes)
    return dataclasses.replace(
        host, peak_bytes=(None if None in parts else
                          parts[0] + parts[1] - parts[2] + parts[3]),  # type: ignore[operator]
        source=source if host.any_nonzero() else None)


def split_host(memory: Memory, argument: int, output: int, alias: int) -> Memory:
    """``memory`` with device figures of device memory only and host figures of
    host memory; ``argument``, ``output`` and ``alias`` are the per-device bytes
    of the leaves whose shardings place them in a host memory kind.

    Where XLA filled a ``host_*`` figure (GPU, TPU), its device figure already
    leaves those leaves out. Where it did not (XLA:CPU counts them as device
    memory), they are moved: the device figure, and XLA's own peak compared with
    it, lose them; the host figure gains them; ``memory_kind_note`` says so.
    """
    h = memory.host
    moved_arg = argument if not h.argument_bytes else 0
    moved_out = output if not h.output_bytes else 0
    moved_alias = alias if not h.alias_bytes and moved_arg and moved_out else 0
    moved = moved_arg + moved_out - moved_alias
    host = dataclasses.replace(
        h, argument_bytes=(h.argument_bytes or 0) + moved_arg if moved_arg else h.argument_bytes,
        output_bytes=(h.output_bytes or 0) + moved_out if moved_out else h.output_bytes,
        alias_bytes=(h.alias_bytes or 0) + moved_alias if moved_alias else h.alias_bytes)
    host = host_figures(host, "shardings" if moved else "xla")
    if not moved:
        return dataclasses.replace(memory, host=host)

    def less(value: int | None, by: int) -> int | None:
        return None if value is None else value - by

    argument_bytes = less(memory.argument_bytes, moved_arg)
    output_bytes = less(memory.output_bytes, moved_out)
    alias_bytes = less(memory.alias_bytes, moved_alias)
    peak, rule, text = peak_rule(argument_bytes, output_bytes, alias_bytes, memory.temp_bytes,
                                 less(memory.xla_peak_bytes, moved))
    if text is not None and rule == "xla":
        text += " (less the host-memory leaves it counted)"
    return dataclasses.replace(
        memory, argument_bytes=argument_bytes, output_bytes=output_bytes,
        alias_bytes=alias_bytes, peak_bytes=peak, peak_is_computed=rule == "sum",
        peak_rule=rule, peak_rule_text=text, host=host,
        memory_kind_note=(
            f"device figures leave out {format_bytes(moved)} of arguments and outputs in "
            "host memory (their shardings' memory kinds), which this backend's "
            "memory_analysis() counts in its device fields (XLA:CPU does)"))


#: How the peak rule's text names each kind of allocation, in its sum's order.
_ALLOCATION_WORDS: dict[str, str] = {
    "parameter": "arguments", "aliased": "donated arguments", "output": "outputs",
    "temporary": "the temporary block", "constant": "constants",
    "thread_local": "thread-local"}


def _hbm_parts_text(memory: Memory, hbm: int, parts: Mapping[str, int]) -> str:
    """``peak = arguments 227.5 KiB + outputs ... (XLA:TPU's HBM allocations ...)``,
    and why the table's temp is not the temporary block."""
    terms = " + ".join(f"{_ALLOCATION_WORDS.get(kind, kind)} {format_bytes(parts[kind])}"
                       for kind in _ALLOCATION_WORDS if parts.get(kind))
    text = (f"peak {format_bytes(hbm)} = {terms}: XLA:TPU's HBM allocations in its buffer "
            "assignment, held for the call")
    block = parts.get("temporary", 0)
    if memory.temp_bytes is not None and memory.temp_bytes != block:
        # XLA:TPU's temp_size_in_bytes also counts temporaries it places in the
        # chip's own scratch memory (VMEM), and is 0 for some programs.
        text += (f"; the temp column is XLA:TPU's temp_size_in_bytes "
                 f"({format_bytes(memory.temp_bytes)}), not this HBM temporary block")
    return text


def hbm_peak_rule(memory: Memory, hbm: int | None, on_chip: int | None,
                  parts: Mapping[str, int] | None = None) -> Memory:
    """``memory`` (XLA:TPU's figures) with its peak by the HBM rule; ``parts``
    are the HBM bytes by allocation kind (``parameter``, ``temporary``, ...),
    which the rule's text adds up to the peak.

    XLA:TPU's ``peak_memory_in_bytes`` is not that figure: with the libtpu of
    JAX 0.10 it was seen up to the scratch memory the compiler plans on the chip
    itself (VMEM, CMEM: ``on_chip``, the buffer assignment's allocations outside
    memory spaces 0 and host) above argument + output - alias, which is not HBM;
    with JAX 0.12's it was seen below the HBM allocations (MaxText's train step,
    and tests/test_tpu_target.py on v5p). Its ``temp_size_in_bytes`` is not the
    HBM temporary block either. The HBM a call holds is the buffer
    assignment's memory-space-0 allocations (``hbm``): arguments, outputs and
    the temporary block, allocated whole for the call. Without a buffer
    assignment (``hbm`` None) the peak is argument + output - alias + temp.
    """
    xla = memory.xla_peak_bytes
    if hbm is None:
        peak, rule, text = peak_rule(memory.argument_bytes, memory.output_bytes,
                                     memory.alias_bytes, memory.temp_bytes, None)
        return dataclasses.replace(
            memory, peak_bytes=peak, peak_is_computed=True, peak_rule=rule,
            peak_rule_text=("peak = argument + output - alias + temp: XLA:TPU gave no "
                            "buffer assignment, and its peak_memory_in_bytes "
                            f"({format_bytes(xla) if xla is not None else 'n/a'}) also "
                            "counts on-chip scratch memory"))
    text = ("peak: XLA:TPU's HBM allocations in its buffer assignment (arguments, outputs, "
            "the temporary block), held for the call")
    if parts:
        text = _hbm_parts_text(memory, hbm, parts)
    if xla is not None and xla != hbm:
        text += (f"; XLA's own peak_memory_in_bytes is {format_bytes(xla)}, "
                 f"{format_bytes(abs(xla - hbm))} {'above' if xla > hbm else 'below'} it")
        if on_chip:
            text += (f" (XLA's figure is not HBM alone: the chip's own scratch, VMEM/CMEM, "
                     f"{format_bytes(on_chip)} allocated, is outside HBM)")
    return dataclasses.replace(memory, peak_bytes=hbm, peak_is_computed=True,
                               peak_rule="hbm", peak_rule_text=text)


def with_peak_rule(memory: Memory) -> Memory:
    """``memory`` with its peak by :func:`peak_rule`, for a report saved before
    memscope stated the rule (its ``peak_bytes`` was XLA's figure, or computed)."""
    if memory.peak_rule is not None:
        return memory
    xla = None if memory.peak_is_computed else memory.peak_bytes
    peak, rule, text = peak_rule(memory.argument_bytes, memory.output_bytes,
                                 memory.alias_bytes, memory.temp_bytes, xla)
    return dataclasses.replace(memory, peak_bytes=peak, xla_peak_bytes=xla, peak_rule=rule,
                               peak_rule_text=text, peak_is_computed=rule == "sum")


@dataclass(frozen=True)
class MeasuredMemory:
    """``Device.memory_stats()`` of the busiest local device around the first call.

    JAX dispatches asynchronously, so "after" is when the call returned: its
    outputs are allocated, its temporaries may not be yet. ``peak_bytes_in_use``
    is the process's peak so far, an upper bound for this call's own; the first
    call compiles the function too, and on XLA:GPU the autotuner's scratch
    memory can set that peak (seen on an H100: 80 MiB for a program of 100 KiB).
    ``peak_bytes_in_use_before`` is the process's peak before the call (``None``
    in reports older than it): where the two are equal, the call (compile
    included) did not raise the process's peak.
    """

    bytes_in_use_before: int
    bytes_in_use_after: int
    peak_bytes_in_use: int
    peak_bytes_in_use_before: int | None = None


@dataclass(frozen=True)
class AllocationGroup:
    """The allocations of one kind (``parameter``, ``aliased``, ``output``,
    ``temporary``, ``constant``, ``thread_local``) in XLA's buffer assignment."""

    kind: AllocationKind
    count: int
    bytes: int


@dataclass(frozen=True)
class TempBuffer:
    """One logical buffer in a temporary allocation and the code that defines it.

    ``op`` is the JAX primitive (``dot_general``; the HLO opcode when JAX named
    none), ``op_name`` JAX's full name (``jit(step)/dot_general``), ``source``
    the user's ``path:line``. ``offset`` is where it lies in allocation
    ``allocation``: buffers whose ranges overlap are never live together.
    """

    instruction: str
    opcode: str
    shape: str
    bytes: int
    op: str
    op_name: str | None = None
    source: str | None = None
    allocation: int = 0
    offset: int = 0


@dataclass(frozen=True)
class SourceLine:
    """The temporary buffers defined on one source line (``None``: no line known).

    ``bytes`` adds the buffers' sizes; buffers reuse each other's memory over
    time, so these sums may exceed the temporary allocation.
    """

    source: str | None
    bytes: int
    buffers: int
    ops: tuple[str, ...] = ()
    #: at a peak (:attr:`LiveAtPeak.by_source`): ``temporary`` for the line's
    #: temporaries, ``held`` for its outputs and constants (held for the whole
    #: call); ``None`` elsewhere (the temporary buffers' table)
    kind: str | None = None


@dataclass(frozen=True)
class BufferBreakdown:
    """What holds the memory of one compiled function, from XLA's buffer assignment.

    ``temp_buffers`` lists the largest temporary buffers (at most
    :data:`memscope.compiled.buffers.MAX_DETAIL_ROWS`); ``more_buffers`` and ``more_bytes``
    count the rest. ``temp_bytes`` adds the temporary allocations, as XLA's
    ``temp_size_in_bytes`` does; ``reconciled`` says whether they agree and
    ``reconcile_note`` why not. ``timeline`` is the replayed heap-simulator trace
    as (step, bytes), ``None`` where XLA records none (``timeline_note`` says why).
    """

    allocations: tuple[AllocationGroup, ...]
    temp_bytes: int
    temp_buffers: tuple[TempBuffer, ...] = ()
    more_buffers: int = 0
    more_bytes: int = 0
    by_source: tuple[SourceLine, ...] = ()
    reconciled: bool | None = None
    reconcile_note: str | None = None
    timeline: tuple[tuple[int, int], ...] | None = None
    timeline_note: str | None = None
    replayed_peak: int | None = None
    live_at_peak: tuple[TempBuffer, ...] = ()


#: Which rule produced a :class:`MemoryTimeline`: the compiled schedule replayed
#: over the buffer assignment (``schedule``, every backend), or XLA's own
#: heap-simulator trace replayed (``heap_trace``, where XLA records one).
TimelineRule = Literal["schedule", "heap_trace"]
LiveKind = Literal["parameter", "aliased", "output", "constant", "temporary"]


@dataclass(frozen=True)
class MemoryTimeline:
    """Bytes live over the entry computation's program order.

    ``points`` are (entry step, bytes): the most held while that entry
    instruction runs (with the loop bodies and branches it calls), decimated to
    at most 400 points, each the largest of its stretch, so the peak is kept.
    ``peak_bytes`` is reached at ``peak_step``, while ``peak_instruction`` runs.
    ``held_bytes`` (parameters, outputs, constants) are held for the whole
    call; of the ``temp_block_bytes`` of temporary allocations,
    ``temp_live_bytes`` hold buffers live at the peak. ``peak_note`` says how
    ``peak_bytes`` relates to ``Memory.peak_bytes`` and its rule;
    ``schedule_peak_bytes`` is the schedule's peak where the curve is XLA's
    trace, and ``trace_note`` whether the two agree.
    """

    rule: TimelineRule
    steps: int
    points: tuple[tuple[int, int], ...]
    peak_bytes: int
    peak_step: int
    peak_instruction: str
    held_bytes: int
    temp_block_bytes: int
    temp_live_bytes: int
    peak_note: str | None = None
    schedule_peak_bytes: int | None = None
    trace_note: str | None = None


@dataclass(frozen=True)
class LiveBuffer:
    """One buffer holding memory at the peak of a :class:`MemoryTimeline`.

    ``kind``: ``parameter`` and ``aliased`` (a donated argument XLA writes an
    output into) are the call's arguments, ``output`` a result's allocation,
    ``constant`` the executable's, all held for the whole call; ``temporary``
    a buffer live from entry step ``live_from`` to ``live_to``. ``donated`` is
    ``None`` for what is not an argument; ``argument`` names the argument leaf.
    """

    kind: LiveKind
    bytes: int
    shape: str
    dtype: str | None
    instruction: str
    opcode: str
    op: str
    op_name: str | None = None
    source: str | None = None
    donated: bool | None = None
    argument: str | None = None
    live_from: int | None = None
    live_to: int | None = None
    #: what the buffer is (:data:`Role`); ``None`` in reports made before roles
    role: Role | None = None


#: What a buffer live at a peak is, decided by :mod:`memscope.analysis.roles`
#: from what memscope knows exactly (docs/roles.md): the call's ``parameters``,
#: ``optimizer`` state, other ``model_state`` (batch statistics, RNG state), the
#: ``batch`` (arguments that are not state), ``gradients``, ``activations``
#: saved for the backward pass, ``collectives``' buffers, the results that are
#: no state (``outputs``), the executable's ``constants``, ``temporaries`` (the
#: others, by their op), and what ``unknown`` (cannot be told), never guessed.
Role = Literal["parameters", "optimizer", "model_state", "batch", "gradients",
               "activations", "collectives", "outputs", "constants", "temporaries",
               "unknown"]
ROLES: tuple[Role, ...] = ("parameters", "optimizer", "model_state", "batch", "gradients",
                           "activations", "collectives", "outputs", "constants",
                           "temporaries", "unknown")
#: Each role in words, for the reports.
ROLE_WORDS: dict[str, str] = {
    "parameters": "parameters", "optimizer": "optimizer state",
    "model_state": "model state", "batch": "batch", "gradients": "gradients",
    "activations": "activations", "collectives": "collectives", "outputs": "outputs",
    "constants": "constants", "temporaries": "other temporaries",
    "unknown": "cannot be told"}


@dataclass(frozen=True)
class RoleBytes:
    """The bytes of one :data:`Role` live at a peak, in ``buffers`` buffers."""

    role: Role
    bytes: int
    buffers: int


@dataclass(frozen=True)
class PeakPart:
    """Buffers live at a peak that share a role, a place and an op.

    ``where`` is the source line (``path:line``) of the instruction that
    defines them, or for an argument its leaf's path (``params['w']``, with
    ``op`` ``argument``); ``None``: neither is known. ``shape`` is the largest one's. The parts of
    :attr:`LiveAtPeak.parts` hold every buffer live at the peak, once.
    """

    role: Role
    where: str | None
    op: str
    bytes: int
    buffers: int
    shape: str = ""


@dataclass(frozen=True)
class LiveAtPeak:
    """The buffers live at the peak of the memory timeline, largest first.

    ``bytes`` adds every one of them and equals the timeline's peak;
    ``buffers`` lists at most 50 (``more_buffers`` and ``more_bytes`` count
    the rest). ``arguments`` parameter buffers hold ``argument_bytes``;
    ``by_source`` groups all the others by the source line of the instruction
    that defines them (``None``: no line, e.g. a constant).
    """

    bytes: int
    buffers: tuple[LiveBuffer, ...] = ()
    more_buffers: int = 0
    more_bytes: int = 0
    by_source: tuple[SourceLine, ...] = ()
    argument_bytes: int = 0
    arguments: int = 0
    #: the bytes by role, largest first; they add up to ``bytes``
    roles: tuple[RoleBytes, ...] = ()
    #: every buffer live at the peak by (role, where, op), largest first; they
    #: add up to ``bytes`` (``memscope diff`` pairs them between two reports)
    parts: tuple[PeakPart, ...] = ()

    def role_bytes(self, role: str) -> int:
        """The bytes of ``role`` at the peak (0 where none is live)."""
        return sum(r.bytes for r in self.roles if r.role == role)

    def parts_of(self, role: str) -> tuple[PeakPart, ...]:
        """The parts of ``role``, largest first."""
        return tuple(p for p in self.parts if p.role == role)


@dataclass(frozen=True)
class XlaBuffer:
    """One buffer an out-of-memory error lists, in XLA's words (``None``: not said)."""

    bytes: int | None
    shape: str | None = None
    op: str | None = None
    source: str | None = None
    #: XLA's label for it (``fusion.3``), where the message gives one
    label: str | None = None


@dataclass(frozen=True)
class LiveArray:
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    sharding: str | None = None


@dataclass(frozen=True)
class LiveArrays:
    """``jax.live_arrays()`` when the program ended (the largest listed)."""

    count: int
    total_bytes: int
    largest: tuple[LiveArray, ...] = ()
