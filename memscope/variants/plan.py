"""Which memory trade buys the largest batch: ``fit`` for each setting (``fit --plan``).

The settings are the program as written, the advised donation, each standard
checkpoint policy (:data:`memscope.variants.remat.POLICIES`), the policy made
from the program's own ``checkpoint_name``\\ s, the offloading policies, and the
best policy together with the advised donation. For each, the largest batch
whose peak fits the budget is found by ``fit``'s compiling search
(:func:`memscope.variants.search.search`), with the step's FLOPs from the
compile's own ``cost_analysis()`` and the host memory an offload holds.

What bounds the cost: every setting is first compiled at the captured size,
side by side (one compile per core). The program as written, the baseline, is
searched in full; the others go from the lowest peak at the captured size, each
first compiling the best batch found so far: where that does not fit, the
setting cannot beat it and its search stops (:attr:`memscope.report.PlanRow.below`). On XLA:CPU each compile
goes through memscope's cache (:mod:`memscope.compiled.cache`), so a plan
asked again compiles nothing it compiled before.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from memscope.compiled.cache import CompileCache
from memscope.compiled.compile import compile_to_read
from memscope.compiled.targets.base import Target
from memscope.compiled.targets.here import HereTarget
from memscope.errors import MemscopeError
from memscope.progress import SILENT, Reporter
from memscope.report.plan import FitPlan, PlanPoint, PlanRow, SettingKind
from memscope.report.units import format_bytes_apart
from memscope.variants import jaxpr_facts, remat
from memscope.variants.batch import BatchChoice, KeptCall, Recorded
from memscope.variants.compile import LoweredVariant, lower_variant, side_by_side
from memscope.variants.fit import (
    Compiles,
    NotCompiled,
    OverCapacity,
    axis_note,
    compute_note,
    loops_over_resized,
    not_compiled_line,
    over_capacity,
    read_flops,
    resized,
    retrace,
    search,
)


@dataclass(frozen=True)
class Setting:
    """One candidate: a checkpoint policy (``None``: the program's own) made for
    ``names``, and a flat donation (``None``: the program's own)."""

    name: str
    kind: SettingKind
    code: str | None = None
    policy: str | None = None
    names: tuple[str, ...] = ()
    donated: tuple[bool, ...] | None = None


@dataclass(frozen=True)
class Levers:
    """What the plan can change in the function: the advised donation (its
    setting and flat mask), its differentiations and checkpoint names; each
    with why it is absent where it is."""

    donation: tuple[str, tuple[bool, ...]] | None
    no_donation: str | None
    differentiations: tuple[Any, ...]
    names: tuple[str, ...]
    no_policy: str | None


class _Compiler:
    """The plan's one compile: a setting at a batch, lowered on the calling
    thread (tracing again under a policy is the calling thread's), compiled
    for the target through memscope's cache, and read; each told to ``steps``."""

    def __init__(self, call: KeptCall, choice: BatchChoice, target: Target,
                 cache: CompileCache | None, steps: Compiles) -> None:
        self.call, self.choice, self.target, self.cache = call, choice, target, cache
        self.steps = steps
        self._before = (target.compiles, target.cache_hits)
        self.points: dict[tuple[str, int], PlanPoint] = {}

    @property
    def compiles(self) -> int:
        """The target's compiles made for the plan."""
        return self.target.compiles - self._before[0]

    @property
    def cached(self) -> int:
        """The plan's compiles read from memscope's cache instead."""
        return self.target.cache_hits - self._before[1]

    def lower(self, setting: Setting, batch: int) -> tuple[Any, Any]:
        args, kwargs = resized(self.call, self.choice, batch)
        try:  # a variant's warnings and prints are not the program's
            with warnings.catch_warnings(), remat.silenced():
                warnings.simplefilter("ignore")
                if setting.policy is not None:
                    fun = self.call.fun
                    traced, lowered = remat.lower_with_policy(
                        fun, self.call.options or {}, (args, kwargs), setting.policy,
                        setting.donated, setting.names, self.target)
                    kept = LoweredVariant.of(traced, lowered)
                    return kept.traced, kept.lowered
                traced = retrace(self.call, args, kwargs)
                if setting.donated is not None:
                    variant = lower_variant(traced, setting.donated, self.target)
                    return variant.traced, variant.lowered
                kept = LoweredVariant.of(traced, self.target.lower(traced))
                return kept.traced, kept.lowered
        except Exception as e:
            raise NotCompiled(batch, "trace", e) from e

    def compiled(self, traced: Any, lowered: Any, batch: int) -> PlanPoint:
        """One compile (or a cached one) of ``lowered``, read; a size the target's
        compiler refuses as too large is a point with no figures (``refused``)."""
        try:
            compiled = compile_to_read(self.target, traced, lowered, sizes=True,
                                       cache=self.cache, counted=False)
            memory = self.target.memory(traced, lowered, compiled)
            flops = read_flops(lambda: self.target.flops(traced, compiled))
        except Exception as e:
            refused = over_capacity(batch, e)
            if refused is None:
                raise NotCompiled(batch, "compile", e) from e
            return PlanPoint(batch, None, refused=refused.headline, needs_bytes=refused.needs,
                             excess_bytes=refused.excess)
        return PlanPoint(batch, memory.peak_bytes, memory.host.peak_bytes, flops)

    def point(self, setting: Setting, batch: int) -> PlanPoint:
        """``setting`` at ``batch``, compiled once per plan."""
        found = self.points.get((setting.name, batch))
        if found is None:
            self.steps.compiling(_phrase(setting), batch)
            traced, lowered = self.lower(setting, batch)
            found = self.compiled(traced, lowered, batch)
            self.points[(setting.name, batch)] = found
        return found

    def peak(self, setting: Setting, batch: int) -> int | None:
        """The peak at ``batch`` for fit's search (see :class:`OverCapacity`)."""
        found = self.point(setting, batch)
        if found.refused is not None:
            raise OverCapacity(batch, found.needs_bytes, found.refused, found.excess_bytes)
        return found.peak_bytes

    def first_round(self, settings: Sequence[Setting]) -> dict[str, PlanPoint | NotCompiled]:
        """Every setting at the captured size, compiled side by side (XLA compiles
        outside the GIL); lowered one after another on this thread."""
        b0 = self.choice.size
        lowered: list[tuple[Setting, Any]] = []
        done: dict[str, PlanPoint | NotCompiled] = {}
        for s in settings:
            self.steps.compiling(_phrase(s), b0)
            try:
                lowered.append((s, self.lower(s, b0)))
            except NotCompiled as e:
                done[s.name] = e
        together = (f"compiling {self.steps.function}'s {len(settings)} settings at "
                    f"batch {b0} for {self.steps.where}, side by side")
        self.steps.say(together)

        def one(item: tuple[Setting, Any]) -> PlanPoint | NotCompiled:
            traced, lowered_ = item[1]
            try:
                return self.compiled(traced, lowered_, b0)
            except NotCompiled as e:
                return e
            finally:
                self.steps.finished(together)

        results = side_by_side(one, lowered)
        for (s, _), result in zip(lowered, results, strict=True):
            done[s.name] = result
            if isinstance(result, PlanPoint):
                self.points[(s.name, b0)] = result
        return done


# ------------------------------------------------------------ settings --


def levers(entry: Recorded, call: KeptCall, choice: BatchChoice) -> Levers:
    """What can be changed in ``entry``'s function (see :class:`Levers`)."""
    advised = next((v for v in entry.variants if v.name == "advised"), None)
    donation, no_donation = None, None
    if advised is None or advised.facts is None:
        no_donation = "memscope has no donation advice for this function"
    elif advised.same_as_written:
        no_donation = "the program already donates what memscope advises"
    else:
        donation = (advised.setting, advised.facts.program.donated)
    if call.fun is None or call.options is None:
        return Levers(donation, no_donation, (), (), "memscope cannot trace this function "
                      "again: it was not jitted while memscope captured the program")
    args, kwargs = resized(call, choice, choice.size)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found, traced = remat.find(call.fun, call.options, (args, kwargs))
    except Exception as e:
        return Levers(donation, no_donation, (), (),
                      f"tracing the function again failed: {type(e).__name__}: {e}")
    if not found:
        return Levers(donation, no_donation, (), (), "the function differentiates nothing "
                      "(no jax.grad, value_and_grad or vjp): no checkpoint policy applies")
    names = jaxpr_facts.checkpoint_names(traced.jaxpr)
    return Levers(donation, no_donation, tuple(remat.differentiation(f) for f in found),
                  names, None)


def _policy_code(lv: Levers, policy: str, names: Sequence[str] = ()) -> str:
    return "; ".join(sorted({remat.code(d, policy, names) for d in lv.differentiations}))


def settings(lv: Levers) -> tuple[list[Setting], list[PlanRow]]:
    """The settings to search, and a row for each that cannot be (saying why)."""
    todo = [Setting("as written", "written")]
    rows: list[PlanRow] = []
    if lv.donation is not None:
        todo.append(Setting("advised donation", "donation", lv.donation[0],
                            donated=lv.donation[1]))
    else:
        rows.append(PlanRow("advised donation", "donation", None, None, note=lv.no_donation))
    policies: list[tuple[str, SettingKind, tuple[str, ...]]] = [
        *((p, "policy", ()) for p in remat.POLICIES),
        *((p, "names", lv.names) for p in remat.NAMED_POLICIES),
        *((p, "offload", lv.names if "names" in p else ()) for p in remat.OFFLOAD_POLICIES)]
    for policy, kind, names in policies:
        if lv.no_policy is not None:
            rows.append(PlanRow(policy, kind, None, None, note=lv.no_policy))
        elif "names" in policy and not names:
            rows.append(PlanRow(policy, kind, None, None, note=(
                "the function names no values with jax.ad_checkpoint.checkpoint_name: "
                "there is nothing for this policy to name")))
        else:
            todo.append(Setting(policy, kind, _policy_code(lv, policy, names), policy, names))
    return todo, rows


def combined(best: Setting, lv: Levers) -> Setting:
    """``best`` (a policy) with the advised donation as well."""
    assert lv.donation is not None and best.policy is not None
    donation = lv.donation[0]
    # A wrapper's setting is its own call (``nnx.jit(donate_argnames=...)``);
    # jax.jit's is its keywords.
    if re.match(r"[\w.]+\(", donation) is None:
        donation = f"jax.jit(..., {donation})"
    return Setting(f"{best.name} + advised donation", "combined",
                   f"{best.code}; {donation}", best.policy, best.names, lv.donation[1])


def _phrase(s: Setting) -> str:
    """``s`` as progress says it: ``as written``, ``with dots_saveable``."""
    return {"written": "as written", "donation": "with the advised donation"}.get(
        s.kind, f"with {s.name}")


# -------------------------------------------------------------- the plan --


def plan(entry: Recorded, choice: BatchChoice, budget: int | None, *,
         target: Target | None = None, cache: CompileCache | None = None,
         memory: int | None = None, held: int | None = None,
         progress: Reporter = SILENT) -> FitPlan:
    """Each setting's largest batch under ``budget``, best first (see the
    module's doc); compiled for ``target`` (this machine by default),
    ``progress`` told of each compile (the first round's count is of its
    compiles, the search's of the settings searched).

    Raises:
        MemscopeError: the program as written does not trace or compile at a size
            tried (:func:`memscope.variants.fit.not_compiled_line` says which).
    """
    call = entry.call
    assert call is not None
    start = time.perf_counter()
    target = target if target is not None else HereTarget()
    lv = levers(entry, call, choice)
    todo, rows = settings(lv)
    compiler = _Compiler(call, choice, target, cache,
                         Compiles(progress, entry.name, target, len(todo)))
    first = compiler.first_round(todo)
    written = first.get("as written")
    if isinstance(written, NotCompiled):
        raise MemscopeError(not_compiled_line(entry, choice, written))
    todo = _searchable(todo, first, rows, target)
    combining = lv.donation is not None and any(s.policy is not None for s in todo)
    compiler.steps = Compiles(progress, entry.name, target, len(todo) + combining)
    try:
        searched = _search_all(compiler, todo, first, budget)
    except NotCompiled as failed:
        raise MemscopeError(not_compiled_line(entry, choice, failed)) from None
    best = max((r.largest for r in searched.values() if r.largest is not None), default=None)
    both = _combined_setting(todo, searched, lv, choice.size)
    if both is not None:
        searched[both.name] = _search_one(compiler, both, budget, best)
    else:
        rows.append(PlanRow("best policy + advised donation", "combined", None, None,
                            note=(lv.no_donation or lv.no_policy
                                  or "no checkpoint policy was searched to combine")))
    ordered = rank([*searched.values(), *rows], written if isinstance(written, PlanPoint)
                   else None)
    top = ordered[0] if ordered and ordered[0].largest is not None else None
    loops = loops_over_resized(call, choice)  # (a loop's FLOPs: its body's, counted
    batch_note = None if loops else _compute_note(searched.get("as written"))  # once)
    return FitPlan(
        function=entry.name, source=entry.source, argument=choice.label, axis=choice.axis,
        batch=choice.size, step=choice.step, budget_bytes=budget, rows=tuple(ordered),
        winner=top.setting if top else None,
        winner_code=(top.code or "the program as written") if top else None,
        compiles=compiler.compiles, seconds=time.perf_counter() - start,
        cached=compiler.cached, target=None if target.runs_here else target.name,
        flops_rule=target.flops_rule, choice_note=axis_note(call, choice, loops),
        memory_bytes=memory, held_bytes=held, batch_note=batch_note)


def _searchable(todo: list[Setting], first: dict[str, PlanPoint | NotCompiled],
                rows: list[PlanRow], target: Target) -> list[Setting]:
    """The settings left to search after the first round; a row in ``rows`` for
    each of the others: it does not compile, or it offloads and moves nothing."""
    left = []
    for s in todo:
        p = first[s.name]
        if isinstance(p, NotCompiled):
            rows.append(_failed(s, p))
        elif s.kind == "offload" and p.refused is None and p.host_bytes == 0:
            rows.append(_moves_nothing(s, p, target))
        else:
            left.append(s)
    return left


def _search_all(compiler: _Compiler, todo: list[Setting],
                first: dict[str, PlanPoint | NotCompiled], budget: int | None
                ) -> dict[str, PlanRow]:
    """Each setting's row. The program as written is the baseline every row is
    read against: its batch is searched in full; the others go from the lowest
    peak at the captured size, each told the best batch found so far."""
    searched: dict[str, PlanRow] = {}
    best: int | None = None
    for s in sorted(todo, key=lambda s: (s.kind != "written",
                                         *_order(first[s.name], todo.index(s)))):
        row = _search_one(compiler, s, budget, best if s.kind != "written" else None,
                          raising=s.kind == "written")
        compiler.steps.finished()
        searched[s.name] = row
        if row.largest is not None and (best is None or row.largest > best):
            best = row.largest
    return searched


def _compute_note(written: PlanRow | None) -> str | None:
    """:func:`memscope.variants.fit.compute_note` of the program as written."""
    return compute_note((p.batch, p.flops) for p in (written.points if written else ())
                        if p.refused is None)


def _order(p: PlanPoint | NotCompiled, index: int) -> tuple[float, float, int]:
    """Searched first: the lowest peak at the captured size (the likeliest to
    fit the most), then the fewest FLOPs, then the settings' own order."""
    assert isinstance(p, PlanPoint)
    return (p.peak_bytes if p.peak_bytes is not None else float("inf"),
            p.flops if p.flops is not None else float("inf"), index)


def _search_one(compiler: _Compiler, s: Setting, budget: int | None, best: int | None,
                raising: bool = False) -> PlanRow:
    """``setting``'s row: ``fit``'s search with its compiles, told the best so far."""
    def peak(call: KeptCall, choice: BatchChoice, batch: int, donated: Any) -> int | None:
        return compiler.peak(s, batch)

    step = compiler.choice.step
    try:
        found = search(compiler.call, compiler.choice, budget, beat=best, compile_peak=peak)
    except NotCompiled as e:
        if raising:  # the program as written: fit's own error, with what to pass
            raise
        return _failed(s, e)
    points = tuple(sorted((p for (name, _), p in compiler.points.items() if name == s.name),
                          key=lambda p: p.batch))
    at = {p.batch: p for p in points}
    fit, over = (at.get(found.largest), at.get(found.largest + step)) if found.largest else (
        None, None)
    flops = fit.flops / found.largest if fit and fit.flops is not None and found.largest else None
    # (fit's own note that the peak is not linear in the batch is left out: each
    # row's batch was confirmed by compiling all the same)
    note = None if found.largest is not None and found.above == found.largest + step else (
        found.note)
    if over is not None and over.refused is not None:
        note = f"batch {over.batch} does not compile for the target: {over.refused}"
    if found.below is not None:
        stopped = at.get(found.below)
        peak_text, limit = format_bytes_apart([stopped.peak_bytes if stopped else None,
                                               budget])
        why = (f"the peak is {peak_text}, over the budget ({limit})"
               if stopped is None or stopped.refused is None
               else f"the target's compiler refused it: {stopped.refused}")
        note = (f"stopped: at batch {found.below}, which another setting fits, {why}; "
                "this setting fits fewer")
    return PlanRow(s.name, s.kind, s.code, found.largest,
                   peak_bytes=fit.peak_bytes if fit else None,
                   over_bytes=over.peak_bytes if over else None,
                   host_bytes=fit.host_bytes if fit else None, flops_per_example=flops,
                   below=found.below, note=note, compiles=len(points), points=points)


def _moves_nothing(s: Setting, p: PlanPoint, target: Target) -> PlanRow:
    """The row of an offloading policy whose compiled step holds no host memory."""
    platform = target.platform
    why = " (XLA:CPU compiles no host offload)" if platform == "cpu" else ""
    return PlanRow(s.name, s.kind, s.code, None, note=(
        f"the step compiled at batch {p.batch} holds no host memory: the policy moves "
        f"nothing to the host on XLA:{platform.upper()}{why}, so it is not searched"),
        compiles=1, points=(p,))


def _failed(s: Setting, e: NotCompiled) -> PlanRow:
    first = (str(e.error).strip().splitlines() or ["n/a"])[0]
    return PlanRow(s.name, s.kind, s.code, None, note=(
        f"does not {e.stage} at batch {e.batch}: {type(e.error).__name__}: {first}"))


def _combined_setting(todo: Sequence[Setting], searched: dict[str, PlanRow], lv: Levers,
                      captured: int) -> Setting | None:
    """The policy that fits the largest batch (else, of those stopped, the lowest
    peak at the captured size) with the advised donation; ``None`` without both."""
    if lv.donation is None:
        return None
    candidates = [s for s in todo if s.policy is not None and s.name in searched]
    if not candidates:
        return None

    def score(s: Setting) -> tuple[int, float, float]:
        row = searched[s.name]
        at = next((p for p in row.points if p.batch == captured), None)
        low = at.peak_bytes if at is not None and at.peak_bytes is not None else float("inf")
        flops = row.flops_per_example if row.flops_per_example is not None else float("inf")
        # as rank orders: the largest batch, then the fewest FLOPs; of those stopped,
        # the lowest peak at the captured size
        return (row.largest or 0, -flops, -low)

    return combined(max(candidates, key=score), lv)


def rank(rows: Sequence[PlanRow], written: PlanPoint | None) -> list[PlanRow]:
    """The rows best first: those with a batch by the largest, then the fewest
    FLOPs per example, then the smaller change (the settings' order); then those
    stopped early (by the size they could not fit); then those that say why.
    Each row gets its FLOPs at the captured size against ``written``'s there."""
    order = {kind: i for i, kind in enumerate(("written", "donation", "policy", "names",
                                               "offload", "combined"))}
    b0 = written.batch if written is not None else None

    def ratio(row: PlanRow) -> float | None:
        at = next((p for p in row.points if p.batch == b0), None)
        if at is None or written is None or at.flops is None or not written.flops:
            return None
        return at.flops / written.flops

    def key(row: PlanRow) -> tuple[int, float, float, int]:
        if row.largest is not None:
            flops = row.flops_per_example
            return (0, -row.largest, flops if flops is not None else float("inf"),
                    order[row.kind])
        if row.below is not None:
            return (1, -row.below, 0.0, order[row.kind])
        return (2, 0.0, 0.0, order[row.kind])

    return sorted((replace(r, flops_ratio=ratio(r)) for r in rows), key=key)

