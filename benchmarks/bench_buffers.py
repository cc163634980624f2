"""How long memscope's buffer breakdown takes next to XLA's compile of the same program.

Builds a deep, unrolled MLP training step (forward, backward and an SGD update
per layer, each layer with its own parameters so XLA cannot share code between
layers), compiles it once, then times what memscope adds for one compiled
function: decoding the buffer assignment and the optimized module, attributing
every logical buffer to its instruction and source line, and summarizing it;
then, apart, replaying the schedule for memory over program order and what is
live at its peak (memscope.compiled.liveness, memscope.analysis.live).

Run:  python -m benchmarks.bench_buffers [--size deep] [--layers N] [--repeat R]

A runnable script, not a test: no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

from benchmarks.sizes import add_size_options, parse_with_size
from memscope import _compat
from memscope.analysis.live import memory_view
from memscope.compiled.buffers import breakdown, read_buffer_assignment
from memscope.compiled.hlo import parse_module
from memscope.compiled.liveness import schedule_liveness
from memscope.compiled.raw import compile_uncached
from memscope.compiled.read import memory_figures


def make_step(layers: int):
    def loss(params, x):
        h = x
        for w, b in params:
            h = jnp.tanh(h @ w + b)
            h = h * jax.nn.sigmoid(h)  # a second op per layer, so layers differ
        return jnp.mean(h ** 2)

    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads, strict=True)], value

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # unrolled layers: the deep size's 160 give about ten thousand instructions on CPU
    add_size_options(parser, "deep", ("layers", "width"))
    parser.add_argument("--repeat", type=int, default=5,
                        help="times to repeat memscope's part (the median is printed)")
    args, _ = parse_with_size(parser, argv)

    keys = jax.random.split(jax.random.key(0), args.layers)
    params = [(jax.random.normal(k, (args.width, args.width)) * 0.1,
               jnp.zeros((args.width,))) for k in keys]
    x = jnp.ones((32, args.width))

    lowered = jax.jit(make_step(args.layers)).lower(params, x)
    start = time.perf_counter()
    compiled = compile_uncached(lowered)
    compile_s = time.perf_counter() - start

    start = time.perf_counter()
    stats = compiled.memory_analysis()
    module_bytes = _compat.executables.optimized_hlo_module_protos(compiled)[0]
    assignment_bytes = _compat.executables.buffer_assignment_bytes(stats)
    fetch_s = time.perf_counter() - start
    if assignment_bytes is None:
        print("this jaxlib reports no buffer assignment", file=sys.stderr)
        return 1

    memory = memory_figures(stats)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        module = parse_module(module_bytes)
        assignment = read_buffer_assignment(assignment_bytes, module)
        result = breakdown(assignment, memory)
        times.append(time.perf_counter() - start)
    decode_s = statistics.median(times)
    live_times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        liveness = schedule_liveness(module, assignment)
        if liveness is not None:
            timeline, live = memory_view(liveness, assignment, memory)
        live_times.append(time.perf_counter() - start)
    live_s = statistics.median(live_times)

    instructions = sum(len(c.instructions) for c in module.computations)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, "
          f"{args.layers} layers of width {args.width}")
    print(f"optimized module: {instructions} instructions in "
          f"{len(module.computations)} computations, {len(assignment.buffers)} logical "
          f"buffers, {len(assignment.allocations)} allocations "
          f"({len(module_bytes) + len(assignment_bytes)} bytes of protos)")
    print(f"temporaries: {result.temp_bytes} bytes, reconciled with XLA: {result.reconciled}")
    print(f"XLA compile:                      {compile_s * 1e3:10.1f} ms")
    print(f"fetch protos (memory_analysis):   {fetch_s * 1e3:10.1f} ms")
    print(f"memscope decode + attribution:    {decode_s * 1e3:10.1f} ms "
          f"(median of {args.repeat})")
    print(f"memscope liveness + live at peak: {live_s * 1e3:10.1f} ms "
          f"(median of {args.repeat})")
    print(f"ratio decode / compile: {decode_s / compile_s:.4f} "
          f"({decode_s / compile_s * 100:.2f}% of the compile time)")
    if liveness is not None:
        print(f"schedule: {liveness.steps} entry steps, peak {timeline.peak_bytes} bytes at "
              f"step {timeline.peak_step}, {len(live.buffers) + live.more_buffers} buffers "
              "live there")
    print(f"ratio liveness / compile: {live_s / compile_s:.4f} "
          f"({live_s / compile_s * 100:.2f}% of the compile time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
