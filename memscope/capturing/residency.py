"""What is alive on the devices just before top-level calls, and what made it.

The run's device memory at a call is what the program holds outside the call's
arguments plus the call's own peak (its arguments once, its temporaries, its
outputs not aliased). The first part is only known by asking JAX:
:class:`RunSampler` counts ``jax.live_arrays()`` just *before* a top-level call
(after it, the arguments the caller is about to drop would still count), per
device, grouped by what made each array: a captured call's result (the
top-level element, ``train_step result[0]``) or something outside the captured
calls, and by the user's variable that holds it.

When: before the first call of each signature (where a run's high-water mark
usually is: the first evaluation step, a new batch size), before calls 1, 2, 4,
8, ..., and otherwise once the time since the last sample is
:data:`SAMPLE_SHARE`'s inverse times what sampling has taken (so samples take
about 1% of the run). Before the first call of a signature, which compiles, a
sample is taken while those samples stay within :data:`FIRST_CALL_SHARE` of the
compile time seen so far.
Between samples, every call records only its number, its start and end time,
its entry, and the ids of its output leaves (up to :data:`MAX_PENDING` calls),
so the next sample can say which call made what. Nothing keeps an array alive: ids, counts,
shapes and shardings only. ``benchmarks/bench_live.py`` measures the cost.
"""

from __future__ import annotations

import collections
import itertools
import math
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np

from memscope import _compat
from memscope.analysis.growth import GroupKey, GroupSample, growing
from memscope.analysis.run_memory import CallLog, Holder, RawGroup, RawSample
from memscope.capturing.between import caller_line
from memscope.capturing.holders import OutputHistory, main_globals, user_holders
from memscope.capturing.observe import is_address_view
from memscope.compiled.read import describe_sharding
from memscope.report import LiveGrowth, LiveSample, LiveTimeline, is_host_kind

#: Largest share of the run's time the samples may take (before first calls of
#: signatures: twice this, or :data:`FIRST_CALL_SHARE`).
SAMPLE_SHARE = 0.01
#: Before the first call of a signature (JAX traces, lowers and compiles it
#: there) a sample is taken while such samples have taken at most this share of
#: the compile time seen so far (plus a tenth of a second): under load the
#: compiles slow down as much as the samples, so the share holds.
FIRST_CALL_SHARE = 0.1
#: Samples kept; past it every other one is dropped (the first, the first call
#: of each signature and the latest stay), so they cover the whole run.
MAX_SAMPLES = 512
#: Top-level calls logged (number, start, entry); later ones are counted only.
MAX_CALLS_LOGGED = 200_000
#: Calls whose output ids wait for the next sample; past it the oldest go (their
#: arrays are then told by the variable that holds them, where one does).
MAX_PENDING = 4096
#: Variables named as holding one growth group's arrays, most first.
MAX_HOLDERS = 3
#: How the sampling is described in the report.
SAMPLING = (f"just before the first call of each signature, before top-level calls "
            f"1, 2, 4, 8, ..., and otherwise at most {SAMPLE_SHARE:.0%} of the run's "
            "time; once at the end")


@dataclass
class Pending:
    """A top-level call in flight: its number, when it began, its sample (if any)."""

    call: int
    start: float
    sample: RawSample | None = None


@dataclass
class _Attribution:
    """Output ids of calls since the last sample, oldest first."""

    calls: collections.deque[tuple[Any, tuple[int, ...]]] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_PENDING))
    #: some call's outputs were not kept: an array made by a call may then be
    #: unattributed, and is not said to be made outside jit
    dropped: bool = False


class RunSampler:
    """Live arrays before top-level calls (see the module's docstring). The line
    that made a call and the variables that hold arrays are the user's code's
    (:func:`memscope.program.sites.is_users`)."""

    def __init__(self) -> None:
        self.samples: list[RawSample] = []
        self.groups: list[GroupSample] = []
        self.seconds = 0.0
        self.origin = time.perf_counter()
        self.log = CallLog(array("d"), array("d"), array("i"), [], array("q"))
        self.unlogged = 0
        self._due = 0.0
        #: seconds of samples before first calls, and of JAX's compiles they preceded
        self._first_seconds = 0.0
        self.compile_seconds = 0.0
        #: sample before every call (``memscope fit``'s short run)
        self.every_call = False
        #: an interactive shell's output history, where the program runs in one
        self.history: OutputHistory | None = None
        self._outputs = _Attribution()
        #: id of a live array -> (entry, flat output index, shape, dtype) of the call
        #: that made it, from earlier samples
        self._made_by: dict[int, tuple[Any, int, tuple[int, ...], Any]] = {}
        #: per growth group: (index in ``log.entries``, output index) of its makers
        self._producers: dict[GroupKey, collections.Counter[tuple[int, int]]] = {}
        #: functions (indices in ``log.entries``) called since the last sample
        self._called: set[int] = set()
        #: some function has been called more than once (the program's loop began)
        self._looping = False
        self._ran: set[int] = set()
        #: id of an entry -> its index in ``log.entries`` (entries are not hashable)
        self._entry_index: dict[int, int] = {}
        self._per_device: dict[Any, tuple[tuple[tuple[str, int], ...], bool]] = {}
        #: where a call with no device array among its arguments runs (JAX's
        #: default device), named as samples name devices; set at the first sample
        self.default_device: str | None = None

    # -- on the program's path ----------------------------------------------------

    def before_call(self, call: int, leaves: Sequence[Any], new_signature: bool) -> Pending:
        """Sample now if this call is due (see the module); always note its start."""
        start = time.perf_counter()
        pending = Pending(call, start)
        elapsed = start - self.origin
        first = new_signature and (self._first_seconds
                                   <= FIRST_CALL_SHARE * (self.compile_seconds + 0.1))
        due = (self.every_call or first or not call & (call - 1) or start >= self._due
               or (new_signature and self.seconds <= 2 * SAMPLE_SHARE * elapsed))
        if due:
            try:
                pending.sample = self._sample(call, start, leaves)
            except Exception:  # never break the program for a sample
                pending.sample = None
            took = time.perf_counter() - start
            self.seconds += took
            if new_signature:
                self._first_seconds += took
            self._due = start + took / SAMPLE_SHARE
        return pending

    def after_call(self, pending: Pending, entry: Any, out: Any, *, failed: bool = False
                   ) -> None:
        """Log the call; keep its output ids for the next sample."""
        now = time.perf_counter()
        index = self._index(entry)
        self._looping = self._looping or index in self._ran
        self._ran.add(index)
        self._called.add(index)
        if len(self.log.starts) < MAX_CALLS_LOGGED:
            self.log.starts.append(pending.start - self.origin)
            self.log.ends.append(now - self.origin)
            self.log.entry.append(index)
            self.log.calls.append(pending.call)
        else:
            self.unlogged += 1
        if pending.sample is not None:
            pending.sample.entry = index
            pending.sample.failed = failed
        if failed:
            return
        try:
            ids = tuple(map(id, jax.tree_util.tree_leaves(out)))
        except Exception:  # an output that does not flatten: told by its holders
            self._outputs.dropped = True
            return
        if len(self._outputs.calls) == MAX_PENDING:
            self._outputs.dropped = True
        self._outputs.calls.append((entry, ids))
        self.seconds += time.perf_counter() - now

    def at_end(self, call: int) -> None:
        """The last sample, when the program has ended (no call follows)."""
        start = time.perf_counter()
        self._sample(call + 1, start, (), end=True)
        self.seconds += time.perf_counter() - start

    # -- a sample -----------------------------------------------------------------

    def _sample(self, call: int, start: float, leaves: Sequence[Any], *, end: bool = False
                ) -> RawSample:
        unsure = self._outputs.dropped
        made = self._resolve_outputs()
        arguments = {id(x): i for i, x in enumerate(leaves) if isinstance(x, jax.Array)}
        holders: dict[int, Holder] | None = None
        counts: dict[tuple[Any, ...], list[Any]] = {}
        groups: dict[tuple[Any, ...], list[Any]] = {}
        kept: dict[int, tuple[Any, int, tuple[int, ...], Any]] = {}
        args: list[tuple[int, tuple[tuple[str, int], ...]]] = []
        made_by: list[tuple[tuple[Any, ...], int | None, int | None, int]] = []
        unnamed: list[tuple[int, tuple[Any, ...]]] = []
        if self.default_device is None:
            self.default_device = _default_device()
        arrays = jax.live_arrays()
        try:
            for a in arrays:
                if is_address_view(a):
                    continue  # the same buffer as an array counted already
                aval, sharding = a.aval, a.sharding
                key = (aval.shape, aval.dtype, sharding)
                count = counts.get(key)
                if count is None:
                    counts[key] = count = [0, a.nbytes, sharding]
                count[0] += 1
                origin = made.get(id(a)) or self._made_by.get(id(a))
                if origin is not None and origin[2:] != (aval.shape, aval.dtype):
                    origin = None  # the id of an array since freed
                if origin is not None:
                    kept[id(a)] = origin
                    made_by.append((key, self._index(origin[0]), origin[1], id(a)))
                else:
                    made_by.append((key, None, None, id(a)))
                position = arguments.pop(id(a), None)
                if position is not None:
                    args.append((position, self._placement(key, count[1])[0]))
                    continue
                producer = ((self._index(origin[0]), _top(origin[0], origin[1]))
                            if origin is not None else None)
                unnamed.append((id(a), (producer, key)))
            count_all = len(arrays)
            if unnamed:
                # Once the program has ended its frames are gone: a script's
                # variables are then its __main__ module's globals.
                wanted = {i for i, _ in unnamed}
                holders = (user_holders(wanted, self.history, frame=None,
                                        namespace=main_globals()) if end
                           else user_holders(wanted, self.history))
            for array_id, (producer, key) in unnamed:
                holder = holders.get(array_id) if holders else None
                group = groups.get((producer, holder, key))
                if group is None:
                    groups[(producer, holder, key)] = group = [0]
                group[0] += 1
        finally:
            del arrays  # not one of the program's arrays stays alive through memscope
        self._made_by = kept
        sample = RawSample(call=call, seconds=start - self.origin, count=count_all,
                           total_bytes=sum(n * each for n, each, _ in counts.values()),
                           line=caller_line() if leaves else None,
                           arguments=tuple(args), groups=self._raw_groups(groups, counts),
                           unattributed=unsure, end=end)
        self._keep(sample, self._growth_sample(call, counts, made_by, holders or {}, end))
        return sample

    def _resolve_outputs(self) -> dict[int, tuple[Any, int, tuple[int, ...], Any]]:
        """The output ids logged since the last sample, newest first wins."""
        made: dict[int, tuple[Any, int, tuple[int, ...], Any]] = {}
        calls, self._outputs = self._outputs.calls, _Attribution()
        for entry, ids in reversed(calls):
            shapes = _output_shapes(entry)
            for i, array_id in enumerate(ids):
                if array_id not in made and i < len(shapes):
                    made[array_id] = (entry, i, *shapes[i])
        return made

    def _raw_groups(self, groups: dict[tuple[Any, ...], list[Any]],
                    counts: dict[tuple[Any, ...], list[Any]]) -> tuple[RawGroup, ...]:
        merged: dict[tuple[Any, Any], RawGroup] = {}
        for (label, holder, key), (n,) in groups.items():
            each, host = self._placement(key, counts[key][1])
            old = merged.get((label, holder))
            device = dict(old.bytes) if old is not None else {}
            host_bytes = old.host_bytes if old is not None else 0
            for name, b in each:
                if host:
                    host_bytes += n * b
                else:
                    device[name] = device.get(name, 0) + n * b
            merged[(label, holder)] = RawGroup(
                producer=label, holder=holder, arrays=n + (old.arrays if old else 0),
                bytes=tuple(sorted(device.items())), host_bytes=host_bytes)
        return tuple(merged.values())

    def _index(self, entry: Any) -> int:
        """``entry``'s index in ``log.entries`` (added at its first call)."""
        index = self._entry_index.get(id(entry))
        if index is None:
            index = self._entry_index[id(entry)] = len(self.log.entries)
            self.log.entries.append(entry)
        return index

    def _placement(self, key: tuple[Any, ...], nbytes: int
                   ) -> tuple[tuple[tuple[str, int], ...], bool]:
        """Bytes of one array of ``key`` (shape, dtype, sharding) on each device,
        and whether its memory kind is a host one."""
        known = self._per_device.get(key)
        if known is None:
            shape, dtype, sharding = key
            known = self._per_device[key] = (
                per_device_bytes(shape, dtype, sharding, nbytes),
                is_host_kind(getattr(sharding, "memory_kind", None)))
        return known

    def _growth_sample(self, call: int, counts: dict[tuple[Any, ...], list[Any]],
                       made_by: list[tuple[tuple[Any, ...], int | None, int | None, int]],
                       holders: dict[int, Holder], end: bool) -> GroupSample:
        """The sample's growth groups: per (shape, dtype, sharding text, the
        function whose call made them), the count and bytes per array; which
        function and output made them, the variables that hold them, the
        functions called since the last sample."""
        named: dict[tuple[Any, ...], tuple[tuple[int, ...], str, str | None]] = {}
        groups: dict[GroupKey, list[int]] = {}
        held: dict[GroupKey, collections.Counter[str]] = {}
        for key, maker, output, array_id in made_by:
            base = named.get(key)
            if base is None:
                base = named[key] = (tuple(key[0]), str(key[1]), describe_sharding(key[2]))
            group: GroupKey = (*base, maker)
            count = groups.get(group)
            if count is None:
                groups[group] = count = [0, counts[key][1]]
            count[0] += 1
            if maker is not None and output is not None:
                self._producers.setdefault(group, collections.Counter())[maker, output] += 1
            holder = holders.get(array_id)
            if holder is not None:
                held.setdefault(group, collections.Counter())[holder.name] += 1
        called, self._called = frozenset(self._called), set()
        return GroupSample(call, {k: (c, b) for k, (c, b) in groups.items()}, called,
                           holders={k: tuple(n for n, _ in names.most_common(MAX_HOLDERS))
                                    for k, names in held.items()},
                           end=end, looping=self._looping)

    def _keep(self, sample: RawSample, growth: GroupSample) -> None:
        self.samples.append(sample)
        self.groups.append(growth)
        if len(self.samples) > MAX_SAMPLES:
            # Every other one goes; the first and the latest stay. A sample kept
            # says every function called since the one kept before it.
            keep = [0, *range(2, len(self.samples) - 1, 2), len(self.samples) - 1]
            called = [frozenset().union(*(g.called for g in self.groups[a + 1:b + 1]))
                      for a, b in itertools.pairwise(keep)]
            self.samples = [self.samples[i] for i in keep]
            self.groups = [self.groups[0], *(replace(self.groups[i], called=c)
                                             for i, c in zip(keep[1:], called, strict=True))]

    # -- for the report -------------------------------------------------------------

    def timeline(self, label: Callable[[Any, int], str]) -> LiveTimeline | None:
        """The live-array counts per sample and the groups that kept growing;
        ``None`` without samples."""
        if not self.samples:
            return None
        producers = {}
        for key, counter in self._producers.items():
            owner, index = counter.most_common(1)[0][0]
            producers[key] = label(self.log.entries[owner], index)
        functions = {i: str(getattr(e, "name", "?")) for i, e in enumerate(self.log.entries)}
        grew: tuple[LiveGrowth, ...] = growing(self.groups, producers, functions)
        samples = tuple(LiveSample(s.call, self._function(s), s.count, s.total_bytes)
                        for s in self.samples)
        return LiveTimeline(samples=samples, sampling=SAMPLING, sample_seconds=self.seconds,
                            growth=grew)

    def _function(self, sample: RawSample) -> str:
        if sample.end:
            return "(end)"
        if sample.entry is None:
            return "?"
        return str(getattr(self.log.entries[sample.entry], "name", "?"))


def _default_device() -> str | None:
    """``"cpu:0"``: the device a call runs on when no argument commits it to one."""
    try:
        device = _compat.hooks.default_device()
        return f"{device.platform}:{device.id}"
    except Exception:  # no backend could start: nothing to name
        return None


def per_device_bytes(shape: tuple[int, ...], dtype: Any, sharding: Any, nbytes: int
                     ) -> tuple[tuple[str, int], ...]:
    """``(("cpu:0", bytes), ...)``: one array's bytes on each device its sharding
    places it on (a replicated array is whole on each)."""
    try:
        itemsize = np.dtype(dtype).itemsize
        out = []
        for device, index in sharding.devices_indices_map(tuple(shape)).items():
            size = math.prod(len(range(*s.indices(n))) for s, n in zip(index, shape, strict=True))
            out.append((f"{device.platform}:{device.id}", size * itemsize))
        return tuple(sorted(out))
    except Exception:  # an extended dtype (PRNG keys), or a sharding that cannot say
        devices = sorted(sharding.device_set, key=lambda d: d.id)
        share = nbytes // max(len(devices), 1)
        return tuple((f"{d.platform}:{d.id}", share) for d in devices)


def live_bytes_per_device() -> dict[str, int]:
    """Bytes of every live ``jax.Array`` on each device (``"cpu:0"``), each buffer
    once: from shapes and shardings, reading no buffer (which would leave
    per-device arrays behind) and skipping those memscope's address reads left."""
    per_device: dict[str, int] = {}
    arrays = jax.live_arrays()
    try:
        for a in arrays:
            if is_address_view(a):
                continue
            for name, nbytes in per_device_bytes(a.shape, a.dtype, a.sharding, a.nbytes):
                per_device[name] = per_device.get(name, 0) + nbytes
    finally:
        del arrays  # not one of the program's arrays stays alive through memscope
    return per_device


def _output_shapes(entry: Any) -> list[tuple[tuple[int, ...], Any]]:
    """(shape, dtype) of each flat output leaf of ``entry``'s calls."""
    shapes = getattr(entry, "output_shapes", None)
    return shapes if shapes is not None else []


def _top(entry: Any, index: int) -> str:
    """The top-level element of the result that flat output leaf ``index`` is in."""
    tops = getattr(entry, "output_tops", None)
    return tops[index] if tops is not None and index < len(tops) else "result"


def output_tops(out: Any) -> tuple[list[str], list[tuple[tuple[int, ...], Any]]]:
    """Per flat leaf of a call's result: its top-level element (``result[0]``,
    ``result['loss']``, ``result``) and (shape, dtype) for array leaves."""
    tops: list[str] = []
    shapes: list[tuple[tuple[int, ...], Any]] = []
    flat, _ = jax.tree_util.tree_flatten_with_path(out)
    for path, leaf in flat:
        tops.append("result" + (jax.tree_util.keystr(path[:1]) if path else ""))
        aval = getattr(leaf, "aval", None)
        shapes.append((tuple(aval.shape), aval.dtype) if aval is not None else ((), None))
    return tops, shapes
