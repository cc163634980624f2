"""What the rematerialization analysis costs next to the compile JAX already did.

For sample_programs/transformer_adam.py's training step (8 layers, optax Adam,
405 input leaves): JAX's own trace-and-compile of the program, then memscope's
work for it, side by side as ratios: tracing again to list the residuals
(JAX's ``saved_residuals`` of the ``value_and_grad``), and per checkpoint
policy tracing again, lowering and compiling (never running). All of it runs in
memscope's worker thread off the program's path; this measures it alone, on
the calling thread, one piece after another.

    python -m benchmarks.bench_remat [--size real] [--layers 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

from benchmarks.models import TRANSFORMER_ADAM, load_program
from benchmarks.sizes import Size, add_size_options, parse_with_size
from memscope.variants import remat


def timings(size: Size) -> dict[str, float]:
    """Seconds for JAX's compile of the step and for each piece of the analysis."""
    t = load_program(TRANSFORMER_ADAM)  # afresh: nothing of it in JAX's caches
    params = t.init_params(jax.random.key(0), size.layers, size.width, size.seq)
    call = ((params, t.optimizer.init(params), t.make_batch(jax.random.key(1), size.batch,
                                                            size.seq)), {})
    call = remat.abstract(call)

    def fresh(*a):  # a new function each run: JAX's own trace and compile are real
        return t.train_step.__wrapped__(*a)

    start = time.perf_counter()
    jax.jit(fresh).trace(*call[0]).lower().compile()
    result = {"JAX's trace and compile of the step": time.perf_counter() - start}
    start = time.perf_counter()
    found, _ = remat.find(t.train_step.__wrapped__, {}, call)
    result[f"residuals ({sum(len(f.residuals) for f in found)} listed)"] = (
        time.perf_counter() - start)
    for policy in remat.POLICIES:
        start = time.perf_counter()
        traced, lowered = remat.lower_with_policy(t.train_step.__wrapped__, {}, call, policy)
        v = remat.measure(traced, lowered, policy, lambda thunk: thunk())
        assert v.error is None, v.error
        result[f"policy {policy}"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_options(parser, "real")
    parser.add_argument("--repeat", type=int, default=3)
    args, size = parse_with_size(parser)
    runs = [timings(size) for _ in range(args.repeat)]
    names = list(runs[0])
    medians = {n: statistics.median(r[n] for r in runs) for n in names}
    base = medians[names[0]]
    print(f"transformer_adam training step: {args.layers} layers, width {args.width}, "
          f"{args.repeat} runs, {os.cpu_count()} cores")
    for name in names:
        print(f"{name:<40} {medians[name] * 1000:9.1f} ms  ratio {medians[name] / base:5.2f}")
    total = sum(medians[n] for n in names[1:])
    print(f"{'the whole analysis':<40} {total * 1000:9.1f} ms  ratio {total / base:5.2f}")


if __name__ == "__main__":
    main()
