"""Turn captured entries into a :class:`~memscope.report.Report`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import jax

from memscope import _compat
from memscope.capture import Entry, MeasuredJit, capture
from memscope.errors import MemscopeError
from memscope.fates import classify
from memscope.report import (
    Device,
    Environment,
    FunctionReport,
    InputBuffer,
    OutputBuffer,
    Report,
    RunInfo,
)
from memscope.runner import Target, run_target
from memscope.version import __version__


def function_report(entry: Entry) -> FunctionReport:
    """Classify one entry's buffers and freeze it into a :class:`FunctionReport`."""
    inputs: tuple[InputBuffer, ...] = ()
    outputs: tuple[OutputBuffer, ...] = ()
    if entry.facts is not None:
        inputs, outputs = classify(entry.facts.program, entry.warnings)
    return FunctionReport(
        name=entry.name, source=entry.source, calls=entry.calls, signature=entry.signature,
        memory=entry.facts.memory if entry.facts is not None else None,
        inputs=inputs, outputs=outputs, warnings=entry.warnings,
        donate_argnums=entry.spec.donate_argnums,
        donate_argnames=entry.spec.donate_argnames,
        error=entry.error)


def environment() -> Environment:
    """The JAX installation and devices the figures were taken on."""
    return Environment(
        jax=_compat.JAX_VERSION, jaxlib=_compat.JAXLIB_VERSION,
        backend=jax.default_backend(),
        devices=tuple(Device(id=d.id, platform=d.platform, kind=d.device_kind,
                             process_index=d.process_index) for d in jax.devices()),
        python=sys.version.split()[0],
        xla_flags=os.environ.get("XLA_FLAGS"))


def build_report(entries: Iterable[Entry], run: RunInfo | None) -> Report:
    return Report(memscope_version=__version__, environment=environment(), run=run,
                  functions=tuple(function_report(e) for e in entries))


def run_and_report(target: Target) -> Report:
    """Run ``target`` as ``__main__`` under :func:`capture` and report what it called.

    Never raises for the target: how it ended (and its exit code) is in
    ``report.run``, and whatever was captured before is reported.
    """
    with capture() as session:
        result = run_target(target)
    return build_report(session.entries, RunInfo(
        target=target.name, argv=target.args, outcome=result.outcome,
        exit_code=result.exit_code, module=target.module, error=result.error))


def analyze(jitted: Any, *args: Any, **kwargs: Any) -> FunctionReport:
    """Call ``jitted(*args, **kwargs)`` once and report what XLA compiled for it.

    ``jitted`` is any ``jax.jit`` object. The call is a real one: donated
    arguments are donated (and deleted) as without memscope, and the result is
    discarded. JAX's donation warnings are recorded only if this call is the one
    that lowers the function.

    Returns:
        The :class:`FunctionReport` of that call.

    Raises:
        MemscopeError: ``jitted`` is not a ``jax.jit`` object, or the call was
            made inside a trace (so nothing was compiled for it).
    """
    jitted = getattr(jitted, "_memscope_jitted", jitted)
    fun = getattr(jitted, "__wrapped__", None)
    if fun is None or not _compat.is_jit_object(jitted):
        raise MemscopeError(f"analyze() needs a jax.jit object, got {type(jitted).__name__}")
    with capture() as session:
        MeasuredJit(jitted, fun, session)(*args, **kwargs)
    if not session.entries:
        raise MemscopeError("analyze() was called inside a trace; nothing was compiled")
    return function_report(session.entries[0])
