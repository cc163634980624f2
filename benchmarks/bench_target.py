"""What ``--target`` costs a real-sized training run, and where the time goes.

Runs benchmarks/_train.py (the bundled transformer with optax Adam) plainly, under
``memscope run`` and under ``memscope run --target SPEC`` for each target given,
interleaved, in one invocation, and prints per command the median wall time and
its ratio to python, and from the report: memscope's analysis seconds (its
worker, beside the program), how long the report waited once the program had
ended, the XLA compiles for the target and their seconds (each with XLA's dump
of it), those read from memscope's compile cache instead, and the donation variants
compiled. Each run starts with the cache empty (:mod:`_cache`: a hit is a
compile the run asked for twice), but the rows "again, cache kept": a run
again, with the cache an earlier run of the same command left.

    python benchmarks/bench_target.py --target tpu:v5p:2x2x1     # needs libtpu
    python benchmarks/bench_target.py --target gpu:h100          # needs the CUDA plugin

No figure here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cache import first_run_env

HERE = Path(__file__).resolve().parent


def measure(command: list[str], report: str | None, cache: str | None = None) -> dict:
    """One timed run of ``command``: with memscope's compile cache empty, or the
    folder ``cache`` (a run again)."""
    started = time.time()
    done = subprocess.run([*command, "--started", repr(started)], capture_output=True,
                          text=True, env=first_run_env(cache, PYTHONWARNINGS="ignore"))
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    run: dict = {"wall_s": wall}
    if report is not None:
        with open(report) as f:
            o = json.load(f)["runtime"]["overhead"]
        run.update(analysis_s=o["analysis_seconds"], after_exit_s=o["after_exit_seconds"],
                   variant_compiles=o["variant_compiles"],
                   target_compiles=o.get("target_compiles", 0),
                   target_compile_s=o.get("target_compile_seconds", 0.0),
                   target_cache_hits=o.get("target_cache_hits", 0))
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True, help="SPEC, repeatable")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=1)
    a = parser.parse_args()
    shape = ["--steps", str(a.steps), "--layers", str(a.layers), "--width", str(a.width)]
    memscope_cmd = [sys.executable, "-m", "memscope"]  # this Python's, whatever is on PATH
    train = str(HERE / "_train.py")
    with tempfile.TemporaryDirectory() as folder:
        todo: dict[str, tuple[list[str], str | None]] = {"python": ([sys.executable, train,
                                                                     *shape], None)}
        plain = os.path.join(folder, "plain.json")
        todo["memscope run"] = ([*memscope_cmd, "run", "-q", "-o", plain, train, *shape], plain)
        caches: dict[str, str] = {}
        for i, spec in enumerate(a.target):
            out = os.path.join(folder, f"t{i}.json")
            command = [*memscope_cmd, "run", "-q", "--target", spec, "-o", out, train, *shape]
            todo[f"memscope run --target {spec}"] = (command, out)
            # A run again: the cache a first run left (made once, untimed).
            again = f"  again, cache kept (--target {spec})"
            todo[again], caches[again] = (command, out), os.path.join(folder, f"cache{i}")
            measure(command, out, caches[again])
        runs: dict[str, list[dict]] = {name: [] for name in todo}
        for _ in range(a.repeat):  # interleaved, so drift hits every command alike
            for name, (command, report) in todo.items():
                runs[name].append(measure(command, report, caches.get(name)))
    base = statistics.median(r["wall_s"] for r in runs["python"])
    print(f"training: {' '.join(shape)}; {a.repeat} runs each, interleaved; "
          f"{os.cpu_count()} cores")
    print(f"{'command':<44} {'wall s':>7} {'ratio':>6} {'analysis s':>10} "
          f"{'after end s':>11} {'target compiles':>15} {'their s':>8} {'cached':>6} "
          f"{'variants':>8}")
    for name, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)

        def med(key: str, rs: list[dict] = rs) -> float:
            values = [r[key] for r in rs if key in r]
            return statistics.median(values) if values else float("nan")

        print(f"{name:<44} {wall:>7.2f} {wall / base:>6.2f} {med('analysis_s'):>10.2f} "
              f"{med('after_exit_s'):>11.2f} {med('target_compiles'):>15.0f} "
              f"{med('target_compile_s'):>8.2f} {med('target_cache_hits'):>6.0f} "
              f"{med('variant_compiles'):>8.0f}")


if __name__ == "__main__":
    main()
