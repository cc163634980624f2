"""Turn captured entries into a :class:`~memscope.report.Report`."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Sequence

import jax

from memscope import _compat
from memscope.analysis import advice, observed, oom
from memscope.analysis.fates import classify, closed_over
from memscope.analysis.live import memory_view
from memscope.analysis.recompiles import SignatureShape, explain
from memscope.analysis.run_memory import (
    OUTPUT_HISTORY,
    CallFacts,
    Holder,
    pruned_positions,
    run_memory,
)
from memscope.capturing.between import DonationLedger, signature_shape
from memscope.capturing.entry import Entry
from memscope.capturing.residency import SAMPLING as RUN_SAMPLING
from memscope.capturing.residency import RunSampler
from memscope.capturing.session import ADVICE_FOR_EVERY, ADVICE_MIN_PEAK
from memscope.compiled.buffers import breakdown
from memscope.compiled.read import CompiledFacts
from memscope.program.sites import assigned_line, display_path
from memscope.report import (
    Advice,
    DeletedRead,
    Device,
    DonationHazard,
    Environment,
    FunctionReport,
    InputBuffer,
    LiveAtPeak,
    Memory,
    MemoryTimeline,
    OutOfMemory,
    OutputBuffer,
    Recompile,
    Report,
    RunInfo,
    RunMemory,
    Runtime,
    TargetInfo,
    Variant,
    XlaBuffer,
)
from memscope.report.units import format_bytes
from memscope.variants.donations import VariantFacts
from memscope.version import __version__


def function_report(entry: Entry) -> FunctionReport:
    """Classify one entry's buffers and freeze it into a :class:`FunctionReport`."""
    inputs: tuple[InputBuffer, ...] = ()
    outputs: tuple[OutputBuffer, ...] = ()
    findings: tuple[str, ...] = ()
    refs: tuple[InputBuffer, ...] = ()
    if entry.facts is not None:
        inputs, outputs = classify(entry.facts.program, entry.warnings)
        refs = closed_over(entry.facts.program)
        inputs = tuple(dataclasses.replace(b, passed_again=entry.passed_again.get(i))
                       if i in entry.passed_again else b for i, b in enumerate(inputs))
        inputs = advice.annotate(inputs, outputs,
                                 same_size_donors=_compat.SAME_SIZE_DONORS)
        if entry.observation is not None:
            inputs, findings = observed.check(inputs, outputs, entry.observation,
                                               entry.observation_again)
            refs, closed_findings = observed.check_closed(refs, entry.observation)
            findings += closed_findings
    memory = entry.facts.memory if entry.facts is not None else None
    variants = tuple(_variant(v) for v in entry.variants)
    timeline, live, timeline_note = _memory_view(entry, inputs, memory)
    return FunctionReport(
        name=entry.name, source=entry.source, calls=entry.calls, signature=entry.signature,
        memory=memory, memory_here=entry.memory_here, inputs=inputs, outputs=outputs,
        warnings=entry.warnings,
        donate_argnums=entry.spec.donate_argnums,
        donate_argnames=entry.spec.donate_argnames,
        error=entry.error, variants=variants,
        advice=_advice(inputs, memory, entry.variants), setting=entry.setting,
        findings=findings, measured=entry.measured, library=entry.library,
        compile_seconds=entry.compile_seconds, first_call=entry.first_call,
        remat=entry.remat,
        jit_site=entry.jit_site, jit_file_sha256=entry.jit_file_sha256,
        call_site=entry.call_site, closed_over_refs=refs,
        devices=entry.facts.program.devices if entry.facts is not None else None,
        buffers=(breakdown(entry.facts.buffers, memory, display_path)
                 if entry.facts is not None and entry.facts.buffers is not None else None),
        memory_timeline=timeline, live_at_peak=live, memory_timeline_note=timeline_note,
        out_of_memory=post_mortem(entry), not_measured=entry.not_measured,
        not_observed=entry.not_observed)


def _memory_view(entry: Entry, inputs: Sequence[InputBuffer], memory: Memory | None
                 ) -> tuple[MemoryTimeline | None, LiveAtPeak | None, str | None]:
    """The entry's memory timeline and what is live at its peak; else why not."""
    if entry.facts is None:
        return None, None, entry.error
    return _facts_view(entry.facts, (*inputs, *closed_over(entry.facts.program)), memory)


def _facts_view(facts: CompiledFacts, inputs: Sequence[InputBuffer], memory: Memory | None
                ) -> tuple[MemoryTimeline | None, LiveAtPeak | None, str | None]:
    if facts.liveness is None or facts.buffers is None:
        return None, None, facts.liveness_error or facts.buffers_error
    arguments = {b.parameter: (b.path, b.donated) for b in inputs if b.parameter is not None}
    timeline, live = memory_view(facts.liveness, facts.buffers, memory, display_path,
                                 arguments)
    return timeline, live, None
def forecast_failures(entries: Iterable[Entry]) -> None:
    """For each call that ran out of memory on a device with a limit: the largest
    batch that fits it, by compiling (after the program has ended)."""
    for entry in entries:
        in_use, limit = entry.failure_memory or (0, None)
        if entry.failure is None or entry.call is None or entry.facts is None or limit is None:
            continue
        from memscope.variants import fit

        held = max(in_use - (entry.facts.memory.argument_bytes or 0), 0)
        try:
            choice = fit.choose_batch(entry)
            entry.forecast = fit.forecast(entry, choice, limit - held, memory=limit,
                                          held=held)
        except Exception:  # the post-mortem goes without it (it says n/a)
            entry.forecast = None


def post_mortem(entry: Entry) -> OutOfMemory | None:
    """What the entry's out-of-memory failure showed; ``None`` when it had none."""
    if entry.failure is None:
        return None
    said = oom.parse(entry.failure)
    in_use, limit = entry.failure_memory or (None, None)
    requested = said.requested_bytes if said else None
    if said is not None and requested is None and said.requested_text is not None:
        requested = oom.resolve_rounded(said.requested_text, _allocation_sizes(entry))
    return OutOfMemory(
        error=said.headline if said is not None else entry.failure.splitlines()[0],
        failed_in="compile" if entry.failed_in == "compile" else "call",
        requested_bytes=requested,
        requested_text=said.requested_text if said else None,
        device_limit_bytes=limit, bytes_in_use=in_use,
        xla_used_bytes=said.used_bytes if said else None,
        xla_capacity_bytes=said.capacity_bytes if said else None,
        listed_buffers=said.buffers if said else (),
        live_arrays=entry.failure_live, forecast=entry.forecast,
        largest_buffers=_largest_buffers(entry))


def _allocation_sizes(entry: Entry) -> list[int | None]:
    """What the compiled program allocates at a call: its output and temporary
    totals, and each allocation of its buffer assignment."""
    if entry.facts is None:
        return []
    memory, assigned = entry.facts.memory, entry.facts.buffers
    return [memory.output_bytes, memory.temp_bytes,
            *(a.size for a in (assigned.allocations if assigned is not None else ()))]


def _largest_buffers(entry: Entry, count: int = 5) -> tuple[XlaBuffer, ...]:
    assigned = entry.facts.buffers if entry.facts is not None else None
    if assigned is None:
        return ()
    largest = sorted(assigned.buffers.values(), key=lambda b: b.size, reverse=True)[:count]
    return tuple(XlaBuffer(b.size, b.shape, b.op,
                           None if b.source_file is None else
                           f"{display_path(b.source_file)}:{b.source_line}")
                 for b in largest)


def _variant(v: VariantFacts) -> Variant:
    if v.facts is None:
        return Variant(name=v.name, setting=v.setting, memory=None, error=v.error,
                       same_as=v.same_as)
    inputs, outputs = classify(v.facts.program, v.warnings)
    timeline, live, _ = _facts_view(v.facts, inputs, v.facts.memory)
    return Variant(name=v.name, setting=v.setting, memory=v.facts.memory, inputs=inputs,
                   outputs=outputs, warnings=v.warnings, same_as_written=v.same_as_written,
                   same_as=v.same_as, memory_timeline=timeline, live_at_peak=live)


def _advice(inputs: tuple[InputBuffer, ...], memory: Memory | None,
            variants: Sequence[VariantFacts]) -> Advice | None:
    """The advisor's fix, with the peak measured by compiling it; ``None`` without
    candidates or when the advisor was off."""
    candidates = [b for b in inputs if b.candidate]
    fix = next((v for v in variants if v.name == "advised"), None)
    if fix is None or not (candidates or fix.dropped):
        return None
    if fix.facts is not None:
        # Only what the setting donates: the advisor may have left an argument out.
        program = fix.facts.program
        donated = {leaf.path for leaf, d in zip(program.inputs, program.donated, strict=True)
                   if d}
        candidates = [b for b in candidates if b.path in donated]
        # Measured before the next call showed the caller keeps a leaf it would
        # donate: that donation would delete an array the program reads again.
        if any(b.passed_again is not None and b.path in donated and not b.donated
               for b in inputs):
            return None
    return Advice(setting=fix.setting, add=fix.added,
                  candidate_bytes=sum(b.bytes for b in candidates),
                  peak_before=memory.peak_bytes if memory else None,
                  peak_after=fix.facts.memory.peak_bytes if fix.facts else None,
                  caveat=f"{fix.note} {advice.CAVEAT}" if fix.note else advice.CAVEAT,
                  drop=fix.dropped)


def environment() -> Environment:
    """The JAX installation and devices the figures were taken on."""
    return Environment(
        jax=_compat.JAX_VERSION, jaxlib=_compat.JAXLIB_VERSION,
        backend=jax.default_backend(),
        devices=tuple(Device(id=d.id, platform=d.platform, kind=d.device_kind,
                             process_index=d.process_index) for d in jax.devices()),
        python=sys.version.split()[0],
        xla_flags=os.environ.get("XLA_FLAGS"),
        process_index=jax.process_index(), process_count=jax.process_count())


def build_report(entries: Iterable[Entry], run: RunInfo | None,
                 runtime: Runtime | None = None, *, uncaptured_pmaps: int = 0,
                 ledger: DonationLedger | None = None,
                 sampler: RunSampler | None = None,
                 target: TargetInfo | None = None) -> Report:
    """The report of captured ``entries``; ``runtime`` is ``session.runtime()``,
    ``uncaptured_pmaps`` is ``session.uncaptured_pmaps``, ``ledger`` the
    session's donations (hazards, and the donation behind a deleted array),
    ``sampler`` its live arrays before calls (for the run's device memory),
    ``target`` the accelerator the functions were compiled for (``--target``)."""
    entries = list(entries)
    recompiles = explain_recompiles(entries)
    functions = tuple(dataclasses.replace(function_report(e), recompile=recompiles.get(id(e)))
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
                      f"({type(e).__name__}: {e}); each function's figures are complete",)
    hazards: tuple[DonationHazard, ...] = ()
    deleted = None
    if ledger is not None:
        # the ledger records the caller line as a path; the report shows it as the user knows it
        hazards = tuple(dataclasses.replace(h, line=_line(h.line)) for h in ledger.hazards)
        deleted = _deleted_read(ledger)
    return Report(memscope_version=__version__, environment=environment(), run=run,
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
                     call_site=fn.call_site)


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


def explain_recompiles(entries: Sequence[Entry]) -> dict[int, Recompile]:
    """Per entry (by ``id``) that is not its function's first signature: why it
    compiled again, against the nearest earlier signature."""
    by_function: dict[tuple[str, str | None], list[Entry]] = {}
    for e in entries:
        by_function.setdefault((e.name, e.source), []).append(e)
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
