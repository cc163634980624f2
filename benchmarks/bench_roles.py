"""What memory by role and the explained diff cost memscope's analysis, on a real-sized step.

Analyzes sample_programs/transformer_adam.py's step (8 layers, optax Adam, 405
input leaves, 1,000+ buffers live at its peak) with :func:`memscope.flow.analyze`
(the compile and every read of it, as ``memscope run`` analyzes a call), timing
apart the work that decides the roles (:mod:`memscope.analysis.roles`: the
arguments' roles, the results paired with them, each temporary's role, the sums)
and the diff of two such reports (:func:`memscope.check.peak.peak_changes`), and
prints them side by side with the analysis, and their share of it:

    python -m benchmarks.bench_roles --repeat 3

No figure here is asserted by the test suite; tests/test_benchmarks.py only
checks that it runs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

from benchmarks.models import transformer_adam
from benchmarks.sizes import add_size_options, parse_with_size
from memscope.analysis import live, roles
from memscope.check.peak import peak_changes
from memscope.flow import analyze

#: The functions that decide roles, as :mod:`memscope.analysis.live` calls them.
TIMED = ("argument_roles", "paired_results", "temporary_role", "output_role", "summed",
         "backward_start")

model = transformer_adam()


def _timed(spent: list[float], fun: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fun)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fun(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    add_size_options(parser, "real")
    args, _ = parse_with_size(parser)
    params = model.init_params(jax.random.key(0), args.layers, args.width, args.seq)
    opt_state = model.optimizer.init(params)
    batch = model.make_batch(jax.random.key(1), args.batch, args.seq)
    originals = {name: getattr(roles, name) for name in TIMED}
    totals, role_times, diff_times = [], [], []
    reports = []
    for _ in range(args.repeat):
        spent = [0.0]
        for name in TIMED:
            setattr(roles, name, _timed(spent, originals[name]))
        try:
            start = time.perf_counter()
            fn = analyze(jax.jit(model.train_step.__wrapped__), params, opt_state, batch)
            totals.append(time.perf_counter() - start)
        finally:
            for name, fun in originals.items():
                setattr(roles, name, fun)
        role_times.append(spent[0])
        reports.append(fn)
        start = time.perf_counter()
        peak_changes(reports[0].live_at_peak, fn.live_at_peak)
        diff_times.append(time.perf_counter() - start)
    live_ = reports[-1].live_at_peak
    assert live_ is not None and live is not None
    total = statistics.median(totals)
    print(f"transformer_adam: {args.layers} layers, width {args.width}; "
          f"{len(live_.parts)} parts at the peak, {len(live_.roles)} roles; "
          f"median of {args.repeat}")
    print(f"{'':28}{'seconds':>10}{'share':>10}")
    for name, seconds in (("analysis (analyze)", total),
                          ("roles", statistics.median(role_times)),
                          ("diff of two reports", statistics.median(diff_times))):
        print(f"{name:28}{seconds:>10.4f}{seconds / total:>10.2%}")


if __name__ == "__main__":
    main()
