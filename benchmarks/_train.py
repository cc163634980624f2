"""The training loop benchmarks/bench_real.py runs: sample_programs/transformer_adam.py's
step (a transformer with optax Adam), timed by the program itself.

Prints one JSON line: seconds from ``--started`` (the launcher's clock) to the end
of the first step, seconds of the steps after it, and the XLA compiles the
program's own thread made (memscope's worker compiles on its own thread).

A program, run as a script (plainly and under ``memscope run``) by bench_real,
which gives it the model's size (benchmarks/sizes.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import threading
import time
from pathlib import Path

import jax
from jax import monitoring

_SAMPLE = Path(__file__).resolve().parent.parent / "sample_programs" / "transformer_adam.py"
_spec = importlib.util.spec_from_file_location("transformer_adam", _SAMPLE)
assert _spec is not None and _spec.loader is not None
model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model)

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
compiles: list[str] = []


def _count(name: str, secs: float, **kwargs: object) -> None:
    if name == COMPILE_EVENT and threading.current_thread() is threading.main_thread():
        compiles.append(name)


monitoring.register_event_duration_secs_listener(_count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--started", type=float, required=True)
    parser.add_argument("--steps", type=int, default=100)
    for figure in ("--layers", "--width", "--batch", "--seq"):
        parser.add_argument(figure, type=int, required=True)
    args = parser.parse_args()
    params = model.init_params(jax.random.key(0), args.layers, args.width, args.seq)
    opt_state = model.optimizer.init(params)
    first = None
    start = time.time()
    for step in range(args.steps):
        batch = model.make_batch(jax.random.key(step), args.batch, args.seq)
        params, opt_state, loss = model.train_step(params, opt_state, batch)
        if first is None:
            loss.block_until_ready()
            first = time.time()
    loss.block_until_ready()
    end = time.time()
    assert first is not None
    print(json.dumps({
        "first_step_s": first - args.started,
        "steps_s": end - first,
        "first_step_compute_s": first - start,
        "inputs": len(jax.tree.leaves((params, opt_state, batch))),
        "compiles": len(compiles),
        "loss": float(loss)}))


if __name__ == "__main__":
    main()
