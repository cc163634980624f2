"""The report: frozen dataclasses, JSON in and out, DataFrame views.

The JSON form (``"schema": "memscope.report/1"``) is a public interface,
documented in docs/report-format.md. Later versions only add fields; readers
ignore fields they do not know, and a field this version added but an older
report lacks takes its default.

Unknown is ``None`` (``null`` in JSON), never a fake zero.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from memscope.errors import ReportFormatError
from memscope.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "memscope.report/1"

InputFate = Literal["aliased", "donor", "unusable", "pruned", "not_donated"]
OutputFate = Literal["reuses_input", "copy_of_input", "new"]
Outcome = Literal["completed", "failed", "interrupted", "stopped"]
VariantName = Literal["none", "all", "advised", "requested"]
Observed = Literal["confirmed", "not_reused", "n/a"]
#: How ``Memory.peak_bytes`` was obtained: XLA's ``peak_memory_in_bytes`` (``xla``),
#: or argument + output - alias + temp (``sum``), see :func:`peak_rule`.
PeakRule = Literal["xla", "sum"]
AllocationKind = Literal["parameter", "aliased", "output", "temporary", "constant",
                         "thread_local"]

INPUT_FATES: tuple[str, ...] = get_args(InputFate)
OUTPUT_FATES: tuple[str, ...] = get_args(OutputFate)


@dataclass(frozen=True)
class HostMemory:
    """Host-side figures of ``memory_analysis()`` (zero on most programs)."""

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None

    def any_nonzero(self) -> bool:
        return any(v for v in dataclasses.astuple(self))


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


def peak_rule(argument: int | None, output: int | None, alias: int | None,
              temp: int | None, xla_peak: int | None
              ) -> tuple[int | None, PeakRule | None, str | None]:
    """The peak of one compiled program: ``(peak_bytes, rule, text)``.

    At the start of a call the device holds the arguments, the outputs that do
    not alias an argument and the temporary allocation all at once: XLA
    allocates every temporary block for the whole execution (XLA:CPU and GPU
    both). So the peak is at least argument + output - alias + temp. XLA's
    ``peak_memory_in_bytes`` replays its heap-simulator traces; XLA:CPU records
    none, so there it is argument + output - alias, the temporaries left out.
    The peak is the larger of the two; ``None`` only when both are unknown.
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
    return parts, "sum", (f"peak = argument + output - alias + temp; XLA's own peak "
                          f"({format_bytes(xla_peak)}) leaves out the temporaries, "
                          "which are held for the whole call")


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
class InputBuffer:
    """One leaf of the arguments, and what the compiled program does with its buffer.

    ``output`` names the result written into this buffer (``aliased``, or a
    ``donor`` XLA used). ``parameter`` is the HLO parameter number, ``None``
    when pruned. ``in_warning`` is true when JAX's "Some donated buffers were not
    usable" warning, raised while lowering this call, named this leaf.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    donated: bool
    fate: InputFate
    output: str | None = None
    sharding: str | None = None
    parameter: int | None = None
    in_warning: bool = False
    candidate: bool = False
    reason: str | None = None
    #: at the first call: did an output land in this donated buffer (``n/a``:
    #: not donated, or no device address to compare); ``None``: not observed
    observed: Observed | None = None
    #: at the first call: was the input deleted by it; ``None``: not an array
    deleted: bool | None = None
    #: its shape and bytes on each device it is sharded over (``None``: unknown)
    shard_shape: tuple[int, ...] | None = None
    device_bytes: int | None = None


@dataclass(frozen=True)
class OutputBuffer:
    """One leaf of the results; ``input`` names the argument it reuses or copies."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    fate: OutputFate
    input: str | None = None
    sharding: str | None = None
    shard_shape: tuple[int, ...] | None = None
    device_bytes: int | None = None


@dataclass(frozen=True)
class Variant:
    """The same function and signature compiled with another donation.

    Measured, never estimated: ``memory`` and the fates come from compiling
    the function with ``setting`` (in ``jax.jit``'s own keywords). When the
    setting is the one the function was written with, nothing is compiled
    again and ``same_as_written`` is true. ``error`` says why a variant could
    not be compiled or the request could not be applied.
    """

    name: VariantName
    setting: str
    memory: Memory | None
    inputs: tuple[InputBuffer, ...] = ()
    outputs: tuple[OutputBuffer, ...] = ()
    warnings: tuple[str, ...] = ()
    same_as_written: bool = False
    error: str | None = None
    #: another variant with the very same donation, whose one compile this shares
    same_as: VariantName | None = None
    #: memory over program order of this compile, and what is live at its peak
    #: (as :class:`FunctionReport`'s); ``None`` when not compiled or unreadable
    memory_timeline: MemoryTimeline | None = None
    live_at_peak: LiveAtPeak | None = None


@dataclass(frozen=True)
class MeasuredMemory:
    """``Device.memory_stats()`` of the busiest local device around the first call.

    JAX dispatches asynchronously, so "after" is when the call returned: its
    outputs are allocated, its temporaries may not be yet. ``peak_bytes_in_use``
    is the process's peak so far, an upper bound for this call's own.
    """

    bytes_in_use_before: int
    bytes_in_use_after: int
    peak_bytes_in_use: int


@dataclass(frozen=True)
class Advice:
    """What to donate, in the user's own terms, and what it was measured to save.

    ``setting`` is the whole donation to write in ``jax.jit(...)`` (what is
    donated already, plus ``add``). ``peak_after`` comes from compiling with
    that setting; ``None`` if that compile failed.
    """

    setting: str
    add: tuple[str, ...]
    candidate_bytes: int
    peak_before: int | None
    peak_after: int | None
    caveat: str


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


@dataclass(frozen=True)
class BufferBreakdown:
    """What holds the memory of one compiled function, from XLA's buffer assignment.

    ``temp_buffers`` lists the largest temporary buffers (at most
    :data:`memscope.compiled.buffers.MAX_LISTED`); ``more_buffers`` and ``more_bytes``
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
class Residual:
    """One value the forward pass saves for the backward pass, as JAX's
    ``saved_residuals`` lists it: ``origin`` is JAX's own words
    (``output of dot_general from model.py:12:8 (forward)``, ``from the
    argument x``), ``primitive`` and ``source`` (``path:line``) are read from
    them (``None`` for an argument or constant)."""

    shape: tuple[int, ...]
    dtype: str
    bytes: int
    origin: str
    primitive: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class FitRow:
    """The function compiled at one batch size: its peak by memscope's rule."""

    batch: int
    peak_bytes: int | None
    #: the advised donation's peak at that size; ``None`` without advice
    advised_peak_bytes: int | None = None


@dataclass(frozen=True)
class Forecast:
    """The largest batch that fits a budget, found by compiling (``memscope fit``).

    ``fixed_bytes`` + ``per_example_bytes`` x batch is the line through the two
    smallest sizes compiled; ``linear`` says whether every other size compiled
    lies on it. ``largest`` was compiled and fits; ``largest`` + ``step`` was
    compiled and does not (``None``: no size fits, or the search could not end).
    """

    function: str
    source: str | None
    argument: str
    axis: int
    batch: int
    step: int
    budget_bytes: int | None
    rows: tuple[FitRow, ...]
    fixed_bytes: int | None
    per_example_bytes: int | None
    linear: bool
    largest: int | None
    advised_largest: int | None = None
    advised_setting: str | None = None
    compiles: int = 0
    seconds: float = 0.0
    note: str | None = None
    #: the batch axis was inferred (not given with --batch), and how
    inferred: bool = False
    choice_note: str | None = None
    #: the budget's parts: the memory given or the device's limit, less what the
    #: process held outside the function's arguments when the capture stopped
    memory_bytes: int | None = None
    held_bytes: int | None = None


@dataclass(frozen=True)
class OutOfMemory:
    """A call (or compile) of the function that ran out of memory: the post-mortem.

    The compiled peak, the largest buffers and the advice are the function's
    own (``memory``, ``buffers``, ``advice``); this holds what only the failure
    shows. ``device_limit_bytes`` and ``bytes_in_use`` are ``None`` where the
    device keeps no statistics (CPU).
    """

    error: str
    failed_in: Literal["call", "compile"]
    requested_bytes: int | None = None
    device_limit_bytes: int | None = None
    bytes_in_use: int | None = None
    #: XLA:TPU's compiler: what the program needed, and the memory it had
    xla_used_bytes: int | None = None
    xla_capacity_bytes: int | None = None
    listed_buffers: tuple[XlaBuffer, ...] = ()
    live_arrays: LiveArrays | None = None
    forecast: Forecast | None = None
    #: the function's largest buffers of any kind (outputs, parameters,
    #: temporaries), from its buffer assignment, with op and source line
    largest_buffers: tuple[XlaBuffer, ...] = ()


@dataclass(frozen=True)
class ResidualLine:
    """The residuals one source line produces (``None``: arguments and constants)."""

    source: str | None
    bytes: int
    count: int
    primitives: tuple[str, ...] = ()


@dataclass(frozen=True)
class Differentiation:
    """One reverse-mode differentiation the function traces (``jax.grad``,
    ``jax.value_and_grad``, ``jax.vjp`` or a framework's wrapper over them).

    ``api`` is how the user wrote it (``jax.value_and_grad``,
    ``eqx.filter_value_and_grad``, ``nnx.value_and_grad``), ``function`` the
    differentiated function's name and ``source`` the user's line that calls
    it. ``by_line`` groups the residuals by source line, largest first.
    """

    api: str
    function: str | None
    source: str | None
    residuals: tuple[Residual, ...]
    total_bytes: int
    by_line: tuple[ResidualLine, ...] = ()


@dataclass(frozen=True)
class RematVariant:
    """The function compiled with its differentiated functions under
    ``jax.checkpoint(policy=jax.checkpoint_policies.<policy>)``, or as written
    (``policy`` ``"as_written"``). ``peak_bytes`` follows the report's peak
    rule; ``flops`` is XLA's ``cost_analysis()``; ``None`` where not known."""

    policy: str
    peak_bytes: int | None
    flops: float | None
    error: str | None = None


@dataclass(frozen=True)
class RematAdvice:
    """The checkpoint policy with the largest measured peak saving within
    ``max_flops_increase`` (a fraction of the function's FLOPs as written).

    ``code`` is the change in the user's terms. When donation advice applies
    too, ``donation`` is its setting and ``peak_after`` was measured with both
    applied (``combined``); otherwise with the policy alone.
    """

    policy: str
    code: str
    peak_before: int | None
    peak_after: int | None
    flops_before: float | None
    flops_after: float | None
    max_flops_increase: float
    donation: str | None = None
    combined: bool = False


@dataclass(frozen=True)
class Remat:
    """What the backward pass keeps, and what each checkpoint policy would trade.

    ``current_policies`` names the policies of the ``jax.checkpoint`` the
    function already uses (``"none"`` for no policy), ``uses_scan`` whether it
    has a ``scan``. ``error`` says why the variants could not be measured.
    """

    differentiations: tuple[Differentiation, ...]
    variants: tuple[RematVariant, ...] = ()
    advice: RematAdvice | None = None
    current_policies: tuple[str, ...] = ()
    uses_scan: bool = False
    error: str | None = None
    #: the FLOPs increase the advice allowed (a fraction), ``None`` if not measured
    max_flops_increase: float | None = None

    @property
    def residual_bytes(self) -> int:
        return sum(d.total_bytes for d in self.differentiations)


@dataclass(frozen=True)
class FunctionReport:
    """One jitted function at one signature.

    ``memory`` is ``None`` and ``error`` says why when memscope could not read
    the compiled program (the user's program ran regardless).
    """

    name: str
    source: str | None
    calls: int
    signature: str
    memory: Memory | None
    inputs: tuple[InputBuffer, ...] = ()
    outputs: tuple[OutputBuffer, ...] = ()
    warnings: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    error: str | None = None
    variants: tuple[Variant, ...] = ()
    advice: Advice | None = None
    #: the donation as written, in jax.jit's keywords (``donate_argnums=(0,)``)
    setting: str | None = None
    #: where the first call's buffers disagree with the compiled program
    findings: tuple[str, ...] = ()
    #: device memory around the first call, where the backend reports it
    measured: MeasuredMemory | None = None
    #: devices the program runs on; ``memory`` is per device
    devices: int | None = None
    #: for a merged multi-process report: the processes that ran it
    processes: tuple[int, ...] = ()
    #: what holds the memory (XLA's buffer assignment); ``None`` when unavailable
    buffers: BufferBreakdown | None = None
    #: the installed package that jitted this function (``optax``), not the user's
    #: code: its figures are reported, with no advice the user could not apply
    library: str | None = None
    #: bytes live over program order (the compiled schedule, or XLA's trace)
    memory_timeline: MemoryTimeline | None = None
    #: the buffers live at that timeline's peak
    live_at_peak: LiveAtPeak | None = None
    #: why ``memory_timeline`` is ``None``
    memory_timeline_note: str | None = None
    #: why this signature compiled again: what differs from the nearest earlier
    #: signature of the same function; ``None`` for a function's first signature
    recompile: Recompile | None = None
    #: seconds JAX spent tracing, lowering and compiling at this signature's first
    #: call (its monitoring events; 0.0: its caches had the program); ``None``: not measured
    compile_seconds: float | None = None
    #: the number of the top-level jitted call that first ran this signature
    first_call: int | None = None
    #: a call or compile of it ran out of memory: the post-mortem
    out_of_memory: OutOfMemory | None = None
    #: residuals of its differentiations and measured checkpoint policies
    #: (``None``: it differentiates nothing, or the analysis was off)
    remat: Remat | None = None
    #: ``path:line`` of the user's code that made the jit (the decorator's function
    #: or the ``jax.jit(...)`` call): what ``memscope fix`` edits; ``None``: unknown
    jit_site: str | None = None
    #: SHA-256 of that file when the jit was made: ``memscope fix`` edits only that text
    jit_file_sha256: str | None = None
    #: ``path:line`` of the user's code that made the first call of this signature
    call_site: str | None = None

    def variant(self, name: str) -> Variant | None:
        """The variant called ``name`` (``none``, ``all``, ``advised``, ``requested``)."""
        return next((v for v in self.variants if v.name == name), None)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per buffer (inputs, then outputs), for analysis and export."""
        import pandas as pd

        rows = [{"kind": "input", "path": b.path, "shape": b.shape, "dtype": b.dtype,
                 "bytes": b.bytes, "donated": b.donated, "fate": b.fate, "partner": b.output,
                 "candidate": b.candidate, "reason": b.reason}
                for b in self.inputs]
        rows += [{"kind": "output", "path": b.path, "shape": b.shape, "dtype": b.dtype,
                  "bytes": b.bytes, "donated": None, "fate": b.fate, "partner": b.input,
                  "candidate": None, "reason": None}
                 for b in self.outputs]
        return pd.DataFrame(rows, columns=["kind", "path", "shape", "dtype", "bytes",
                                           "donated", "fate", "partner", "candidate",
                                           "reason"])


@dataclass(frozen=True)
class Device:
    id: int
    platform: str
    kind: str
    process_index: int = 0


@dataclass(frozen=True)
class Environment:
    jax: str
    jaxlib: str
    backend: str
    devices: tuple[Device, ...]
    python: str | None = None
    xla_flags: str | None = None
    #: this process under jax.distributed (0 and 1 for a single process)
    process_index: int = 0
    process_count: int = 1


@dataclass(frozen=True)
class RunInfo:
    """How the target ran; ``error`` is the uncaught exception, as one line."""

    target: str
    argv: tuple[str, ...]
    outcome: Outcome
    exit_code: int
    module: bool = False
    error: str | None = None

    @property
    def command(self) -> str:
        """The target and its arguments as a shell would take them (``-m`` for a module)."""
        text = shlex.join(["-m", self.target] if self.module else [self.target])
        return f"{text} {shlex.join(self.argv)}" if self.argv else text

    @property
    def ending(self) -> str:
        """How the run ended: ``failed (exit code 1): ValueError: bad shape``."""
        text = f"{self.outcome} (exit code {self.exit_code})"
        return f"{text}: {self.error}" if self.error else text


@dataclass(frozen=True)
class MemorySample:
    """Device memory right after one top-level jitted call (the busiest device)."""

    call: int
    function: str
    bytes_in_use: int
    peak_bytes_in_use: int


@dataclass(frozen=True)
class LiveArray:
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    sharding: str | None = None


@dataclass(frozen=True)
class LiveArrays:
    """``jax.live_arrays()`` when the target ended (the largest listed)."""

    count: int
    total_bytes: int
    largest: tuple[LiveArray, ...] = ()


@dataclass(frozen=True)
class Runtime:
    """What the run itself showed, beside the compiled figures.

    ``device_memory`` is ``None`` where ``Device.memory_stats()`` reports
    nothing (CPU), and ``device_memory_note`` says so; it is never zeros.
    """

    device_memory: tuple[MemorySample, ...] | None = None
    device_memory_note: str | None = None
    timeline_truncated: bool = False
    live_arrays: LiveArrays | None = None
    #: what memscope's own work cost the run
    overhead: Overhead | None = None
    #: ``jax.live_arrays()`` sampled after top-level calls; ``None`` when no call ran
    live_timeline: LiveTimeline | None = None


@dataclass(frozen=True)
class Overhead:
    """What memscope's own work cost the run it measured.

    Reading compiled programs and compiling donation variants run in a worker
    thread beside the program; the report waits for what is left of it once the
    program has ended (``after_exit_seconds``). ``host_bytes`` is memscope's own
    host memory at its largest: the largest growth of the process's resident
    memory over one piece of that work (reading one signature's compiled program
    and compiling its variants), taken before memscope hands the free memory back
    to the system; what the program's own threads allocated meanwhile counts
    too. ``None`` where the system does not say, or when there was no such work.
    """

    analysis_seconds: float
    after_exit_seconds: float
    host_bytes: int | None
    #: XLA compiles of donation variants memscope made
    variant_compiles: int
    #: variants answered without a compile of their own: the program as written,
    #: or another variant with the same donation
    variants_reused: int


RecompileKind = Literal["shape", "dtype", "weak_type", "kind", "sharding", "sharding_spelling",
                        "tree", "static", "donation", "unknown"]


@dataclass(frozen=True)
class RecompileReason:
    """One way a signature differs from an earlier one of the same function.

    ``path`` is the argument leaf (``params['w']``), the static argument
    (``#1``, ``lr``), or empty for the call as a whole; ``before``/``after`` are
    the two values in words; ``advice`` says what to change.
    """

    path: str
    kind: RecompileKind
    before: str
    after: str
    advice: str


@dataclass(frozen=True)
class Recompile:
    """Why a signature compiled again: compared with signature number ``since``
    (1-based, in the order of first calls) of the same function, the nearest one."""

    since: int
    reasons: tuple[RecompileReason, ...]
    #: differing leaves past the ones listed
    more: int = 0


@dataclass(frozen=True)
class LiveSample:
    """``jax.live_arrays()`` right after top-level call number ``call``."""

    call: int
    function: str
    count: int
    bytes: int


@dataclass(frozen=True)
class LiveGrowth:
    """Live arrays of one shape, dtype and sharding whose count kept growing.

    ``produced_by`` is the jitted function and output path the arrays came from
    (``train_step result[1]``), ``None`` where memscope could not tell.
    """

    shape: tuple[int, ...]
    dtype: str
    sharding: str | None
    bytes_each: int
    first_call: int
    first_count: int
    last_call: int
    last_count: int
    produced_by: str | None = None

    @property
    def per_call(self) -> float:
        calls = self.last_call - self.first_call
        return (self.last_count - self.first_count) / calls if calls > 0 else 0.0


@dataclass(frozen=True)
class LiveTimeline:
    """Live arrays over the run; ``sampling`` says when a sample was taken."""

    samples: tuple[LiveSample, ...]
    sampling: str
    #: seconds the sampling took in all (on the program's path)
    sample_seconds: float
    growth: tuple[LiveGrowth, ...] = ()


HazardKind = Literal["donated_twice", "donated_and_passed"]


@dataclass(frozen=True)
class DonationHazard:
    """At a donating signature's first call: one buffer donated twice
    (``donated_twice``), or donated and also passed as a non-donated argument
    (``donated_and_passed``); JAX refuses both at run time."""

    kind: HazardKind
    function: str
    source: str | None
    call: int
    #: the user's line that made the call (``train.py:42``)
    line: str | None
    paths: tuple[str, str]


@dataclass(frozen=True)
class DeletedRead:
    """The run ended reading an array that a jitted call had donated (deleted)."""

    error: str
    function: str
    source: str | None
    path: str
    call: int
    line: str | None


@dataclass(frozen=True)
class ProcessPart:
    """One process's report inside a merged one: where it came from and how it ran."""

    process_index: int
    file: str
    run: RunInfo | None = None


@dataclass(frozen=True)
class Report:
    memscope_version: str
    environment: Environment
    run: RunInfo | None
    functions: tuple[FunctionReport, ...]
    schema: str = SCHEMA
    runtime: Runtime | None = None
    #: for ``memscope merge``: the per-process reports this one combines
    merged_from: tuple[ProcessPart, ...] = ()
    #: what memscope could not see or verify in this run, one line each (an
    #: unsupported JAX, pmap programs JAX compiled outside jax.jit)
    notes: tuple[str, ...] = ()
    #: donations that JAX refuses or that delete what the call also reads
    donation_hazards: tuple[DonationHazard, ...] = ()
    #: the donation that deleted the array whose read ended the run
    deleted_read: DeletedRead | None = None

    def unreadable(self) -> tuple[FunctionReport, ...]:
        """The functions whose compiled program memscope could not read (``error``)."""
        return tuple(fn for fn in self.functions if fn.error is not None and fn.memory is None)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {"schema": data.pop("schema"), **data}

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Build a report from parsed JSON.

        Raises:
            ReportFormatError: not a memscope report, or a field has the wrong type.
        """
        if not isinstance(data, dict) or "schema" not in data:
            raise ReportFormatError("not a memscope report (it has no \"schema\" field)")
        if data["schema"] != SCHEMA:
            raise ReportFormatError(
                f"unsupported report schema {data['schema']!r}; this memscope reads {SCHEMA!r}")
        report = _decode(cls, data, "report")
        # A report saved before memscope stated its peak rule has no "peak_rule" key.
        raw = data.get("functions")
        old = {i for i, fn in enumerate(raw if isinstance(raw, list) else ())
               if isinstance(fn, dict) and isinstance(fn.get("memory"), dict)
               and "peak_rule" not in fn["memory"]}
        return _with_peak_rule(report, old) if old else report

    @classmethod
    def from_json(cls, text: str) -> Report:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ReportFormatError(f"not valid JSON ({e.msg} at line {e.lineno})") from None
        except RecursionError:
            raise ReportFormatError("not a memscope report (nested too deeply)") from None
        except ValueError as e:  # an integer longer than python reads (4300 digits)
            raise ReportFormatError(f"not a memscope report ({e})") from None
        try:
            return cls.from_dict(data)
        except RecursionError:
            raise ReportFormatError("not a memscope report (nested too deeply)") from None

    def peak_rule_texts(self) -> tuple[str, ...]:
        """The distinct ``peak_rule_text`` of the functions, in order: what the
        renderers say where the peak first appears."""
        texts = (fn.memory.peak_rule_text for fn in self.functions if fn.memory is not None)
        return tuple(dict.fromkeys(t for t in texts if t))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per function and signature with its memory figures."""
        import pandas as pd

        figures = [f.name for f in dataclasses.fields(Memory) if f.name.endswith("_bytes")]
        rows = []
        for fn in self.functions:
            row: dict[str, Any] = {"name": fn.name, "source": fn.source, "calls": fn.calls,
                                   "signature": fn.signature}
            for fig in figures:
                row[fig] = getattr(fn.memory, fig) if fn.memory else None
            rows.append(row)
        return pd.DataFrame(rows, columns=["name", "source", "calls", "signature", *figures])


def _with_peak_rule(report: Report, old: set[int]) -> Report:
    """A report saved before memscope stated its peak rule, with every peak (and the
    advice's before and after) by :func:`peak_rule`, so old and new compare alike."""
    def memory(m: Memory | None) -> Memory | None:
        return None if m is None else with_peak_rule(m)

    def function(fn: FunctionReport) -> FunctionReport:
        if fn.memory is None or fn.memory.peak_rule is not None:
            return fn
        now = memory(fn.memory)
        variants = tuple(dataclasses.replace(v, memory=memory(v.memory)) for v in fn.variants)
        advised = next((v for v in variants if v.name == "advised"), None)
        advice = fn.advice
        if advice is not None:
            advice = dataclasses.replace(
                advice, peak_before=now.peak_bytes if now else None,
                peak_after=(advised.memory.peak_bytes if advised and advised.memory
                            else advice.peak_after))
        return dataclasses.replace(fn, memory=now, variants=variants, advice=advice)

    functions = tuple(function(fn) if i in old else fn
                      for i, fn in enumerate(report.functions))
    return dataclasses.replace(report, functions=functions)


#: Integers a report may hold: what fits in a signed 64-bit integer, as in XLA.
INT_RANGE = (-2**63, 2**63 - 1)
#: The only integer fields that may be negative; every size, count, index,
#: shape and step is at least 0.
_SIGNED_FIELDS = frozenset({"exit_code", "donate_argnums"})

Decoder = typing.Callable[[Any], Any]
_DECODERS: dict[tuple[Any, bool], Decoder] = {}


class _Invalid(Exception):
    """A value that does not fit its field; ``path`` grows as it travels up."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def _decode(tp: Any, value: Any, where: str) -> Any:
    """Decode JSON ``value`` as type ``tp``; errors name the offending field."""
    try:
        return _decoder(tp)(value)
    except _Invalid as e:
        raise ReportFormatError(f"{where}{''.join(reversed(e.path))}: {e.message}") from None


def _decoder(tp: Any, signed: bool = False) -> Decoder:
    """The decoder of type ``tp``, built once per type: reading a large report
    walks its data, not Python's type hints, once per object."""
    key = (tp, signed)
    found = _DECODERS.get(key)
    if found is None:
        found = _DECODERS[key] = _build_decoder(tp, signed)
    return found


def _build_decoder(tp: Any, signed: bool) -> Decoder:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if origin in (types.UnionType, typing.Union):
        (inner_type,) = (o for o in get_args(tp) if o is not type(None))
        inner = _decoder(inner_type, signed)
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        return _tuple_decoder(get_args(tp), signed)
    if origin is Literal:
        allowed = get_args(tp)

        def literal(value: Any) -> Any:
            if not isinstance(value, str | int) or value not in allowed:
                raise _Invalid(f"{_shown(value)} is not one of {list(allowed)}")
            return value
        return literal
    if tp is int:
        low = INT_RANGE[0] if signed else 0

        def integer(value: Any) -> Any:
            if type(value) is not int:
                raise _Invalid(f"expected int, got {type(value).__name__}")
            if not low <= value <= INT_RANGE[1]:
                bound = "a signed 64-bit integer" if signed else "0 to 2**63-1"
                raise _Invalid(f"{_shown(value)} is out of range (expected {bound})")
            return value
        return integer

    def plain(value: Any) -> Any:
        if type(value) is not tp:
            raise _Invalid(f"expected {tp.__name__}, got {type(value).__name__}")
        return value
    return plain


def _dataclass_decoder(tp: Any) -> Decoder:
    hints = typing.get_type_hints(tp)
    fields = dataclasses.fields(tp)
    # Filled in on first use: a dataclass may refer to itself through its fields.
    decoders: list[tuple[str, Any, Decoder]] = []

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid("expected an object")
        if not decoders:
            decoders.extend((f.name, f, _decoder(hints[f.name], f.name in _SIGNED_FIELDS))
                            for f in fields)
        attributes = {}
        for name, f, decoder in decoders:
            if name in value:
                try:
                    attributes[name] = decoder(value[name])
                except _Invalid as e:
                    e.path.append(f".{name}")
                    raise
            elif f.default is not dataclasses.MISSING:
                attributes[name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                attributes[name] = f.default_factory()
            else:
                raise _Invalid(f"missing field {name!r}")
        # Every field is decoded and checked above; filling the instance directly
        # skips the frozen dataclass's per-field __setattr__ (the report classes
        # define no __post_init__).
        obj = object.__new__(tp)
        obj.__dict__.update(attributes)
        return obj
    return decode


def _tuple_decoder(args: tuple[Any, ...], signed: bool) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0], signed)

        def variable(value: Any) -> Any:
            if not isinstance(value, list):
                raise _Invalid("expected a list")
            try:
                return tuple([item(v) for v in value])
            except _Invalid as e:
                e.path.append(f"[{_failing(item, value)}]")
                raise
        return variable
    items = [_decoder(a, signed) for a in args]

    def fixed(value: Any) -> Any:
        if not isinstance(value, list) or len(value) != len(items):
            raise _Invalid(f"expected a list of {len(items)} items")
        try:
            return tuple([d(v) for d, v in zip(items, value, strict=True)])
        except _Invalid as e:
            e.path.append(f"[{next(i for i, (d, v) in enumerate(zip(items, value, strict=True)) if _fails(d, v))}]")
            raise
    return fixed


def _fails(decoder: Decoder, value: Any) -> bool:
    try:
        decoder(value)
    except _Invalid:
        return True
    return False


def _failing(decoder: Decoder, values: list[Any]) -> int:
    """The index of the first item ``decoder`` rejects (looked for only on error)."""
    return next(i for i, v in enumerate(values) if _fails(decoder, v))


def _shown(value: Any) -> str:
    """``value`` for an error message, cut short (an integer of 400 digits)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 \
        else f"an integer of {len(str(abs(value)))} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def load_report(path: str) -> Report:
    """Read a report saved as JSON.

    Raises:
        ReportFormatError: the file cannot be read, is not JSON, or is not a report.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise ReportFormatError(f"cannot read {path}: {reason}") from None
    try:
        return Report.from_json(text)
    except ReportFormatError as e:
        raise ReportFormatError(f"{path}: {e}") from None


def save_report(report: Report, path: str) -> None:
    """Write ``report`` as JSON to ``path``, whole or not at all (see :func:`write_whole`).

    Raises:
        ReportFormatError: the file cannot be written.
    """
    write_whole(path, report.to_json() + "\n")


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a file beside it, renamed into place, so
    that a process ended mid-write (``os._exit``, SIGKILL) leaves the old file
    as it was, never half of the new one.

    Raises:
        ReportFormatError: the file cannot be written.
    """
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise ReportFormatError(f"cannot write {path}: {e.strerror}") from None
