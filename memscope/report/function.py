"""The record of one jitted function at one signature: its buffers' fates, variants, advice, residuals, forecast."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from memscope.report import display
from memscope.report.memory import (
    BufferBreakdown,
    LiveArrays,
    LiveAtPeak,
    MeasuredMemory,
    Memory,
    MemoryTimeline,
    XlaBuffer,
)

if TYPE_CHECKING:
    import pandas as pd

InputFate = Literal["aliased", "donor", "unusable", "pruned", "not_donated"]
OutputFate = Literal["reuses_input", "copy_of_input", "new"]
VariantName = Literal["none", "all", "advised", "requested"]
#: What the first call showed of a donated input's buffer (``confirmed_later``:
#: no output landed there at the first call, and at the next call one did).
Observed = Literal["confirmed", "confirmed_later", "not_reused", "n/a"]
#: Why a donated buffer may take no output at run time though the compiled
#: program says it does: the cause seen on CPU.
NOT_XLAS = ("XLA cannot take a buffer it did not allocate: a NumPy array's memory, which "
            "jax.device_put shares on CPU")
#: What a jitted function does with a ``jax.Ref`` it is given or closes over:
#: reads and writes it (``updated``: JAX writes the new value into the Ref's
#: own buffer), only reads it, only writes it, or never touches it (pruned).
RefAccess = Literal["updated", "read", "written", "unused"]

INPUT_FATES: tuple[str, ...] = get_args(InputFate)
REF_ACCESSES: tuple[str, ...] = get_args(RefAccess)
OUTPUT_FATES: tuple[str, ...] = get_args(OutputFate)


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
    #: not donated, or no device address to compare; ``confirmed_later``: not
    #: then, at the next call yes); ``None``: not observed
    observed: Observed | None = None
    #: at the first call: was the input deleted by it; ``None``: not an array
    deleted: bool | None = None
    #: its shape and bytes on each device it is sharded over (``None``: unknown)
    shard_shape: tuple[int, ...] | None = None
    device_bytes: int | None = None
    #: the sharding's memory kind (``device``, ``pinned_host``, ``unpinned_host``);
    #: ``None`` where it names none. A leaf in host memory holds no device memory.
    memory_kind: str | None = None
    #: for a ``jax.Ref``: what the program does with it (``None``: not a Ref). A
    #: Ref the program keeps is ``aliased`` to its own new value, in place.
    ref: RefAccess | None = None
    #: for a Ref: its buffer address when the run ended equals the one before
    #: the first call (through every call since); ``None``: not read (the Ref
    #: was gone by then)
    ref_kept: bool | None = None
    #: the number of the signature's next call, where the caller passed this very
    #: array again (it keeps it: not to be donated); ``None``: not seen
    passed_again: int | None = None
    #: for a candidate: the output that donating it lets reuse its buffer, as
    #: the advisor paired them; ``None`` otherwise (and in a report saved before
    #: the field was written)
    candidate_for: str | None = None


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
    #: the sharding's memory kind (``device``, ``pinned_host``, ``unpinned_host``);
    #: ``None`` where it names none. A leaf in host memory holds no device memory.
    memory_kind: str | None = None


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


#: The smallest peak saving, as a fraction of the peak, that a donation advice
#: is shown for; below it the candidates are a note (``Advice.worthwhile``).
MEANINGFUL_SAVING = 0.01


@dataclass(frozen=True)
class Advice:
    """What to donate, in the user's own terms, and what it was measured to save.

    ``setting`` is the whole donation to write in ``jax.jit(...)`` (what is
    donated already, plus ``add``), set only where compiling with it was
    measured to help (:func:`advice_verdict`); otherwise ``None`` (and ``add``
    empty), with ``reason`` saying what the compile measured. ``tried`` is the
    donation that was compiled, either way. ``peak_after`` comes from that
    compile; ``None`` if it failed.
    """

    setting: str | None
    add: tuple[str, ...]
    candidate_bytes: int
    peak_before: int | None
    peak_after: int | None
    caveat: str
    #: the arguments the function donates that no output can take (left out)
    drop: tuple[str, ...] = ()
    #: (later addition) the donation compiled for the advice, whether or not it helped
    tried: str | None = None
    #: (later addition) why ``setting`` is ``None``: what the compile measured
    reason: str | None = None

    @property
    def worthwhile(self) -> bool:
        """Whether the advice is worth acting on: it was measured to lower the
        peak by at least :data:`MEANINGFUL_SAVING` of it, or to leave out a
        donation that does nothing without raising it."""
        return (self.setting is not None and advice_verdict(
            self.setting, self.peak_before, self.peak_after, self.drop) is None)


def advice_verdict(setting: str, peak_before: int | None, peak_after: int | None,
                   drop: tuple[str, ...] = (), error: str | None = None) -> str | None:
    """Why the donation ``setting``, compiled, is not advised, from its measured
    peaks (``peak_after``: compiled with it; ``error``: why that compile
    failed); ``None`` where it helps: the peak falls by at least
    :data:`MEANINGFUL_SAVING` of it, or the setting leaves out a donation that
    does nothing (``drop``) and the peak does not rise."""
    from memscope.report.units import format_bytes, format_bytes_apart

    if peak_before is None or peak_after is None:
        why = f": {error}" if error else ""
        return f"compiled with {setting}, the peak could not be measured{why}"
    saved = peak_before - peak_after
    if (drop and saved >= 0) or (saved > 0 and saved >= MEANINGFUL_SAVING * peak_before):
        return None
    before, after = format_bytes_apart([peak_before, peak_after])
    if saved < 0:
        rise = -saved / peak_before if peak_before else math.inf
        return (f"compiled with {setting}, the peak rises from {before} to {after} "
                f"(+{rise:.0%})" if rise >= 0.01 else
                f"compiled with {setting}, the peak rises from {before} to {after}")
    if saved == 0:
        return f"compiled with {setting}, the peak stays {before}"
    return (f"compiled with {setting}, the peak falls by only {format_bytes(saved)} of "
            f"{before} (under {MEANINGFUL_SAVING:.0%})")


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
    #: the target's compiler refused the size as too large for the device (as
    #: written, with the advised donation): it does not fit, and has no peak
    refused: bool = False
    advised_refused: bool = False


#: How far (a share of the compiled peak) a size may lie off the line through
#: the smallest and largest sizes compiled for ``fit`` to give the line as the peak.
LINE_TOLERANCE = 0.01


@dataclass(frozen=True)
class Forecast:
    """The largest batch that fits a budget, found by compiling (``memscope fit``).

    ``fixed_bytes`` + ``per_example_bytes`` x batch is the line through the
    smallest and largest sizes compiled; ``linear`` says whether every size
    compiled lies on it, within :data:`LINE_TOLERANCE` of its peak (where not,
    the line is no model of the peak, and ``fit`` does not print it).
    ``largest`` is the largest size compiled that fits, below the first that
    does not (``None``: no size compiled fits); ``largest`` + ``step`` was
    compiled and does not fit where it is ``confirmed``.
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
    #: how ``held_bytes`` was found
    held_note: str | None = None
    #: which rule gave ``memory_bytes`` where the target's room did (no
    #: ``--memory``): ``75% of 79.1 GiB, JAX 0.12's default; ...``
    memory_source: str | None = None
    #: how some of the target's compiles were made otherwise than the rest
    compile_note: str | None = None
    #: where the step's FLOPs do not grow with the batch resized: why ``largest``
    #: counts input bytes, not examples, and is no answer (``fit`` says so)
    batch_note: str | None = None
    #: ``largest`` + ``step`` was compiled and does not fit; ``False`` where the
    #: search stopped first (its compile limit: ``note`` says what is left)
    confirmed: bool = True
    #: where not ``confirmed``: the smallest size compiled above ``largest`` that
    #: does not fit (``None``: no size compiled was too large)
    above: int | None = None

    @property
    def answers(self) -> bool:
        """A batch fits, and it counts examples (no :attr:`batch_note`)."""
        return self.largest is not None and self.batch_note is None


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
    #: the failed allocation's size as XLA printed it, rounded (XLA:GPU), where it
    #: did; ``requested_bytes`` is then the one compiled allocation of that size
    requested_text: str | None = None
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
    #: host memory the compiled program holds (argument + output - alias + temp
    #: of host memory): where an offloading policy put residuals; ``None`` unknown
    host_bytes: int | None = None
    #: the policy offloads residuals to host memory (for ``as_written``: one of
    #: the user's own policies does)
    offloads: bool = False


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
    #: the names given with ``checkpoint_name`` in the function, which the
    #: ``save_and_offload_only_these_names`` variant offloads
    checkpoint_names: tuple[str, ...] = ()
    #: where the user's own policy offloads to host but the compiled program
    #: holds no host memory: the offload moves nothing (else ``None``)
    offload_note: str | None = None
    #: what counted the variants' FLOPs where it is not the compiled program's
    #: own cost analysis (a GPU target's deviceless compile counts none); ``None``:
    #: XLA's cost analysis of each compiled variant
    flops_rule: str | None = None

    @property
    def residual_bytes(self) -> int:
        return sum(d.total_bytes for d in self.differentiations)


@dataclass(frozen=True)
class MemoryLimit:
    """Whether the target's compiler reshaped the function to fit the memory it
    compiled against (``--target gpu:``: XLA:GPU's rematerialization recomputes
    values where the peak would cross the limit): compiled again without, both peaks."""

    #: the memory the target's compiler started from (a GPU's: the room, as on the device)
    limit_bytes: int
    #: the function's peak as compiled for the target (its ``memory``)
    peak_bytes: int
    #: its peak compiled without the rematerialization; ``None``: that compile failed
    unlimited_peak_bytes: int | None
    #: the compiler that rematerialized (``XLA:GPU``)
    compiler: str = "XLA:GPU"

    @property
    def rematerialized(self) -> bool:
        """The compile without the limit has another peak."""
        return (self.unlimited_peak_bytes is not None
                and self.unlimited_peak_bytes != self.peak_bytes)


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
    #: with ``--target``, ``memory`` is the target's (per device) and this the
    #: figures of the same function as compiled on the machine that ran it
    memory_here: Memory | None = None
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
    #: why its variants (the advice's, the checkpoint policies) were not measured
    #: although asked for: the program let go of the function, or cleared its
    #: cache, before memscope compiled them; ``None`` otherwise
    not_measured: str | None = None
    #: why the first call's buffers were not observed (``observed`` is then
    #: ``None`` on every leaf); ``None`` where they were, or nothing says why
    not_observed: str | None = None
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
    #: the ``jax.Ref`` s the function closes over, named as the user's code names
    #: them (``closed-over Ref #k`` where memscope could not tell): JAX passes
    #: each as an extra argument, updated in place like a Ref argument; then the
    #: arrays of the hijax values it closes over (Flax's hijax Variables, JAX 0.7
    #: to 0.10: ``ref`` is ``None``, never donated, their new values outputs)
    closed_over_refs: tuple[InputBuffer, ...] = ()
    #: with ``--target gpu:``, where the peak came within reach of the memory
    #: limit XLA:GPU compiled against: its peak compiled without the limit too;
    #: ``None``: not checked (no target that checks, or a peak far below it)
    memory_limit: MemoryLimit | None = None

    def variant(self, name: str) -> Variant | None:
        """The variant called ``name`` (``none``, ``all``, ``advised``, ``requested``)."""
        return next((v for v in self.variants if v.name == name), None)

    def __repr__(self) -> str:
        """Its terminal report, plain: its answer, then its section."""
        return display.text(self, f"<FunctionReport {self.name} {self.signature}>")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """IPython's plain text: the terminal report."""
        p.text(repr(self))

    def _repr_html_(self) -> str | None:
        """In a notebook: its answer and its section of the HTML report."""
        return display.shown("html", self)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per buffer (inputs, the Refs it closes over, then outputs), for
        analysis and export; ``ref`` says what the program does with a Ref."""
        import pandas as pd

        rows = [{"kind": kind, "path": b.path, "shape": b.shape, "dtype": b.dtype,
                 "bytes": b.bytes, "donated": b.donated, "fate": b.fate, "partner": b.output,
                 "candidate": b.candidate, "reason": b.reason, "ref": b.ref}
                for kind, buffers in (("input", self.inputs),
                                      ("closed_over_ref", self.closed_over_refs))
                for b in buffers]
        rows += [{"kind": "output", "path": b.path, "shape": b.shape, "dtype": b.dtype,
                  "bytes": b.bytes, "donated": None, "fate": b.fate, "partner": b.input,
                  "candidate": None, "reason": None, "ref": None}
                 for b in self.outputs]
        return pd.DataFrame(rows, columns=["kind", "path", "shape", "dtype", "bytes",
                                           "donated", "fate", "partner", "candidate",
                                           "reason", "ref"])


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
