"""One captured entry's report: its buffers classified, the advice measured
beside them, its donation variants, what is live at its peak, and the
post-mortem of a call that ran out of memory (:class:`~memscope.report.FunctionReport`).

This stage sits above the analysis it calls (:mod:`memscope.analysis`) and the
capture it reads (:mod:`memscope.capturing.entry`); the records it fills are
:mod:`memscope.report`'s, which import none of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from memscope import _compat
from memscope.analysis import advice, observed, oom
from memscope.analysis.fates import closed_over
from memscope.analysis.live import memory_view
from memscope.capturing.entry import Entry
from memscope.compiled.buffers import breakdown
from memscope.compiled.read import CompiledFacts
from memscope.errors import first_line
from memscope.program.sites import display_path
from memscope.report import (
    Advice,
    Forecast,
    FunctionReport,
    InputBuffer,
    LiveAtPeak,
    Memory,
    MemoryTimeline,
    OutOfMemory,
    OutputBuffer,
    Variant,
    XlaBuffer,
)
from memscope.report.function import advice_verdict
from memscope.variants.donation_variants import VariantFacts


def function_report(entry: Entry, forecast: Forecast | None = None) -> FunctionReport:
    """Classify one entry's buffers and freeze it into a :class:`FunctionReport`;
    ``forecast`` is what batch would fit a call of it that ran out of memory
    (:func:`memscope.variants.fit.forecast_failures`)."""
    inputs: tuple[InputBuffer, ...] = ()
    outputs: tuple[OutputBuffer, ...] = ()
    findings: tuple[str, ...] = ()
    refs: tuple[InputBuffer, ...] = ()
    if entry.facts is not None and entry.fates is not None:
        # (classified once, when the capture read the program)
        inputs, outputs = entry.fates.passed_again(entry.passed_again), entry.fates.outputs
        refs = closed_over(entry.facts.program)
        inputs = advice.annotate(inputs, outputs,
                                 same_size_donors=_compat.SAME_SIZE_DONORS)
        if entry.observation is not None:
            inputs, findings = observed.check_buffers(inputs, outputs, entry.observation,
                                               entry.observation_again)
            refs, closed_findings = observed.check_closed(refs, entry.observation)
            findings += closed_findings
    memory = entry.facts.memory if entry.facts is not None else None
    variants = tuple(_variant(v) for v in entry.variants)
    timeline, live, timeline_note = _memory_view(entry, inputs, outputs, memory)
    return FunctionReport(
        name=entry.name, source=entry.source, calls=entry.calls, signature=entry.signature,
        memory=memory, memory_here=entry.memory_here, memory_limit=entry.memory_limit,
        inputs=inputs, outputs=outputs,
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
        out_of_memory=post_mortem(entry, forecast), not_measured=entry.not_measured,
        not_observed=entry.not_observed)


def _memory_view(entry: Entry, inputs: Sequence[InputBuffer],
                 outputs: Sequence[OutputBuffer], memory: Memory | None
                 ) -> tuple[MemoryTimeline | None, LiveAtPeak | None, str | None]:
    """The entry's memory timeline and what is live at its peak; else why not."""
    if entry.facts is None:
        return None, None, entry.error
    return _facts_view(entry.facts, (*inputs, *closed_over(entry.facts.program)), outputs,
                       memory)


def _facts_view(facts: CompiledFacts, inputs: Sequence[InputBuffer],
                outputs: Sequence[OutputBuffer], memory: Memory | None
                ) -> tuple[MemoryTimeline | None, LiveAtPeak | None, str | None]:
    if facts.liveness is None or facts.buffers is None:
        return None, None, facts.liveness_error or facts.buffers_error
    timeline, live = memory_view(facts.liveness, facts.buffers, memory, display_path,
                                 inputs, outputs, facts.program.result_outputs,
                                 facts.program.role_hints())
    return timeline, live, None


def post_mortem(entry: Entry, forecast: Forecast | None = None) -> OutOfMemory | None:
    """What the entry's out-of-memory failure showed, with ``forecast``; ``None``
    when it had none."""
    if entry.failure is None:
        return None
    said = oom.parse(entry.failure)
    in_use, limit = entry.failure_memory or (None, None)
    requested = said.requested_bytes if said else None
    if said is not None and requested is None and said.requested_text is not None:
        requested = oom.resolve_rounded(said.requested_text, _allocation_sizes(entry))
    return OutOfMemory(
        error=said.headline if said is not None else first_line(entry.failure),
        failed_in="compile" if entry.failed_in == "compile" else "call",
        requested_bytes=requested,
        requested_text=said.requested_text if said else None,
        device_limit_bytes=limit, bytes_in_use=in_use,
        xla_used_bytes=said.used_bytes if said else None,
        xla_capacity_bytes=said.capacity_bytes if said else None,
        listed_buffers=said.buffers if said else (),
        live_arrays=entry.failure_live, forecast=forecast,
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
    if v.facts is None or v.fates is None:
        return Variant(name=v.name, setting=v.setting, memory=None, error=v.error,
                       same_as=v.same_as)
    inputs, outputs = v.fates
    timeline, live, _ = _facts_view(v.facts, inputs, outputs, v.facts.memory)
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
    before = memory.peak_bytes if memory else None
    after = fix.facts.memory.peak_bytes if fix.facts else None
    # A setting only where the compile measured it to help; else what it measured.
    reason = advice_verdict(fix.setting, before, after, fix.dropped, fix.error)
    return Advice(setting=fix.setting if reason is None else None,
                  add=fix.added if reason is None else (),
                  candidate_bytes=sum(b.bytes for b in candidates),
                  peak_before=before, peak_after=after,
                  caveat=f"{fix.note} {advice.CAVEAT}" if fix.note else advice.CAVEAT,
                  drop=fix.dropped, tried=fix.setting, reason=reason)


