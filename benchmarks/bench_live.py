"""What tracking device memory over the run costs a real-sized training loop.

Runs sample_programs/transformer_adam.py's step (8 layers, optax Adam, 405 input
leaves, about 800 live arrays) plainly and under :func:`memscope.capturing`, in
one process, and prints side by side the median step time of each, their ratio,
the samples of ``jax.live_arrays()`` taken before calls (memscope.capturing.residency),
what one sample costs at that count of live arrays, and what the per-call
record (the call's output ids, for naming what made each array) costs:

    python -m benchmarks.bench_live --steps 60

The first step (the compile) is left out of every median. No figure here is
asserted by the test suite; tests/test_benchmarks.py only checks that it runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

from benchmarks.models import transformer_adam
from benchmarks.sizes import add_size_options, parse_with_size
from memscope.capturing import capture, residency

model = transformer_adam()


def steps(args: argparse.Namespace, step: object, after: object = None) -> list[float]:
    """Seconds of each step after the first; ``after()`` runs while the state is alive."""
    params = model.init_params(jax.random.key(0), args.layers, args.width, args.seq)
    opt_state = model.optimizer.init(params)
    times = []
    for i in range(args.steps):
        batch = model.make_batch(jax.random.key(i), args.batch, args.seq)
        start = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, batch)  # type: ignore[operator]
        loss.block_until_ready()
        times.append(time.perf_counter() - start)
    if after is not None:
        after()  # type: ignore[operator]
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    add_size_options(parser, "real")
    args, _ = parse_with_size(parser)
    one = residency.RunSampler()
    plain = steps(args, model.train_step, lambda: one.at_end(args.steps))
    with capture(advise=False) as session:
        measured = steps(args, jax.jit(model.train_step.__wrapped__))
    sampler = session.live_sampler
    samples = sampler.samples
    before_calls = sum(not s.end for s in samples)
    live = max(s.count for s in samples)
    single = one.seconds
    params = model.init_params(jax.random.key(0), args.layers, args.width, args.seq)
    out = (params, model.optimizer.init(params), None)
    start = time.perf_counter()
    for _ in range(1000):
        tuple(map(id, jax.tree_util.tree_leaves(out)))
    record = (time.perf_counter() - start) / 1000
    leaves = len(jax.tree_util.tree_leaves(out))
    base, under = statistics.median(plain), statistics.median(measured)
    print(f"transformer_adam: {args.layers} layers, width {args.width}, {args.steps} steps, "
          f"{live} live arrays")
    print(f"{'run':<22} {'median step ms':>15} {'ratio':>7}")
    print(f"{'python':<22} {base * 1000:>15.2f} {1:>7.2f}")
    print(f"{'memscope capture':<22} {under * 1000:>15.2f} {under / base:>7.2f}")
    print(f"samples before {before_calls} of {args.steps} calls and at the end; sampling and "
          f"per-call records {sampler.seconds * 1000:.2f} ms in all, "
          f"{sampler.seconds / sum(measured) * 100:.2f}% of the steps' time; "
          f"one sample at {one.samples[0].count} arrays (no capture running): "
          f"{single * 1000:.2f} ms; one call's record ({leaves} output leaves): "
          f"{record * 1e6:.1f} us")


if __name__ == "__main__":
    main()
