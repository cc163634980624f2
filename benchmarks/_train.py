"""The training loop benchmarks/bench_real.py runs: sample_programs/transformer_adam.py's
step (a transformer with optax Adam), timed by the program itself.

Prints one JSON line: seconds from ``--started`` (the launcher's clock) to the end
of the first step, seconds of the steps after it, and the XLA compiles the
program's own thread made (memscope's worker compiles on its own thread).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sample_programs"))

import jax
import transformer_adam as model
from jax import monitoring

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
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
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
