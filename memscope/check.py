"""Compare a report with a baseline report and with budgets: pure functions, frozen verdicts.

Nothing here prints or touches a file: the command line reads the inputs, calls
:func:`check`, and hands the :class:`CheckResult` to the renderers.

Three figures are compared per function, each from ``memory_analysis()``:
``peak``, ``temp`` and ``io`` (argument + output bytes). A figure may grow by
its :class:`Tolerance` (a percentage, a byte count, or both, in which case both
limits hold); with no tolerance, any growth is a regression.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from memscope.report import Environment, FunctionReport, InputBuffer, Report
from memscope.units import format_bytes, format_change

Figure = Literal["peak", "temp", "io"]
FIGURES: tuple[str, ...] = get_args(Figure)
FIGURE_LABELS: dict[str, str] = {"peak": "peak", "temp": "temp", "io": "argument+output"}

Status = Literal["pass", "fail", "new", "vanished", "not_called", "unchecked"]
#: Statuses that fail the check.
FAILING: tuple[str, ...] = ("fail", "not_called")


# --- what to check against -----------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """How much one figure may grow over its baseline; ``None`` is "not limited this way".

    With neither set, no growth at all is allowed.
    """

    percent: float | None = None
    bytes: int | None = None

    def allowed(self, baseline: int) -> int:
        """The largest value that passes, for this baseline."""
        limits = [baseline]
        if self.percent is not None or self.bytes is not None:
            limits = []
            if self.percent is not None:
                limits.append(baseline + int(baseline * self.percent / 100))
            if self.bytes is not None:
                limits.append(baseline + self.bytes)
        return min(limits)

    def describe(self) -> str:
        """``+ 5%``, ``+ 16.0 MiB``, ``+ 5% and + 16.0 MiB``; empty when no growth is allowed."""
        parts = []
        if self.percent is not None:
            parts.append(f"+ {self.percent:g}%")
        if self.bytes is not None:
            parts.append(f"+ {format_bytes(self.bytes)}")
        return " and ".join(parts)


@dataclass(frozen=True)
class Tolerances:
    """One :class:`Tolerance` per figure."""

    peak: Tolerance = Tolerance()
    temp: Tolerance = Tolerance()
    io: Tolerance = Tolerance()

    def over(self, base: Tolerances) -> Tolerances:
        """These tolerances, falling back on ``base`` figure by figure, percent and bytes apart."""
        merged = {}
        for figure in FIGURES:
            mine, theirs = getattr(self, figure), getattr(base, figure)
            merged[figure] = Tolerance(
                percent=mine.percent if mine.percent is not None else theirs.percent,
                bytes=mine.bytes if mine.bytes is not None else theirs.bytes)
        return Tolerances(**merged)


@dataclass(frozen=True)
class Budget:
    """Limits for every signature of the function called ``function``, without a baseline."""

    function: str
    max_peak: int | None = None
    forbid_unusable_donation: bool = False
    #: argument names or leaf-path prefixes (``"state"``, ``"params[0]"``) that must be aliased
    require_aliased: tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    """What ``[tool.memscope]`` (or a ``--config`` file) says; ``source`` is that file."""

    source: str | None = None
    tolerances: Tolerances = Tolerances()
    budgets: tuple[Budget, ...] = ()


# --- what the check says -------------------------------------------------------------


@dataclass(frozen=True)
class FigureChange:
    """One figure of one function, then and now; ``None`` where unknown or absent."""

    figure: Figure
    baseline: int | None
    now: int | None

    @property
    def change(self) -> int | None:
        if self.baseline is None or self.now is None:
            return None
        return self.now - self.baseline

    @property
    def percent(self) -> float | None:
        """The change as a percentage of the baseline; ``None`` when the baseline is 0."""
        change = self.change
        if change is None or not self.baseline:
            return None
        return 100 * change / self.baseline


@dataclass(frozen=True)
class FunctionVerdict:
    """One function (at one signature) and what the check found.

    ``problems`` are the reasons it fails, one line each; ``notes`` are said but
    do not fail. ``file`` and ``line`` locate its definition when known.
    """

    name: str
    signature: str | None
    source: str | None
    status: Status
    figures: tuple[FigureChange, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def file(self) -> str | None:
        return split_source(self.source)[0]

    @property
    def line(self) -> int | None:
        return split_source(self.source)[1]

    def figure(self, figure: Figure) -> FigureChange:
        return next(f for f in self.figures if f.figure == figure)


@dataclass(frozen=True)
class EnvDifference:
    """One way the environment differs from the baseline's."""

    field: str
    baseline: str
    now: str


@dataclass(frozen=True)
class CheckResult:
    functions: tuple[FunctionVerdict, ...]
    environment: tuple[EnvDifference, ...] = ()
    strict_env: bool = False
    has_baseline: bool = False
    #: the baseline's file name as given, when there is a baseline and it has one
    baseline_source: str | None = None
    #: the config file the budgets and tolerances came from, if any
    config_source: str | None = None
    summary: str = field(default="")

    @property
    def environment_failed(self) -> bool:
        return self.strict_env and bool(self.environment)

    @property
    def failed(self) -> bool:
        return self.environment_failed or any(f.failed for f in self.functions)


def split_source(source: str | None) -> tuple[str | None, int | None]:
    """``"train.py:18"`` -> ``("train.py", 18)``; no line -> ``(source, None)``."""
    if source is None:
        return None, None
    path, sep, line = source.rpartition(":")
    if sep and line.isdigit():
        return path, int(line)
    return source, None


# --- the check -----------------------------------------------------------------------


def check(current: Report, baseline: Report | None, config: Config = Config(), *,
          strict_env: bool = False, baseline_source: str | None = None) -> CheckResult:
    """Compare ``current`` with ``baseline`` (if any) and with ``config``'s budgets.

    A function matched in the baseline fails when a figure grows beyond its
    tolerance, it gains an ``unusable`` donation, or a leaf that was ``aliased``
    is not any more. A budget fails when broken, and when its function was never
    called. New and vanished functions are listed but do not fail.
    """
    budgets = _budgets_by_name(config.budgets)
    pairs, vanished = match_functions(current.functions, baseline.functions if baseline else ())
    verdicts = []
    for now, then in pairs:
        problems: list[str] = []
        notes: list[str] = []
        if now.memory is None:
            problems.append(f"its memory figures could not be read now: {now.error or 'n/a'}")
        if then is not None:
            _compare(then, now, config.tolerances, problems, notes)
        for budget in budgets.get(now.name, ()):
            problems.extend(budget_problems(now, budget))
        checked = then is not None or now.name in budgets
        status: Status = ("fail" if problems else "pass" if checked
                          else "new" if baseline is not None else "unchecked")
        verdicts.append(FunctionVerdict(
            now.name, now.signature, now.source, status, _figures(then, now),
            tuple(problems), tuple(notes)))
    for then in vanished:
        verdicts.append(FunctionVerdict(then.name, then.signature, then.source, "vanished",
                                        _figures(then, None)))
    called = {fn.name for fn in current.functions}
    where = config.source or "the config"
    for name in budgets:
        if name not in called:
            verdicts.append(FunctionVerdict(
                name, None, None, "not_called",
                problems=(f"has a budget in {where} but was never called",)))
    env = environment_differences(baseline.environment, current.environment) if baseline else ()
    result = CheckResult(tuple(verdicts), env, strict_env, baseline is not None,
                         baseline_source, config.source)
    return replace(result, summary=_summary(result))


def match_functions(current: Sequence[FunctionReport], baseline: Sequence[FunctionReport]
                    ) -> tuple[list[tuple[FunctionReport, FunctionReport | None]],
                               list[FunctionReport]]:
    """Pair each current function with its baseline by (name, signature).

    Where a (name, signature) is not unique on either side, the source file
    (without its line, which moves) tells them apart, and what is still alike
    pairs in order. Returns the current functions with their partner (or
    ``None``: new), in the current order, and the baseline functions left over
    (vanished).
    """
    def key(fn: FunctionReport) -> tuple[str, str]:
        return fn.name, fn.signature

    def file_key(fn: FunctionReport) -> tuple[str, str, str | None]:
        return fn.name, fn.signature, split_source(fn.source)[0]

    count_now, count_then = _count(current, key), _count(baseline, key)

    def refined(fn: FunctionReport) -> tuple[object, ...]:
        k = key(fn)
        return file_key(fn) if count_now[k] > 1 or count_then[k] > 1 else k

    waiting: dict[tuple[object, ...], list[FunctionReport]] = defaultdict(list)
    for fn in baseline:
        waiting[refined(fn)].append(fn)
    pairs: list[tuple[FunctionReport, FunctionReport | None]] = []
    for fn in current:
        queue = waiting.get(refined(fn))
        pairs.append((fn, queue.pop(0) if queue else None))
    matched = {id(then) for _, then in pairs if then is not None}
    return pairs, [fn for fn in baseline if id(fn) not in matched]


def _count(fns: Sequence[FunctionReport], key: Callable[[FunctionReport], tuple[str, str]]
           ) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for fn in fns:
        counts[key(fn)] += 1
    return counts


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


def _compare(then: FunctionReport, now: FunctionReport, tolerances: Tolerances,
             problems: list[str], notes: list[str]) -> None:
    if then.memory is None:
        notes.append("the baseline has no memory figures for it; they were not compared")
    for change in _figures(then, now):
        if change.baseline is None or change.now is None:
            continue
        tolerance: Tolerance = getattr(tolerances, change.figure)
        allowed = tolerance.allowed(change.baseline)
        if change.now > allowed:
            limit = (f"the limit of {format_bytes(allowed)} (baseline "
                     f"{format_bytes(change.baseline)} {tolerance.describe()})"
                     if tolerance.describe() else
                     f"the baseline {format_bytes(change.baseline)} (no growth allowed "
                     "without --max-increase or --max-increase-bytes)")
            problems.append(
                f"{FIGURE_LABELS[change.figure]} grew by "
                f"{format_change(change.change, change.percent)} to "
                f"{format_bytes(change.now)}, over {limit}")
    gained = gained_unusable(then.inputs, now.inputs)
    if gained:
        problems.append("gained an unusable donation: " + ", ".join(_leaf(b) for b in gained)
                        + (" is" if len(gained) == 1 else " are")
                        + " donated but no output can take the buffer")
    for fate, paths in lost_aliases(then.inputs, now.inputs).items():
        now_text = "no longer an argument leaf" if fate == "gone" else f"now {fate}"
        what = "leaf lost its alias" if len(paths) == 1 else "leaves lost their alias"
        problems.append(f"{len(paths)} {what} ({now_text}): {', '.join(paths)}")


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
                            f"{format_bytes(peak - budget.max_peak)})")
    if budget.forbid_unusable_donation:
        unusable = [b for b in fn.inputs if b.fate == "unusable"]
        if unusable:
            problems.append("has an unusable donation (forbid_unusable_donation): "
                            + ", ".join(_leaf(b) for b in unusable))
    for prefix in budget.require_aliased:
        leaves = [b for b in fn.inputs if leaf_under(b.path, prefix)]
        if not leaves:
            problems.append(f"require_aliased {prefix!r}: no argument leaf is {prefix} "
                            "or under it")
        others = [f"{b.path} is {b.fate}" for b in leaves if b.fate != "aliased"]
        if others:
            problems.append(f"require_aliased {prefix!r}: " + ", ".join(others))
    return problems


def leaf_under(path: str, prefix: str) -> bool:
    """True when leaf ``path`` is ``prefix`` or inside it: ``state['w']`` is under ``state``."""
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in "[.")


def environment_differences(baseline: Environment, now: Environment
                            ) -> tuple[EnvDifference, ...]:
    """How ``now`` differs from ``baseline`` in what the figures depend on."""
    def facts(env: Environment) -> dict[str, str]:
        return {"jax": env.jax, "jaxlib": env.jaxlib, "backend": env.backend,
                "device kind": ", ".join(sorted({d.kind for d in env.devices})),
                "device count": str(len(env.devices)),
                "XLA_FLAGS": env.xla_flags if env.xla_flags is not None else "unset"}
    then, current = facts(baseline), facts(now)
    return tuple(EnvDifference(k, then[k], current[k]) for k in then if then[k] != current[k])


def target_failure(report: Report) -> str | None:
    """One line saying how the report's run failed, or ``None`` when it completed."""
    run = report.run
    if run is None or (run.outcome == "completed" and run.exit_code == 0):
        return None
    error = f": {run.error}" if run.error else ""
    return f"{run.target} {run.outcome} (exit code {run.exit_code}){error}"


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
        where = f"{fn.name} ({fn.source or 'n/a'}, signature {fn.signature})"
        peak = figure_value(fn, "peak")
        if peak is None:
            problems.append(f"{where}: peak unknown ({fn.error or 'n/a'}), so the "
                            f"{format_bytes(limit)} limit cannot be checked")
        elif peak > limit:
            problems.append(f"{where}: peak {format_bytes(peak)} exceeds the limit "
                            f"{format_bytes(limit)}; largest buffers: {largest_buffers(fn)}")
        unusable = [b for b in fn.inputs if b.fate == "unusable"]
        if forbid_unusable_donation and unusable:
            problems.append(f"{where}: unusable donation: "
                            + ", ".join(_leaf(b) for b in unusable))
    return problems


def largest_buffers(fn: FunctionReport, count: int = 3) -> str:
    """``params['w'] 4.0 MiB (input, aliased), ...``: the biggest inputs and outputs."""
    buffers: list[tuple[int, str, str, str]] = [
        (b.bytes, b.path, "input", b.fate) for b in fn.inputs]
    buffers += [(b.bytes, b.path, "output", b.fate) for b in fn.outputs]
    buffers.sort(key=lambda b: -b[0])
    return ", ".join(f"{path} {format_bytes(size)} ({kind}, {fate})"
                     for size, path, kind, fate in buffers[:count]) or "none"


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
    else:
        text = f"{len(checked)} function{plural} checked, none failed"
        text = ("FAIL: " if result.environment_failed else "PASS: ") + text
    if result.environment_failed:
        text += "; the environment differs from the baseline's (--strict-env)"
    others = [f"{n} {status}" for status in ("new", "vanished", "unchecked")
              if (n := sum(1 for f in result.functions if f.status == status))]
    if others:
        text += f"; {', '.join(others)}"
    if any(f.status == "new" for f in result.functions):
        text += " (a new signature is a new function: --update-baseline takes it in)"
    return text
