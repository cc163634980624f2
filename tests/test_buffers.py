"""The buffer breakdown: decoded from XLA's own buffer assignment, checked against
JAX's figures, the compiled module's text and the user's source file."""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import pytest

from memscope.compiled import buffers
from memscope.compiled.buffers import (
    Allocation,
    BufferAssignment,
    HeapEvent,
    HeapTrace,
    LogicalBuffer,
    Slot,
    breakdown,
    downsample,
    replay,
)
from memscope.flow import analyze
from memscope.report import Memory
from tests.support.truth import assigned, split_product


def forward(x, w):
    y = x @ w  # the largest temporary: f32[256,1024]
    z = jnp.tanh(y) @ w.T
    return (z * 2).sum() + y.sum()


def mlp_step(params, x):
    def loss(p):
        h = jnp.tanh(x @ p["w1"])
        return jnp.mean((h @ p["w2"]) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def _forward_args():
    return jnp.ones((256, 512)), jnp.ones((512, 1024))


def _mlp_args():
    return {"w1": jnp.ones((256, 512)), "w2": jnp.ones((512, 256))}, jnp.ones((128, 256))


CASES = {
    "forward": (forward, _forward_args, ()),
    "mlp_donated": (mlp_step, _mlp_args, (0,)),
    "mlp": (mlp_step, _mlp_args, ()),
}

#: What each JAX primitive looks like in the source lines above.
SPELLING = {"dot_general": ("@",), "transpose": ("@", ".T"), "tanh": ("tanh",),
            "mul": ("*",), "add": ("+",), "reduce_sum": ("sum", "mean"),
            "integer_pow": ("**",), "sub": ("-",)}


def _compiled(fun, args, donate):
    return jax.jit(fun, donate_argnums=donate).lower(*args).compile()


def _source_line(source: str) -> str:
    path, line = source.rsplit(":", 1)
    with open(os.path.abspath(path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert 1 <= int(line) <= len(lines), source
    return lines[int(line) - 1]


@pytest.mark.parametrize("case", list(CASES))
def test_temporary_allocations_add_up_to_temp_size(case):
    fun, make_args, donate = CASES[case]
    stats = _compiled(fun, make_args(), donate).memory_analysis()
    report = analyze(jax.jit(fun, donate_argnums=donate), *make_args(), advise=False)
    b = report.buffers
    assert b is not None
    assert b.temp_bytes == stats.temp_size_in_bytes
    assert b.reconciled is True and b.reconcile_note is None
    kinds = {g.kind: g.bytes for g in b.allocations}
    assert kinds.get("parameter", 0) + kinds.get("aliased", 0) == stats.argument_size_in_bytes
    assert kinds.get("output", 0) + kinds.get("aliased", 0) == stats.output_size_in_bytes
    assert kinds.get("aliased", 0) == stats.alias_size_in_bytes
    assert (kinds.get("aliased", 0) > 0) == bool(donate)


@pytest.mark.parametrize("case", list(CASES))
def test_every_reported_line_exists_and_holds_the_named_op(case):
    fun, make_args, donate = CASES[case]
    b = analyze(jax.jit(fun, donate_argnums=donate), *make_args(), advise=False).buffers
    assert b is not None
    checked = 0
    for t in (*b.temp_buffers, *b.live_at_peak):
        if t.source is None:
            continue
        assert t.source.startswith("tests/test_buffers.py:"), t.source  # relative to cwd
        text = _source_line(t.source)
        assert text.strip(), t
        # An op autodiff derived from the line's own (JAX 0.12 names the tanh
        # line for the multiply of tanh's derivative, under jvp()/transpose())
        # is that line's, though the line does not spell it.
        derived = "jvp(" in (t.op_name or "") or "transpose(" in (t.op_name or "")
        if t.op in SPELLING:
            assert derived or any(s in text for s in SPELLING[t.op]), (t, text)
            checked += 1
    assert checked >= 1
    assert sum(line.bytes for line in b.by_source) == sum(
        t.bytes for t in b.temp_buffers) + b.more_bytes


def test_the_largest_temporary_is_the_matmul_on_its_line():
    b = analyze(jax.jit(forward), *_forward_args(), advise=False).buffers
    assert b is not None
    top = b.temp_buffers[0]
    parts = split_product(top.shape, 256, 1024)  # 1 on XLA:CPU
    assert top.op == "dot_general" and parts is not None, top
    assert top.bytes == parts * 256 * 1024 * 4
    assert _source_line(top.source).strip().startswith("y = x @ w")
    lines = {line.source: line for line in b.by_source}
    assert "dot_general" in lines[top.source].ops
    # Lines come by the bytes of their temporaries. Which line holds the most is
    # XLA's choice: up to JAX 0.9 tanh(y) is a temporary of its own, so the next
    # line outweighs the matmul's there; 0.10 fuses it away.
    assert b.more_bytes == 0
    assert [line.bytes for line in b.by_source] == sorted(
        (line.bytes for line in b.by_source), reverse=True)
    for line in b.by_source:
        assert line.bytes == sum(t.bytes for t in b.temp_buffers if t.source == line.source)


@pytest.mark.parametrize("case", list(CASES))
def test_instructions_and_shapes_agree_with_the_module_text(case):
    fun, make_args, donate = CASES[case]
    _, assignment, text = assigned(
        jax.jit(fun, donate_argnums=donate).lower(*make_args()))
    assert assignment.buffers
    for buf in assignment.buffers.values():
        # `%name = f32[256,1024]{1,0} opcode(` in XLA's own text of the module
        line = re.search(rf"%{re.escape(buf.instruction)} = (.*)", text)
        assert line is not None, buf.instruction
        if not buf.shape.startswith("("):
            assert line.group(1).startswith(buf.shape), (buf, line.group(0))
        assert f" {buf.opcode}(" in line.group(0), (buf, line.group(0))


def test_timeline_is_unknown_on_cpu_and_says_why():
    b = analyze(jax.jit(forward), *_forward_args(), advise=False).buffers
    assert b is not None
    if jax.default_backend() != "cpu":
        pytest.skip("the CPU behaviour")
    assert b.timeline is None and b.replayed_peak is None
    assert b.timeline_note == buffers.NO_TRACE_NOTE


@pytest.mark.gpu
def test_replayed_peak_equals_xla_peak_on_gpu():
    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU: XLA records heap-simulator traces only on GPU and TPU")
    stats = _compiled(mlp_step, _mlp_args(), ()).memory_analysis()
    b = analyze(jax.jit(mlp_step), *_mlp_args(), advise=False).buffers
    assert b is not None and b.timeline is not None
    assert b.replayed_peak == stats.peak_memory_in_bytes
    assert max(size for _, size in b.timeline) == b.replayed_peak


# ----------------------------------------------------- hand-built records --


def _buf(i: int, size: int, line: int | None = None, op: str = "dot_general") -> LogicalBuffer:
    return LogicalBuffer(id=i, size=size, instruction=f"fusion.{i}", opcode="fusion",
                         shape=f"f32[{size // 4}]", op_name=f"jit(f)/{op}",
                         source_file="/src/train.py" if line else None, source_line=line)


def _alloc(index: int, kind: str, size: int, slots=(), color: int = 0) -> Allocation:
    return Allocation(index=index, size=size, kind=kind, color=color,  # type: ignore[arg-type]
                      parameter=0 if kind in ("parameter", "aliased") else None,
                      slots=tuple(slots))


def test_replay_counts_shared_memory_once_until_the_last_sharer_is_freed():
    events = [HeapEvent("alloc", 1, 100), HeapEvent("alloc", 2, 50),
              HeapEvent("share", 3, 50, canonical=2), HeapEvent("free", 2, 50),
              HeapEvent("alloc", 4, 30), HeapEvent("free", 3, 50),
              HeapEvent("free", 1, 100), HeapEvent("free", 4, 30)]
    r = replay(events)
    assert r.sizes == (100, 150, 150, 150, 180, 130, 30, 0)
    assert (r.peak, r.peak_step) == (180, 4)
    assert sorted(r.live_at_peak) == [1, 2, 4]


def test_replay_of_nothing_is_empty():
    r = replay([])
    assert (r.sizes, r.peak, r.live_at_peak) == ((), 0, ())


def test_downsample_keeps_the_peak_and_the_bound():
    sizes = [i % 97 for i in range(10_000)] + [500] + [0] * 10
    points = downsample(sizes, 400)
    assert len(points) <= 400
    assert (10_000, 500) in points
    assert [s for s, _ in points] == sorted(s for s, _ in points)


def test_breakdown_replays_the_largest_trace_and_adds_what_lives_throughout():
    bufs = {i: _buf(i, size, line=10 + i) for i, size in ((1, 400), (2, 200), (3, 100))}
    assignment = BufferAssignment(
        allocations=(_alloc(0, "parameter", 1000), _alloc(1, "output", 8),
                     _alloc(2, "temporary", 600, [Slot(1, 0, 400), Slot(2, 400, 200),
                                                  Slot(3, 0, 100)])),
        buffers=bufs,
        traces=(HeapTrace(2, (HeapEvent("alloc", 1, 400), HeapEvent("alloc", 2, 200),
                              HeapEvent("free", 1, 400), HeapEvent("alloc", 3, 100),
                              HeapEvent("free", 2, 200), HeapEvent("free", 3, 100))),))
    memory = Memory(temp_bytes=600, peak_bytes=1608, xla_peak_bytes=1608)
    b = breakdown(assignment, memory, display=lambda p: p.removeprefix("/src/"))
    assert b.replayed_peak == 1608 and b.timeline_note is None
    assert b.timeline == ((0, 1408), (1, 1608), (2, 1208), (3, 1308), (4, 1108), (5, 1008))
    assert [t.instruction for t in b.live_at_peak] == ["fusion.1", "fusion.2"]
    assert [t.source for t in b.temp_buffers] == ["train.py:11", "train.py:12", "train.py:13"]
    assert b.reconciled is True

    off = breakdown(assignment, Memory(temp_bytes=600, peak_bytes=2000, xla_peak_bytes=2000))
    assert off.timeline_note is not None and "differs" in off.timeline_note


def test_breakdown_lists_the_largest_and_totals_the_rest():
    n = buffers.MAX_DETAIL_ROWS + 10
    bufs = {i: _buf(i, 4 * (i + 1), line=1 + i % 3) for i in range(n)}
    slots = [Slot(i, 0, 4 * (i + 1)) for i in range(n)]
    assignment = BufferAssignment(
        allocations=(_alloc(0, "temporary", 4 * n, slots),), buffers=bufs, traces=())
    b = breakdown(assignment, Memory(temp_bytes=4 * n))
    assert len(b.temp_buffers) == buffers.MAX_DETAIL_ROWS
    assert [t.bytes for t in b.temp_buffers] == sorted((t.bytes for t in b.temp_buffers),
                                                       reverse=True)
    assert b.more_buffers == 10 and b.more_bytes == sum(4 * (i + 1) for i in range(10))
    assert len(b.by_source) == 3
    assert sum(line.buffers for line in b.by_source) == n


def test_reconcile_says_why_the_figures_differ():
    assignment = BufferAssignment(
        allocations=(_alloc(0, "temporary", 1024), _alloc(1, "temporary", 512, color=5),
                     _alloc(2, "constant", 64), _alloc(3, "thread_local", 16)),
        buffers={}, traces=())
    ok, note = buffers.reconcile(assignment, Memory(temp_bytes=1024))
    assert ok is True and note is None
    ok, note = buffers.reconcile(assignment, Memory(temp_bytes=1600))
    assert ok is False
    assert note == ("decoded temporary allocations add to 1.0 KiB, XLA's temp figure is "
                    "1.6 KiB: 512 B of temporaries are in another memory space (XLA counts "
                    "those as host temp); 64 B of constants are not counted as temp; 16 B "
                    "of thread-local scratch are not counted as temp")
    assert buffers.reconcile(assignment, Memory()) == (
        None, "XLA reported no temp figure to check against")
