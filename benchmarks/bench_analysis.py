"""What memscope's analysis costs next to XLA's compile of a large program.

A 24-layer transformer training step (benchmarks.models' plain one, unrolled)
is compiled as JAX compiles it for the program; then, side by side in one run, memscope's as-written
analysis of that compiled program is timed: reading it back through JAX's
caches (trace, lower and compile are cache hits), the memory figures, the HLO
facts, the fates, the reasons and the buffer breakdown. The donation variants
are compiles of their own and are measured by bench_variants.py.

    python -m benchmarks.bench_analysis [--size long] [--layers 24] [--repeat 3]

No figure is asserted by the test suite; tests/test_benchmarks.py runs it tiny.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

from benchmarks.models import plain_step_args, plain_train_step
from benchmarks.sizes import Size, add_size_options, parse_with_size
from memscope import _compat
from memscope.analysis import advice
from memscope.analysis.fates import classify
from memscope.compiled.buffers import breakdown
from memscope.compiled.read import read_compiled
from memscope.program.sites import display_path


def analyze_once(size: Size) -> tuple[float, float, int]:
    """(XLA compile seconds, memscope analysis seconds, HLO instructions)."""
    step_args = plain_step_args(size)
    jitted = jax.jit(plain_train_step, donate_argnums=(0, 1))  # a fresh function: a real compile
    lowered = jitted.trace(*step_args).lower()
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    instructions = sum(1 for line in compiled.as_text().splitlines() if " = " in line)
    shardings = [a.sharding for a in jax.tree_util.tree_leaves(step_args)]
    start = time.perf_counter()
    facts = read_compiled(jitted, step_args, {}, shardings=shardings)
    inputs, outputs = classify(facts.program)
    inputs = advice.annotate(inputs, outputs, same_size_donors=_compat.SAME_SIZE_DONORS)
    buffers = breakdown(facts.buffers, facts.memory, display_path) if facts.buffers else None
    analysis_s = time.perf_counter() - start
    assert buffers is not None and len(inputs) == len(jax.tree_util.tree_leaves(step_args))
    return compile_s, analysis_s, instructions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_options(parser, "long")
    parser.add_argument("--repeat", type=int, default=3)
    args, size = parse_with_size(parser)
    runs = [analyze_once(size) for _ in range(args.repeat)]
    compile_s = statistics.median(r[0] for r in runs)
    analysis_s = statistics.median(r[1] for r in runs)
    print(f"transformer training step: {args.layers} layers, width {args.width}, "
          f"{runs[0][2]} HLO instructions, {args.repeat} runs")
    print(f"XLA compile (median)        {compile_s * 1000:10.1f} ms")
    print(f"memscope analysis (median)  {analysis_s * 1000:10.1f} ms")
    print(f"ratio analysis / compile    {analysis_s / compile_s:10.4f}")


if __name__ == "__main__":
    main()
