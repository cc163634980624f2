"""Device memory over the run, and its high-water mark: pure functions over samples.

:mod:`memscope.capturing.residency` samples the live arrays just before some
top-level calls (:class:`RawSample`) and logs every call (:class:`CallLog`).
Here each sample becomes a :class:`~memscope.report.RunPoint`: per device, what
was alive outside the call's arguments (arguments the compiled program pruned
count as alive outside it: the program never reads them) plus the call's peak
by memscope's rule. A call between samples is estimated from the sample before
it: everything alive then, less this function's argument bytes, plus its peak.
The largest point is the :class:`~memscope.report.HighWater`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from memscope.report import (
    CallSpan,
    GroupKind,
    HighWater,
    InputBuffer,
    LiveBuffer,
    ResidentGroup,
    RoleBytes,
    RunMemory,
    RunPoint,
)
from memscope.report.units import format_bytes

#: Resident groups named at the high-water mark; the rest are counted.
MAX_GROUPS = 8
#: Groups kept per point (for the chart and the trace).
POINT_GROUPS = 6
#: Points kept in the report (exact ones first; the estimated largest per stretch).
MAX_POINTS = 2000
#: The call's largest buffers named at the high-water mark.
MAX_BUFFERS = 5
#: Calls kept as spans for a trace (the first and the last half of it).
MAX_SPANS = 5000
#: How the figures were obtained, and how exact they are (:attr:`RunMemory.how`).
HOW = ("live arrays sampled {sampling} ({sampled} of {calls} calls), grouped by the call "
       "that made them; at each call, what was alive outside its arguments plus the "
       "call's own peak by memscope's rule; calls between samples are estimated from the "
       "sample before them (what was alive then, less the function's argument bytes)")


#: :attr:`Holder.scope` of an entry of an interactive shell's output history
#: (IPython's ``Out[3]``): the value a cell showed, kept by the shell.
OUTPUT_HISTORY = "output history"


class Holder(NamedTuple):
    """A variable of the user's code that held arrays at a sample."""

    name: str
    path: str
    #: the function's name, ``module``, or :data:`OUTPUT_HISTORY`
    scope: str
    #: the function's first line (0 for a module's global)
    first_line: int
    #: the frame's line at the sample (0: a module's global seen from a function)
    line: int
    #: for an output history's entry: the shell's other names for it (``_3``, ``_``)
    aliases: tuple[str, ...] = ()


@dataclass
class RawGroup:
    """Arrays alive at a sample, outside the next call's arguments, of one producer
    (index into :attr:`CallLog.entries` and the result's top-level element;
    ``None``: made outside the captured calls) and one holder."""

    producer: tuple[int, str] | None
    holder: Holder | None
    arrays: int
    #: per device: (device, bytes), device memory kinds only
    bytes: tuple[tuple[str, int], ...]
    host_bytes: int = 0


@dataclass
class RawSample:
    """``jax.live_arrays()`` just before top-level call ``call``."""

    call: int
    seconds: float
    #: live arrays, and their bytes (each array's whole size, as ``nbytes``)
    count: int
    total_bytes: int
    line: str | None
    #: the call's own argument arrays: (flat leaf position, bytes per device)
    arguments: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]
    groups: tuple[RawGroup, ...]
    #: index into :attr:`CallLog.entries` of the call that followed
    entry: int | None = None
    failed: bool = False
    #: the sample taken once the program ended (no call follows)
    end: bool = False
    #: some calls' outputs since the previous sample were not recorded: arrays
    #: with no producer may have been made by one of them
    unattributed: bool = False


@dataclass
class CallLog:
    """Every top-level call (up to a bound): when it began and ended (seconds since
    the capture began; the call returns once dispatched, the device may still
    run it) and its entry (index into ``entries``)."""

    starts: array[float]
    ends: array[float]
    entry: array[int]
    entries: list[Any]
    #: the call's number (top-level calls, counted from 1)
    calls: array[int]


@dataclass(frozen=True)
class CallFacts:
    """What the run's view needs of one captured function."""

    name: str
    signature: str
    peak_bytes: int | None
    peak_rule: str | None
    argument_bytes: int | None
    #: flat leaf positions the compiled program pruned
    pruned: frozenset[int]
    buffers: tuple[LiveBuffer, ...]
    call_site: str | None
    #: the call's live-at-peak bytes by role
    roles: tuple[RoleBytes, ...] = ()


def run_memory(samples: Sequence[RawSample], log: CallLog, facts: Sequence[CallFacts | None],
               *, calls: int, sample_seconds: float, sampling: str,
               holder_text: Callable[[Holder], tuple[str, str | None]],
               allocator_peak: int | None = None,
               functions: Sequence[int | None] = (),
               default_device: str | None = None) -> RunMemory | None:
    """The run's :class:`RunMemory` from its samples; ``facts[i]`` describes
    ``log.entries[i]`` (``None``: unread) and ``functions[i]`` is its index in
    the report's functions. ``sampling`` says when samples were taken;
    ``holder_text`` names a holder and the line that last assigned it;
    ``default_device`` is where a call with no device array among its
    arguments runs (a NumPy array, a Python number), the only device a run
    names when no sample saw an array on any."""
    exact = [s for s in samples if not s.end and s.entry is not None]
    if not exact:
        return None
    devices = sorted({d for s in samples for g in s.groups for d, _ in g.bytes}
                     | {d for s in exact for _, each in s.arguments for d, _ in each})
    if not devices and default_device is not None:
        devices = [default_device]
    if not devices:
        return None  # no device to place anything on: no view of the run
    found = [(_point(s, facts[s.entry], facts, devices, holder_text), s.entry, s)
             for s in exact if s.entry is not None]
    found += _estimates(samples, log, facts, devices)
    best, entry, sample = max(found, key=lambda t: (t[0].total_bytes, t[0].exact))
    high = _high_water(best, facts[entry], sample, facts, holder_text, allocator_peak)
    ordered = sorted((p for p, _, _ in found), key=lambda p: (p.call, not p.exact))
    if len(ordered) > MAX_POINTS:
        keep = [p for p in ordered if p.exact or p is best]
        rest = [p for p in ordered if not (p.exact or p is best)]
        room = max(MAX_POINTS - len(keep), 0)
        step = max(1, -(-len(rest) // max(room, 1)))
        ordered = sorted(keep + rest[::step][:room], key=lambda p: (p.call, not p.exact))
    return RunMemory(devices=tuple(devices), points=tuple(ordered), high_water=high,
                     calls=calls, sampled=len(exact),
                     how=HOW.format(sampling=sampling, sampled=len(exact), calls=calls),
                     sample_seconds=sample_seconds,
                     host_bytes=sum(g.host_bytes for g in sample.groups),
                     spans=spans(log, functions))


def spans(log: CallLog, functions: Sequence[int | None]) -> tuple[CallSpan, ...]:
    """The logged calls as spans, at most :data:`MAX_SPANS` (the first and last half)."""
    n = len(log.calls)
    half = MAX_SPANS // 2
    chosen = range(n) if n <= MAX_SPANS else [*range(half), *range(n - half, n)]
    return tuple(CallSpan(call=log.calls[i],
                          function=functions[log.entry[i]] if log.entry[i] < len(functions)
                          else None, start=log.starts[i], end=log.ends[i]) for i in chosen)


def pruned_positions(inputs: Sequence[InputBuffer]) -> frozenset[int]:
    """The flat leaf positions of a function's inputs that its program prunes."""
    return frozenset(i for i, x in enumerate(inputs) if x.fate == "pruned")


def resident(sample: RawSample, pruned: frozenset[int]) -> dict[str, int]:
    """Bytes per device alive before ``sample``'s call outside its arguments (a
    pruned argument counts: the program never reads it, it stays where it is)."""
    return _by_device([*(g.bytes for g in sample.groups),
                       *(each for position, each in sample.arguments if position in pruned)])


def _alive(sample: RawSample) -> dict[str, int]:
    """Bytes per device of everything alive at ``sample``, its call's arguments too."""
    return _by_device([*(g.bytes for g in sample.groups),
                       *(each for _, each in sample.arguments)])


def _by_device(parts: Iterable[tuple[tuple[str, int], ...]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for d, b in part:
            out[d] = out.get(d, 0) + b
    return out


def _call_devices(sample: RawSample, devices: Sequence[str]) -> list[str]:
    """The devices the call runs on: those its arguments are on (none: the first)."""
    used = sorted({d for _, each in sample.arguments for d, _ in each})
    return used or list(devices[:1])


def _point(sample: RawSample, fn: CallFacts | None, facts: Sequence[CallFacts | None],
           devices: Sequence[str], holder_text: Callable[[Holder], tuple[str, str | None]]) -> RunPoint:
    held = resident(sample, fn.pruned if fn is not None else frozenset())
    peak = fn.peak_bytes if fn is not None else None
    on = _call_devices(sample, devices)
    device = max(devices or on, key=lambda d: held.get(d, 0) + (peak or 0 if d in on else 0))
    groups = _groups(sample, device, fn, facts, holder_text)
    return RunPoint(call=sample.call, function=fn.name if fn is not None else "?",
                    seconds=sample.seconds, device=device, resident_bytes=held.get(device, 0),
                    peak_bytes=peak if device in on else None, exact=True,
                    groups=tuple((g.label + (f" ({g.held_by})" if g.held_by else ""), g.bytes)
                                 for g in groups[:POINT_GROUPS]),
                    failed=sample.failed, per_device=tuple(held.get(d, 0) for d in devices))


def _estimates(samples: Sequence[RawSample], log: CallLog, facts: Sequence[CallFacts | None],
               devices: Sequence[str]) -> list[tuple[RunPoint, int, RawSample]]:
    """For each stretch of calls between two samples: per function called in it
    (other than at the sample itself), its largest estimated point."""
    by_call = sorted((s for s in samples if not s.end), key=lambda s: s.call)
    out: list[tuple[RunPoint, int, RawSample]] = []
    k = 0
    seen: set[tuple[int, int]] = set()
    alive: dict[int, dict[str, int]] = {}  # per sample, computed once
    for i, call in enumerate(log.calls):
        while k + 1 < len(by_call) and by_call[k + 1].call <= call:
            k += 1
        if not by_call or by_call[k].call >= call:
            continue
        sample, entry = by_call[k], log.entry[i]
        fn = facts[entry]
        if fn is None or fn.peak_bytes is None or (k, entry) in seen:
            continue
        seen.add((k, entry))
        if k not in alive:
            alive[k] = _alive(sample)
        held = {d: max(alive[k].get(d, 0) - (fn.argument_bytes or 0), 0) for d in devices}
        device = max(devices, key=lambda d: alive[k].get(d, 0)) if devices else "?"
        out.append((RunPoint(call=call, function=fn.name, seconds=log.starts[i], device=device,
                             resident_bytes=held.get(device, 0), peak_bytes=fn.peak_bytes,
                             exact=False, from_call=sample.call,
                             per_device=tuple(held.values())), entry, sample))
    return out


def _groups(sample: RawSample, device: str, fn: CallFacts | None,
            facts: Sequence[CallFacts | None], holder_text: Callable[[Holder], tuple[str, str | None]]) -> list[ResidentGroup]:
    """The sample's groups on ``device``, largest first; pruned arguments as one."""
    groups = []
    for g in sample.groups:
        b = dict(g.bytes).get(device, 0)
        if not b:
            continue
        held_by, line = holder_text(g.holder) if g.holder is not None else (None, None)
        kind: GroupKind = "output" if g.producer is not None else "outside"
        if g.producer is not None:
            maker = facts[g.producer[0]]
            label = f"{maker.name if maker else '?'} {g.producer[1]}"
        elif sample.unattributed:
            label = "made outside jit, or by a call whose outputs were not recorded"
        else:
            label = "made outside jit"
        groups.append(ResidentGroup(label=label, kind=kind, arrays=g.arrays, bytes=b,
                                    held_by=held_by, line=line))
    pruned = [each for position, each in sample.arguments
              if fn is not None and position in fn.pruned]
    b = sum(dict(each).get(device, 0) for each in pruned)
    if fn is not None and b:
        groups.append(ResidentGroup(label=f"{fn.name} arguments it prunes (never read)",
                                    kind="outside", arrays=len(pruned), bytes=b))
    return sorted(groups, key=lambda g: (-g.bytes, g.label))


def _high_water(best: RunPoint, fn: CallFacts | None, sample: RawSample,
                facts: Sequence[CallFacts | None], holder_text: Callable[[Holder], tuple[str, str | None]],
                allocator_peak: int | None) -> HighWater:
    """The largest point, with the groups of its sample and the call's largest
    buffers. For an estimate, the groups of the sample it was carried from,
    where they fit in what it leaves outside the call's arguments; where they
    do not, some of them are the call's own arguments, which a sample before
    another call cannot tell apart, and none is named."""
    groups = _groups(sample, best.device, fn if best.exact else None, facts, holder_text)
    if not best.exact and sum(g.bytes for g in groups) > best.resident_bytes:
        groups = []
    shown = groups[:MAX_GROUPS]
    note = None
    if allocator_peak is not None:
        diff = allocator_peak - best.total_bytes
        note = (f"the allocator's own peak over the run (memory_stats peak_bytes_in_use) is "
                f"{format_bytes(allocator_peak)}, {format_bytes(abs(diff))} "
                f"{'above' if diff >= 0 else 'below'} this: "
                + ("what the allocator held beyond live buffers (fragmentation, "
                   "compiler workspace such as autotuning, memory freed late)"
                   if diff >= 0 else
                   "memscope's rule counts the whole temporary block, which the "
                   "allocator never had all live at once"))
    return HighWater(
        call=best.call, function=best.function,
        signature=fn.signature if fn is not None else "?",
        line=(sample.line if best.exact else None) or (fn.call_site if fn is not None else None),
        device=best.device, bytes=best.total_bytes, resident_bytes=best.resident_bytes,
        call_peak_bytes=best.peak_bytes,
        peak_rule=fn.peak_rule if fn is not None else None, exact=best.exact,
        from_call=best.from_call, groups=tuple(shown), more_groups=len(groups) - len(shown),
        more_group_bytes=sum(g.bytes for g in groups[MAX_GROUPS:]),
        buffers=fn.buffers[:MAX_BUFFERS] if fn is not None else (),
        call_roles=fn.roles if fn is not None else (),
        allocator_peak_bytes=allocator_peak, allocator_note=note)
