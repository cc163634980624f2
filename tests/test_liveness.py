"""Memory over program order from the compiled schedule (memscope.compiled.liveness, memscope.analysis.live).

A hand-built module whose live ranges are known gives the exact curve; real
programs (loops, branches, the gradient of a scan, XLA:CPU's calls, the samples)
are checked against XLA's own facts: the temporary bytes live at each step are
those of XLA's own ``HloLiveRange`` (its live-range dump), buffers the schedule
calls live together never share memory in XLA's packing, what is listed live
at the peak sits in disjoint memory and adds up to the peak, the peak differs
from memscope's by exactly the idle part of the temporary block (and the
constants), and the source lines named are where JAX recorded that op.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import memscope
from memscope.analysis.live import memory_view
from memscope.compiled._hlo_schema import HloModuleProto, message_class
from memscope.compiled.buffers import MAX_DETAIL_ROWS, read_buffer_assignment
from memscope.compiled.dump import HloProto
from memscope.compiled.hlo import parse_module
from memscope.compiled.liveness import (
    LiveRange,
    _sweep,
    flatten,
    live_ranges,
    schedule_liveness,
)
from memscope.compiled.raw import compile_uncached
from memscope.report import InputBuffer, Memory
from tests.support.samples import SAMPLES, sample_module
from tests.support.truth import assigned

BufferAssignmentProto = message_class("BufferAssignmentProto")

# ------------------------------------------------------------ hand-built --

#: (computation, name, opcode, operands, size or None, allocation, offset, extra)
#: Entry 1 runs p0, a, b, t, g, k (a call of computation 3), c; computation 3
#: runs cp, cx. Allocation 0 holds the parameter, 1 the output, 2 the temporaries.
INSTRUCTIONS = [
    (1, "p0", "parameter", [], 16, 0, 0, {"parameter_number": 0}),
    (1, "a", "fusion", ["p0"], 100, 2, 0, {}),
    (1, "b", "fusion", ["a"], 200, 2, 100, {}),
    (1, "t", "tuple", ["a", "b"], 16, 2, 300, {}),
    (1, "g", "get-tuple-element", ["t"], None, 0, 0, {"tuple_index": 1}),
    (3, "cp", "parameter", [], None, 0, 0, {"parameter_number": 0}),
    (3, "cx", "fusion", ["cp"], 30, 2, 400, {}),
    (1, "k", "call", ["g"], None, 0, 0, {"called": [3]}),
    (1, "c", "fusion", ["k"], 50, 1, 0, {}),
]
#: Flattened: p0 a b t g cp cx k c (the call's body just before it). Live:
#: a [1,2] (b uses it; the tuple only forwards it, and g takes b out),
#: b [2,6] (g passes it to the call, whose parameter cp holds it and cx uses
#: it; the call itself uses nothing, as in XLA), t's own index table [3,4] (g
#: reads it), cx [6,8] (its computation's root: to the call, and c uses the call).
TEMP_BY_TIME = [0, 100, 300, 216, 216, 200, 230, 30, 30]
HELD = 16 + 50


def hand_built(schedule: bool = True):
    module = HloModuleProto(name="m", entry_computation_id=1)
    ids = {name: i + 10 for i, (_, name, *_rest) in enumerate(INSTRUCTIONS)}
    comps = {cid: module.computations.add(id=cid, name=f"c{cid}") for cid in (1, 3)}
    proto = BufferAssignmentProto()
    allocs = [proto.buffer_allocations.add(index=i) for i in range(3)]
    allocs[0].is_entry_computation_parameter = True
    allocs[1].maybe_live_out = True
    for n, (cid, name, opcode, operands, size, alloc, offset, extra) in enumerate(INSTRUCTIONS):
        instr = comps[cid].instructions.add(id=ids[name], name=name, opcode=opcode)
        instr.operand_ids.extend(ids[o] for o in operands)
        instr.shape.element_type = 11
        instr.parameter_number = extra.get("parameter_number", 0)
        instr.tuple_index = extra.get("tuple_index", 0)
        instr.called_computation_ids.extend(extra.get("called", []))
        if size is not None:
            lb = proto.logical_buffers.add(id=n, size=size)
            lb.defined_at.instruction_id = ids[name]
            allocs[alloc].assigned.add(logical_buffer_id=n, offset=offset, size=size)
            allocs[alloc].size = max(allocs[alloc].size, offset + size)
    comps[1].root_id, comps[3].root_id = ids["c"], ids["cx"]
    if schedule:
        for cid in (1, 3):
            entry = module.schedule.sequences.add(key=cid)
            entry.value.instruction_ids.extend(i.id for i in comps[cid].instructions)
    return module, read_buffer_assignment(proto.SerializeToString(), module)


def test_hand_built_module_gives_the_exact_curve():
    module, assignment = hand_built()
    order, entry_step, spans, scheduled = flatten(module)
    assert [i.name for i in order] == ["p0", "a", "b", "t", "g", "cp", "cx", "k", "c"]
    assert entry_step == [0, 1, 2, 3, 4, 5, 5, 5, 6] and scheduled
    ranges = live_ranges(module, assignment, order, spans).ranges
    named = {assignment.buffers[b].instruction: r for b, r in ranges.items()}
    assert named == {"p0": (0, 1), "a": (1, 2), "b": (2, 6), "t": (3, 4), "cx": (6, 8),
                     "c": (8, 8)}
    live = schedule_liveness(module, assignment)
    assert live is not None
    # per entry step, the most held while it (and the call's body) runs
    assert live.entry_bytes == (66, 166, 366, 282, 282, 296, 96)
    assert list(live.entry_bytes) == [HELD + max(TEMP_BY_TIME[t] for t in range(9)
                                                 if entry_step[t] == s) for s in range(7)]
    assert (live.peak_bytes, live.peak_step, live.peak_instruction) == (366, 2, "b")
    assert [assignment.buffers[r.buffer].instruction for r in live.live] == ["b", "a"]
    assert (live.held_bytes, live.temp_block, live.live_temp) == (66, 430, 300)


def test_without_a_schedule_the_instruction_order_stands_in():
    module, assignment = hand_built(schedule=False)
    live = schedule_liveness(module, assignment)
    assert live is not None and not live.scheduled
    assert live.entry_bytes == (66, 166, 366, 282, 282, 296, 96)


def test_the_peak_view_adds_up_and_says_what_differs():
    module, assignment = hand_built()
    live = schedule_liveness(module, assignment)
    assert live is not None
    memory = Memory(argument_bytes=16, output_bytes=50, alias_bytes=0, temp_bytes=430,
                    peak_bytes=496, peak_rule="sum")
    x = InputBuffer("x", (4,), "float32", 16, True, "donor", parameter=0)
    timeline, at_peak = memory_view(live, assignment, memory, inputs=[x])
    assert timeline.rule == "schedule" and timeline.points == tuple(enumerate(
        live.entry_bytes))
    assert at_peak.bytes == timeline.peak_bytes == 366
    assert [(b.kind, b.instruction, b.bytes) for b in at_peak.buffers] == [
        ("temporary", "b", 200), ("temporary", "a", 100), ("output", "c", 50),
        ("parameter", "p0", 16)]
    param = next(b for b in at_peak.buffers if b.kind == "parameter")
    assert (param.argument, param.donated) == ("x", True)
    assert (at_peak.argument_bytes, at_peak.arguments) == (16, 1)
    b = at_peak.buffers[0]
    assert (b.live_from, b.live_to, b.donated) == (2, 5, None)  # entry steps
    assert timeline.peak_note is not None
    assert "130 B of the temporary block hold no buffer live at the peak" in \
        timeline.peak_note  # 496 - 366 = 430 - 300
    # The hand-built module has no JAX op names: its temporaries cannot be
    # told; its argument is not given back (the batch), its output is an output.
    assert {(r.role, r.bytes) for r in at_peak.roles} == {
        ("unknown", 300), ("outputs", 50), ("batch", 16)}
    assert sum(p.bytes for p in at_peak.parts) == at_peak.bytes


def test_buffers_sharing_memory_count_once():
    same = [LiveRange(1, 0, 0, 8, 0, 2), LiveRange(2, 0, 0, 8, 1, 3)]  # in place
    assert _sweep(same, 4) == [8, 8, 8, 8]
    apart = [LiveRange(1, 0, 0, 8, 0, 2), LiveRange(2, 0, 8, 4, 1, 3)]
    assert _sweep(apart, 5) == [8, 12, 12, 4, 0]


# ---------------------------------------------------------- real programs --


def _compiled_liveness(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    module, assignment, _ = assigned(lowered)
    return module, assignment, lowered.compile().memory_analysis()


def _never_overlap(module, assignment) -> int:
    """Checks XLA's packing against the schedule: buffers live at once at
    different places of one allocation never overlap. Returns the pairs checked."""
    order, _, spans, _ = flatten(module)
    ranges = live_ranges(module, assignment, order, spans).ranges
    checked = 0
    for alloc in assignment.of_kind("temporary"):
        slots = sorted((s for s in alloc.slots if s.buffer in ranges),
                       key=lambda s: ranges[s.buffer][0])
        for i, s1 in enumerate(slots):
            r1 = ranges[s1.buffer]
            for s2 in slots[i + 1:]:
                r2 = ranges[s2.buffer]
                if r2[0] > r1[1]:
                    break
                if (s1.offset, s1.size) == (s2.offset, s2.size):
                    continue  # the same memory, shared (in place)
                checked += 1
                assert not (s1.offset < s2.offset + s2.size
                            and s2.offset < s1.offset + s1.size), (
                    assignment.buffers[s1.buffer].instruction,
                    assignment.buffers[s2.buffer].instruction)
    return checked


def loop(x):
    def body(i, carry):
        y = jnp.tanh(carry @ carry.T) @ carry
        return carry + y * i
    return jax.lax.fori_loop(0, 3, body, x).sum()


def branch(x, flag):
    return jax.lax.cond(flag, lambda v: jnp.sin(v @ v.T).sum(),
                        lambda v: (v * 2).sum(), x)


def scanned(ws, x):
    def layer(h, w):
        h = jnp.tanh(h @ w)
        return h, h.sum(0)
    h, sums = jax.lax.scan(layer, x, ws)
    return h.sum() + sums.sum()


#: The gradient of a scan, reduced from MaxText's train_step: its loops' initial
#: state and their bodies' parameter share memory, and XLA packs the backward
#: loop's temporaries into memory an initial value held until the body took
#: over. memscope listed a loop's state twice at a peak inside it and kept the
#: initial value live over those temporaries (more than the temporary block).
scan_grad = jax.grad(scanned)


def branch_in_loop(x):
    def body(i, h):
        return jax.lax.cond(i % 2 == 0, lambda v: jnp.sin(v @ v.T), lambda v: v * 2, h)
    return jax.lax.fori_loop(0, 4, body, x).sum()


def random_bits(key, x):
    """XLA:CPU expands each rng_bit_generator into a ``call`` of its own computation."""
    key, bits = jax.lax.rng_bit_generator(key, x.shape, dtype=jnp.uint32)
    _, more = jax.lax.rng_bit_generator(key, x.shape, dtype=jnp.uint32)
    return (x * bits + more).sum()


PROGRAMS = {
    "loop": (loop, (jnp.ones((256, 256)),)),
    "branch": (branch, (jnp.ones((256, 512)), True)),
    "scan_grad": (scan_grad, (jnp.ones((4, 128, 128)), jnp.ones((64, 128)))),
    "branch_in_loop": (branch_in_loop, (jnp.ones((128, 128)),)),
    "random_bits": (random_bits, (jnp.zeros((4,), jnp.uint32),
                                  jnp.ones((128, 128), jnp.uint32))),
}


def _program(name):
    fn, args = PROGRAMS[name]
    return (fn, *args)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_loops_and_branches_agree_with_xla_packing(name):
    module, assignment, stats = _compiled_liveness(*_program(name))
    checked = _never_overlap(module, assignment)
    # Every program has temporaries live at once but random_bits on XLA:GPU,
    # which fuses its generators with their use: one temporary.
    temporaries = sum(len(a.slots) for a in assignment.of_kind("temporary"))
    assert checked > 0 or (jax.default_backend() != "cpu" and temporaries == 1), temporaries
    live = schedule_liveness(module, assignment)
    assert live is not None and live.scheduled and live.unplaced == 0
    assert live.temp_block == stats.temp_size_in_bytes
    assert 0 < live.live_temp <= live.temp_block
    assert live.peak_bytes == max(live.entry_bytes)


def _xla_live_ranges(fn, *args):
    """XLA's own ``HloLiveRange`` of ``fn`` compiled, from its text dump
    (``*-live-range.txt``), with the optimized module and buffer assignment of
    the same compile: (module, assignment, the flattened order's names, per
    (instruction, shape index) its (start, end)); ``None`` where XLA wrote none."""
    lowered = jax.jit(fn).lower(*args)
    with tempfile.TemporaryDirectory() as folder:
        compile_uncached(lowered, {"xla_dump_to": folder, "xla_dump_hlo_as_proto": True,
                                           "xla_dump_hlo_as_text": True})
        dumped = sorted(Path(folder).glob("*after_optimizations.hlo.pb"))
        text = sorted(Path(folder).glob("*after_optimizations-live-range.txt"))
        if not dumped or not text:
            return None
        proto = HloProto()
        proto.ParseFromString(dumped[0].read_bytes())
        text_read = text[0].read_text(encoding="utf-8")
    module = parse_module(bytes(proto.hlo_module))
    assignment = read_buffer_assignment(bytes(proto.buffer_assignment), module)
    sequence, rest = text_read.split("BufferLiveRange:", 1)
    names = re.findall(r"^ +\d+:(\S+)$", sequence, re.M)
    ranges = {(name, tuple(int(i) for i in index.split(",") if i)): (int(start), int(end))
              for name, index, start, end in re.findall(
                  r"^ +(\S+?)\{([\d,]*)\}:(\d+)-(\d+)$", rest.split("Live ranges at")[0],
                  re.M)}
    return module, assignment, names, ranges


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="held to XLA:CPU's live-range dump; not yet run against XLA:GPU's")
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_replay_is_xla_own_live_range(name):
    """memscope's replay against XLA's own ``HloLiveRange`` of the same compile
    (its live-range dump): the same flattened order, and at every step the same
    temporary bytes live, buffers sharing memory counted once. XLA clips the
    ranges of buffers that share memory so they do not overlap; memscope counts
    such a slot once while any of them lives, so only the curves compare."""
    xla = _xla_live_ranges(*_program(name))
    if xla is None:
        pytest.skip("this XLA writes no live-range dump")
    module, assignment, names, xla_ranges = xla
    order, _, spans, _ = flatten(module)
    assert [i.name for i in order] == names
    ours = live_ranges(module, assignment, order, spans).ranges
    last = len(order) - 1
    theirs, mine = [], []
    for alloc in assignment.allocations:
        if alloc.color != 0 or alloc.kind != "temporary":
            continue
        for s in alloc.slots:
            buf = assignment.buffers[s.buffer]
            start, end = xla_ranges[(buf.instruction, tuple(buf.shape_index))]
            theirs.append(LiveRange(s.buffer, alloc.index, s.offset, s.size, start,
                                    min(end, last)))  # XLA's root values end one past
            mine.append(LiveRange(s.buffer, alloc.index, s.offset, s.size, *ours[s.buffer]))
    curve = _sweep(theirs, len(order))
    assert _sweep(mine, len(order)) == curve
    live = schedule_liveness(module, assignment)
    assert live is not None and live.live_temp == max(curve) <= live.temp_block


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_what_is_live_at_the_peak_is_disjoint_memory_in_xla_packing(name):
    """The temporaries listed at the peak, one per memory slot, sit apart in
    XLA's own packing: they add up to the peak's temporary bytes and fit in
    their allocations. (Before, a loop's state counted once as its initial
    value and once as the body's parameter, in one slot, and the initial value
    lived on over memory XLA gave the body's temporaries.)"""
    module, assignment, _ = _compiled_liveness(*_program(name))
    live = schedule_liveness(module, assignment)
    assert live is not None and live.live
    assert sum(r.size for r in live.live) == live.live_temp <= live.temp_block
    sizes = {a.index: a.size for a in live.temp_allocations}
    by_allocation: dict[int, list[LiveRange]] = defaultdict(list)
    for r in live.live:
        assert r.start <= live.peak_time <= r.end
        by_allocation[r.allocation].append(r)
    for index, ranges in by_allocation.items():
        ranges.sort(key=lambda r: r.offset)
        for low, high in pairwise(ranges):
            assert low.offset + low.size <= high.offset, (
                assignment.buffers[low.buffer].instruction,
                assignment.buffers[high.buffer].instruction)
        assert ranges[-1].offset + ranges[-1].size <= sizes[index]


def _assert_peak_adds_up(fn) -> None:
    """What a report lists live at the peak adds up to the replayed peak; its
    temporaries to the temporary bytes live there, at most the block; its source
    lines (every buffer but the arguments) to the peak less the arguments."""
    t, live = fn.memory_timeline, fn.live_at_peak
    assert t is not None and live is not None
    if t.rule == "heap_trace":  # the curve is XLA's trace; the list is the schedule's
        peak = t.schedule_peak_bytes
    else:
        peak = t.peak_bytes
        assert peak == max(b for _, b in t.points)
    assert live.bytes == peak
    assert sum(b.bytes for b in live.buffers) + live.more_bytes == live.bytes
    temps = sum(b.bytes for b in live.buffers if b.kind == "temporary")
    assert temps <= peak - t.held_bytes <= t.temp_block_bytes
    held = sum(b.bytes for b in live.buffers if b.kind != "temporary")
    assert held <= t.held_bytes
    if not live.more_buffers:
        assert (temps, held) == (peak - t.held_bytes, t.held_bytes)
    lines = sum(s.bytes for s in live.by_source)
    assert lines <= live.bytes - live.argument_bytes
    if len(live.by_source) < MAX_DETAIL_ROWS:
        assert lines == live.bytes - live.argument_bytes


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_what_is_live_at_the_peak_adds_up_to_the_peak(name):
    fn, *args = _program(name)
    _assert_peak_adds_up(memscope.analyze(jax.jit(fn), *args, advise=False))


def _jaxpr_ops(fn, *args) -> dict[tuple[str, int], set[str]]:
    """JAX's own record: per (file, line) the primitives traced there, with those
    of the nested jaxprs an equation there calls (``jnp.where`` is a jit of its
    own; XLA inlines it and names the calling line)."""
    from jax._src import source_info_util

    seen: dict[tuple[str, int], set[str]] = defaultdict(set)

    def walk(jaxpr) -> set[str]:
        inside: set[str] = set()
        for eqn in jaxpr.eqns:
            prims = {eqn.primitive.name}
            for sub in _compat_jaxprs_in_params(eqn.params):
                prims |= walk(sub)
            frame = source_info_util.user_frame(eqn.source_info.traceback)
            if frame is not None:
                seen[(frame.file_name, frame.start_line)] |= prims
            inside |= prims
        return inside

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return seen


def _compat_jaxprs_in_params(params):
    """The jaxprs an equation's params hold (a jit's, a scan's body, a cond's
    branches), found by their shape: the helper JAX has for it moved between
    series (``jax.core`` to ``jax.extend.core``)."""
    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(v, "eqns"):
                yield v
            elif hasattr(getattr(v, "jaxpr", None), "eqns"):
                yield v.jaxpr


@pytest.fixture(scope="module")
def transformer():
    sys.path.insert(0, str(SAMPLES))
    try:
        import transformer_adam as t
    finally:
        sys.path.remove(str(SAMPLES))
    params = t.init_params(jax.random.key(0), 8, 128, 64)
    state = t.optimizer.init(params)
    batch = t.make_batch(jax.random.key(0), 8, 64)
    fn = memscope.analyze(t.train_step, params, state, batch, advise=False)
    return t, (params, state, batch), fn


def test_transformer_adam_peak_adds_up_to_memscope_peak(transformer):
    _, _, fn = transformer
    m, t, live = fn.memory, fn.memory_timeline, fn.live_at_peak
    assert m is not None and t is not None and live is not None
    assert t.rule == "schedule" and len(t.points) <= 400 and t.steps > 1000
    assert live.bytes == t.peak_bytes == max(b for _, b in t.points)
    assert sum(b.bytes for b in live.buffers) + live.more_bytes == live.bytes
    constants = fn.buffers and sum(g.bytes for g in fn.buffers.allocations
                                   if g.kind == "constant")
    # held for the call: XLA's argument + output - alias, and the constants
    assert t.held_bytes == m.argument_bytes + m.output_bytes - m.alias_bytes + constants
    assert t.temp_block_bytes == m.temp_bytes
    # memscope's peak (rule sum on CPU) holds the temporary block whole: it
    # exceeds this one by exactly the block's idle bytes, less the constants
    assert m.peak_rule == ("sum" if jax.default_backend() == "cpu" else m.peak_rule)
    if m.peak_rule == "sum":
        idle = t.temp_block_bytes - t.temp_live_bytes
        assert m.peak_bytes - t.peak_bytes == idle - constants
        assert 0 <= idle <= t.temp_block_bytes // 100  # measured: 1.7 KiB of 46.2 MiB
    assert live.arguments == 405 and live.argument_bytes == m.argument_bytes
    assert all(b.donated is False for b in live.buffers if b.kind == "parameter")
    _assert_peak_adds_up(fn)


def test_activations_sample_peak_adds_up():
    sample = sample_module("activations")
    params = sample.init_params(jax.random.key(0), 4, 128)
    x = jax.random.normal(jax.random.key(1), (1024, 128))
    _assert_peak_adds_up(memscope.analyze(sample.train_step, params, x, advise=False))


def test_transformer_adam_source_lines_exist_and_hold_the_op(transformer):
    t, args, fn = transformer
    seen = _jaxpr_ops(t.train_step.__wrapped__, *args)
    named = [(b.source, b.op) for b in fn.live_at_peak.buffers if b.source]
    named += [(s.source, op) for s in fn.live_at_peak.by_source if s.source for op in s.ops]
    assert len(named) > 50
    for source, op in named:
        path, line = source.rsplit(":", 1)
        text = Path(path).read_text(encoding="utf-8").splitlines()
        assert 1 <= int(line) <= len(text) and text[int(line) - 1].strip()
        assert op in seen[(os.path.abspath(path), int(line))], (source, op)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="heap-simulator traces: GPU only")
def test_on_gpu_the_schedule_agrees_with_the_trace_and_xla_peak():
    fn = memscope.analyze(jax.jit(loop), jnp.ones((256, 256)), advise=False)
    t = fn.memory_timeline
    assert t is not None and t.rule == "heap_trace" and fn.memory is not None
    assert t.peak_bytes == fn.memory.xla_peak_bytes
    # The schedule holds the loop's few scalars whole where the heap simulator
    # packs them: 32 B above the trace on an H200 (tests/test_gpu_recorded.py).
    assert 0 <= t.schedule_peak_bytes - t.peak_bytes <= 64, t.trace_note


def test_each_variant_has_its_own_timeline():
    def scale(x, y):
        return jnp.tanh(x @ y) * 2, y.sum()

    x, y = jnp.ones((256, 256)), jnp.ones((256, 256))
    fn = memscope.analyze(jax.jit(scale), x, y)
    advised = fn.variant("advised")
    assert advised is not None and advised.memory is not None
    assert fn.memory_timeline is not None and advised.memory_timeline is not None
    for m, t, live in ((fn.memory, fn.memory_timeline, fn.live_at_peak),
                       (advised.memory, advised.memory_timeline, advised.live_at_peak)):
        assert m is not None and live is not None
        assert live.bytes == t.peak_bytes
        assert t.held_bytes - m.argument_bytes - m.output_bytes + m.alias_bytes >= 0
    # the advised donation lets the output take x's buffer: held once, not twice
    assert advised.memory.alias_bytes == x.nbytes
    assert fn.memory_timeline.held_bytes - advised.memory_timeline.held_bytes == x.nbytes
    donated = [b for b in advised.live_at_peak.buffers if b.kind == "aliased"]
    assert [(b.argument, b.donated, b.bytes) for b in donated] == [("x", True, x.nbytes)]
