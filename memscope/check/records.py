"""What a check is against (tolerances, budgets, the config) and what it says (verdicts, the result): frozen records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from memscope.report.units import format_bytes

Figure = Literal["peak", "temp", "io"]
FIGURES: tuple[str, ...] = get_args(Figure)
FIGURE_LABELS: dict[str, str] = {"peak": "peak", "temp": "temp", "io": "argument+output"}

VerdictStatus = Literal["pass", "fail", "new", "vanished", "not_called", "unchecked"]
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
    #: growth over the tolerance fails (``True``), or is only reported; ``None``:
    #: not said, which gates the peak and reports the components
    gated: bool | None = None

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
                bytes=mine.bytes if mine.bytes is not None else theirs.bytes,
                gated=mine.gated if mine.gated is not None else theirs.gated)
        return Tolerances(**merged)

    def gated(self, figure: str) -> bool:
        """Whether growth of ``figure`` over its tolerance fails: the peak unless
        told otherwise, a component only when the user named it."""
        said = getattr(self, figure).gated
        return said if said is not None else figure == "peak"


@dataclass(frozen=True)
class Budget:
    """Limits for every signature of the function called ``function``, without a baseline."""

    function: str
    max_peak: int | None = None
    forbid_unusable_donation: bool = False
    #: argument names or leaf-path prefixes (``"state"``, ``"params[0]"``) that must be aliased
    require_aliased: tuple[str, ...] = ()
    #: fail when the function compiled for more than one signature
    forbid_recompiles: bool = False


@dataclass(frozen=True)
class Config:
    """What ``[tool.memscope]`` (or a ``--config`` file) says; ``source`` is that file."""

    source: str | None = None
    tolerances: Tolerances = Tolerances()
    budgets: tuple[Budget, ...] = ()
    #: the most bytes the live arrays that kept growing may have gained over the run
    max_live_growth: int | None = None
    #: the most the run's high-water mark may reach on one device
    max_run_peak: int | None = None


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
    status: VerdictStatus
    figures: tuple[FigureChange, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: the baseline's signature, where it was paired with another signature
    baseline_signature: str | None = None
    #: what changed in the signature, one line per argument leaf
    signature_change: tuple[str, ...] = ()
    #: the signature abbreviated per argument, as every renderer shows it
    short_signature: str | None = None
    #: how it was paired with a baseline defined in another file
    #: (``paired by name (train.py -> train_v2.py)``); ``None``: same file, or unpaired
    paired_by: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def shown_signature(self) -> str | None:
        """The signature to show: abbreviated where known, else as recorded."""
        return self.short_signature or self.signature

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
    #: why nothing was compared with the baseline, when it has functions and
    #: none was paired with one called now; ``None`` otherwise
    nothing_compared: str | None = None
    #: a check that compared nothing passes (``--allow-empty``)
    allow_empty: bool = False

    @property
    def environment_failed(self) -> bool:
        return self.strict_env and bool(self.environment)

    @property
    def empty_failed(self) -> bool:
        """Nothing was compared with the baseline, and that was not allowed."""
        return self.nothing_compared is not None and not self.allow_empty

    @property
    def failed(self) -> bool:
        return (self.environment_failed or self.empty_failed
                or any(f.failed for f in self.functions))


def split_source(source: str | None) -> tuple[str | None, int | None]:
    """``"train.py:18"`` -> ``("train.py", 18)``; no line -> ``(source, None)``."""
    if source is None:
        return None, None
    path, sep, line = source.rpartition(":")
    if sep and line.isdigit():
        return path, int(line)
    return source, None
