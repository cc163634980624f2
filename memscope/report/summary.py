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
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from memscope.analysis.advice import candidates
from memscope.analysis.recompiles import keeps_recompiling
from memscope.report import (
    FunctionReport,
    InputBuffer,
    LiveGrowth,
    Memory,
    OutputBuffer,
    Recompile,
    Report,
    Variant,
    remat_text,
)
from memscope.report.units import format_bytes, format_change

#: How many leaves a bounded list names before "and N more".
MAX_LISTED = 5
#: An argument or subtree with more leaves than this is shown by its parts.
SUBTREE_MIN = 8
#: How many subtrees of one argument get a line of their own.
MAX_SUBTREES = 8
#: An argument with at most this many leaves is spelled out in the signature.
MAX_SPELLED = 3
#: A function with at most this many leaves (inputs and outputs) is shown leaf by leaf.
SMALL_FUNCTION = 16

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
    "not_reused": "at the first call no output landed at the donated input's buffer address",
    "deleted": "the call deleted the donated input (reading it again raises an error)",
    "alive": "the donated input was not deleted by the call",
}


# --- records -------------------------------------------------------------------------


@dataclass(frozen=True)
class FateCount:
    """How many leaves of a group have one fate (``candidates``: of those, not donated
    but reusable by an output)."""

    fate: str
    leaves: int
    bytes: int
    candidates: int = 0


@dataclass(frozen=True)
class LeafGroup:
    """An argument (``depth`` 0) or one of its subtrees (``depth`` 1), with its leaves' fates."""

    path: str
    depth: int
    leaves: int
    bytes: int
    fates: tuple[FateCount, ...]
    #: run-time observations (``confirmed, deleted``) and how many leaves had each
    observed: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ReasonGroup:
    """Leaves of one group whose reasons say the same thing, with one of them as example."""

    group: str
    fate: str
    leaves: int
    bytes: int
    example_path: str
    example: str


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing), in words; ``leaves`` names a bounded few."""

    severity: Severity
    text: str
    leaves: str = ""


@dataclass(frozen=True)
class ArgumentSignature:
    """One argument of a signature, abbreviated: ``params: 134 arrays, 6.6 MiB``."""

    name: str
    text: str
    #: a static argument (``lr=0.1``), part of the signature by value
    static: bool = False


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

    @property
    def change(self) -> int | None:
        if self.peak_before is None or self.peak_after is None:
            return None
        return self.peak_after - self.peak_before

    @property
    def headline(self) -> str:
        """``jit step with donate_argnames=("state",) (adds state)``."""
        return f"jit {self.function} with {self.setting} (adds {', '.join(self.add)})"

    @property
    def saving(self) -> str:
        """``3 candidate leaves, 12.0 KiB; peak 40.0 KiB -> 28.0 KiB (-12.0 KiB, measured)``."""
        peak = f"peak {format_bytes(self.peak_before)} -> {format_bytes(self.peak_after)}"
        if self.change is not None:
            peak += f" ({format_change(self.change)}, measured)"
        noun = "leaf" if self.candidates == 1 else "leaves"
        return (f"{self.candidates} candidate {noun}, {format_bytes(self.candidate_bytes)}; "
                f"{peak}")


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
    #: the checkpoint policy to apply and what it saves (see :mod:`memscope.report.remat_text`)
    remat_advice: str | None = None

    @property
    def problems(self) -> int:
        return sum(f.severity == "problem" for f in self.findings)


@dataclass(frozen=True)
class ReportSummary:
    functions: tuple[FunctionSummary, ...]
    #: what happened between calls: recompiling functions, growing live arrays,
    #: donation hazards, the donation behind a deleted array (worst first)
    between: tuple[Finding, ...] = ()


# --- paths ---------------------------------------------------------------------------

_STEP = re.compile(r"""\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]]*)\]|\.[^.\[]+""")


@functools.lru_cache(maxsize=1 << 16)  # every grouping reads each path's steps again
def path_steps(path: str) -> tuple[str, ...]:
    """``opt_state[0].mu['w']`` -> ``("opt_state", "[0]", ".mu", "['w']")``."""
    head = re.match(r"[^.\[]*", path)
    first = head.group(0) if head else ""
    steps, pos = [first], len(first)
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:  # not a pytree path we can read: keep the rest whole
            steps.append(path[pos:])
            break
        steps.append(m.group(0))
        pos = m.end()
    return tuple(steps)


def argument_of(path: str) -> str:
    """The top-level argument (or result) a leaf belongs to: ``opt_state``."""
    return path_steps(path)[0]


def path_matches(path: str, pattern: str) -> bool:
    """Whether a leaf ``path`` is under ``pattern`` or matches it as a glob
    (``*`` any text, ``?`` one character; brackets are literal)."""
    if path == pattern or (path.startswith(pattern) and path[len(pattern):][:1] in ("[", ".")):
        return True
    if not any(ch in pattern for ch in "*?"):
        return False
    escaped = pattern.replace("[", "[[]")
    return fnmatchcase(path, escaped) or fnmatchcase(path, escaped + "*")


# --- bounded lists -------------------------------------------------------------------


def bounded(items: Sequence[str], limit: int = MAX_LISTED) -> str:
    """``a, b, c and 12 more``: at most ``limit`` items named."""
    if len(items) <= limit:
        return ", ".join(items)
    return f"{', '.join(items[:limit])} and {len(items) - limit} more"


def bounded_leaves(paths: Sequence[str], limit: int = MAX_LISTED) -> str:
    """A few leaves by name, counted by argument (when more than one) when there are
    more than ``limit``: ``134 in params, 269 in opt_state; e.g. params['embed'], ...
    and 400 more``.
    """
    if len(paths) <= limit:
        return ", ".join(paths)
    by_arg: dict[str, int] = defaultdict(int)
    for p in paths:
        by_arg[argument_of(p)] += 1
    named = bounded(list(paths), min(limit, 3))
    if len(by_arg) == 1:
        return named
    return f"{bounded([f'{n} in {arg}' for arg, n in by_arg.items()], limit)}; e.g. {named}"


# --- groups --------------------------------------------------------------------------

Buffer = InputBuffer | OutputBuffer


def _observed_label(b: Buffer) -> str | None:
    if not isinstance(b, InputBuffer) or b.observed in (None, "n/a"):
        return None
    state = "" if b.deleted is None else (", deleted" if b.deleted else ", alive")
    return f"{b.observed}{state}"


def _make_group(path: str, depth: int, leaves: Sequence[Buffer], candidate: set[str]
                ) -> LeafGroup:
    fates: dict[str, list[Buffer]] = {}
    for b in leaves:
        fates.setdefault(b.fate, []).append(b)
    observed: dict[str, int] = {}
    for b in leaves:
        label = _observed_label(b)
        if label is not None:
            observed[label] = observed.get(label, 0) + 1
    return LeafGroup(
        path, depth, len(leaves), sum(b.bytes for b in leaves),
        tuple(FateCount(f, len(bs), sum(b.bytes for b in bs),
                        sum(b.path in candidate for b in bs)) for f, bs in fates.items()),
        tuple(observed.items()))


def _children(prefix_len: int, leaves: Sequence[Buffer]) -> dict[str, list[Buffer]]:
    """Leaves by their subtree one step below ``prefix_len`` steps, descending through
    single-child chains (``opt_state`` -> ``opt_state[0]`` -> ``.mu``, ``.nu``)."""
    depth = prefix_len
    while True:
        parts: dict[str, list[Buffer]] = {}
        for b in leaves:
            steps = path_steps(b.path)
            parts.setdefault("".join(steps[:depth + 1]), []).append(b)
        deeper = all(len(path_steps(b.path)) > depth + 1 for b in leaves)
        if len(parts) == 1 and deeper:
            depth += 1
            continue
        return parts


def leaf_groups(buffers: Sequence[Buffer], candidate: Iterable[str] = ()) -> tuple[LeafGroup, ...]:
    """One group per top-level argument, in order, each large one followed by its subtrees."""
    chosen = set(candidate)
    by_arg: dict[str, list[Buffer]] = {}
    for b in buffers:
        by_arg.setdefault(argument_of(b.path), []).append(b)
    groups = []
    for arg, leaves in by_arg.items():
        groups.append(_make_group(arg, 0, leaves, chosen))
        if len(leaves) <= SUBTREE_MIN:
            continue
        parts = _children(1, leaves)
        if len(parts) < 2:
            continue
        shown = list(parts.items())[:MAX_SUBTREES]
        groups += [_make_group(p, 1, ls, chosen) for p, ls in shown]
        rest = [b for _, ls in list(parts.items())[MAX_SUBTREES:] for b in ls]
        if rest:
            groups.append(_make_group(f"{len(parts) - MAX_SUBTREES} more subtrees of {arg}",
                                      1, rest, chosen))
    return tuple(groups)


# --- reasons -------------------------------------------------------------------------


def leaf_reason(b: InputBuffer) -> str | None:
    """Why a leaf ended as it did, in words: its own reason, or the generic one its
    fate implies; ``None`` when there is nothing to explain."""
    if b.reason is not None:
        return b.reason
    if b.fate == "unusable" and not b.in_warning:
        return ("Donated but no output could take its buffer (JAX did not warn in this run: "
                "the function was lowered before).")
    if b.fate == "donor":
        used = (f"XLA reused it for {b.output}." if b.output else
                "XLA did not use it, so it stays allocated.")
        return ("Offered to XLA as an optional donor (no output of its shape and dtype was "
                f"left); {used}")
    return None


def _template(b: InputBuffer, text: str, partner: str | None) -> str:
    # Reasons name the leaf, its partner and its size: what differs from leaf to leaf
    # while the reason is the same.
    text = text.replace(b.path, "\0")
    if partner:
        text = text.replace(partner, "\1")
    return text.replace(format_bytes(b.bytes), "\2")


def reason_groups(fn: FunctionReport) -> tuple[ReasonGroup, ...]:
    """Each argument's leaves with the same reason, merged, in the order they first appear."""
    partners = _candidate_partners(fn)
    merged: dict[tuple[str, str, str], list[tuple[InputBuffer, str]]] = {}
    for b in fn.inputs:
        text = leaf_reason(b)
        if text is None:
            continue
        key = (argument_of(b.path), b.fate, _template(b, text, b.output or partners.get(b.path)))
        merged.setdefault(key, []).append((b, text))
    groups = []
    for (_arg, fate, _), items in merged.items():
        paths = [b.path for b, _ in items]
        # the largest leaf is the example: its saving is the one worth reading
        example, text = max(items, key=lambda item: item[0].bytes)
        groups.append(ReasonGroup(common_prefix(paths), fate, len(items),
                                  sum(b.bytes for b, _ in items), example.path, text))
    return tuple(groups)


def common_prefix(paths: Sequence[str]) -> str:
    """The deepest subtree holding every path (the path itself for one leaf)."""
    split = [path_steps(p) for p in paths]
    common: list[str] = []
    for steps in zip(*split, strict=False):
        if any(s != steps[0] for s in steps):
            break
        common.append(steps[0])
    return "".join(common)


def _candidate_partners(fn: FunctionReport) -> dict[str, str]:
    chosen = candidates(fn.inputs, fn.outputs)
    return {fn.inputs[i].path: fn.outputs[j].path for i, j in chosen.items()}


# --- signatures ----------------------------------------------------------------------


def _aval(b: Buffer) -> str:
    return f"{b.dtype}[{','.join(map(str, b.shape))}]"


def argument_signatures(fn: FunctionReport) -> tuple[ArgumentSignature, ...]:
    """Each argument abbreviated: its aval, a few spelled out, or a count and a size;
    then the static arguments the signature names (``lr=0.1``)."""
    by_arg: dict[str, list[InputBuffer]] = {}
    for b in fn.inputs:
        by_arg.setdefault(argument_of(b.path), []).append(b)
    out = []
    for arg, leaves in by_arg.items():
        if len(leaves) == 1 and leaves[0].path == arg:
            text = _aval(leaves[0])
        elif len(leaves) <= MAX_SPELLED:
            inner = ", ".join(f"{_relative(b.path, arg)}: {_aval(b)}" for b in leaves)
            text = "{" + inner + "}"
        else:
            text = f"{len(leaves)} arrays, {format_bytes(sum(b.bytes for b in leaves))}"
        out.append(ArgumentSignature(arg, text))
    out += [ArgumentSignature(name, value, static=True)
            for name, value in static_arguments(fn.signature)]
    return tuple(out)


def _relative(path: str, arg: str) -> str:
    rest = path[len(arg):]
    m = re.fullmatch(r"\[(['\"])(.*)\1\]", rest) or re.fullmatch(r"\.(\w+)", rest)
    return m.group(m.lastindex or 0) if m else rest


def static_arguments(signature: str) -> list[tuple[str, str]]:
    """The static arguments in a signature's text: ``(f32[2], #1=3, lr=0.1)`` ->
    ``[("#1", "3"), ("lr", "0.1")]``."""
    inner = signature[1:-1] if signature.startswith("(") and signature.endswith(")") else ""
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(inner):
        if quote:
            quote = "" if ch == quote and inner[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    found = []
    for part in parts:
        m = re.match(r"(#\d+|[A-Za-z_]\w*)=(.*)", part, re.S)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def signature_text(arguments: Sequence[ArgumentSignature]) -> str:
    """``params: 134 arrays, 6.6 MiB; batch: {tokens: int32[8,64]}``; ``()`` for none."""
    return "; ".join(f"{a.name}={a.text}" if a.static else f"{a.name}: {a.text}"
                     for a in arguments) or "()"


def short_signature(fn: FunctionReport) -> str:
    """The abbreviated signature of ``fn`` (the full one is ``fn.signature``)."""
    if not fn.inputs:
        return fn.signature if len(fn.signature) <= 80 else f"{fn.signature[:77]}..."
    return signature_text(argument_signatures(fn))


def parenthesized(signature: str) -> str:
    """A signature in parentheses, as a name is followed by it: a recorded ``(...)``
    signature brings its own."""
    return signature if signature.startswith("(") else f"({signature})"


def differences(fn: FunctionReport, others: Sequence[FunctionReport]) -> str | None:
    """What sets ``fn`` apart from the other signatures of the same function: the
    leaves whose dtype and shape differ (a bounded list), and static arguments."""
    if not others:
        return None
    mine = {b.path: _aval(b) for b in fn.inputs}
    theirs = [{b.path: _aval(b) for b in o.inputs} for o in others]
    changed = [f"{p} {a}" for p, a in mine.items() if any(t.get(p) != a for t in theirs)]
    changed += [f"no {p}" for p in dict.fromkeys(p for t in theirs for p in t)
                if p not in mine]
    statics = dict(static_arguments(fn.signature))
    for o in others:
        for name, value in static_arguments(o.signature):
            if statics.get(name) != value and name in statics:
                changed.append(f"{name}={statics[name]}")
    changed = list(dict.fromkeys(changed))
    if not changed:
        return "the same leaves (it differs in weak types or shardings)"
    return bounded(changed)


# --- findings ------------------------------------------------------------------------


def findings(fn: FunctionReport, signatures: int = 1) -> tuple[Finding, ...]:
    """What is wrong with ``fn``, worst first, each with a bounded list of its leaves."""
    out: list[Finding] = []
    if fn.error:
        out.append(Finding("problem", f"memscope could not read it: {fn.error}"))
    out += [Finding("problem", f"run time disagrees with the compiled program: {f}")
            for f in fn.findings]
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
    if chosen:
        out.append(_leaf_finding("warning", chosen, "not donated, but an output of the same "
                                 "shape and dtype could reuse the buffer (candidates)"))
    if signatures > 1:
        out.append(Finding("info", f"compiled for {signatures} signatures (a recompile each)"))
    if fn.recompile is not None:
        out.append(Finding("warning", recompile_text(fn, fn.recompile)))
    pruned = [b for b in fn.inputs if b.fate == "pruned"]
    if pruned:
        out.append(_leaf_finding("info", pruned, "never read, so dropped from the compiled "
                                 "program (pruned)"))
    return tuple(out)


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
    return AdviceSummary(fn.name, a.setting, a.add, sum(b.candidate for b in fn.inputs),
                         a.candidate_bytes, a.peak_before, a.peak_after, a.caveat)


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
    inputs = leaf_groups(fn.inputs, chosen)
    outputs = leaf_groups(fn.outputs)
    arguments = argument_signatures(fn)
    position = (next(i for i, s in enumerate(siblings) if s is fn) + 1, len(siblings)
                ) if others else None
    return FunctionSummary(
        name=fn.name, source=fn.source, calls=fn.calls,
        peak=fn.memory.peak_bytes if fn.memory else None,
        signature=signature_text(arguments) if fn.inputs else short_signature(fn),
        arguments=arguments, variant_of=position, differs=differences(fn, others),
        findings=findings(fn, len(siblings) or 1), advice=advice_summary(fn),
        inputs=inputs, outputs=outputs,
        input_leaves=len(fn.inputs), input_bytes=sum(b.bytes for b in fn.inputs),
        output_leaves=len(fn.outputs), output_bytes=sum(b.bytes for b in fn.outputs),
        reasons=reason_groups(fn), terms=_terms(fn, (*inputs, *outputs)), error=fn.error,
        setting=fn.setting, memory=fn.memory, variants=variant_summaries(fn),
        unusable=sum(b.fate == "unusable" for b in fn.inputs),
        small=len(fn.inputs) + len(fn.outputs) <= SMALL_FUNCTION,
        remat_advice=remat_text.headline(fn.remat) if fn.remat is not None else None)


def summarize(report: Report) -> ReportSummary:
    """Every function of ``report`` summarized, in the report's order."""
    by_name: dict[tuple[str, str | None], list[FunctionReport]] = defaultdict(list)
    for fn in report.functions:
        by_name[fn.name, fn.source].append(fn)
    return ReportSummary(tuple(
        summarize_function(fn, by_name[fn.name, fn.source] if len(by_name[fn.name, fn.source])
                           > 1 else ())
        for fn in report.functions), between=between_findings(report))


# --- between calls -------------------------------------------------------------------


def recompile_text(fn: FunctionReport, r: Recompile) -> str:
    """``compiled again at call 3 (differs from signature 2): batch: float32[8,3] ->
    float32[5,3] (only the leading dimension changed ...); cost 0.1 s, 1.2 KiB of code``."""
    reasons = "; ".join(
        (f"{x.path}: " if x.path else "")
        + (f"{x.before} -> {x.after}: {x.advice}" if x.before or x.after else x.advice)
        for x in r.reasons)
    more = f"; and {r.more} more" if r.more else ""
    at = f" at call {fn.first_call}" if fn.first_call is not None else ""
    return (f"compiled again{at} (differs from signature {r.since}): {reasons}{more}; "
            f"cost {compile_cost(fn)}")


def compile_cost(fn: FunctionReport) -> str:
    """``0.13 s compiling, 1.2 KiB of generated code`` (``n/a`` where unmeasured)."""
    seconds = "n/a" if fn.compile_seconds is None else f"{fn.compile_seconds:.2g} s"
    code = format_bytes(fn.memory.generated_code_bytes if fn.memory else None)
    return f"{seconds} compiling, {code} of generated code"


def growth_text(g: LiveGrowth) -> str:
    """``train_step result[1]['loss']: float32[] on cpu:0, +1 array per call, 4 B each,
    301 alive at the end (call 300): a list of device values kept across steps?``"""
    what = f"{g.dtype}[{','.join(map(str, g.shape))}]" + (f" on {g.sharding}" if g.sharding else "")
    who = f"{g.produced_by}: {what}" if g.produced_by else f"arrays {what} (made outside a jitted call's result, or not seen)"
    rate = f"{g.per_call:.3g}"
    return (f"{who}: +{rate} array{'s' if rate != '1' else ''} per call, "
            f"{format_bytes(g.bytes_each)} each, {g.last_count:,} alive at call "
            f"{g.last_call} (from {g.first_count:,} at call {g.first_call}): a list or dict "
            "of device values kept across steps?")


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
                for g in live.growth]
    by_function: dict[tuple[str, str | None], list[FunctionReport]] = defaultdict(list)
    for fn in report.functions:
        by_function[fn.name, fn.source].append(fn)
    for (name, source), fns in by_function.items():
        if keeps_recompiling(len(fns)):
            kinds = Counter(x.kind for fn in fns if fn.recompile for x in fn.recompile.reasons)
            common = kinds.most_common(1)[0][0] if kinds else "n/a"
            seconds = [fn.compile_seconds for fn in fns if fn.compile_seconds is not None]
            out.append(Finding("problem", f"{name} ({source or 'n/a'}) keeps recompiling: "
                               f"{len(fns)} signatures in {sum(fn.calls for fn in fns)} calls"
                               f", {sum(seconds):.2g} s compiling; most often a new {common}"))
    return tuple(out)


def select_leaves(fn: FunctionReport, pattern: str | None = None,
                  fate: str | None = None) -> tuple[tuple[InputBuffer, ...],
                                                     tuple[OutputBuffer, ...]]:
    """The leaves of ``fn`` under (or matching) ``pattern`` with ``fate`` (``candidate``
    selects the candidates); ``None`` selects all."""
    def keep(b: Buffer) -> bool:
        if pattern is not None and not path_matches(b.path, pattern):
            return False
        if fate is None:
            return True
        if fate == "candidate":
            return isinstance(b, InputBuffer) and b.candidate
        return b.fate == fate
    return (tuple(b for b in fn.inputs if keep(b)), tuple(o for o in fn.outputs if keep(o)))
