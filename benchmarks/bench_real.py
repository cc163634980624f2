"""What memscope costs a real-sized training run: wall time, first step, peak RSS, compiles.

Runs benchmarks/_train.py (sample_programs/transformer_adam.py's transformer with
optax Adam, timed by the program itself) plainly and under ``memscope run`` with
the advisor off, with the default options and with the checkpoint policies too
(``--remat``), interleaved, in one invocation, at
two shapes: a training run (enough steps that training dominates) and a long
compile (many layers, few steps). Prints, per command, the median wall time and
its ratio to python, the time to the end of the first step and how much later it
came than under python, the largest peak RSS and its ratio, and the XLA compiles
(the program's own plus the variants memscope compiled).

    python -m benchmarks.bench_real                 # the sizes docs/performance.md reports
    python -m benchmarks.bench_real --repeat 3

No figure here is asserted by the test suite; tests/test_benchmarks.py runs it tiny.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._cache import first_run_env
from benchmarks.sizes import SIZES, add_size_options, parse_with_size, size_options

HERE = Path(__file__).resolve().parent
COMMANDS = ("python", "memscope run --no-advice", "memscope run", "memscope run --remat")


@dataclass(frozen=True)
class Run:
    wall_s: float
    rss_bytes: int
    first_step_s: float
    inputs: int
    compiles: int
    after_exit_s: float | None
    memscope_host_bytes: int | None


def measure(command: list[str], report: str | None) -> Run:
    """One child process: wall seconds, peak RSS, and what it and its report say."""
    started = time.time()
    child = subprocess.Popen([*command, "--started", repr(started)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True,
                             env=first_run_env(PYTHONWARNINGS="ignore"))
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.time() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    said = json.loads(next(line for line in reversed(output.splitlines())
                           if line.startswith("{")))
    overhead = None
    if report is not None:
        with open(report) as f:
            overhead = json.load(f)["runtime"]["overhead"]
    return Run(wall_s=wall, rss_bytes=usage.ru_maxrss * 1024,  # Linux reports KiB
               first_step_s=said["first_step_s"], inputs=said["inputs"],
               compiles=said["compiles"] + (overhead["variant_compiles"] if overhead else 0),
               after_exit_s=overhead["after_exit_seconds"] if overhead else None,
               memscope_host_bytes=overhead["host_bytes"] if overhead else None)


def commands(shape: list[str], folder: str) -> dict[str, tuple[list[str], str | None]]:
    memscope = shutil.which("memscope") or str(Path(sys.executable).with_name("memscope"))
    train = str(HERE / "_train.py")
    off, on = os.path.join(folder, "off.json"), os.path.join(folder, "on.json")
    with_remat = os.path.join(folder, "remat.json")
    return {
        "python": ([sys.executable, train, *shape], None),
        "memscope run --no-advice": ([memscope, "run", "-q", "--no-advice", "-o", off,
                                      train, *shape], off),
        "memscope run": ([memscope, "run", "-q", "-o", on, train, *shape], on),
        "memscope run --remat": ([memscope, "run", "-q", "--remat", "-o", with_remat,
                                  train, *shape], with_remat),
    }


def bench(title: str, shape: list[str], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        todo = commands(shape, folder)
        runs: dict[str, list[Run]] = {name: [] for name in todo}
        for _ in range(repeat):  # interleaved, so drift hits every command alike
            for name, (command, report) in todo.items():
                runs[name].append(measure(command, report))
    base = runs["python"]
    base_wall = statistics.median(r.wall_s for r in base)
    base_first = statistics.median(r.first_step_s for r in base)
    base_rss = max(r.rss_bytes for r in base)
    print(f"{title}: {' '.join(shape)}; {base[0].inputs} input leaves; {repeat} runs each, "
          f"interleaved; {os.cpu_count()} cores")
    print(f"{'command':<26} {'wall s':>7} {'ratio':>6} {'1st step s':>10} {'later by':>9} "
          f"{'RSS MiB':>8} {'ratio':>6} {'compiles':>8} {'after end s':>11} "
          f"{'memscope MiB':>12}")
    for name, rs in runs.items():
        wall = statistics.median(r.wall_s for r in rs)
        first = statistics.median(r.first_step_s for r in rs)
        rss = max(r.rss_bytes for r in rs)
        after = [r.after_exit_s for r in rs if r.after_exit_s is not None]
        host = [r.memscope_host_bytes for r in rs if r.memscope_host_bytes is not None]
        print(f"{name:<26} {wall:>7.2f} {wall / base_wall:>6.2f} {first:>10.2f} "
              f"{first - base_first:>9.2f} {rss / 2**20:>8.1f} {rss / base_rss:>6.2f} "
              f"{rs[0].compiles:>8} "
              f"{statistics.median(after) if after else float('nan'):>11.2f} "
              f"{max(host) / 2**20 if host else float('nan'):>12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="steps of the training run")
    add_size_options(parser, "real")  # the training run's
    long = SIZES["long_narrow"]
    parser.add_argument("--compile-layers", type=int, default=long.layers,
                        help=f"layers of the long-compile run (its width is {long.width}, "
                             "3 steps)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", choices=("training", "long compile"),
                        help="run one of the two shapes")
    args, size = parse_with_size(parser)
    shapes = {
        "training": ["--steps", str(args.steps), *size_options(size)],
        "long compile": ["--steps", "3", *size_options(
            dataclasses.replace(long, layers=args.compile_layers))],
    }
    for i, (title, shape) in enumerate(shapes.items()):
        if args.only in (None, title):
            if i and args.only is None:
                print()
            bench(title, shape, args.repeat)


if __name__ == "__main__":
    main()
