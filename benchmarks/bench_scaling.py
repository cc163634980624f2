"""memscope's cost as the number of distinct jitted signatures grows: it must be linear.

For N in 1, 10, 100, 1000: a loop calls N distinct signatures (one small
function at N input shapes) a few times each, plainly and inside memscope's
capture (as-written analysis only, as `memscope run --no-advice`), in one run,
in the order plain, memscope, memscope, plain so that neither side gains from
going first; each side's faster run counts. memscope's extra time per signature
should stay flat as N grows.

    python -m benchmarks.bench_scaling [--sizes 1,10,100,1000] [--calls 3]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

from memscope.capturing import capture


def workload(n: int, calls: int) -> float:
    """Seconds for ``calls`` calls at each of ``n`` signatures of a fresh function."""
    def step(x, w):  # fresh each time: nothing in JAX's caches
        return jnp.tanh(x @ w).sum(0), w * 0.99

    jitted = jax.jit(step)
    inputs = [(jnp.ones((1 + i, 8)), jnp.ones((8, 8))) for i in range(n)]
    start = time.perf_counter()
    for x, w in inputs:
        for _ in range(calls):
            jax.block_until_ready(jitted(x, w))
    return time.perf_counter() - start


def measured(n: int, calls: int) -> float:
    with capture():
        return workload(n, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100,1000")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    workload(1, 1)  # JAX's own start-up, outside the figures
    print(f"{'signatures':>10} {'plain s':>9} {'memscope s':>11} {'ratio':>7} "
          f"{'extra ms per signature':>23}")
    for n in (int(s) for s in args.sizes.split(",")):
        first, second = workload(n, args.calls), measured(n, args.calls)
        with_memscope = min(second, measured(n, args.calls))
        plain = min(first, workload(n, args.calls))
        extra = (with_memscope - plain) / n * 1000
        print(f"{n:>10} {plain:>9.2f} {with_memscope:>11.2f} {with_memscope / plain:>7.2f} "
              f"{extra:>23.2f}")


if __name__ == "__main__":
    main()
