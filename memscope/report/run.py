"""The whole report: the run, its environment, what happened between calls, and the functions."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from memscope.errors import ReportFormatError
from memscope.report import display
from memscope.report.decode import _decode
from memscope.report.function import FunctionReport
from memscope.report.memory import LiveArrays, Memory, with_peak_rule
from memscope.report.run_memory import RunMemory

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "memscope.report/1"
Outcome = Literal["completed", "failed", "interrupted", "stopped"]


@dataclass(frozen=True)
class Device:
    id: int
    platform: str
    kind: str
    process_index: int = 0


@dataclass(frozen=True)
class Environment:
    """The JAX the figures were taken on. ``backend`` is ``None`` (and ``devices``
    empty) where the program never started JAX: nothing was captured."""

    jax: str
    jaxlib: str
    backend: str | None
    devices: tuple[Device, ...]
    python: str | None = None
    xla_flags: str | None = None
    #: this process under jax.distributed (0 and 1 for a single process)
    process_index: int = 0
    process_count: int = 1


@dataclass(frozen=True)
class TargetInfo:
    """The accelerator the captured programs were compiled for (``--target``),
    beside the machine that ran them; nothing ran on it."""

    #: as given: ``tpu:v5p:2x2x1``
    name: str
    #: JAX's device kind of its devices: ``TPU v5``
    chip: str
    chips: int
    #: JAX devices (per chip: 1, or 2 on v2, v3 and 7x)
    devices: int
    #: HBM per device, and where that figure comes from
    hbm_bytes: int | None = None
    hbm_source: str | None = None
    #: ``tpu`` or ``gpu`` (``None`` in reports saved before GPU targets: a TPU's)
    kind: str | None = None
    #: what a program may hold on one device, and why (a GPU's: JAX's
    #: allocator takes a fraction of its memory); ``None``: the HBM figure
    budget_bytes: int | None = None
    budget_source: str | None = None
    #: where the device's facts the compiler read come from (a GPU's description)
    description_source: str | None = None
    #: how some of the target's compiles were made otherwise than the rest
    compile_note: str | None = None


@dataclass(frozen=True)
class RunInfo:
    """How the program ran; ``error`` is the uncaught exception, as one line.

    A notebook cell run under ``%%memscope`` is the program ``In[5]`` with
    ``cell`` true (its ``exit_code`` as python's would be for a script that
    ended alike).
    """

    #: the script path or module name, as given (JSON ``"program"``; reports
    #: saved before it was so named call it ``"target"``, and are read alike)
    program: str
    argv: tuple[str, ...]
    outcome: Outcome
    exit_code: int
    module: bool = False
    error: str | None = None
    #: the program was a notebook cell (``%%memscope``, ``%memscope``), ``program`` its ``In[N]``
    cell: bool = False

    @property
    def command(self) -> str:
        """The program and its arguments as a shell would take them (``-m`` for a
        module); a notebook cell as ``notebook cell In[5]``."""
        if self.cell:
            return f"notebook cell {self.program}"
        text = shlex.join(["-m", self.program] if self.module else [self.program])
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
    #: device memory over the run's calls and its high-water mark; ``None``
    #: when no call was sampled
    run_memory: RunMemory | None = None


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
    #: signatures with candidates whose advice was not compiled: in a run of many
    #: jitted functions, the small ones after the first 50 (docs/cli.md)
    advice_skipped: int = 0
    #: advised variants begun early: lowered while JAX compiled the call and
    #: compiled once it returned (memscope.variants.early), and those of them the
    #: advice did not settle on (dropped; counted in ``variant_compiles`` all the same)
    early_compiles: int = 0
    early_unused: int = 0
    #: donation variants read from memscope's cache of an identical compile in an
    #: earlier run (memscope.compiled.cache), not compiled: not in ``variant_compiles``
    variant_cache_hits: int = 0
    #: where ``memory_analysis()`` carries no buffer assignment (XLA:GPU): the
    #: program's functions compiled once more, with XLA's dump, to read it, and
    #: those whose dump was read from memscope's cache of an earlier run instead
    dump_compiles: int = 0
    dump_cache_hits: int = 0
    #: with ``--target``: XLA compiles for the target (the functions', their
    #: variants', checkpoint policies' and fit's sizes, each with XLA's dump of
    #: it) and the seconds they took, each compile's own, summed (two side by
    #: side count both); and the target's compiles read from memscope's cache
    #: of an earlier run instead
    target_compiles: int = 0
    target_compile_seconds: float = 0.0
    target_cache_hits: int = 0


@dataclass(frozen=True)
class LiveSample:
    """``jax.live_arrays()`` just before top-level call number ``call`` (the
    last sample, ``function`` ``(end)``: when the program had ended)."""

    call: int
    function: str
    count: int
    bytes: int


@dataclass(frozen=True)
class LiveGrowth:
    """Live arrays of one shape, dtype and sharding whose count kept growing.

    ``produced_by`` is the jitted function and output path the arrays came from
    (``train_step result[1]``), ``None`` where memscope could not tell. The
    counts are of those arrays alone (of that shape, dtype and sharding, made
    by that function), from the last sample before they rose.
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
    #: (later addition) the count rose call after call of :attr:`repeated` (a
    #: loop that keeps them: a problem); false for a one-off rise (a note)
    steady: bool = True
    #: (later addition) the function called between every two samples the count rose between
    repeated: str | None = None
    #: (later addition) the user's variables that hold them at the last sample
    #: that found one (``losses``; several: ``kept, state``, most first)
    held_by: str | None = None

    @property
    def holders(self) -> tuple[str, ...]:
        return tuple(self.held_by.split(", ")) if self.held_by else ()

    @property
    def gained(self) -> int:
        """The arrays the group gained from ``first_call`` to ``last_call``."""
        return self.last_count - self.first_count

    @property
    def gained_bytes(self) -> int:
        return self.gained * self.bytes_each

    @property
    def per_call(self) -> float:
        calls = self.last_call - self.first_call
        return self.gained / calls if calls > 0 else 0.0


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
    #: the accelerator every function was also compiled for (``--target``): the
    #: functions' figures are then the target's, per device
    target: TargetInfo | None = None

    def __repr__(self) -> str:
        """The terminal report, plain (``print(report)``, the prompt)."""
        return display.text(self, f"<Report of {len(self.functions)} functions>")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """IPython's plain text: the terminal report."""
        p.text(repr(self))

    def _repr_html_(self) -> str | None:
        """In a notebook: the HTML report's body, answer first, sections collapsible."""
        return display.shown("html", self)

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
        report = _decode(cls, _with_program_key(data), "report")
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

    def peak_rule_notes(self) -> tuple[tuple[str, bool], ...]:
        """Each distinct peak rule as the renderers say it under the figures, with
        whether memscope computed the peaks it covers (they are marked ``*``).
        Where the functions' texts differ (a ``--target``'s figures name each
        program's own), each text names the functions it is for."""
        by_text: dict[str, list[FunctionReport]] = {}
        for fn in self.functions:
            if fn.memory is not None and fn.memory.peak_rule_text:
                by_text.setdefault(fn.memory.peak_rule_text, []).append(fn)
        notes = []
        for text, fns in by_text.items():
            if len(by_text) > 1 and len(fns) < len(self.functions):
                names = list(dict.fromkeys(fn.name for fn in fns))
                shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more"
                                                if len(names) > 3 else "")
                text = f"{shown}: {text}"
            notes.append((text, any(fn.memory is not None and fn.memory.peak_is_computed
                                    for fn in fns)))
        return tuple(notes)

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


def _with_program_key(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its run's script under ``"program"``: a report saved before
    the key was so named has it under ``"target"`` (which now names only the
    accelerator, the report's own ``target``)."""
    run = data.get("run")
    if isinstance(run, dict) and "program" not in run and isinstance(run.get("target"), str):
        return {**data, "run": {**run, "program": run["target"]}}
    return data
