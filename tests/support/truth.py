"""Ground truth for buffer fates: what JAX does with the buffers when the call runs.

A fate memscope reports must agree with the runtime: an ``aliased`` input (or a
``donor`` XLA used) is deleted after the call and its output sits at the input's
old ``unsafe_buffer_pointer()``; every other input stays alive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax

from memscope.assemble.function import function_report
from memscope.capturing import capture
from memscope.report import FunctionReport


def flat_dynamic_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The call's array leaves in JAX's flat order (kwargs sorted by name).

    Static arguments in these tests are never arrays, so they drop out here.
    """
    return [x for x in jax.tree_util.tree_leaves((args, kwargs)) if isinstance(x, jax.Array)]


def pointer(x: Any) -> tuple[int, ...]:
    """The device address of every shard of ``x`` (one for a single-device array)."""
    return tuple(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)


def run_and_report(make: Callable[[], Any], *args: Any,
                   **kwargs: Any) -> tuple[FunctionReport, list[Any], list[int], Any]:
    """Jit inside a capture, call once; return the report, inputs, old pointers, output."""
    inputs = flat_dynamic_inputs(args, kwargs)
    pointers = [pointer(x) for x in inputs]
    with capture() as session:
        out = make()(*args, **kwargs)
    (entry,) = session.entries
    return function_report(entry), inputs, pointers, out


def assert_matches_runtime(report: FunctionReport, inputs: list[Any],
                           pointers: list[tuple[int, ...]],
                           out: Any) -> None:
    """Every input and output fate agrees with the buffers JAX left behind."""
    outputs = jax.tree_util.tree_leaves(out)
    assert len(report.inputs) == len(inputs)
    assert len(report.outputs) == len(outputs)
    out_index = {b.path: i for i, b in enumerate(report.outputs)}
    in_index = {b.path: i for i, b in enumerate(report.inputs)}
    for i, buf in enumerate(report.inputs):
        reused = buf.fate == "aliased" or (buf.fate == "donor" and buf.output is not None)
        assert inputs[i].is_deleted() == reused, (buf.path, buf.fate)
        if reused:
            assert buf.output is not None
            partner = outputs[out_index[buf.output]]
            assert pointer(partner) == pointers[i], buf.path
        else:
            assert buf.output is None, buf.path
    donated_pointers = {p for p, b in zip(pointers, report.inputs, strict=True) if b.donated}
    for j, obuf in enumerate(report.outputs):
        address = pointer(outputs[j])
        if obuf.fate == "reuses_input":
            assert obuf.input is not None
            assert address == pointers[in_index[obuf.input]], obuf.path
        else:
            assert address not in donated_pointers, obuf.path
        if obuf.fate == "copy_of_input":
            assert obuf.input is not None
            source = inputs[in_index[obuf.input]]
            assert address != pointers[in_index[obuf.input]]
            assert (outputs[j] == source).all()


def fates(report: FunctionReport) -> dict[str, tuple[str, str | None]]:
    """``{path: (fate, partner)}`` for inputs and outputs alike."""
    result = {b.path: (b.fate, b.output) for b in report.inputs}
    result.update({b.path: (b.fate, b.input) for b in report.outputs})
    return result


def device_held(stats: Any) -> int:
    """What a program's device holds from the start of a call, from XLA's own
    ``memory_analysis()``: arguments, the outputs that alias none, and the
    temporary allocation, which XLA allocates for the whole execution."""
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes
               - stats.alias_size_in_bytes + stats.temp_size_in_bytes)


def expected_peak(stats: Any) -> int:
    """memscope's peak for ``stats``: XLA's ``peak_memory_in_bytes`` where it covers
    :func:`device_held` (it replays heap-simulator traces), else :func:`device_held`
    (XLA:CPU records no trace and leaves the temporaries out of its figure)."""
    return max(int(stats.peak_memory_in_bytes), device_held(stats))


def assigned(lowered: Any) -> tuple[Any, Any, Any]:
    """XLA's own optimized module, its buffer assignment (decoded) and its text,
    for ``lowered`` compiled: from ``memory_analysis()`` where it carries the
    assignment (XLA:CPU), else from XLA's dump of the compile (XLA:GPU)."""
    from memscope import _compat
    from memscope.compiled.buffers import read_buffer_assignment
    from memscope.compiled.dump import compile_dumped
    from memscope.compiled.hlo import parse_module

    compiled = lowered.compile()
    data = _compat.executables.buffer_assignment_bytes(compiled.memory_analysis())
    if data is not None:
        module = parse_module(_compat.executables.optimized_hlo_module_protos(compiled)[0])
        return module, read_buffer_assignment(data, module), compiled.as_text()
    built = compile_dumped(lowered)
    assert built.module is not None and built.assignment is not None
    module = parse_module(built.module)
    return module, read_buffer_assignment(built.assignment, module), built.compiled.as_text()


def split_product(shape: str, rows: int, cols: int) -> int | None:
    """In how many parts XLA computed a float32 ``[rows, cols]`` matmul whose
    temporary has ``shape``: 1 where it is the product itself; k where it is
    ``f32[k,rows,cols]``, the partial products of a contraction XLA:GPU split k
    ways (split-K) and sums after, which XLA:CPU never does; ``None`` for any
    other shape."""
    found = re.fullmatch(rf"f32\[(?:(\d+),)?{rows},{cols}\]", shape)
    if found is None or (found.group(1) is not None and jax.default_backend() == "cpu"):
        return None
    return int(found.group(1) or 1)


def gemm_workspace() -> str:
    """A regex of what XLA:GPU may list before a matmul step's own temporaries
    among its largest buffers: the workspace of the cuBLAS GEMM it chose
    (``temporary dot_general s8[33554432] 32.0 MiB at LINE, `` on an H100);
    XLA:CPU has none, so nothing there."""
    if jax.default_backend() == "cpu":
        return ""
    return r"(?:temporary dot_general s8\[\d+\] [\d.]+ [KMG]iB at \S+:\d+, )?"
