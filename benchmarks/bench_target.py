"""What ``--target`` costs a program, beside JAX's own compile of its step.

Runs benchmarks/short/scanned_lm.py (a small language model, layers run by
``lax.scan``, optax Adam, two steps: compile-bound) plainly; JAX's own
deviceless compile of its step for each target given (benchmarks/_direct_compile.py:
``step.trace(...).lower(...).compile()``, the seconds of that call); and
``memscope run --target SPEC`` with memscope's compile cache empty (a first
run) and kept from an earlier run (a run again); interleaved, in one
invocation. Prints per command the median wall time and its ratio to python,
and from the report: memscope's analysis seconds, how long the report waited
once the program had ended, the XLA compiles for the target and their seconds,
those read from the cache instead, and the donation variants compiled. The
last lines hold a first run to python plus 1.5 times the direct compile.

    python -m benchmarks.bench_target --target tpu:v5e:2x2 --target gpu:h100 --repeat 3

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

from benchmarks._cache import first_run_env
from benchmarks.sizes import add_size_options, parse_with_size, size_options

HERE = Path(__file__).resolve().parent


def measure(command: list[str], report: str | None, cache: str | None = None) -> dict:
    """One timed run of ``command``: with memscope's compile cache empty, or the
    folder ``cache`` (a run again)."""
    started = time.time()
    done = subprocess.run(command, capture_output=True,
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


def direct(spec: str, shape: list[str]) -> float:
    """Seconds of JAX's own compile of the step for ``spec`` (a process of its own)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks._direct_compile", spec, *shape],
                          capture_output=True, text=True, env=first_run_env(),
                          cwd=HERE.parent)
    if done.returncode != 0:
        raise SystemExit(f"failed: JAX's compile for {spec}\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.splitlines()[-1])["compile_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True, help="SPEC, repeatable")
    add_size_options(parser, "target", ("layers", "width"))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    a, size = parse_with_size(parser)
    shape = size_options(size, ("layers", "width"))
    memscope_cmd = [sys.executable, "-m", "memscope"]  # this Python's, whatever is on PATH
    program = [str(HERE / "short" / "scanned_lm.py"), *shape, "--steps", str(a.steps)]
    with tempfile.TemporaryDirectory() as folder:
        todo: dict[str, tuple[list[str], str | None]] = {"python": ([sys.executable, *program],
                                                                     None)}
        caches: dict[str, str] = {}
        for i, spec in enumerate(a.target):
            out = os.path.join(folder, f"t{i}.json")
            command = [*memscope_cmd, "run", "-q", "--target", spec, "-o", out, *program]
            todo[f"JAX's compile of the step for {spec}"] = ([spec], None)
            todo[f"memscope run --target {spec}"] = (command, out)
            # A run again: the cache a first run left (made once, untimed).
            again = f"  again, cache kept (--target {spec})"
            todo[again], caches[again] = (command, out), os.path.join(folder, f"cache{i}")
            measure(command, out, caches[again])
        runs: dict[str, list[dict]] = {name: [] for name in todo}
        for _ in range(a.repeat):  # interleaved, so drift hits every command alike
            for name, (command, report) in todo.items():
                if name.startswith("JAX's compile"):
                    runs[name].append({"wall_s": direct(command[0], shape)})
                else:
                    runs[name].append(measure(command, report, caches.get(name)))
    medians = {name: statistics.median(r["wall_s"] for r in rs) for name, rs in runs.items()}
    base = medians["python"]
    print(f"scanned_lm.py {' '.join(shape)} --steps {a.steps}; {a.repeat} runs each, "
          f"interleaved; {os.cpu_count()} cores")
    print(f"{'command':<48} {'wall s':>7} {'ratio':>6} {'analysis s':>10} "
          f"{'after end s':>11} {'target compiles':>15} {'their s':>8} {'cached':>6} "
          f"{'variants':>8}")
    for name, rs in runs.items():
        def med(key: str, rs: list[dict] = rs) -> float:
            values = [r[key] for r in rs if key in r]
            return statistics.median(values) if values else float("nan")

        print(f"{name:<48} {medians[name]:>7.2f} {medians[name] / base:>6.2f} "
              f"{med('analysis_s'):>10.2f} {med('after_exit_s'):>11.2f} "
              f"{med('target_compiles'):>15.0f} {med('target_compile_s'):>8.2f} "
              f"{med('target_cache_hits'):>6.0f} {med('variant_compiles'):>8.0f}")
    for spec in a.target:
        compile_s = medians[f"JAX's compile of the step for {spec}"]
        first = medians[f"memscope run --target {spec}"]
        print(f"--target {spec}: a first run {first:.2f} s = python + "
              f"{(first - base) / compile_s:.2f} x JAX's compile ({compile_s:.2f} s); "
              f"python + 1.5 x is {base + 1.5 * compile_s:.2f} s")


if __name__ == "__main__":
    main()
