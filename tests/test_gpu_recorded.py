"""What XLA:GPU compiled on an H200 (JAX 0.11.2), recorded, read on any machine.

``tests/data/gpu/`` holds what XLA dumped there (``xla_dump_hlo_as_proto``:
``*after_optimizations.hlo.pb``, the optimized module with its buffer
assignment) for three programs, and one program's optimized module as the
executable carries it. The figures below are what ``memory_analysis()`` said on
the same machine for the same compile (``.gpu/diag.py`` in the GPU session that
recorded them): each holds the assignment memscope reads to XLA's own figures,
where no GPU is at hand. ``pytest -m gpu`` checks the same on a live GPU.

    mlp(w, x) = jnp.tanh(x @ w).sum(), jnp.sin(x @ w)      w: f32[512,256], x: f32[128,512]
    loop(x) = fori_loop(0, 3, lambda i, c: jnp.sin(c) @ c, x)   x: f32[256,256]
    passthrough(frozen, y) = frozen, y * 2                 frozen: f32[64,64], y: f32[64]
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from memscope.analysis.live import memory_view
from memscope.compiled.buffers import breakdown, read_buffer_assignment
from memscope.compiled.dump import HloProto
from memscope.compiled.hlo import parse_module, read_module
from memscope.compiled.liveness import schedule_liveness
from memscope.report import Memory

DATA = Path(__file__).parent / "data" / "gpu"

#: memory_analysis() on the H200: argument, output, alias, temp, peak_memory_in_bytes
H200 = {
    "mlp": (786432, 131092, 0, 1049088, 1966612),
    "loop": (262144, 262144, 0, 34865680, 35389448),
    "passthrough": (16640, 16656, 0, 16, 33296),
}


def _dumped(name: str):
    proto = HloProto()
    proto.ParseFromString((DATA / f"{name}.after_optimizations.hlo.pb").read_bytes())
    module = parse_module(proto.hlo_module)
    return module, read_buffer_assignment(proto.buffer_assignment, module)


@pytest.mark.parametrize("name", sorted(H200))
def test_the_dumped_assignment_adds_up_to_xla_gpus_own_figures(name):
    argument, output, alias, temp, _ = H200[name]
    _, assignment = _dumped(name)
    by_kind = Counter()
    for a in assignment.allocations:
        by_kind[a.kind] += a.size
    assert (by_kind["parameter"], by_kind["output"], by_kind["temporary"]) == (
        argument, output, temp)
    memory = Memory(argument_bytes=argument, output_bytes=output, alias_bytes=alias,
                    temp_bytes=temp, xla_peak_bytes=H200[name][4])
    b = breakdown(assignment, memory)
    assert b.reconciled, b.reconcile_note


@pytest.mark.parametrize("name", ["mlp", "loop"])
def test_xla_gpus_heap_trace_replays_to_its_own_peak(name):
    # XLA:GPU's peak_memory_in_bytes is the heap simulator's: the trace it keeps
    # in the assignment replays to it, byte for byte.
    argument, output, alias, temp, xla_peak = H200[name]
    _, assignment = _dumped(name)
    memory = Memory(argument_bytes=argument, output_bytes=output, alias_bytes=alias,
                    temp_bytes=temp, xla_peak_bytes=xla_peak)
    b = breakdown(assignment, memory)
    assert b.replayed_peak == xla_peak, b.timeline_note


@pytest.mark.parametrize(("name", "slack"), [("mlp", 0), ("loop", 32)])
def test_the_schedule_replays_over_the_dumped_module(name, slack):
    # memscope's replay of the module's own schedule lands on XLA:GPU's peak: to
    # the byte for straight-line code; a loop's few scalars (its counter, its
    # condition, a constant: 32 B here) are held whole by memscope's replay,
    # where the heap simulator packs them.
    module, assignment = _dumped(name)
    liveness = schedule_liveness(module, assignment)
    assert liveness is not None and liveness.scheduled
    assert liveness.temp_block == H200[name][3]
    assert 0 <= liveness.peak_bytes - H200[name][4] <= slack


def test_a_returned_input_is_a_copy_through_the_tuple_xla_gpu_builds():
    # On the H200: tuple(frozen, fusion) -> get-tuple-element(tuple, 0) -> copy,
    # a pass-through copy memscope read as a new buffer before.
    module = (DATA / "passthrough.module.pb").read_bytes()
    assert "copy(%get-tuple-element" in (DATA / "passthrough.hlo.txt").read_text()
    assert read_module(module).result_sources == (0, None)
    dumped, _ = _dumped("passthrough")
    assert read_module(dumped).result_sources == (0, None)


@pytest.mark.parametrize("name", ["mlp", "loop"])
def test_the_timeline_follows_xla_gpus_heap_trace(name):
    module, assignment = _dumped(name)
    argument, output, alias, temp, xla_peak = H200[name]
    memory = Memory(argument_bytes=argument, output_bytes=output, alias_bytes=alias,
                    temp_bytes=temp, xla_peak_bytes=xla_peak)
    liveness = schedule_liveness(module, assignment)
    assert liveness is not None
    timeline, _ = memory_view(liveness, assignment, memory)
    assert timeline.rule == "heap_trace" and timeline.peak_bytes == xla_peak
    assert timeline.schedule_peak_bytes == liveness.peak_bytes
