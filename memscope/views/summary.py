"""Pure functions: a report -> what a reader needs first, grouped the way users think.

Every renderer (terminal, markdown, HTML, check's renderers, the pytest plugin)
shows the same answer, so it is computed once, here: per function its peak,
an ordered list of findings (what is wrong), the advice with its measured
saving, its leaves grouped by argument and subtree, identical reasons merged
with a count, an abbreviated signature per argument, and what differs between
several signatures of one function. Output scales with the program, not with
its leaf count: every list of leaves here is bounded and ends with "and N more";
the full detail stays in the report (``--leaves``, JSON).

No printing and no JAX: a :class:`~memscope.report.Report` in, frozen records out.
The leaves' grouping, reasons and signatures are :mod:`memscope.views.leaves`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from memscope.report import (
    FunctionReport,
    LiveGrowth,
    Memory,
    Recompile,
    Report,
    TargetInfo,
    Variant,
)
from memscope.report.function import MEANINGFUL_SAVING, NOT_XLAS, advice_verdict
from memscope.report.paths import argument_of, bounded_leaves
from memscope.report.units import format_bytes, format_change
from memscope.views import remat_text
from memscope.views.leaves import (
    ArgumentSignature,
    Buffer,
    LeafGroup,
    ReasonGroup,
    argument_signatures,
    arguments_text,
    differs_text,
    leaf_groups,
    reason_groups,
    short_signature,
)
from memscope.views.roles_text import roles_line

#: A function with at most this many leaves (inputs and outputs) is shown leaf by leaf.
SMALL_FUNCTION = 16
#: A function with at least this many signatures "keeps recompiling" (a problem).
KEEPS_RECOMPILING = 4

Severity = Literal["problem", "warning", "info"]

#: Each fate, and each run-time observation, in words; shown beside the term.
TERMS: dict[str, str] = {
    "aliased": "donated, and the named output is written into its buffer",
    "donor": "donated without a fixed output; XLA may reuse it (the output is named if it did)",
    "unusable": "donated, but no output could take its buffer: it stays allocated",
    "pruned": "never read by the computation, so dropped from the compiled program",
    "not_donated": "not donated: the buffer stays allocated for the caller",
    "reuses_input": "written into the named donated input's buffer",
    "copy_of_input": "a copy of a non-donated input, returned unchanged (a whole extra buffer)",
    "new": "a fresh buffer",
    "candidate": "not donated, yet an output of its shape and dtype could reuse it",
    "confirmed": "at the first call an output landed at the donated input's buffer address",
    "confirmed_later": "at the first call no output landed at the donated input's buffer "
                       "address; at the next call one did",
    "not_reused": "at the first call no output landed at the donated input's buffer address",
    "deleted": "the call deleted the donated input (reading it again raises an error)",
    "alive": "the donated input was not deleted by the call",
    "ref_updated": "a jax.Ref the function reads and writes: JAX writes its new value into "
                   "the Ref's own buffer (an alias JAX sets itself; a Ref needs no donation)",
    "ref_read": "a jax.Ref the function only reads: its buffer is passed in and kept, "
                "unchanged, in place",
    "ref_written": "a jax.Ref the function only writes: its new value goes into the Ref's "
                   "own buffer",
    "ref_unused": "a jax.Ref the function never touches: dropped from the compiled program "
                  "(under keep_unused=True passed in and kept, unchanged)",
    "same_buffer": "at the first call the Ref's buffer address was the same after the call "
                   "as before",
    "moved": "at the first call the Ref's buffer address changed",
    "kept": "when the run ended the Ref's buffer address was still the one it had before "
            "the first call, after every call",
    "moved_later": "when the run ended the Ref's buffer was at another address than "
                   "before the first call",
}


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing), in words; ``leaves`` names a bounded few."""

    severity: Severity
    text: str
    leaves: str = ""
    #: the same, shorter, for the default terminal report (``None``: ``text``)
    brief: str | None = None


@dataclass(frozen=True)
class AdviceSummary:
    """The advisor's fix, in the user's terms, with its measured saving."""

    function: str
    setting: str
    add: tuple[str, ...]
    candidates: int
    candidate_bytes: int
    peak_before: int | None
    peak_after: int | None
    caveat: str
    drop: tuple[str, ...] = ()
    #: the donation's own leaves no output can take (bounded), with ``drop``
    idle_leaves: str = ""

    @property
    def change(self) -> int | None:
        if self.peak_before is None or self.peak_after is None:
            return None
        return self.peak_after - self.peak_before

    @property
    def headline(self) -> str:
        """``jit step with donate_argnames=("state",) (adds state; drops batch)``."""
        parts = ([f"adds {', '.join(self.add)}"] if self.add else []) + (
            [f"drops {', '.join(self.drop)}"] if self.drop else [])
        return f"jit {self.function} with {self.setting} ({'; '.join(parts)})"

    @property
    def saving(self) -> str:
        """``3 candidate leaves, 12.0 KiB; peak 40.0 KiB -> 28.0 KiB (-12.0 KiB, measured)``."""
        peak = f"peak {format_bytes(self.peak_before)} -> {format_bytes(self.peak_after)}"
        if self.change == 0:
            peak = f"peak unchanged, {format_bytes(self.peak_before)} (measured)"
        elif self.change is not None:
            peak += f" ({format_change(self.change)}, measured)"
        dropped = ""
        if self.drop:
            it = "it" if "," not in self.idle_leaves else "them"
            dropped = (f"no output can take {self.idle_leaves}, so donating {it} only "
                       f"deletes {it} for the caller and makes JAX warn")
        if not self.candidates:
            return f"{dropped}; {peak}"
        noun = "leaf" if self.candidates == 1 else "leaves"
        head = f"{self.candidates} candidate {noun}, {format_bytes(self.candidate_bytes)}"
        return f"{head}; {dropped}; {peak}" if dropped else f"{head}; {peak}"


#: The figures shown side by side, by report field.
FIGURES_SHOWN = (("argument", "argument_bytes"), ("output", "output_bytes"),
                 ("alias", "alias_bytes"), ("temp", "temp_bytes"), ("peak", "peak_bytes"))

#: Column titles of the donation variants, in the order they are shown.
VARIANT_TITLES = {"none": "no donation", "all": "donate all", "advised": "advised",
                  "requested": "requested"}


@dataclass(frozen=True)
class VariantSummary:
    """One donation variant: its setting, figures, and its unusable leaves (bounded)."""

    name: str
    title: str
    setting: str
    memory: Memory | None
    same_as_written: bool = False
    unusable: int | None = None
    unusable_leaves: str = ""
    error: str | None = None


@dataclass(frozen=True)
class FunctionSummary:
    """One function at one signature: the answer first, then its groups."""

    name: str
    source: str | None
    calls: int
    peak: int | None
    signature: str
    arguments: tuple[ArgumentSignature, ...]
    #: for a function with several signatures: this one's number (1-based) and the count
    variant_of: tuple[int, int] | None
    #: what sets this signature apart from the function's others (bounded)
    differs: str | None
    findings: tuple[Finding, ...]
    advice: AdviceSummary | None
    inputs: tuple[LeafGroup, ...]
    outputs: tuple[LeafGroup, ...]
    input_leaves: int
    input_bytes: int
    output_leaves: int
    output_bytes: int
    reasons: tuple[ReasonGroup, ...]
    #: the terms these groups use, each with its meaning
    terms: tuple[tuple[str, str], ...]
    error: str | None = None
    #: the donation as written, then each variant compiled beside it
    setting: str | None = None
    memory: Memory | None = None
    variants: tuple[VariantSummary, ...] = ()
    unusable: int = 0
    #: few enough leaves to show each one by default (:data:`SMALL_FUNCTION`)
    small: bool = False

    @property
    def host_text(self) -> str:
        """`` (+1.0 MiB in host memory)`` beside the device peak, where the
        program holds host memory; else ``""``."""
        host = self.memory.host.peak_bytes if self.memory is not None else None
        return f" (+{format_bytes(host)} in host memory)" if host else ""
    #: the checkpoint policy to apply and what it saves (see :mod:`memscope.views.remat_text`)
    remat_advice: str | None = None
    #: with ``--target``: the peak's share of the target's HBM and the peak here
    #: (`` on tpu:v5p:2x2x1, 3.1% of its 95.0 GiB HBM; here (cpu) 12.0 MiB``)
    target_text: str = ""
    #: what the peak is made of, by role (:func:`memscope.views.roles_text.roles_line`)
    roles_text: str | None = None
    #: figures the user asked for beyond the advice: other donations measured
    #: (``--advice full``, ``diff``), the backward pass's residuals (``--remat``)
    asked_for: bool = False

    @property
    def problems(self) -> int:
        return sum(f.severity == "problem" for f in self.findings)


@dataclass(frozen=True)
class ReportSummary:
    functions: tuple[FunctionSummary, ...]
    #: what happened between calls: recompiling functions, growing live arrays,
    #: donation hazards, the donation behind a deleted array (worst first)
    between: tuple[Finding, ...] = ()


# --- findings ------------------------------------------------------------------------


def findings(fn: FunctionReport, signatures: int = 1) -> tuple[Finding, ...]:
    """What is wrong with ``fn``, worst first, each with a bounded list of its leaves."""
    out: list[Finding] = []
    if fn.error:
        out.append(Finding("problem", f"memscope could not read it: {fn.error}"))
    out += [Finding("problem", f"run time disagrees with the compiled program: {f}")
            for f in fn.findings]
    if fn.not_observed is not None and any(b.donated for b in fn.inputs):
        out.append(Finding("info", f"donation not checked at run time: {fn.not_observed}"))
    later = [b for b in fn.inputs if b.observed == "confirmed_later"]
    if later:
        out.append(_leaf_finding(
            "info", later, "donated, and reused at the second call, not at the first, whose "
            f"input was not a buffer XLA allocated ({NOT_XLAS}; a NumPy array passed as it is)"))
    unusable = [b for b in fn.inputs if b.fate == "unusable"]
    if unusable:
        out.append(_leaf_finding("problem", unusable, "donated but unusable: no output can "
                                 "take the buffer, so it stays allocated"))
    unused = [b for b in fn.inputs if b.fate == "donor" and b.output is None]
    if unused:
        out.append(_leaf_finding("warning", unused, "donated as optional donors XLA did not "
                                 "use: they stay allocated"))
    copies = [o for o in fn.outputs if o.fate == "copy_of_input"]
    if copies:
        out.append(_leaf_finding("warning", copies, "returned as copies of non-donated "
                                 "inputs: each a whole extra buffer"))
    chosen = [b for b in fn.inputs if b.candidate]
    if chosen and fn.not_measured is not None:
        out.append(_leaf_finding("info", chosen, f"not donated; an output could reuse the "
                                 f"buffer, but the advice was not measured: {fn.not_measured}"))
    elif chosen and fn.advice is not None and not fn.advice.worthwhile:
        a = fn.advice
        measured = a.reason or advice_verdict(a.tried or a.setting or "the advised donation",
                                              a.peak_before, a.peak_after, a.drop)
        out.append(_leaf_finding(
            "info", chosen, f"not donated; an output could reuse the buffer, but {measured}: "
            "not advised"))
    elif chosen and _too_small(fn, chosen):
        peak = fn.memory.peak_bytes if fn.memory is not None else None
        out.append(_leaf_finding(
            "info", chosen, f"not donated; an output could reuse the buffer, but they hold "
            f"under {MEANINGFUL_SAVING:.0%} of the {format_bytes(peak)} peak: not advised"))
    elif chosen:
        out.append(_leaf_finding("warning", chosen, "not donated, but an output of the same "
                                 "shape and dtype could reuse the buffer (candidates)"))
    if signatures > 1:
        out.append(Finding("info", f"compiled for {signatures} signatures (a recompile each)"))
    if fn.recompile is not None:
        out.append(Finding("warning", recompile_text(fn, fn.recompile),
                           brief=recompile_brief(fn, fn.recompile)))
    pruned = [b for b in fn.inputs if b.fate == "pruned"]
    if pruned:
        out.append(_leaf_finding("info", pruned, "never read, so dropped from the compiled "
                                 "program (pruned)"))
    limit = fn.memory_limit
    if limit is not None and limit.rematerialized:
        out.append(Finding("info", f"{limit.compiler} rematerialized to fit the "
                           f"{format_bytes(limit.limit_bytes)} limit: peak "
                           f"{format_bytes(limit.peak_bytes)}, "
                           f"{format_bytes(limit.unlimited_peak_bytes)} without the limit"))
    return tuple(out)


def _too_small(fn: FunctionReport, chosen: Sequence[Buffer]) -> bool:
    """Candidates that hold under MEANINGFUL_SAVING of the peak: donating them
    cannot save more, so no advice was compiled for them."""
    peak = fn.memory.peak_bytes if fn.memory is not None else None
    return bool(peak) and sum(b.bytes for b in chosen) < MEANINGFUL_SAVING * peak  # type: ignore[operator]


def _leaf_finding(severity: Severity, leaves: Sequence[Buffer], what: str) -> Finding:
    size = format_bytes(sum(b.bytes for b in leaves))
    noun = "leaf" if len(leaves) == 1 else "leaves"
    return Finding(severity, f"{len(leaves)} {noun}, {size}, {what}",
                   bounded_leaves([b.path for b in leaves]))


# --- the whole -----------------------------------------------------------------------


def advice_summary(fn: FunctionReport) -> AdviceSummary | None:
    a = fn.advice
    if a is None:
        return None
    if a.setting is None or not a.worthwhile:
        return None  # a note among the findings says what it measured
    unusable = [b.path for b in fn.inputs if b.fate == "unusable"]
    idle = [p for p in unusable if argument_of(p) in a.drop] or unusable
    return AdviceSummary(fn.name, a.setting, a.add, sum(b.candidate for b in fn.inputs),
                         a.candidate_bytes, a.peak_before, a.peak_after, a.caveat, a.drop,
                         bounded_leaves(idle))


def _terms(fn: FunctionReport, groups: Iterable[LeafGroup]) -> tuple[tuple[str, str], ...]:
    used: set[str] = set()
    for g in groups:
        used |= {f.fate for f in g.fates}
        if any(f.candidates for f in g.fates):
            used.add("candidate")
        for label, _ in g.observed:
            used |= {word.strip() for word in label.split(",")}
    return tuple((t, m) for t, m in TERMS.items() if t in used)


def variant_summaries(fn: FunctionReport) -> tuple[VariantSummary, ...]:
    """The variants of ``fn`` in the order of :data:`VARIANT_TITLES`."""
    order = list(VARIANT_TITLES)
    return tuple(_variant(v) for v in sorted(fn.variants, key=lambda v: order.index(v.name)))


def _variant(v: Variant) -> VariantSummary:
    unusable = [b.path for b in v.inputs if b.fate == "unusable"]
    return VariantSummary(v.name, VARIANT_TITLES[v.name], v.setting, v.memory,
                          v.same_as_written, None if v.memory is None else len(unusable),
                          bounded_leaves(unusable), v.error)


def summarize_function(fn: FunctionReport, siblings: Sequence[FunctionReport] = ()
                       ) -> FunctionSummary:
    """The summary of ``fn``; ``siblings`` are all reports of the same function
    (``fn`` among them) when it has several signatures."""
    others = [s for s in siblings if s is not fn]
    chosen = {b.path for b in fn.inputs if b.candidate}
    inputs = leaf_groups((*fn.inputs, *fn.closed_over_refs), chosen)
    outputs = leaf_groups(fn.outputs)
    arguments = argument_signatures(fn)
    position = (next(i for i, s in enumerate(siblings) if s is fn) + 1, len(siblings)
                ) if others else None
    return FunctionSummary(
        name=fn.name, source=fn.source, calls=fn.calls,
        peak=fn.memory.peak_bytes if fn.memory else None,
        signature=arguments_text(arguments) if fn.inputs else short_signature(fn),
        arguments=arguments, variant_of=position, differs=differs_text(fn, others),
        findings=findings(fn, len(siblings) or 1), advice=advice_summary(fn),
        inputs=inputs, outputs=outputs,
        input_leaves=len(fn.inputs), input_bytes=sum(b.bytes for b in fn.inputs),
        output_leaves=len(fn.outputs), output_bytes=sum(b.bytes for b in fn.outputs),
        reasons=reason_groups(fn), terms=_terms(fn, (*inputs, *outputs)), error=fn.error,
        setting=fn.setting, memory=fn.memory, variants=variant_summaries(fn),
        unusable=sum(b.fate == "unusable" for b in fn.inputs),
        small=len(fn.inputs) + len(fn.outputs) <= SMALL_FUNCTION,
        remat_advice=remat_text.remat_headline(fn.remat) if fn.remat is not None else None,
        asked_for=fn.remat is not None or any(v.name != "advised" for v in fn.variants))


def summarize(report: Report) -> ReportSummary:
    """Every function of ``report`` summarized, in the report's order."""
    by_name: dict[tuple[str, str | None], list[FunctionReport]] = defaultdict(list)
    for fn in report.functions:
        by_name[fn.name, fn.source].append(fn)
    largest = max((fn.live_at_peak.bytes for fn in report.functions
                   if fn.live_at_peak is not None), default=0)
    return ReportSummary(tuple(
        replace(summarize_function(fn, by_name[fn.name, fn.source]
                                   if len(by_name[fn.name, fn.source]) > 1 else ()),
                target_text=target_text(fn, report.target, report.environment.backend),
                roles_text=roles_line(fn.live_at_peak, largest, fn.memory))
        for fn in report.functions), between=between_findings(report))


def target_line(target: TargetInfo) -> str:
    """The report's line on its ``--target``."""
    if target.kind == "gpu":
        memory = f", {format_bytes(target.hbm_bytes)} each" if target.hbm_bytes else ""
        budget = (f"; a program may hold {format_bytes(target.budget_bytes)} "
                  f"({target.budget_source})" if target.budget_bytes else "")
        return (f"compiled for {target.name} ({target.devices} x {target.chip}{memory}"
                f"{budget}): the functions' figures are XLA:GPU's for it, per device, "
                "compiled without a GPU (no autotuning); nothing ran on it; the device "
                f"description is {target.description_source}"
                + (f"; {target.compile_note}" if target.compile_note else ""))
    hbm = (f", {format_bytes(target.hbm_bytes)} HBM per device (published figure)"
           if target.hbm_bytes else "")
    return (f"compiled for {target.name} ({target.chip}, {target.chips} chips, "
            f"{target.devices} devices){hbm}: the functions' figures are XLA:TPU's for it, "
            "per device; nothing ran on it")


def target_text(fn: FunctionReport, target: TargetInfo | None, here: str | None) -> str:
    """Where the figures are a ``--target``'s: which, the peak's share of its HBM,
    and the peak of the program compiled ``here`` (the backend that ran it)."""
    if target is None:
        return ""
    peak = fn.memory.peak_bytes if fn.memory is not None else None
    if target.kind == "gpu":
        share = (f", {100 * peak / target.budget_bytes:.2g}% of the "
                 f"{format_bytes(target.budget_bytes)} a program may hold"
                 if peak is not None and target.budget_bytes else "")
    else:
        share = (f", {100 * peak / target.hbm_bytes:.2g}% of its "
                 f"{format_bytes(target.hbm_bytes)} HBM"
                 if peak is not None and target.hbm_bytes else "")
    ours = fn.memory_here.peak_bytes if fn.memory_here is not None else None
    return (f" on {target.name}{share}; here ({here}) "
            f"{format_bytes(ours) if ours is not None else 'n/a'}")


# --- between calls -------------------------------------------------------------------


def recompile_text(fn: FunctionReport, r: Recompile) -> str:
    """``compiled again at call 3 (differs from signature 2): batch: float32[8,3] ->
    float32[5,3] (only the leading dimension changed ...); cost 0.1 s, 1.2 KiB of code``."""
    said = "; ".join(
        (f"{x.path}: " if x.path else "")
        + (f"{x.before} -> {x.after}: {x.advice}" if x.before or x.after else x.advice)
        for x in r.reasons)
    return _compiled_again(fn, r, said, r.more)


def recompile_brief(fn: FunctionReport, r: Recompile) -> str:
    """:func:`recompile_text` in a line or two: what kind of difference, where
    first (``compiled again at call 3 (differs from signature 2): a new shape in
    batch; and 2 more; cost ...``)."""
    if all(x.kind == "unknown" for x in r.reasons):  # no difference seen in the arguments
        return _compiled_again(fn, r, "no difference in the arguments (a new closure, "
                               "lambda or partial each time?)", r.more)
    kinds = ", ".join(dict.fromkeys(x.kind.replace("_", " ") for x in r.reasons))
    first = next((x.path for x in r.reasons if x.path), "")
    said = f"a new {kinds}" + (f" in {first}" if first else "")
    return _compiled_again(fn, r, said, r.more + max(0, len(r.reasons) - 1))


def _compiled_again(fn: FunctionReport, r: Recompile, said: str, left: int) -> str:
    more = f"; and {left} more" if left else ""
    at = f" at call {fn.first_call}" if fn.first_call is not None else ""
    return (f"compiled again{at} (differs from signature {r.since}): {said}{more}; "
            f"cost {compile_cost(fn)}")


def compile_cost(fn: FunctionReport) -> str:
    """``0.13 s compiling, 1.2 KiB of generated code`` (``n/a`` where unmeasured)."""
    seconds = "n/a" if fn.compile_seconds is None else f"{fn.compile_seconds:.2g} s"
    code = format_bytes(fn.memory.generated_code_bytes if fn.memory else None)
    return f"{seconds} compiling, {code} of generated code"


def growth_text(g: LiveGrowth) -> str:
    """``train_step result[1]['loss']: float32[] on cpu:0: +1 array per call, 4 B
    each, 301 alive at call 301 (from 1 at call 2), held by `losses`, rising at
    the calls of train_step``."""
    what = f"{g.dtype}[{','.join(map(str, g.shape))}]" + (f" on {g.sharding}" if g.sharding else "")
    who = f"{g.produced_by}: {what}" if g.produced_by else f"arrays {what} (made outside a jitted call's result, or not seen)"
    rate = f"{g.per_call:.3g}"
    held = ("held by " + ", ".join(f"`{h}`" for h in g.holders) if g.holders else
            "held by no variable of the program's code that memscope could find")
    rising = f", rising at the calls of {g.repeated}" if g.repeated else ""
    return (f"{who}: +{rate} array{'s' if rate != '1' else ''} per call, "
            f"{format_bytes(g.bytes_each)} each, {g.last_count:,} alive at call "
            f"{g.last_call} (from {g.first_count:,} at call {g.first_call}), {held}{rising}")


def rises_text(rises: Sequence[LiveGrowth]) -> str:
    """One line for the live arrays that rose once or twice but not call after
    call (a new optimizer state, a result kept at the end): what holds them."""
    gained = sum(g.gained for g in rises)
    total = sum(g.gained_bytes for g in rises)
    by_holder: Counter[str] = Counter()
    for g in rises:  # (a group several variables hold counts for each)
        for name in [f"`{h}`" for h in g.holders] or ["no variable memscope found"]:
            by_holder[name] += g.gained_bytes
    holders = ", ".join(name for name, _ in by_holder.most_common())
    first, last = min(g.first_call for g in rises), max(g.last_call for g in rises)
    return (f"live arrays rose between calls {first} and {last} at one or two places, not "
            f"call after call (no leak): +{gained:,} arrays, {format_bytes(total)}, held by "
            f"{holders}")


def between_findings(report: Report) -> tuple[Finding, ...]:
    """Findings of the run as a whole: a deleted array read, donation hazards,
    live arrays that kept growing, functions that keep recompiling."""
    out: list[Finding] = []
    d = report.deleted_read
    if d is not None:
        out.append(Finding("problem", f"{d.error}: {d.path} was donated by {d.function} "
                           f"({d.source or 'n/a'}) at call {d.call}, from line "
                           f"{d.line or 'n/a'}; read it before that call, or stop donating "
                           "it"))
    for h in report.donation_hazards:
        a, b = h.paths
        what = ("donated twice" if h.kind == "donated_twice"
                else "donated as one and passed undonated as the other")
        out.append(Finding("problem", f"{h.function} ({h.source or 'n/a'}), call {h.call} at "
                           f"{h.line or 'n/a'}: {a} and {b} are one buffer, {what}; JAX "
                           "refuses this at the call: pass a copy (jnp.copy) as one of them"))
    live = report.runtime.live_timeline if report.runtime is not None else None
    if live is not None:
        out += [Finding("problem", "live arrays keep growing: " + growth_text(g))
                for g in live.growth if g.steady]
        rises = [g for g in live.growth if not g.steady]
        if rises:
            out.append(Finding("info", rises_text(rises)))
    by_function: dict[tuple[str, str | None], list[FunctionReport]] = defaultdict(list)
    for fn in report.functions:
        by_function[fn.name, fn.source].append(fn)
    for (name, source), fns in by_function.items():
        if len(fns) >= KEEPS_RECOMPILING:
            kinds = Counter(x.kind for fn in fns if fn.recompile for x in fn.recompile.reasons)
            common = kinds.most_common(1)[0][0] if kinds else "n/a"
            seconds = [fn.compile_seconds for fn in fns if fn.compile_seconds is not None]
            out.append(Finding("problem", f"{name} ({source or 'n/a'}) keeps recompiling: "
                               f"{len(fns)} signatures in {sum(fn.calls for fn in fns)} calls"
                               f", {sum(seconds):.2g} s compiling; most often a new {common}"))
    return tuple(out)


def library_line(report: Report) -> str | None:
    """One line naming the functions jitted in installed packages' own code (they
    have figures, and no advice the user could not apply), and how to count such
    a package as the user's; ``None`` where there are none."""
    packages = Counter(f.library for f in report.functions if f.library is not None)
    if not packages:
        return None
    count = sum(packages.values())
    named = ", ".join(f"{name} {n}" for name, n in packages.most_common(4))
    more = f", {len(packages) - 4} more packages" if len(packages) > 4 else ""
    return (f"{count} function{'s' if count != 1 else ''} jitted in installed packages "
            f"({named}{more}) {'have' if count != 1 else 'has'} no advice: "
            "--user-package NAME counts a package as your code.")
