"""Compare a report with a baseline report and with budgets: pure functions, frozen verdicts.

The records are :mod:`memscope.check.records`; which function is which,
:mod:`memscope.check.pairing`.

Nothing here prints or touches a file: the command line reads the inputs, calls
:func:`check_report`, and hands the :class:`~memscope.check.records.CheckResult` to the renderers.

Three figures are compared per function: ``peak`` (memscope's one peak, see
:func:`memscope.report.peak_rule`), ``temp`` and ``io`` (argument + output
bytes). A figure may grow by its :class:`~memscope.check.records.Tolerance` (a percentage, a byte
count, or both, in which case both limits hold); with no tolerance, any growth
is over it. The peak is gated: growth over its tolerance fails. ``temp`` and
``io`` are components of the peak and only reported, unless the user gates
them by naming them (``--max-increase temp=5%``): a change that lowers the peak
must not fail because one component grew. ``memscope diff OLD NEW`` judges by
the same rules (:func:`judge`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from memscope.check.pairing import (
    Pairing,
    pair_functions,
    signature_changes,
)
from memscope.check.peak import grown, peak_changes
from memscope.check.records import (
    FIGURE_LABELS,
    Budget,
    CheckResult,
    Config,
    EnvDifference,
    Figure,
    FigureChange,
    FunctionVerdict,
    Tolerance,
    Tolerances,
    VerdictStatus,
)
from memscope.report import Environment, FunctionReport, InputBuffer, Report
from memscope.report.paths import MAX_LEAVES_LISTED, bounded, bounded_leaves
from memscope.report.units import format_bytes, format_change
from memscope.views import run_text
from memscope.views.leaves import parenthesized, short_signature
from memscope.views.roles_text import made_of, part_text
from memscope.views.summary import growth_text, recompile_text

# --- the check -----------------------------------------------------------------------


def check_report(current: Report, baseline: Report | None, config: Config = Config(), *,
                 strict_env: bool = False, baseline_source: str | None = None,
                 allow_empty: bool = False) -> CheckResult:
    """Compare ``current`` with ``baseline`` (if any) and with ``config``'s budgets.

    Each function is paired with its baseline by :func:`pair_functions` (across
    a change of signature or of file too) and judged by :func:`judge`. A budget
    fails when broken, and when its function was never called. A function that
    has baseline signatures but could not be paired with one fails, saying why;
    functions that truly appear or disappear are listed as new or vanished. A
    baseline with functions none of which was compared fails the check, unless
    ``allow_empty``: a check that compares nothing must not pass unnoticed.
    """
    budgets = _budgets_by_name(config.budgets)
    pairing = pair_functions(current.functions, baseline.functions if baseline else ())
    verdicts = []
    for now, then in pairing.pairs:
        problems: list[str] = []
        notes: list[str] = []
        if now.memory is None:
            problems.append(f"its memory figures could not be read now: {now.error or 'n/a'}")
        changed: tuple[str, ...] = ()
        if id(now) in pairing.moved:
            notes.append(pairing.moved[id(now)])
        if then is not None:
            changed = signature_changes(then, now)
            if changed:
                notes.append("paired with its baseline signature "
                             f"{parenthesized(short_signature(then))}; "
                             f"its signature changed: {'; '.join(changed)}")
            found, said = judge(then, now, config.tolerances)
            problems += found
            notes += said
        elif id(now) in pairing.unpaired:
            problems.append(pairing.unpaired[id(now)])
        for budget in budgets.get(now.name, ()):
            problems.extend(budget_problems(now, budget))
        checked = then is not None or now.name in budgets or id(now) in pairing.unpaired
        status: VerdictStatus = ("fail" if problems else "pass" if checked
                          else "new" if baseline is not None else "unchecked")
        verdicts.append(FunctionVerdict(
            now.name, now.signature, now.source, status, _figures(then, now),
            tuple(problems), tuple(notes),
            baseline_signature=then.signature if changed and then else None,
            signature_change=changed, short_signature=short_signature(now),
            paired_by=pairing.moved.get(id(now))))
    for then in pairing.vanished:
        verdicts.append(FunctionVerdict(then.name, then.signature, then.source, "vanished",
                                        _figures(then, None),
                                        short_signature=short_signature(then)))
    verdicts += live_growth_verdicts(current, config.max_live_growth)
    verdicts += run_peak_verdicts(current, config.max_run_peak)
    called = {fn.name for fn in current.functions}
    where = config.source or "the config"
    for name in budgets:
        if name not in called:
            verdicts.append(FunctionVerdict(
                name, None, None, "not_called",
                problems=(f"has a budget in {where} but was never called",)))
    env = environment_differences(baseline.environment, current.environment) if baseline else ()
    result = CheckResult(tuple(verdicts), env, strict_env, baseline is not None,
                         baseline_source, config.source,
                         nothing_compared=_nothing_compared(pairing, baseline),
                         allow_empty=allow_empty)
    return replace(result, summary=_summary(result))


def _nothing_compared(pairing: Pairing, baseline: Report | None) -> str | None:
    """Why nothing was compared with ``baseline``, or ``None`` when something was
    (or the baseline has no function to compare)."""
    if baseline is None or not baseline.functions or pairing.unpaired or any(
            then is not None for _, then in pairing.pairs):
        return None
    count, called = len(baseline.functions), len(pairing.pairs)
    names = bounded(list(dict.fromkeys(fn.name for fn in baseline.functions)))
    new = bounded(list(dict.fromkeys(fn.name for fn, _ in pairing.pairs)))
    them = "them" if count != 1 else "it"
    return (f"nothing was compared with the baseline: its {count} "
            f"function{'s' if count != 1 else ''} ({names}) vanished and "
            + (f"none of the {called} called now ({new}) pairs with {them}" if called
               else "nothing was called now")
            + "; check that the baseline is this program's, retake it with "
              "--update-baseline, or pass --allow-empty")


def figure_value(fn: FunctionReport | None, figure: Figure) -> int | None:
    """``peak``, ``temp`` or ``io`` (argument + output) bytes of ``fn``; ``None`` if unknown."""
    m = fn.memory if fn is not None else None
    if m is None:
        return None
    if figure == "peak":
        return m.peak_bytes
    if figure == "temp":
        return m.temp_bytes
    if m.argument_bytes is None or m.output_bytes is None:
        return None
    return m.argument_bytes + m.output_bytes


def _figures(then: FunctionReport | None, now: FunctionReport | None
             ) -> tuple[FigureChange, ...]:
    figures: tuple[Figure, ...] = ("peak", "temp", "io")
    return tuple(FigureChange(fig, figure_value(then, fig), figure_value(now, fig))
                 for fig in figures)


def judge(then: FunctionReport, now: FunctionReport, tolerances: Tolerances = Tolerances()
          ) -> tuple[list[str], list[str]]:
    """The one rule by which ``check`` and ``diff OLD NEW`` judge a function against
    its baseline: ``(problems, notes)``, one line each; problems fail.

    A gated figure (the peak, and a component the user named) growing beyond
    its tolerance is a problem; a component doing so is a note. Gaining an
    ``unusable`` donation, or losing an alias, is a problem.
    """
    problems: list[str] = []
    notes: list[str] = []
    if then.memory is None:
        notes.append("the baseline has no memory figures for it; they were not compared")
    for change in _figures(then, now):
        if change.baseline is None or change.now is None:
            continue
        tolerance: Tolerance = getattr(tolerances, change.figure)
        allowed = tolerance.allowed(change.baseline)
        if change.now <= allowed:
            continue
        limit = (f"the limit of {format_bytes(allowed)} (baseline "
                 f"{format_bytes(change.baseline)} {tolerance.describe()})"
                 if tolerance.describe() else f"the baseline {format_bytes(change.baseline)}")
        text = (f"{FIGURE_LABELS[change.figure]} grew by "
                f"{format_change(change.change, change.percent)} to "
                f"{format_bytes(change.now)}, over {limit}")
        if tolerances.gated(change.figure):
            if not tolerance.describe():
                text += " (no growth allowed without --max-increase or --max-increase-bytes)"
            if change.figure == "peak":
                text += _grown_at_peak(then, now)
            problems.append(text)
        else:
            notes.append(f"{text}; reported, not gated (--max-increase "
                         f"{change.figure}=PCT gates it)")
    gained = gained_unusable(then.inputs, now.inputs)
    if gained:
        what = (" is" if len(gained) == 1 else " are") + " donated but no output can take the buffer"
        problems.append(f"gained an unusable donation: {leaves_text(gained)}{what}"
                        if len(gained) <= MAX_LEAVES_LISTED else
                        f"gained an unusable donation: {len(gained)} leaves{what}: "
                        + leaves_text(gained))
    for fate, paths in lost_aliases(then.inputs, now.inputs).items():
        now_text = "no longer an argument leaf" if fate == "gone" else f"now {fate}"
        what = "leaf lost its alias" if len(paths) == 1 else "leaves lost their alias"
        problems.append(f"{len(paths)} {what} ({now_text}): {bounded_leaves(paths)}")
    return problems, notes


def _grown_at_peak(then: FunctionReport, now: FunctionReport) -> str:
    """``; at the peak, +7.5 MiB activations: model.py:7 ...``: the buffers
    that grew there, largest first; ``""`` where the reports cannot tell."""
    changes = peak_changes(then.live_at_peak, now.live_at_peak)
    text = grown(changes or ())
    if not text or then.live_at_peak is None or now.live_at_peak is None:
        return ""
    return (f"; at the peak ({format_bytes(then.live_at_peak.bytes)} -> "
            f"{format_bytes(now.live_at_peak.bytes)} live), grew: {text}")


def gained_unusable(then: Sequence[InputBuffer], now: Sequence[InputBuffer]
                    ) -> list[InputBuffer]:
    """The leaves of ``now`` that are ``unusable`` and were not so in ``then``."""
    before = {b.path: b.fate for b in then}
    return [b for b in now if b.fate == "unusable" and before.get(b.path) != "unusable"]


def lost_aliases(then: Sequence[InputBuffer], now: Sequence[InputBuffer]
                 ) -> dict[str, list[str]]:
    """The paths ``aliased`` in ``then`` but not in ``now``, by their fate now
    (``gone`` when the leaf is no longer an argument)."""
    after = {b.path: b.fate for b in now}
    lost: dict[str, list[str]] = defaultdict(list)
    for b in then:
        if b.fate == "aliased" and after.get(b.path) != "aliased":
            lost[after.get(b.path, "gone")].append(b.path)
    return dict(lost)


def budget_problems(fn: FunctionReport, budget: Budget) -> list[str]:
    """How ``fn`` breaks ``budget``, one line each; empty when it keeps it."""
    problems = []
    peak = figure_value(fn, "peak")
    if budget.max_peak is not None:
        if peak is None:
            problems.append(f"its peak is unknown, so max_peak {format_bytes(budget.max_peak)} "
                            "cannot be checked")
        elif peak > budget.max_peak:
            problems.append(f"peak {format_bytes(peak)} is over max_peak "
                            f"{format_bytes(budget.max_peak)} (by "
                            f"{format_bytes(peak - budget.max_peak)}); "
                            f"{what_holds_the_peak(fn)}")
    if budget.forbid_unusable_donation:
        unusable = [b for b in fn.inputs if b.fate == "unusable"]
        if unusable:
            problems.append("has an unusable donation (forbid_unusable_donation): "
                            + leaves_text(unusable))
    if budget.forbid_recompiles and fn.recompile is not None:
        problems.append("compiled again (forbid_recompiles): "
                        + recompile_text(fn, fn.recompile))
    for prefix in budget.require_aliased:
        leaves = [b for b in fn.inputs if leaf_under(b.path, prefix)]
        if not leaves:
            problems.append(f"require_aliased {prefix!r}: no argument leaf is {prefix} "
                            "or under it")
        others = [b for b in leaves if b.fate != "aliased"]
        listed = bounded([f"{b.path} is {b.fate}" for b in others])
        if others and len(others) <= MAX_LEAVES_LISTED:
            problems.append(f"require_aliased {prefix!r}: {listed}")
        elif others:
            fates = ", ".join(f"{n} {fate}" for fate, n in _fate_counts(others).items())
            problems.append(f"require_aliased {prefix!r}: {len(others)} of {len(leaves)} "
                            f"leaves are not aliased ({fates}): {listed}")
    return problems


#: The name of the verdict on the live arrays of the run as a whole.
LIVE_ARRAYS = "live arrays"


def live_growth_verdicts(report: Report, limit: int | None) -> list[FunctionVerdict]:
    """The verdict on ``max_live_growth``: the bytes gained by the live arrays
    that kept growing over the run (see :mod:`memscope.growth`)."""
    if limit is None:
        return []
    timeline = report.runtime.live_timeline if report.runtime is not None else None
    if timeline is None:
        return [FunctionVerdict(LIVE_ARRAYS, None, None, "fail", problems=(
            f"max_live_growth {format_bytes(limit)} cannot be checked: the report has no "
            "live-array samples",))]
    leaks = [g for g in timeline.growth if g.steady]  # (a one-off rise is no leak)
    grown = sum(g.gained_bytes for g in leaks)
    if grown <= limit:
        return [FunctionVerdict(LIVE_ARRAYS, None, None, "pass", notes=(
            f"grew {format_bytes(grown)} (max_live_growth {format_bytes(limit)})",))]
    return [FunctionVerdict(LIVE_ARRAYS, None, None, "fail", problems=tuple(
        [f"kept growing by {format_bytes(grown)}, over max_live_growth "
         f"{format_bytes(limit)}"] + [growth_text(g) for g in leaks]))]


#: The name of the verdict on the run's high-water mark.
RUN_PEAK = "run high-water mark"


def run_peak_verdicts(report: Report, limit: int | None) -> list[FunctionVerdict]:
    """The verdict on ``max_run_peak``: the run's high-water mark on one device
    (what was alive outside a call's arguments plus that call's own peak)."""
    if limit is None:
        return []
    run = report.runtime.run_memory if report.runtime is not None else None
    if run is None or run.high_water is None:
        return [FunctionVerdict(RUN_PEAK, None, None, "fail", problems=(
            f"max_run_peak {format_bytes(limit)} cannot be checked: the report has no "
            "device memory over the run (no call was sampled)",))]
    high = run.high_water
    text = run_text.high_water_headline(high)
    if high.bytes <= limit:
        return [FunctionVerdict(RUN_PEAK, None, None, "pass", notes=(
            f"{text} (max_run_peak {format_bytes(limit)})",))]
    return [FunctionVerdict(RUN_PEAK, None, None, "fail", problems=(
        f"{text}: over max_run_peak {format_bytes(limit)} by "
        f"{format_bytes(high.bytes - limit)}", "  " + run_text.parts(high),
        *("  alive: " + run_text.group_text(g) for g in high.groups[:run_text.SHOWN])))]


def leaf_under(path: str, prefix: str) -> bool:
    """True when leaf ``path`` is ``prefix`` or inside it: ``state['w']`` is under ``state``."""
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in "[.")


def environment_differences(baseline: Environment, now: Environment
                            ) -> tuple[EnvDifference, ...]:
    """How ``now`` differs from ``baseline`` in what the figures depend on."""
    def facts(env: Environment) -> dict[str, str]:
        return {"jax": env.jax, "jaxlib": env.jaxlib, "backend": env.backend or "n/a",
                "device kind": ", ".join(sorted({d.kind for d in env.devices})),
                "device count": str(len(env.devices)),
                "XLA_FLAGS": env.xla_flags if env.xla_flags is not None else "unset"}
    then, current = facts(baseline), facts(now)
    return tuple(EnvDifference(k, then[k], current[k]) for k in then if then[k] != current[k])


def program_failure(report: Report) -> str | None:
    """One line saying how the report's run failed, or ``None`` when it completed."""
    run = report.run
    if run is None or (run.outcome == "completed" and run.exit_code == 0):
        return None
    error = f": {run.error}" if run.error else ""
    return f"{run.program} {run.outcome} (exit code {run.exit_code}){error}"


def limit_problems(functions: Sequence[FunctionReport], limit: int, *,
                   function: str | None = None,
                   forbid_unusable_donation: bool = False) -> list[str]:
    """The pytest marker's check: each function (or the one named) keeps to ``limit`` peak bytes.

    Returns one message per function over the limit, naming it, its peak and its
    largest buffers; the caller says what it means when none was called.
    """
    problems = []
    for fn in functions:
        if function is not None and fn.name != function:
            continue
        where = f"{fn.name} ({fn.source or 'n/a'}, signature {short_signature(fn)})"
        peak = figure_value(fn, "peak")
        if peak is None:
            problems.append(f"{where}: peak unknown ({fn.error or 'n/a'}), so the "
                            f"{format_bytes(limit)} limit cannot be checked")
        elif peak > limit:
            problems.append(f"{where}: peak {format_bytes(peak)} exceeds the limit "
                            f"{format_bytes(limit)}; {what_holds_the_peak(fn)}")
        unusable = [b for b in fn.inputs if b.fate == "unusable"]
        if forbid_unusable_donation and unusable:
            problems.append(f"{where}: unusable donation: " + leaves_text(unusable))
    return problems


def what_holds_the_peak(fn: FunctionReport, count: int = 3) -> str:
    """What makes ``fn``'s peak, as a failed budget or limit says it: the first
    screen's roles line with each role's bytes, then its largest parts (``peak
    made of: activations 8.0 MiB (67%), ...; largest parts: train.py:12 sin
    (f32[1024,1024]) 4.0 MiB, ...``), where the report has the buffers live at
    the peak by role; else its largest buffers."""
    live = fn.live_at_peak
    if live is None or not live.roles or not live.parts:
        return f"largest buffers: {largest_buffers(fn, count)}"
    parts = ", ".join(f"{part_text(p)} {format_bytes(p.bytes)}" for p in live.parts[:count])
    return f"{made_of(live, fn.memory, sized=True)}; largest parts: {parts}"


def largest_buffers(fn: FunctionReport, count: int = 3) -> str:
    """What holds the memory at the peak, largest first: the temporaries live at the
    peak (else the largest temporaries) from the buffer breakdown, with their op,
    shape and source line (``temporary dot_general f32[2048,2048] 16.0 MiB at
    train.py:12``), as those are what the user's code can change; the inputs and
    outputs (``params['w'] 4.0 MiB (input, aliased)``) only where the breakdown
    has no temporaries."""
    b = fn.buffers
    temps = sorted(b.live_at_peak or b.temp_buffers, key=lambda t: -t.bytes) if b else []
    if temps:
        text = ", ".join(f"temporary {t.op} {t.shape} {format_bytes(t.bytes)} at "
                         f"{t.source or 'n/a'}" for t in temps[:count])
        total = f" (temp {format_bytes(fn.memory.temp_bytes)} in all)" if fn.memory else ""
        return text + total
    buffers: list[tuple[int, str, str, str]] = [
        (b.bytes, b.path, "input", b.fate) for b in fn.inputs]
    buffers += [(b.bytes, b.path, "output", b.fate) for b in fn.outputs]
    buffers.sort(key=lambda b: -b[0])
    return ", ".join(f"{path} {format_bytes(size)} ({kind}, {fate})"
                     for size, path, kind, fate in buffers[:count]) or "none"


def leaves_text(leaves: Sequence[InputBuffer]) -> str:
    """A handful of leaves with their avals and sizes, or, for more, counted by argument
    with a few named: a failure message stays short however many leaves fail."""
    if len(leaves) <= MAX_LEAVES_LISTED:
        return ", ".join(_leaf(b) for b in leaves)
    total = format_bytes(sum(b.bytes for b in leaves))
    return f"{len(leaves)} leaves, {total}: {bounded_leaves([b.path for b in leaves])}"


def _fate_counts(leaves: Sequence[InputBuffer]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for b in leaves:
        counts[b.fate] += 1
    return dict(counts)


def _leaf(b: InputBuffer) -> str:
    return f"{b.path} ({b.dtype}[{','.join(map(str, b.shape))}], {format_bytes(b.bytes)})"


def _budgets_by_name(budgets: Sequence[Budget]) -> dict[str, list[Budget]]:
    by_name: dict[str, list[Budget]] = defaultdict(list)
    for b in budgets:
        by_name[b.function].append(b)
    return dict(by_name)


def _summary(result: CheckResult) -> str:
    failed = [f for f in result.functions if f.failed]
    checked = [f for f in result.functions if f.status in ("pass", "fail", "not_called")]
    plural = "s" if len(checked) != 1 else ""
    if failed:
        names = ", ".join(dict.fromkeys(f.name for f in failed))
        text = f"FAIL: {len(failed)} of {len(checked)} checked function{plural} failed ({names})"
    elif result.empty_failed:
        text = "FAIL: " + str(result.nothing_compared)
    else:
        text = f"{len(checked)} function{plural} checked, none failed"
        text = ("FAIL: " if result.environment_failed else "PASS: ") + text
    if result.empty_failed and failed:
        text += f"; {result.nothing_compared}"
    if result.environment_failed:
        text += "; the environment differs from the baseline's (--strict-env)"
    others = [f"{n} {status}" for status in ("new", "vanished", "unchecked")
              if (n := sum(1 for f in result.functions if f.status == status))]
    if result.nothing_compared is not None and result.allow_empty:
        text += "; nothing was compared with the baseline (--allow-empty)"
    if others and not result.empty_failed:
        text += f"; {', '.join(others)}"
    if any(f.status == "new" for f in result.functions) and not result.empty_failed:
        text += " (--update-baseline takes new functions in)"
    moved = sum(1 for f in result.functions if f.paired_by)
    if moved:
        text += f"; {moved} paired across files"
    return text
