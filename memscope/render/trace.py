"""The run as a Chrome / Perfetto trace (JSON, the Trace Event Format).

Opens in the Perfetto UI and in ``chrome://tracing``. One process, the program:

* a thread ``jitted calls`` with a slice per top-level call (its function,
  signature, peak and that peak's bytes by role, ``peak_by_role``, in the
  slice's arguments; a call returns once dispatched, so the slice is the
  dispatch, not the device's run of it);
* a counter track per device, ``device memory <device>``, with ``resident``
  (alive outside the call's arguments just before it) and ``call peak`` (the
  call's own peak on top) at each point of the report, estimated points too;
* a counter track ``resident groups`` with the largest groups at each sampled
  call (bytes on the busiest device);
* an instant event at the high-water mark, its parts in its arguments (the
  call's own peak by role in ``call roles``);
* a counter track per function, ``peak by role: <function>``, with the bytes
  of each role live at its peak (docs/roles.md) over its first call: a series
  per role, stacked in ``chrome://tracing``, a track each in Perfetto.

Roles are named as in the JSON report (``optimizer``, ``unknown``: cannot be
told), their bytes in the report's order, largest first.

Timestamps are microseconds since the capture began. Every value comes from the
report; nothing is computed here beyond unit conversion.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

from memscope.report import Report, RoleBytes, RunMemory
from memscope.views import run_text

PID = 1
CALLS_TID = 1


def trace_events(report: Report) -> dict[str, Any]:
    """The trace of ``report``'s run as a JSON object (``traceEvents``)."""
    run = report.runtime.run_memory if report.runtime is not None else None
    program = report.run.command if report.run is not None else "memscope capture"
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "args": {"name": f"memscope: {program}"}},
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": CALLS_TID,
         "args": {"name": "jitted calls"}},
    ]
    if run is None:
        return {"traceEvents": events, "displayTimeUnit": "ms"}
    functions = report.functions
    for span in run.spans:
        fn = functions[span.function] if span.function is not None else None
        args: dict[str, Any] = {"call": span.call}
        if fn is not None:
            args["signature"] = fn.signature
            args["peak_bytes"] = fn.memory.peak_bytes if fn.memory is not None else None
            if fn.live_at_peak is not None and fn.live_at_peak.roles:
                args["peak_by_role"] = _roles(fn.live_at_peak.roles)
        events.append({"name": fn.name if fn is not None else "?", "ph": "X",
                       "pid": PID, "tid": CALLS_TID, "ts": _us(span.start),
                       "dur": max(_us(span.end) - _us(span.start), 0), "args": args})
    events.extend(_role_counters(report, run))
    ends = {span.call: span.end for span in run.spans}
    labels: dict[str, int] = {}
    for point in run.points:
        for device, resident in zip(run.devices, point.per_device, strict=False):
            # On the call's device its peak; elsewhere none (0); unknown: not drawn.
            peak = point.peak_bytes if device == point.device else 0
            counters = {"resident": resident} | ({} if peak is None else {"call peak": peak})
            events.append({"name": f"device memory {device}", "ph": "C", "pid": PID,
                           "ts": _us(point.seconds), "args": counters})
            if peak and point.call in ends:  # the call's own peak ends with it
                events.append({"name": f"device memory {device}", "ph": "C", "pid": PID,
                               "ts": max(_us(ends[point.call]), _us(point.seconds)),
                               "args": {"resident": resident, "call peak": 0}})
        if point.exact:
            # a group absent now reads 0 (a counter keeps its last value otherwise)
            labels = dict.fromkeys(labels, 0) | dict(point.groups)
            events.append({"name": "resident groups", "ph": "C", "pid": PID,
                           "ts": _us(point.seconds), "args": labels})
    events.extend(_high_water_mark(run))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"memscope": report.memscope_version, "how": run.how}}


def render_trace(report: Report, file: IO[str]) -> None:
    """Write the trace of ``report``'s run to ``file``."""
    json.dump(trace_events(report), file)


def _role_counters(report: Report, run: RunMemory) -> list[dict[str, Any]]:
    """Per function with roles, its peak by role over its first call: a series per
    role, each back to 0 when the call returns (a counter keeps its last value)."""
    events: list[dict[str, Any]] = []
    seen: set[int] = set()
    for span in run.spans:
        if span.function is None or span.function in seen:
            continue
        seen.add(span.function)
        fn = report.functions[span.function]
        if fn.live_at_peak is None or not fn.live_at_peak.roles:
            continue
        name = f"peak by role: {fn.name}"
        roles = _roles(fn.live_at_peak.roles)
        events.append({"name": name, "ph": "C", "pid": PID, "ts": _us(span.start),
                       "args": roles})
        events.append({"name": name, "ph": "C", "pid": PID,
                       "ts": max(_us(span.end), _us(span.start) + 1),
                       "args": dict.fromkeys(roles, 0)})
    return events


def _high_water_mark(run: RunMemory) -> list[dict[str, Any]]:
    """The instant event at the run's high-water mark, where it has one."""
    high = run.high_water
    at = None if high is None else next(
        (p.seconds for p in run.points if p.call == high.call), None)
    if high is None or at is None:
        return []
    args: dict[str, Any] = {"summary": run_text.high_water_headline(high), "bytes": high.bytes,
            "resident": high.resident_bytes, "call peak": high.call_peak_bytes,
            "groups": [run_text.group_text(g) for g in high.groups]}
    if high.call_roles:
        args["call roles"] = _roles(high.call_roles)
    return [{"name": "high-water mark", "ph": "i", "s": "g", "pid": PID, "tid": CALLS_TID,
             "ts": _us(at), "args": args}]


def _roles(roles: Iterable[RoleBytes]) -> dict[str, int]:
    """``{role: bytes}``, largest first, as the report lists them."""
    return {r.role: r.bytes for r in roles}


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)
