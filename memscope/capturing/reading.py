"""The first call's compiled program, read off the program's path, and the recorded
call handed to the variants (:mod:`memscope.variants`) that the session asks for."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from memscope import _compat
from memscope.capturing import wrappers
from memscope.capturing.arguments import parameter_names
from memscope.capturing.entry import Entry
from memscope.capturing.session import Session
from memscope.capturing.worker import release_free_memory
from memscope.compiled.read import (
    CompiledFacts,
    CompiledHandles,
    describe_sharding,
    read_handles,
)
from memscope.variants import donations, remat
from memscope.variants.early import EarlyVariant


def analyse(session: Session, entry: Entry, fun: Callable[..., Any], handles: CompiledHandles,
            shardings: list[Any], settings: _compat.ConfigSnapshot,
            plan: remat.Plan | None = None, ref_names: dict[int, str] | None = None,
            early: EarlyVariant | None = None) -> None:
    """Read the compiled program of ``entry``'s first call, then hand the
    recorded call to the variants (in the worker thread, under the JAX settings
    the call ran with). ``fun`` is the jitted function (the parameters a
    requested donation may name); ``ref_names`` names, by ``id``, the Refs it
    can see (:mod:`memscope.capturing.refs`); ``early`` the advised variant
    whose compile began with the call's, if one did (:mod:`memscope.variants.early`)."""
    try:
        _analyse(session, entry, fun, handles, shardings, settings, plan, ref_names, early)
    finally:
        if early is not None and not early.deferred:
            let_go(session, early)


def _analyse(session: Session, entry: Entry, fun: Callable[..., Any], handles: CompiledHandles,
             shardings: list[Any], settings: _compat.ConfigSnapshot,
             plan: remat.Plan | None, ref_names: dict[int, str] | None,
             early: EarlyVariant | None) -> None:
    with contextlib.suppress(Exception):
        texts = tuple(describe_sharding(s) for s in shardings)
        session.publish(lambda: setattr(entry, "shardings", texts))
    if early is not None:  # its compile first: the two at once would add their memory
        early.settle(hurry=lambda: session.worker.draining)
        release_free_memory()
    try:
        with _compat.applied_config(settings):
            read = read_handles(handles, shardings=shardings, ref_names=ref_names)
            if session.accelerator is not None:
                here = read.memory
                session.publish(lambda: setattr(entry, "memory_here", here))
                read = _for_target(session, handles, shardings, ref_names)
            facts = wrappers.renamed(entry.wrapper, read)
            session.publish(lambda: setattr(entry, "facts", facts))
        if facts is None or entry.library is not None or not (
                session.advice != "off" or session.request or plan is not None):
            return
        later = functools.partial(_alternatives, session, entry, fun, handles, shardings,
                                  settings, plan, facts, early)
        if _compat.lowers_with_foreign_rules(handles.traced.jaxpr):
            # Lowering a variant runs every lowering rule of the program again,
            # the program's own too (a custom primitive's, which may count or
            # print): they run once the program has ended, when it cannot see them.
            if early is not None:
                early.deferred = True  # (never started: see variants.early.start)
            session.defer_to_end(later)
        else:
            later()
    except TargetCompileError as e:  # the figures here are in memory_here
        message = str(e)
        session.publish(lambda: setattr(entry, "error", message))
    except Exception as e:  # never let the measurement break the program
        error = f"could not read the compiled program: {type(e).__name__}: {e}"
        session.publish(lambda: setattr(entry, "error", error))


def _for_target(session: Session, handles: CompiledHandles, shardings: list[Any],
                ref_names: dict[int, str] | None) -> CompiledFacts:
    """The call's program compiled for ``session.accelerator`` and read (XLA:TPU)."""
    target = session.accelerator
    try:
        return target.facts(handles.traced, shardings, ref_names)
    except Exception as e:
        raise TargetCompileError(f"could not compile it for {target.spec.name}: "
                                 f"{type(e).__name__}: {e}") from None


class TargetCompileError(RuntimeError):
    """The call's program does not compile for the ``--target`` accelerator."""


def _alternatives(session: Session, entry: Entry, fun: Callable[..., Any],
                  handles: CompiledHandles, shardings: list[Any],
                  settings: _compat.ConfigSnapshot, plan: remat.Plan | None,
                  facts: Any, early: EarlyVariant | None = None) -> None:
    """The variants the session asks for, and the checkpoint policies of ``plan``."""
    try:
        with _compat.applied_config(settings):
            if session.advice != "off" or session.request:
                variants = donations.donation_variants(
                    recorded(entry, fun, session), facts, handles.traced, shardings, session,
                    early)
                session.publish(lambda: setattr(entry, "variants", variants))
            if plan is not None:
                found = remat.measure_call(plan, facts, handles, settings, entry.variants,
                                           session)
                session.publish(lambda: setattr(entry, "remat", found))
    except Exception as e:  # never let the measurement break the program
        error = f"could not read the compiled program: {type(e).__name__}: {e}"
        session.publish(lambda: setattr(entry, "error", error))
    finally:
        if early is not None:
            let_go(session, early)


def let_go(session: Session, early: EarlyVariant) -> None:
    """Drop an early compile the variants did not use, counting it: it was a
    real compile, only of a donation the advice did not settle on."""
    if not early.used and early.drop():
        session.count_variants(compiled=1, reused=0)
        session.count_early(wasted=True)


def recorded(entry: Entry, fun: Callable[..., Any], session: Session) -> donations.Call:
    """What the variants need of ``entry``, in plain terms (no array)."""
    parameters = None
    if session.request is not None:
        parameters = (entry.wrapper.parameters
                      if entry.wrapper is not None and entry.wrapper.parameters
                      else parameter_names(fun))
    return donations.Call(
        name=entry.name, arguments=entry.arguments, style=entry.style,
        warnings=entry.warnings, parameters=parameters,
        static=frozenset({*entry.spec.static_argnums, *entry.spec.static_argnames}),
        rename=functools.partial(wrappers.renamed, entry.wrapper),
        passed_again=dict(entry.passed_again))
