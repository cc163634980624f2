"""What memscope costs a training script: wall time and peak host memory (RSS).

Runs a sample program plainly (``python SCRIPT``) and under ``memscope run``
(with and without the advisor), interleaved, in one invocation, and prints
ratios to the plain run: medians of wall time, and the largest RSS of each.

    python -m benchmarks.bench_overhead --steps 200 --repeat 5
    python -m benchmarks.bench_overhead --program benchmarks/mnist_like.py --repeat 3

``--program`` runs another program, with no arguments (benchmarks/mnist_like.py:
JAX's MNIST example's way of training, thousands of small calls).

No figure here is asserted by the test suite; tests/test_benchmarks.py only
checks that the runner works.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._cache import first_run_env

ROOT = Path(__file__).resolve().parent.parent


def measure(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=first_run_env(PYTHONWARNINGS="ignore"))
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return seconds, usage.ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", default="forgot_to_donate.py")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--program", help="a program to run instead of --sample (no arguments)")
    args = parser.parse_args()
    if args.program:
        script, given, title = str(Path(args.program).resolve()), [], Path(args.program).name
    else:
        script = str(ROOT / "sample_programs" / args.sample)
        given, title = ["--steps", str(args.steps)], f"{args.sample}, {args.steps} steps"
    memscope = shutil.which("memscope") or str(Path(sys.executable).with_name("memscope"))
    variants = {
        "python": [sys.executable, script, *given],
        "memscope run --no-advice": [memscope, "run", "-q", "--no-advice", script, *given],
        "memscope run": [memscope, "run", "-q", script, *given],
    }
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in variants}
    for _ in range(args.repeat):  # interleaved, so drift hits every variant alike
        for name, command in variants.items():
            results[name].append(measure(command))
    base_time = statistics.median(t for t, _ in results["python"])
    base_rss = max(r for _, r in results["python"])
    print(f"{title}, {args.repeat} runs each, interleaved")
    print(f"{'command':<26} {'median s':>9} {'time ratio':>11} {'peak RSS MiB':>13} "
          f"{'RSS ratio':>10}")
    for name, runs in results.items():
        seconds = statistics.median(t for t, _ in runs)
        rss = max(r for _, r in runs)
        print(f"{name:<26} {seconds:>9.2f} {seconds / base_time:>11.2f} "
              f"{rss / 2**20:>13.1f} {rss / base_rss:>10.2f}")


if __name__ == "__main__":
    main()
