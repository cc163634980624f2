"""The first call's compiled program, read off the program's path, and the recorded
call handed to the variants (:mod:`memscope.variants`) that the session asks for."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from memscope import _compat
from memscope.analysis.fates import Fates, classify
from memscope.capturing import wrappers
from memscope.capturing.arguments import parameter_names
from memscope.capturing.entry import Entry
from memscope.capturing.hold import CLEARED, Hold
from memscope.capturing.session import Session
from memscope.capturing.worker import release_free_memory
from memscope.compiled.compile import compile_again_dumped
from memscope.compiled.held import reading_view
from memscope.compiled.read import CompiledFacts, CompiledHandles, read_handles
from memscope.compiled.shardings import describe_sharding
from memscope.compiled.targets.base import Target
from memscope.errors import described
from memscope.variants import donation_variants, jaxpr_facts, remat
from memscope.variants.compile import (
    ConfigSnapshot,
    LoweredVariant,
    applied_config,
    compile_lowered,
    config_snapshot,
)
from memscope.variants.early import EarlyVariant


def schedule(session: Session, entry: Entry, fun: Callable[..., Any],
             handles: CompiledHandles, shardings: list[Any], *,
             plan: remat.RematPlan | None = None, ref_names: dict[int, str] | None = None,
             early: EarlyVariant | None = None, hold: Hold | None = None) -> Hold:
    """Hand the first call's reading, and then its variants, to the worker; what
    they hold of the program is :class:`~memscope.capturing.hold.Hold`'s (given,
    where the early variant's job holds it already). On the program's path: it
    only builds the hold and queues the job."""
    if hold is None:
        hold = Hold(fun, reading_handles(handles), handles.traced, plan)
    else:
        hold.attach(reading_handles(handles), plan)
    settings = config_snapshot()
    if handles.built is None and not session.target.runs_here and early is None:
        # (an early variant lowers it for the target at the call already)
        hold.prepare(functools.partial(_lower_for_target, session.target, settings))
    session.keep(hold)
    entry.hold = hold
    parameters = (parameter_names(fun) if session.host.request is not None
                  and (entry.wrapper is None or not entry.wrapper.parameters) else None)
    session.defer(functools.partial(read_and_measure, session, entry, hold, shardings,
                                    settings, ref_names, early, parameters))
    return hold


def reading_handles(handles: CompiledHandles) -> CompiledHandles:
    """``handles`` for the reading: the traced program as a view that holds none
    of the arrays the function closes over (:func:`memscope.compiled.held.reading_view`)."""
    return CompiledHandles(reading_view(handles.traced), handles.lowered,
                           handles.compiled, handles.built)


def read_and_measure(session: Session, entry: Entry, hold: Hold, shardings: list[Any],
            settings: ConfigSnapshot, ref_names: dict[int, str] | None = None,
            early: EarlyVariant | None = None,
            parameters: tuple[str, ...] | None = None) -> None:
    """Read the compiled program of ``entry``'s first call, then hand the
    recorded call to the variants (in the worker thread, under the JAX settings
    the call ran with). ``ref_names`` names, by ``id``, the Refs the function
    can see (:mod:`memscope.capturing.refs`); ``early`` the advised variant whose
    compile began with the call's, if one did (:mod:`memscope.variants.early`);
    ``parameters`` the function's parameter names, for a requested donation."""
    try:
        _read_and_measure(session, entry, hold, shardings, settings, ref_names, early, parameters)
    finally:
        if early is not None and not early.deferred:
            let_go(session, early)


def _read_and_measure(session: Session, entry: Entry, hold: Hold, shardings: list[Any],
             settings: ConfigSnapshot, ref_names: dict[int, str] | None,
             early: EarlyVariant | None, parameters: tuple[str, ...] | None) -> None:
    with contextlib.suppress(Exception):
        texts = tuple(describe_sharding(s) for s in shardings)
        session.publish(lambda: setattr(entry, "shardings", texts))
    if early is not None and session.target.runs_here:
        # Its compile first: the two at once would add their memory. (For a
        # --target, the call's own compile is the target's, made below: the
        # two run side by side, as the program has ended before either would
        # one after the other: docs/performance.md.)
        early.settle(hurry=lambda: session.worker.draining)
        release_free_memory()
    read = _read(session, entry, hold, shardings, settings, ref_names, early)
    if read is None:
        return
    facts, fates, written_flops, foreign = read
    if facts is None or fates is None or entry.library is not None or not (
            session.host.advice != "off" or session.host.request or hold.plan is not None):
        return
    later = functools.partial(_alternatives, session, entry, hold, shardings, settings,
                              facts, fates, early, written_flops, parameters)
    if foreign:
        # Lowering a variant runs every lowering rule of the program again,
        # the program's own too (a custom primitive's, which may count or
        # print): they run once the program has ended, when it cannot see them.
        if early is not None:
            early.deferred = True  # (never started: see variants.early.start)
        session.defer_to_end(later)
    else:
        later()


def _read(session: Session, entry: Entry, hold: Hold, shardings: list[Any],
          settings: ConfigSnapshot, ref_names: dict[int, str] | None,
          early: EarlyVariant | None = None
          ) -> tuple[CompiledFacts | None, Fates | None, float | None, bool] | None:
    """The compiled program read (renamed in the user's terms) and its buffers
    classified (the one classification of them: :func:`_publish`), the written
    program's FLOPs (for the checkpoint policies' table) and whether lowering it
    runs lowering rules of the program's own; ``None`` where it could not be read
    (the entry's ``error`` says why). JAX's stages go as soon as they are read."""
    handles = hold.begin_read()
    if handles is None:
        error = f"not read: {CLEARED}"
        session.publish(lambda: setattr(entry, "error", error))
        return None
    try:
        with applied_config(settings):
            if handles.built is not None:  # compiled for the target already: read as its
                read = session.target.read(handles.traced, handles.lowered, handles.built,
                                           shardings=shardings, ref_names=ref_names)
                _check_limit(session, entry, handles.traced, handles.lowered, read)
                foreign = jaxpr_facts.lowers_with_foreign_rules(handles.traced.jaxpr)
                del handles
                facts = wrappers.renamed(entry.wrapper, read)
                return facts, _publish(session, entry, facts), None, foreign
            read = read_handles(handles, shardings=shardings, ref_names=ref_names,
                                dump=functools.partial(compile_again_dumped, cache=session.host.cache))
            session.host.counts.count_dump(read.dumped)
            flops = (_compat.executables.flops(handles.compiled)
                     if hold.plan is not None and session.target.runs_here else None)
            foreign = jaxpr_facts.lowers_with_foreign_rules(handles.traced.jaxpr)
            del handles  # the executable goes once read (end_read, below)
            if not session.target.runs_here:  # the figures are the target's
                here = read.memory
                session.publish(lambda: setattr(entry, "memory_here", here))
                read = _for_target(session, entry, hold, shardings, ref_names, early)
            facts = wrappers.renamed(entry.wrapper, read)
            fates = _publish(session, entry, facts)
        return facts, fates, flops, foreign
    except TargetCompileError as e:  # the figures here are in memory_here
        message = str(e)
        session.publish(lambda: setattr(entry, "error", message))
    except Exception as e:  # never let the measurement break the program
        error = f"could not read the compiled program: {described(e)}"
        session.publish(lambda: setattr(entry, "error", error))
    finally:
        hold.end_read()
    return None


def _publish(session: Session, entry: Entry, facts: CompiledFacts | None) -> Fates | None:
    """Give ``entry`` its compiled program's facts and its buffers' fates,
    classified here once for the variants and the report alike."""
    fates = None if facts is None else classify(facts.program, entry.warnings)

    def apply() -> None:
        entry.facts, entry.fates = facts, fates

    session.publish(apply)
    return fates


def _for_target(session: Session, entry: Entry, hold: Hold, shardings: list[Any],
                ref_names: dict[int, str] | None, early: EarlyVariant | None = None
                ) -> CompiledFacts:
    """The call's program compiled for the session's ``--target`` and read
    (through memscope's cache: a run again compiles nothing it kept): the
    compile ``early`` began at the call, where it did. Where the target checks
    whether its compiler reshaped the program to fit its memory limit, that
    check too (on ``entry``)."""
    target = session.target
    begun = early.take_own() if early is not None else None
    try:
        if begun is not None:
            own, compiled = begun
        else:
            with hold.use():
                own = hold.take_prepared(functools.partial(_lower_for_target, target, ()))
            if own is None:
                raise TargetCompileError(f"not compiled for {target.name}: "
                                         f"{hold.released or donation_variants.LET_GO}")
            if isinstance(own, Exception):
                raise own
            compiled = compile_lowered(own, target, cache=session.host.cache, counted=False)
        if isinstance(compiled, Exception):
            raise compiled
        facts = target.read(own.traced, own.lowered, compiled, shardings=shardings,
                            ref_names=ref_names)
        del compiled  # (the check below compiles once more)
    except TargetCompileError:
        raise
    except Exception as e:
        raise TargetCompileError(f"could not compile it for {target.name}: "
                                 f"{described(e)}") from None
    _check_limit(session, entry, own.traced, own.lowered, facts)
    return facts


def _check_limit(session: Session, entry: Entry, traced: Any, lowered: Any,
                 facts: CompiledFacts) -> None:
    """Whether the ``--target``'s compiler reshaped the program (``lowered``,
    read as ``facts``) to fit its memory limit, where the target checks
    (:meth:`~memscope.compiled.targets.Target.limit_check`), on ``entry``."""
    limit = session.target.limit_check(traced, lowered, facts.memory, cache=session.host.cache)
    if limit is not None:
        session.publish(lambda: setattr(entry, "memory_limit", limit))


def _lower_for_target(target: Target, settings: ConfigSnapshot, traced: Any
                      ) -> LoweredVariant:
    """The call's own program lowered for ``target`` under the call's JAX
    ``settings`` (``()``: those in force), holding none of its arrays."""
    with applied_config(settings):
        return LoweredVariant.of(traced, target.lower(traced))


class TargetCompileError(RuntimeError):
    """The call's program does not compile for the ``--target`` accelerator."""


def _alternatives(session: Session, entry: Entry, hold: Hold, shardings: list[Any],
                  settings: ConfigSnapshot, facts: Any, fates: Fates,
                  early: EarlyVariant | None, written_flops: float | None,
                  parameters: tuple[str, ...] | None) -> None:
    """The variants the session asks for, and the checkpoint policies of the
    hold's plan: none once the program let go of the function (the hold did)."""
    try:
        with hold.use() as plan:
            view = hold.view()
            if view is None:
                why = f"the variants were not compiled: {hold.released}"
                session.publish(lambda: setattr(entry, "not_measured", why))
                return
            _measure(session, entry, hold, view, plan, shardings, settings, facts, fates,
                     early, written_flops, parameters)
        hold.release_plan()  # measured: the function itself goes
    except Exception as e:  # never let the measurement break the program
        error = f"could not read the compiled program: {described(e)}"
        session.publish(lambda: setattr(entry, "error", error))
    finally:
        if early is not None:
            let_go(session, early)


def _measure(session: Session, entry: Entry, hold: Hold, view: Any,
             plan: remat.RematPlan | None, shardings: list[Any], settings: ConfigSnapshot,
             facts: Any, fates: Fates, early: EarlyVariant | None,
             written_flops: float | None, parameters: tuple[str, ...] | None) -> None:
    """The donation variants, then the checkpoint policies, of one call; each
    lowering takes the traced program, with its arrays, from ``hold`` just for
    itself."""
    with applied_config(settings):
        if session.host.advice != "off" or session.host.request:
            variants = donation_variants.donation_variants(
                recorded(entry, fates, parameters, session), facts, hold.lowering, shardings,
                session.host, early)
            session.publish(lambda: setattr(entry, "variants", variants))
        if plan is not None:
            found = remat.measure_call(plan, facts, view, hold.lowering, written_flops, settings,
                                       entry.variants, session.host)
            session.publish(lambda: setattr(entry, "remat", found))


def let_go(session: Session, early: EarlyVariant) -> None:
    """Drop an early compile the variants did not use, counting it: it was a
    real compile, only of a donation the advice did not settle on."""
    if not early.used and early.drop():
        session.host.count_variants(compiled=1, reused=0)
        session.host.counts.count_early(wasted=True)


def recorded(entry: Entry, fates: Fates, parameters: tuple[str, ...] | None,
             session: Session) -> donation_variants.Call:
    """What the variants need of ``entry``, in plain terms (no array): ``fates``
    its buffers' (classified as read); ``parameters`` the jitted function's names
    (read at the call)."""
    if session.host.request is not None and entry.wrapper is not None and entry.wrapper.parameters:
        parameters = entry.wrapper.parameters
    return donation_variants.Call(
        name=entry.name, arguments=entry.arguments, style=entry.style,
        warnings=entry.warnings, fates=fates, parameters=parameters,
        static=frozenset({*entry.spec.static_argnums, *entry.spec.static_argnames}),
        rename=functools.partial(wrappers.renamed, entry.wrapper),
        passed_again=dict(entry.passed_again))
