"""The run's report: every function's (:mod:`memscope.assemble.function`), why a
signature compiled again, the run's device memory over time and its
high-water mark, the donation hazards the ledger saw, and what the report
cannot show (:class:`~memscope.report.Report`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from memscope import _compat
from memscope.analysis.recompiles import SignatureShape, explain
from memscope.analysis.run_memory import (
    OUTPUT_HISTORY,
    CallFacts,
    Holder,
    pruned_positions,
    run_memory,
)
from memscope.assemble.function import function_report
from memscope.capturing.between import DonationLedger, signature_shape
from memscope.capturing.counts import ADVICE_FOR_EVERY, ADVICE_MIN_PEAK
from memscope.capturing.entry import Entry
from memscope.capturing.residency import SAMPLING as RUN_SAMPLING
from memscope.capturing.residency import RunSampler
from memscope.capturing.session import describe_environment
from memscope.errors import described
from memscope.program.sites import assigned_line, display_path
from memscope.report import (
    DeletedRead,
    DonationHazard,
    Environment,
    Forecast,
    FunctionReport,
    Recompile,
    Report,
    RunInfo,
    RunMemory,
    Runtime,
    TargetInfo,
)
from memscope.report.units import format_bytes
from memscope.version import __version__


def build_report(entries: Iterable[Entry], run: RunInfo | None,
                 runtime: Runtime | None = None, *, uncaptured_pmaps: int = 0,
                 ledger: DonationLedger | None = None,
                 sampler: RunSampler | None = None,
                 target: TargetInfo | None = None,
                 environment: Environment | None = None,
                 forecasts: Mapping[int, Forecast] | None = None) -> Report:
    """The report of captured ``entries``; ``runtime`` is ``session.runtime()``,
    ``uncaptured_pmaps`` is ``session.uncaptured_pmaps``, ``ledger`` the
    session's donations (hazards, and the donation behind a deleted array),
    ``sampler`` its live arrays before calls (for the run's device memory),
    ``target`` the accelerator the functions were compiled for (``--target``),
    ``environment`` the one the capture recorded (``session.environment``;
    when ``None``, JAX's devices as they are now), ``forecasts`` what batch
    would fit each call that ran out of memory, by the ``id`` of its entry
    (:func:`memscope.variants.fit.forecast_failures`)."""
    entries = list(entries)
    forecasts = forecasts or {}
    sources = jit_sources(entries)
    recompiles = explain_recompiles(entries, sources)
    functions = tuple(dataclasses.replace(function_report(e, forecasts.get(id(e))),
                                          recompile=recompiles.get(id(e)),
                                          source=sources.get(id(e), e.source))
                      for e in entries)
    failed: tuple[str, ...] = ()
    if runtime is not None and sampler is not None:
        by_entry = {id(e): (i, fn) for i, (e, fn) in enumerate(zip(entries, functions,
                                                                    strict=True))}
        try:
            runtime = dataclasses.replace(runtime, run_memory=over_the_run(sampler, by_entry,
                                                                           runtime))
        except Exception as e:  # memscope's own fault: the functions' figures still stand
            failed = (f"memscope could not build the run's device memory over time "
                      f"({described(e)}); each function's figures are complete",)
    hazards: tuple[DonationHazard, ...] = ()
    deleted = None
    if ledger is not None:
        # the ledger records the caller line as a path; the report shows it as the user knows it
        hazards = tuple(dataclasses.replace(h, line=_line(h.line)) for h in ledger.hazards)
        deleted = _deleted_read(ledger)
    return Report(memscope_version=__version__,
                  environment=environment if environment is not None else describe_environment(),
                  run=run,
                  functions=functions, runtime=runtime,
                  notes=run_notes(uncaptured_pmaps, runtime) + failed,
                  donation_hazards=hazards,
                  deleted_read=deleted, target=target)


def over_the_run(sampler: RunSampler, functions: dict[int, tuple[int, FunctionReport]],
                 runtime: Runtime) -> RunMemory | None:
    """The run's device memory (:mod:`memscope.analysis.run_memory`) from the
    sampler's records; ``functions`` (index, report) by the ``id`` of their entry."""
    found_fns = [functions.get(id(e)) for e in sampler.log.entries]
    facts = [_call_facts(f[1] if f is not None else None) for f in found_fns]
    samples = runtime.device_memory or ()
    allocator = max((s.peak_bytes_in_use for s in samples), default=None)
    found = run_memory(sampler.samples, sampler.log, facts, calls=len(sampler.log.calls)
                       + sampler.unlogged, sample_seconds=sampler.seconds,
                       sampling=RUN_SAMPLING, holder_text=_holder_text,
                       allocator_peak=allocator,
                       functions=[f[0] if f is not None else None for f in found_fns],
                       default_device=sampler.default_device)
    if found is None or found.high_water is None:
        return found
    return dataclasses.replace(found, high_water=dataclasses.replace(
        found.high_water, line=_line(found.high_water.line)))


def _call_facts(fn: FunctionReport | None) -> CallFacts | None:
    if fn is None:
        return None
    m = fn.memory
    live = fn.live_at_peak
    return CallFacts(name=fn.name, signature=fn.signature,
                     peak_bytes=m.peak_bytes if m is not None else None,
                     peak_rule=m.peak_rule if m is not None else None,
                     argument_bytes=m.argument_bytes if m is not None else None,
                     pruned=pruned_positions(fn.inputs),
                     buffers=live.buffers if live is not None else (),
                     call_site=fn.call_site, roles=live.roles if live is not None else ())


def _holder_text(holder: Holder) -> tuple[str, str | None]:
    """```losses``` and the line that last assigned it (``train.py:50``); an entry
    of a notebook's output history with what frees it."""
    if holder.scope == OUTPUT_HISTORY:
        names = ", ".join([holder.name, *holder.aliases])
        return (f"`{holder.name}` (the notebook's output history; `del {names}` or "
                "`%reset -f out` frees it)"), None
    line = assigned_line(holder.path, holder.first_line, holder.name, holder.line)
    return f"`{holder.name}`", (f"{display_path(holder.path)}:{line}" if line is not None
                                else None)


def jit_sources(entries: Sequence[Entry]) -> dict[int, str]:
    """The ``source`` of each entry (by ``id``) that its ``def`` line does not
    tell apart: where one definition (a factory's closure, ``make(2.0)`` and
    ``make(3.0)``; a function jitted with two settings) was jitted at more than
    one line of the user's, each jit is a function of its own, at its jit line.
    One jit object called from many places, or one jit line run many times,
    stays one function."""
    sites: dict[tuple[str, str | None], set[str]] = {}
    for e in entries:
        if e.jit_site is not None:
            sites.setdefault((e.name, e.source), set()).add(e.jit_site)
    return {id(e): e.jit_site for e in entries
            if e.jit_site is not None and len(sites[e.name, e.source]) > 1}


def explain_recompiles(entries: Sequence[Entry], sources: Mapping[int, str] | None = None
                       ) -> dict[int, Recompile]:
    """Per entry (by ``id``) that is not its function's first signature: why it
    compiled again, against the nearest earlier signature of the same function
    (its name and ``source``; ``sources`` where :func:`jit_sources` moved it)."""
    sources = sources or {}
    by_function: dict[tuple[str, str | None], list[Entry]] = {}
    for e in entries:
        by_function.setdefault((e.name, sources.get(id(e), e.source)), []).append(e)
    found: dict[int, Recompile] = {}
    for group in by_function.values():
        shapes = [_signature_shape(e) for e in group]
        for i in range(1, len(group)):
            now = shapes[i]
            earlier = [s for s in shapes[:i] if s is not None]
            if now is None or not earlier:
                continue
            explained = explain(earlier, now)
            if explained is not None:
                found[id(group[i])] = explained
    return found


def _signature_shape(entry: Entry) -> SignatureShape | None:
    if entry.key is None:
        return None
    n = len(entry.key[3])
    paths = None
    if entry.facts is not None and len(entry.facts.program.inputs) == n:
        paths = [leaf.path for leaf in entry.facts.program.inputs]
    return signature_shape(entry.key, paths, entry.shardings,
                           entry.setting or _donation_text(entry))


def _donation_text(entry: Entry) -> str:
    spec = entry.spec
    return (f"donate_argnums={tuple(spec.donate_argnums)}, "
            f"donate_argnames={tuple(spec.donate_argnames)}")


def _line(line: str | None) -> str | None:
    """``train.py:42``: the path relative to the working directory where under it."""
    if line is None:
        return None
    path, _, number = line.rpartition(":")
    return f"{display_path(path)}:{number}"


def _deleted_read(ledger: DonationLedger) -> DeletedRead | None:
    found = ledger.deleted
    if found is None:
        return None
    entry = found.donated.entry
    facts = entry.facts
    inputs = facts.program.inputs if facts is not None else ()
    path = inputs[found.leaf].path if found.leaf < len(inputs) else f"argument leaf {found.leaf}"
    return DeletedRead(error=found.error, function=entry.name, source=entry.source, path=path,
                       call=found.donated.call, line=_line(found.donated.line))


def run_notes(uncaptured_pmaps: int = 0, runtime: Runtime | None = None
              ) -> tuple[str, ...]:
    """What the report cannot show (on this JAX, or in a run this large), one line each."""
    notes = []
    skipped = runtime.overhead.advice_skipped if runtime and runtime.overhead else 0
    if skipped:
        notes.append(f"the advised donation was not compiled for {skipped:,} signature"
                     f"{'s' if skipped != 1 else ''} with candidates: in a run of many jitted "
                     f"functions, after the first {ADVICE_FOR_EVERY} only those with a peak "
                     f"of {format_bytes(ADVICE_MIN_PEAK)} or more get one (their candidates "
                     "are still named)")
    unverified = _compat.unverified_note()
    if unverified is not None:
        notes.append(unverified)
    if uncaptured_pmaps:
        notes.append(f"jax.pmap compiled {uncaptured_pmaps} program"
                     f"{'s' if uncaptured_pmaps != 1 else ''} outside jax.jit, which "
                     f"memscope cannot read on JAX {_compat.JAX_VERSION} "
                     "(jax_pmap_shmap_merge is off): they are not in this report; set "
                     "jax.config.update('jax_pmap_shmap_merge', True) to see them")
    return tuple(notes)
