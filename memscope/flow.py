"""The whole flow, as the library's entry points run it: a program run under
:func:`~memscope.capturing.capture` and then reported (:func:`run_and_report`,
``memscope run``, ``diff``, ``check``), one call analyzed (:func:`analyze`), and
a program run until its loop begins, then fitted (:func:`run_fit`, ``memscope fit``).

Each step is another package's: running the script (:mod:`memscope.program`),
recording its calls (:mod:`memscope.capturing`), building the report
(:mod:`memscope.assemble`), compiling other batch sizes
(:mod:`memscope.variants.fit`). This module only puts them in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memscope import _versions
from memscope.analysis.advice import AdviceLevel
from memscope.capturing.deferred import capture_on_import
from memscope.errors import EXIT_NOTHING_FITS, EXIT_TERMINATED, EXIT_USAGE, MemscopeError
from memscope.program.ending import Guard
from memscope.program.runner import RunResult, Script, run_script
from memscope.progress import SILENT, Reporter
from memscope.report import (
    Environment,
    FitPlan,
    Forecast,
    FunctionReport,
    Report,
    RunInfo,
)
from memscope.version import __version__

# JAX is imported when the program imports it (memscope.capturing.deferred), or
# when a step that needs it runs: the modules that import JAX are imported there.
if TYPE_CHECKING:
    from memscope.capturing import Session
    from memscope.capturing.entry import Entry
    from memscope.compiled.cache import CompileCache
    from memscope.compiled.targets import Target
    from memscope.variants.batch import BatchChoice
    from memscope.variants.donation import VariantRequest


def run_and_report(script: Script, *, advise: bool | AdviceLevel = False,
                   request: VariantRequest | None = None,
                   stop_after: int | None = None, guard: Guard | None = None,
                   deliver: Callable[[Report], None] | None = None,
                   remat_flops: float | None = None,
                   target: Target | None = None,
                   stop_at_function: str | None = None,
                   progress: Reporter = SILENT
                   ) -> Report:
    """Run ``script`` as ``__main__`` under :func:`capture` and report what it called.

    ``advise``, ``request``, ``stop_after``, ``remat_flops``, ``target`` (a
    ``--target`` accelerator; ``None``: this machine), ``stop_at_function`` and
    ``progress`` are :func:`capture`'s.
    Never raises for the script: how it ended (and its exit code) is in ``report.run``, and
    whatever was captured before is reported. ``deliver`` (writing the report
    where the user asked) gets the report however the run ends: at its end,
    with SIGINT and SIGTERM held until it returns, or at a SIGTERM during the
    run, after which the process ends by SIGTERM as it would under python.

    Raises:
        SystemExit: in a child process the program forked, with the child's exit
            status: only the process that started the run reports.
    """
    if guard is None:
        with Guard() as own:
            return run_and_report(script, advise=advise, request=request,
                                  stop_after=stop_after, guard=own, deliver=deliver,
                                  remat_flops=remat_flops, target=target,
                                  stop_at_function=stop_at_function, progress=progress)

    def run_info(result: RunResult) -> RunInfo:
        return RunInfo(program=script.name, argv=script.args, outcome=result.outcome,
                       exit_code=result.exit_code, module=script.module,
                       error=result.error)

    unsupported = _versions.support_problem()
    if unsupported is not None and not _versions.unsupported_allowed():
        raise MemscopeError(unsupported)  # before the script runs
    with capture_on_import(advise=advise, request=request, stop_after=stop_after,
                           remat_flops=remat_flops, target=target,
                           stop_at_function=stop_at_function, progress=progress) as pending:
        def terminated() -> None:
            pending.finish()
            report = _report(pending.session, run_info(RunResult(
                "interrupted", EXIT_TERMINATED, "terminated by SIGTERM")), pending.problem)
            if deliver is not None:
                deliver(report)

        with guard.terminated_by(terminated):
            result = run_script(script, on_finish=pending.finish, on_error=pending.explain)
    if not guard.owns_the_report():
        raise SystemExit(result.exit_code)
    session = pending.session
    if session is not None and session.stopped:  # even where the program caught it and went on
        result = RunResult("stopped", 0)
    with guard.deferred_signals():
        report = _report(session, run_info(result), pending.problem, forecast=True)
        if deliver is not None:
            deliver(report)
    if pending.problem is not None:
        raise NotCaptured(pending.problem, report)
    return report


class NotCaptured(MemscopeError):
    """The program ran, unmeasured: memscope could not capture on the JAX it
    imported (``report`` holds how the run ended, and nothing captured)."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report


def _report(session: Session | None, run: RunInfo, problem: str | None, *,
            forecast: bool = False) -> Report:
    """The report of what ``session`` captured (``forecast``: see
    :func:`session_report`); with no session (the program never imported JAX,
    or JAX could not be captured) one that says so, made without importing JAX."""
    if session is not None:
        return session_report(session, run, forecast=forecast)
    environment = Environment(jax=_versions.installed("jax") or "n/a",
                              jaxlib=_versions.installed("jaxlib") or "n/a", backend=None,
                              devices=(), python=sys.version.split()[0],
                              xla_flags=os.environ.get("XLA_FLAGS"))
    return Report(memscope_version=__version__, environment=environment, run=run,
                  functions=(), notes=() if problem is None else (problem,))


def session_report(session: Session, run: RunInfo, *, forecast: bool = False) -> Report:
    """The report of what ``session`` has captured, for a run that ended as ``run``
    says (its functions compiled for the session's target). With ``forecast``, each call that ran
    out of memory is first compiled at other batch sizes for what would fit
    (:func:`memscope.variants.fit.forecast_failures`): a report made at a
    SIGTERM goes without."""
    from memscope.assemble.run import build_report

    forecasts = None
    if forecast:
        from memscope.variants.fit import forecast_failures

        forecasts = forecast_failures(session.entries)
    return build_report(session.entries, run, session.runtime(),
                        uncaptured_pmaps=session.uncaptured_pmaps, ledger=session.ledger,
                        sampler=session.live_sampler,
                        target=session.target.info(),
                        environment=session.environment, forecasts=forecasts)


def analyze(jitted: Any, *args: Any, advise: bool | AdviceLevel = True,
            target: str | Target | None = None, **kwargs: Any) -> FunctionReport:
    """Report what XLA compiles for ``jitted(*args, **kwargs)``: by calling it once,
    or, where the arguments are ``jax.ShapeDtypeStruct``'s (or ``target`` is
    given), by compiling it without running anything.

    ``jitted`` is any ``jax.jit`` object, or what ``eqx.filter_jit`` or
    ``nnx.jit`` returned (called with arrays: reported in the user's terms, as
    ``memscope run`` reports it). A call is a real one: donated
    arguments are donated (and deleted) as without memscope, and the result is
    discarded; JAX's donation warnings are recorded only if this call is the one
    that lowers the function. A compile-only analysis allocates nothing: a
    ``jax.ShapeDtypeStruct`` stands for each array (with its sharding, over
    this machine's devices or a target's), and the function is traced, lowered
    and compiled for those devices, then read and advised as a call is. With
    ``target`` (``"gpu:h100:8"``, ``"tpu:v5p:2x2x1"``, or what :func:`target`
    returned) it is compiled for that accelerator: build the arguments'
    shardings over its devices (``target(...).mesh(...)``); an argument without
    a sharding is placed on its first device. That answers "will it fit on 64
    H100s with FSDP" from a machine without them.

    With ``advise`` (the default, ``"full"``) the function is also compiled with
    no donation, with every array argument donated and with the advisor's
    donation, for ``variants`` and ``advice`` (``"advised"``: the advisor's
    only; ``False``/``"off"``: none); each distinct donation is compiled once,
    and before this returns. A jit object made outside :func:`capture` does not
    tell how its donation was spelled, so the advice names arguments
    (``donate_argnames``) wherever they have names.

    Returns:
        The :class:`FunctionReport` of that call (a compile-only one counts no
        call and observes nothing: ``not_observed`` says so).

    Raises:
        MemscopeError: ``jitted`` is not a ``jax.jit`` object (nor a framework's
            wrapper of one, which is analyzed by calling it), the call was
            made inside a trace (so nothing was compiled for it), or the target
            cannot be set up.
    """
    from memscope import _compat
    from memscope.assemble.function import function_report
    from memscope.capturing import MeasuredJit, capture
    from memscope.capturing.analyzed import analyzed_wrapper
    from memscope.capturing.calls import CallRecorder
    from memscope.compiled.targets.here import HereTarget

    chosen = (target if target is not None and not isinstance(target, str)
              else _compile_only_target(target) if target else HereTarget())
    wrapper = analyzed_wrapper(jitted)
    if wrapper is not None:
        if not chosen.runs_here or _abstract((args, kwargs)):
            raise MemscopeError(
                f"analyze() of {wrapper.label} runs the call: give it arrays, not "
                "jax.ShapeDtypeStruct's, and no target (a compile-only analysis reads "
                "a jax.jit object)")
        with capture(advise=advise) as session, wrapper.measured(session):
            jitted(*args, **kwargs)
        if not session.entries:
            raise MemscopeError("analyze() was called inside a trace; nothing was compiled")
        return function_report(session.entries[0])
    jitted = getattr(jitted, "_memscope_jitted", jitted)
    fun = getattr(jitted, "__wrapped__", None)
    if fun is None or not _compat.hooks.is_jit_object(jitted):
        raise MemscopeError(f"analyze() needs a jax.jit, eqx.filter_jit or nnx.jit object, "
                            f"got {type(jitted).__name__}")
    if not chosen.runs_here or _abstract((args, kwargs)):
        if not chosen.runs_here:
            args, kwargs = _placed((args, kwargs), chosen)
        with capture(advise=advise, target=chosen) as session:
            CallRecorder(jitted, fun, session).compile_only(args, kwargs)
    else:
        with capture(advise=advise) as session:
            MeasuredJit(jitted, fun, session)(*args, **kwargs)
    if not session.entries:
        raise MemscopeError("analyze() was called inside a trace; nothing was compiled")
    return function_report(session.entries[0])


def target(spec: str) -> Target:
    """The accelerator ``spec`` names (``"gpu:h100:64"``, ``"tpu:v5p:4x4x4"``), for a
    compile-only :func:`analyze`: its compile-only devices (``.devices``), a mesh
    of them (``.mesh((8, 8), ("data", "model"))``), the budget a program has on
    each (``.budget_bytes``). This process's JAX is left as it is.

    Raises:
        MemscopeError: an unknown form, or its compiler is not installed.
    """
    return _compile_only_target(spec)


def _compile_only_target(spec: str) -> Target:
    from memscope.compiled.targets import compile_only_target

    return compile_only_target(spec)


def _abstract(tree: Any) -> bool:
    import jax

    return any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(tree))


def _placed(tree: Any, target: Target) -> Any:
    """``tree`` with each ``jax.ShapeDtypeStruct`` that has no sharding on the
    target's first device."""
    import jax

    first = jax.sharding.SingleDeviceSharding(next(iter(target.devices.values())))

    def place(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct) and not isinstance(x.sharding,
                                                                    jax.sharding.Sharding):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=first)
        return x

    return jax.tree.map(place, tree)


@dataclass(frozen=True)
class FitRun:
    """``memscope fit``'s answer: the forecast (or, with ``plan``, the plan), and
    how the program's capture ended."""

    forecast: Forecast | None
    outcome: str
    exit_code: int
    plan: FitPlan | None = None

    @property
    def fits(self) -> bool:
        """Some batch fits (the plan's winner, or the forecast's largest)."""
        if self.plan is not None:
            return self.plan.winner is not None
        return self.forecast is not None and self.forecast.answers

    @property
    def status(self) -> int:
        """``memscope fit``'s exit code: 0 a batch fits; 1 none fits; 2 the axis
        resized is not what the step computes on (no answer in examples)."""
        if self.plan is None and self.forecast is not None and self.forecast.batch_note:
            return EXIT_USAGE
        return 0 if self.fits else EXIT_NOTHING_FITS


def run_fit(script: Script, *, function: str | None = None, batch: Sequence[str] = (),
            memory: int | None = None, stop_after: int | None = None,
            target: Target | None = None, plan: bool = False,
            progress: Reporter = SILENT) -> FitRun:
    """Run ``script`` until its loop begins (a signature called again) or
    ``stop_after`` jitted calls, then forecast the chosen function's batch;
    compiled for ``target`` (a ``--target`` accelerator: its compiles, its
    budget as the default limit; ``None``: this machine, its devices' limit).
    With ``plan``, each setting's batch instead (:mod:`memscope.variants.plan`).
    ``progress`` is told of the compiles, once the program has ended: those
    the capture waits for, then each of fit's.

    Raises:
        MemscopeError: nothing to compile, a bad ``function`` or ``batch``, or no
            budget (no ``memory`` on a device that keeps no limit).
    """
    held: dict[str, tuple[int, int | None] | None] = {}

    def started(session: Session) -> None:
        session.live_sampler.every_call = True  # a short run: what each call sees

    with capture_on_import(advise="advised", stop_after=stop_after, keep_calls=True,
                           stop_at_repeat=(function or True) if stop_after is None else False,
                           target=target, started=started, progress=progress) as pending:
        def finish() -> None:  # while what the program holds still exists
            if pending.session is not None:
                held["in_use"] = _in_use(pending.session)
            pending.finish()

        # The program's prints go to stderr: stdout is the forecast (--format json).
        with contextlib.redirect_stdout(sys.stderr):
            result = run_script(script, on_finish=finish)
    session = pending.session
    if session is None:
        raise MemscopeError(pending.problem or f"{script.name} never imported JAX: nothing "
                            "was jitted, so there is nothing to fit")
    import jax

    from memscope.compiled.cache import CompileCache
    from memscope.variants.fit import choose_batch, choose_function

    entry = choose_function(session.entries, function)
    _check_readable(entry, batch)
    choice = choose_batch(entry, batch)
    in_use = held.get("in_use")
    source = None
    if memory is not None:
        limit: int | None = memory
    elif session.target.budget_bytes is not None:
        limit = session.target.budget_bytes
        source = _room_source(session.target)
    else:
        limit = in_use[1] if in_use else None
    if limit is None:
        where = (f"{session.target.name} has no room memscope knows "
                 f"({session.target.budget_source})" if session.target.budget_source
                 else f"{jax.default_backend()} reports no device memory limit")
        raise MemscopeError(f"{where}: give the budget with --memory SIZE "
                            "(e.g. --memory 80GiB)")
    outside = _resident_at(session, entry)
    held_note = "alive outside its arguments just before its calls (sampled)"
    if outside is None:  # no sample of its calls: what was held at the end, less its arguments
        arguments = (entry.facts.memory.argument_bytes or 0) if entry.facts is not None else 0
        outside = None if in_use is None else max(in_use[0] - arguments, 0)
        held_note = "held when the run stopped, less the function's argument bytes"
    budget = limit - (outside or 0)
    outcome = "stopped" if session.stopped else result.outcome
    code = 0 if session.stopped else result.exit_code
    note = session.target.compile_note
    cache = CompileCache.from_environment()
    found = _search(entry, choice, budget, limit, outside, session.target, cache, plan,
                    progress)
    found = dataclasses.replace(found, held_note=held_note, compile_note=note,
                                memory_source=source)
    return (FitRun(None, outcome, code, found) if isinstance(found, FitPlan)
            else FitRun(found, outcome, code))


def _search(entry: Entry, choice: BatchChoice, budget: int, limit: int, held: int | None,
            target: Target, cache: CompileCache | None, plan: bool, progress: Reporter
            ) -> Forecast | FitPlan:
    """``fit``'s search, or ``fit --plan``'s, once the program has ended (or
    been stopped), each compile told to ``progress``: XLA's own log lines are
    kept off stderr meanwhile."""
    from memscope.compiled.targets.base import compiler_logs_dropped
    from memscope.variants.fit import forecast

    with compiler_logs_dropped():
        if plan:
            from memscope.variants.plan import plan as plan_settings

            return plan_settings(entry, choice, budget, target=target, cache=cache,
                                 memory=limit, held=held, progress=progress)
        return forecast(entry, choice, budget, memory=limit, held=held, target=target,
                        cache=cache, progress=progress)


def _room_source(target: Target) -> str | None:
    """What ``target``'s budget is and which rule gave it, for ``fit``'s line:
    ``the room on gpu:h100:1: 75% of 79.1 GiB, JAX 0.12's default; ...``."""
    rule = target.budget_source
    return f"the room on {target.name}: {rule}" if rule else None


def _check_readable(entry: Entry, batch: Sequence[str]) -> None:
    """Fit starts from the function's compiled program: without it the batch axis
    cannot be told from state. A target that refused the captured size as too
    large is searched below it, on the axis given with ``--batch``.

    Raises:
        MemscopeError: memscope could not read it, saying why (and what to give).
    """
    if entry.facts is not None or entry.error is None:
        return
    from memscope.variants.fit import over_capacity

    first = (entry.error.strip().splitlines() or ["n/a"])[0]
    too_large = over_capacity(0, RuntimeError(entry.error)) is not None
    if not (too_large and batch):
        raise MemscopeError(
            f"{entry.name}: memscope could not read its compiled program, which fit "
            f"starts from: {first[:300]}"
            + ("; give the batch axis with --batch ARG[:AXIS] to search below the "
               "captured size" if too_large else ""))


def _resident_at(session: Session, entry: Entry) -> int | None:
    """The most bytes alive on one device outside ``entry``'s arguments just
    before one of its calls (an argument its program prunes counts as alive);
    ``None`` where none of its calls was sampled."""
    from memscope.analysis.run_memory import pruned_positions, resident
    from memscope.assemble.function import function_report

    log = session.live_sampler.log
    pruned = pruned_positions(function_report(entry).inputs)
    found = [max(resident(s, pruned).values(), default=0)
             for s in session.live_sampler.samples
             if s.entry is not None and not s.end and log.entries[s.entry] is entry]
    return max(found, default=None)


def _in_use(session: Session) -> tuple[int, int | None] | None:
    """(bytes the process holds on its busiest device, that device's limit): from
    ``memory_stats()``, else (CPU) from ``jax.live_arrays()`` with no limit."""
    from memscope import _compat
    from memscope.capturing.device_memory import device_limits
    from memscope.capturing.residency import live_bytes_per_device

    stats = device_limits()
    if stats is not None:
        return stats
    if not _compat.hooks.backends_initialized():
        return None
    return (max(live_bytes_per_device().values(), default=0), None)
