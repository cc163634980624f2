"""The advisor's compiles next to the compile JAX already did, one after another or at once.

For a transformer training step: JAX's own compile of the program; memscope's
two variant compiles for it (no donation is the program as written here, so it
is not compiled again; "donate all" and the advised donation are), first one
after the other, then side by side on the machine's cores; and the number of
XLA compiles a captured call costs with the advisor on and off, counted from
JAX's own monitoring events.

    python -m benchmarks.bench_variants [--size wide] [--layers 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
from jax import monitoring

from benchmarks.models import plain_step_args, plain_train_step
from benchmarks.sizes import Size, add_size_options, parse_with_size
from memscope.capturing import capture
from memscope.compiled.targets.here import HereTarget
from memscope.variants.compile import compile_variants, lower_variant

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiles: list[str] = []
monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: _compiles.append(name) if name == COMPILE_EVENT else None)


def variant_times(size: Size) -> tuple[float, float, float]:
    """(JAX's compile, two variants one after another, the same two at once), seconds."""
    step_args = plain_step_args(size)

    def fresh(*a):  # a new function each run: JAX's own compile is a real one
        return plain_train_step(*a)

    jitted = jax.jit(fresh)
    lowered = jitted.trace(*step_args).lower()
    start = time.perf_counter()
    lowered.compile()
    jax_s = time.perf_counter() - start
    n = len(jax.tree_util.tree_leaves(step_args))
    n_params = len(jax.tree_util.tree_leaves(step_args[:2]))
    masks = [(True,) * n, (True,) * n_params + (False,) * (n - n_params)]
    here = HereTarget()  # this machine, as a run without --target compiles them
    timings = []
    for workers in (1, len(masks)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "donate all" leaves x unusable
            traced = jitted.trace(*step_args)
            pending = [lower_variant(traced, m, here) for m in masks]
        start = time.perf_counter()
        results = compile_variants(pending, here, workers=workers)  # (no cache: real compiles)
        timings.append(time.perf_counter() - start)
        assert not any(isinstance(r, Exception) for r in results)
    return jax_s, timings[0], timings[1]


def compiles_per_call(advise: bool, size: Size, *, remat: bool = False) -> int:
    """XLA compiles for the first call of a function never compiled before
    (with ``remat``, the checkpoint policies too)."""
    step_args = plain_step_args(size)

    def fresh(*a):  # a new function, so nothing is in JAX's caches for it
        return plain_train_step(*a)

    before = len(_compiles)
    with warnings.catch_warnings(), capture(advise=advise,
                                            remat_flops=0.35 if remat else None):
        warnings.simplefilter("ignore")
        jax.jit(fresh)(*step_args)
    return len(_compiles) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_options(parser, "wide")
    parser.add_argument("--repeat", type=int, default=3)
    args, size = parse_with_size(parser)
    runs = [variant_times(size) for _ in range(args.repeat)]
    jax_s, seq_s, par_s = (statistics.median(r[i] for r in runs) for i in range(3))
    off = compiles_per_call(False, size)
    on = compiles_per_call(True, size)
    with_remat = compiles_per_call(True, size, remat=True)
    print(f"transformer training step: {args.layers} layers, width {args.width}, "
          f"{args.repeat} runs, {os.cpu_count()} cores")
    print(f"JAX's compile of the program        {jax_s * 1000:9.1f} ms")
    print(f"2 variants, one after the other     {seq_s * 1000:9.1f} ms  "
          f"(ratio to JAX's compile {seq_s / jax_s:.2f})")
    print(f"2 variants, side by side            {par_s * 1000:9.1f} ms  "
          f"(ratio to JAX's compile {par_s / jax_s:.2f}, speed-up {seq_s / par_s:.2f})")
    print(f"XLA compiles for a new signature under memscope with the checkpoint policies "
          f"too: {with_remat}")
    print(f"XLA compiles for a new signature under memscope: advisor off {off} "
          f"(the program's own), advisor on {on}")


if __name__ == "__main__":
    main()
