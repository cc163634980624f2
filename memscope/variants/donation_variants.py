"""Donation variants of a recorded call: the donations to measure, each lowered
from the very program JAX traced for the call and compiled, and the advice kept
consistent with what its own compile shows.

Scheduled by the capture (:mod:`memscope.capturing.reading`), which hands over the
recorded call as a :class:`Call` and itself as the :class:`Host`; nothing here
knows the capture's own records. Runs in memscope's worker thread, never on the
program's path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from memscope.analysis import advice
from memscope.analysis.advice import AdviceLevel
from memscope.analysis.fates import Fates, classify
from memscope.compiled.cache import CompileCache
from memscope.compiled.read import CompiledFacts
from memscope.compiled.targets.base import Target
from memscope.errors import MemscopeError, described
from memscope.report import InputBuffer, VariantName
from memscope.report.function import MEANINGFUL_SAVING
from memscope.report.paths import bounded_leaves
from memscope.variants.compile import (
    LoweredVariant,
    compile_variants,
    config_snapshot,
    lower_variant,
    read_variant,
)
from memscope.variants.donation import (
    Argument,
    Donation,
    Spelling,
    VariantRequest,
    advised,
    as_written,
    donate_all,
    donate_none,
    idle,
    resolve_spec,
    wider_note,
)


@dataclass(frozen=True)
class VariantFacts:
    """One entry compiled with another donation; ``setting`` in jax.jit's keywords."""

    name: VariantName
    setting: str
    facts: CompiledFacts | None
    warnings: tuple[str, ...] = ()
    same_as_written: bool = False
    error: str | None = None
    #: labels of the arguments this variant donates that the function does not
    added: tuple[str, ...] = ()
    #: labels of the arguments the function donates that this variant does not
    dropped: tuple[str, ...] = ()
    #: what the setting does beyond the donation asked for (a wrapper's limits)
    note: str | None = None
    #: the variant planned before this one with the same donation (one compile)
    same_as: VariantName | None = None
    #: its buffers' fates, classified once when its ``facts`` were read
    fates: Fates | None = None



@dataclass(frozen=True)
class Call:
    """What the variants need of a recorded call: its name, its top-level
    arguments and how the user spells donation, its buffers' fates as the capture
    classified them, the warnings JAX raised lowering it, the parameters a requested donation may name, its static arguments, and
    how its compiled facts are renamed into the user's terms (a framework's
    wrapper). No array."""

    name: str
    arguments: tuple[Argument, ...]
    style: Spelling
    fates: Fates
    warnings: tuple[str, ...] = ()
    parameters: tuple[str, ...] | None = None
    static: frozenset[int | str] = frozenset()
    rename: Callable[[CompiledFacts], CompiledFacts | None] = lambda facts: facts
    #: flat leaves the caller passed again, by the call that showed it, as far as
    #: known when the variants are planned: never advised
    passed_again: Mapping[int, int] = field(default_factory=dict)


#: A context giving the call's traced program, with the arrays it closes over, for
#: one lowering within it; ``None`` where the program let go of one of them (and
#: of the function). (:meth:`memscope.capturing.hold.Hold.lowering`)
TracedSource = Callable[[], AbstractContextManager[Any]]
#: Why a variant was not compiled where its traced program's arrays are gone.
LET_GO = "the program let go of the function and the arrays it closes over first"


class VariantThread(Protocol):
    """The capture's worker thread, as the variants use it."""

    @property
    def cancelled(self) -> bool: ...
    @property
    def draining(self) -> bool: ...
    def compiler_for(self, runs_here: bool) -> Executor: ...


class Begun(Protocol):
    """A variant whose compile began before the call's reading
    (:class:`memscope.variants.early.EarlyVariant`)."""

    warnings: tuple[str, ...]
    lowered: LoweredVariant | None

    def matches(self, mask: tuple[bool, ...]) -> bool: ...
    def take(self) -> Any: ...


class Host(Protocol):
    """What the variants need of the capture that schedules them."""

    advice: AdviceLevel
    request: VariantRequest | None
    #: what the variants are compiled for: this machine, or a ``--target``
    target: Target
    #: the variants' reads kept across runs (:mod:`memscope.compiled.cache`), else None
    cache: CompileCache | None

    @property
    def worker(self) -> VariantThread: ...

    def recording_warnings(self, *, emit: bool = True
                           ) -> contextlib.AbstractContextManager[list[str]]: ...

    def count_variants(self, *, compiled: int, reused: int) -> None: ...

    def advice_allowed(self, peak: int | None) -> bool:
        """Whether a function with this compiled peak gets its advised compile."""


def donation_variants(call: Call, facts: CompiledFacts, traced: TracedSource,
                      shardings: list[Any],
                      host: Host, early: Begun | None = None) -> list[VariantFacts]:
    """Compile the donation variants the session asks for: one compile per
    donation that is neither the program's own nor an earlier variant's. The
    advised one's compile is ``early``'s where that predicted the same donation
    (:mod:`memscope.variants.early`)."""
    arguments = call.arguments
    if sum(len(a.leaves) for a in arguments) != len(facts.program.inputs):
        return [VariantFacts("none", "n/a", None, error="the call's arguments do not "
                             "line up with the compiled program's; no variants")]
    plan, done, note = _plan(call, facts, host)
    pending: list[tuple[VariantFacts, LoweredVariant]] = []
    started: list[tuple[VariantFacts, Begun]] = []
    first: dict[tuple[bool, ...], VariantName] = {}
    shared: list[VariantFacts] = []
    for name, donation in plan:
        if host.worker.cancelled:
            return []  # the report is being built without them
        ready, mask = _describe(call, facts, name, donation)
        if mask == facts.program.donated:
            done.append(ready)
        elif mask in first:
            shared.append(replace(ready, same_as=first[mask]))
        else:
            first[mask] = name
            if name == "advised" and early is not None and early.matches(mask):
                started.append((replace(ready, warnings=early.warnings), early))
                continue
            lowered, ready = _lower_variant(ready, mask, traced, host, facts)
            if lowered is None:
                done.append(ready)
            else:
                pending.append((ready, lowered))
    done += _compiled(call, pending, shardings, host)
    for ready, begun in started:
        assert begun.lowered is not None
        done.append(_recorded(call, ready, read_variant(begun.lowered, begun.take(),
                                                        host.target, shardings)))
    by_name = {v.name: v for v in done}
    done += [replace(v, facts=by_name[v.same_as].facts, warnings=by_name[v.same_as].warnings,
                     error=by_name[v.same_as].error, fates=by_name[v.same_as].fates)
             for v in shared if v.same_as is not None]
    host.count_variants(compiled=len(pending) + len(started), reused=sum(
        v.same_as_written or v.same_as is not None for v in done))
    order = [name for name, _ in plan]
    done.sort(key=lambda v: order.index(v.name) if v.name in order else -1)
    done = [replace(v, note=note) if v.name == "advised" else v for v in done]
    return _consistent_advice(call, facts, done, traced, shardings, host)


def _compiled(call: Call, pending: list[tuple[VariantFacts, LoweredVariant]],
             shardings: list[Any], host: Host) -> list[VariantFacts]:
    """Compile the lowered variants: one at a time while the program runs (at
    the lowest priority where it runs here: :meth:`VariantThread.compiler_for`); side
    by side at the usual priority once it has ended and the report waits for
    them."""
    ended = host.worker.draining
    results = compile_variants([lowered for _, lowered in pending], host.target,
                               shardings=shardings, workers=None if ended else 1,
                               pool=None if ended else host.worker.compiler_for(
                                   host.target.runs_here),
                               settings=config_snapshot(), cache=host.cache)
    return [_recorded(call, ready, result)
            for (ready, _), result in zip(pending, results, strict=True)]


def _recorded(call: Call, ready: VariantFacts, result: CompiledFacts | Exception
              ) -> VariantFacts:
    """The variant with its compile's facts (in the user's terms) and its
    buffers' fates (classified here, once), or its error."""
    if isinstance(result, Exception):
        return replace(ready, error=f"could not compile with {ready.setting}: "
                                    f"{described(result)}"
                                    f"{_ref_alias_note(result)}")
    facts = call.rename(result)
    return replace(ready, facts=facts, fates=None if facts is None
                   else classify(facts.program, ready.warnings))


def _without_ref_collisions(fix: Donation, written: Donation,
                            arguments: tuple[Argument, ...], facts: CompiledFacts) -> Donation:
    """``fix`` less the arguments it adds whose donation JAX would pair with a
    Ref's new value (:func:`memscope.analysis.advice.ref_collisions`): XLA
    refuses such a program."""
    n = len(facts.program.inputs)
    while True:
        collisions = advice.ref_collisions(facts.program, fix.leaf_mask(arguments, n))
        bad = {a for a in fix.arguments - written.arguments
               if any(leaf in collisions for leaf in arguments[a].leaves)}
        if not bad:
            return fix
        fix = Donation(fix.arguments - bad)


def _ref_alias_note(error: Exception) -> str:
    """Why XLA refused an alias, where a donation met a ``jax.Ref``: JAX (0.7 to
    0.10) pairs a donated argument with the first output of its shape and dtype
    left, which can be a Ref's own new value, already aliased to the Ref."""
    if "is already aliased with param" not in str(error):
        return ""
    return (" (JAX paired a donated argument with a jax.Ref's new value, which is "
            "already aliased to the Ref: donate only arguments an output of the "
            "function itself can take)")


def _plan(call: Call, facts: CompiledFacts, host: Host
          ) -> tuple[list[tuple[VariantName, Donation]], list[VariantFacts], str | None]:
    """The donations to measure, the variants already answered (a request that
    cannot be applied), and the note on the advised setting."""
    arguments = call.arguments
    plan: list[tuple[VariantName, Donation]] = []
    done: list[VariantFacts] = []
    note = None
    # An argument holding a jax.Ref is never donated by memscope's variants:
    # JAX updates a Ref in place anyway, and a donated Ref can fail to compile.
    with_refs = frozenset(i for i, a in enumerate(arguments)
                          if any(facts.program.ref_access(leaf) is not None
                                 for leaf in a.leaves))
    if host.advice == "full":
        every = donate_all(arguments)
        plan += [("none", donate_none()),
                 ("all", Donation(every.arguments - with_refs))]
    if host.advice != "off":
        inputs, outputs = call.fates.passed_again(call.passed_again), call.fates.outputs
        chosen = {i: o for i, o in advice.candidates(inputs, outputs).items()
                  if not any(i in arguments[a].leaves for a in with_refs)}
        written = as_written(arguments, facts.program.donated)
        # The user's own donations no output can take: the advice leaves them out.
        drop = idle(arguments, written, *_taken_unusable(inputs)) - with_refs
        # Neither: the advice is known without a compile. Candidates too small to
        # matter, or a run of many small functions: not compiled (said in the report).
        if drop or (chosen and _worth_a_compile(inputs, chosen, facts, host)):
            wanted = advised(arguments, written, chosen, drop)
            fix = _without_ref_collisions(wanted.closest(arguments, call.style), written,
                                          arguments, facts)
            if fix.arguments != written.arguments:
                plan.append(("advised", fix))
                note = wider_note(fix, wanted, arguments, call.style)
    request = host.request
    if request is not None and (request.functions is None
                                or call.name in request.functions):
        try:
            plan.append(("requested", resolve_spec(
                request.spec, arguments, function=call.name,
                parameters=call.parameters, static=set(call.static))))
        except MemscopeError as e:
            done.append(VariantFacts("requested", request.spec.text, None, error=str(e)))
    return plan, done, note


def _worth_a_compile(inputs: Sequence[InputBuffer], chosen: dict[int, int],
                     facts: CompiledFacts, host: Host) -> bool:
    """Whether the advised donation is worth its compile (always with ``--advice
    full``, which asks for every variant): its candidates hold at
    least :data:`MEANINGFUL_SAVING` of the peak (donating them cannot save more
    than they hold), and the session still compiles advice for a function of
    this peak (:meth:`Host.advice_allowed`)."""
    if host.advice == "full":  # every variant asked for, the advised one among them
        return True
    peak = facts.memory.peak_bytes
    held = sum(inputs[i].bytes for i in chosen)
    if peak and held < MEANINGFUL_SAVING * peak:
        return False
    return host.advice_allowed(peak)


def _consistent_advice(call: Call, facts: CompiledFacts, variants: list[VariantFacts],
                       traced: TracedSource, shardings: list[Any], host: Host
                       ) -> list[VariantFacts]:
    """The variants, the advised one never donating an argument that its own
    compile shows ``unusable``: such arguments are left out and the rest
    compiled again, or, where the spelling cannot leave them out (Equinox),
    kept with a note saying so."""
    at = next((i for i, v in enumerate(variants) if v.name == "advised"), None)
    if at is None or variants[at].facts is None:
        return variants
    fixed = variants[at]
    assert fixed.facts is not None and fixed.fates is not None
    arguments, style = call.arguments, call.style
    written = as_written(arguments, facts.program.donated)
    inputs = fixed.fates.inputs
    mask = fixed.facts.program.donated
    donated = Donation(frozenset(i for i, a in enumerate(arguments)
                                 if any(mask[leaf] for leaf in a.leaves)))
    # What the advice adds must all be usable; what the user wrote must be of use.
    bad = sorted({i for i in donated.arguments - written.arguments
                  if any(inputs[leaf].fate == "unusable" for leaf in arguments[i].leaves)}
                 | idle(arguments, Donation(donated.arguments & written.arguments),
                        *_taken_unusable(inputs)))
    if not bad:
        return variants
    unusable = [inputs[leaf].path for i in bad for leaf in arguments[i].leaves
                if inputs[leaf].fate == "unusable"]
    leaves, labels = bounded_leaves(unusable), ", ".join(arguments[i].label for i in bad)
    one = len(unusable) == 1
    rest = Donation(donated.arguments - frozenset(bad))
    refix = rest.closest(arguments, style)
    if refix.arguments & frozenset(bad):
        why = (f"{leaves} stay{'s' if one else ''} unusable (no output can take "
               f"{'it' if one else 'them'}): {fixed.setting} cannot leave out {labels}.")
        variants[at] = replace(fixed, note=f"{fixed.note} {why}" if fixed.note else why)
        return variants
    dropped = (f"The advice leaves out {labels}: donating {'it' if len(bad) == 1 else 'them'}"
               f" leaves {leaves} unusable (no output can take the buffer).")
    if refix.arguments == written.arguments:
        return [v for v in variants if v.name != "advised"]
    ready, refix_mask = _describe(call, facts, "advised", refix)
    lowered, ready = _lower_variant(ready, refix_mask, traced, host, facts)
    if lowered is not None:
        (ready,) = _compiled(call, [(ready, lowered)], shardings, host)
        host.count_variants(compiled=1, reused=0)
    wider = wider_note(refix, rest, arguments, style)
    variants[at] = replace(ready, note=f"{dropped} {wider}" if wider else dropped)
    return _consistent_advice(call, facts, variants, traced, shardings, host)


def _describe(call: Call, facts: CompiledFacts, name: VariantName,
              donation: Donation) -> tuple[VariantFacts, tuple[bool, ...]]:
    """The variant's record, and the flat leaves its donation donates."""
    mask = tuple(donation.leaf_mask(call.arguments, len(facts.program.inputs)))
    setting = donation.setting(call.arguments, call.style)
    written = as_written(call.arguments, facts.program.donated)
    added = tuple(call.arguments[i].label
                  for i in sorted(donation.arguments - written.arguments))
    dropped = tuple(call.arguments[i].label
                    for i in sorted(written.arguments - donation.arguments))
    if mask == facts.program.donated:
        return VariantFacts(name, setting, facts, call.warnings, same_as_written=True,
                            added=added, dropped=dropped, fates=call.fates), mask
    return VariantFacts(name, setting, None, added=added, dropped=dropped), mask


def _taken_unusable(inputs: Sequence[InputBuffer]) -> tuple[list[bool], list[bool]]:
    """Per input leaf: whether an output is written into it, whether it is unusable."""
    return ([b.output is not None for b in inputs], [b.fate == "unusable" for b in inputs])


def _lower_variant(ready: VariantFacts, mask: tuple[bool, ...], traced: TracedSource,
                   host: Host, facts: CompiledFacts | None = None
                   ) -> tuple[LoweredVariant | None, VariantFacts]:
    """The variant lowered (``None`` if it could not be, or XLA would refuse it)
    and its record."""
    program = facts.program if facts is not None else None
    collisions = advice.ref_collisions(program, mask) if program is not None else {}
    if program is not None and collisions:
        # Not compiled: XLA refuses it, and logs the refusal to stderr.
        named = ", ".join(f"{program.inputs[i].path} with the Ref {ref}"
                          for i, ref in sorted(collisions.items()))
        return None, replace(ready, error=(
            f"not compiled: with {ready.setting} JAX would pair {named} (the Ref's new "
            "value, already aliased to the Ref), which XLA refuses; donate only arguments "
            "an output of the function can take"))
    # JAX's warnings for a program the user never runs are not the user's.
    # The traced program with the arrays it closes over, for this lowering only.
    with traced() as program, host.recording_warnings(emit=False) as lowering_warnings:
        if program is None:
            return None, replace(ready, error=f"not compiled: {LET_GO}")
        try:
            lowered = lower_variant(program, mask, host.target)
        except Exception as e:
            return None, replace(ready, error=f"could not lower with {ready.setting}: "
                                              f"{described(e)}")
    return lowered, replace(ready, warnings=tuple(lowering_warnings))
