"""Run every benchmark in turn and print what each measured (ratios, side by side).

    python -m benchmarks.run_all            # the sizes docs/performance.md reports
    python -m benchmarks.run_all --quick    # the small size: checks that they all run

Each benchmark is its own module (run one alone for its options); this only runs
them one after another, in fresh interpreters, so one's caches do not help another.
Each runs at its own default size (benchmarks/sizes.py), or ``--size small``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: each benchmark, with the options of a full run beside its default size
FULL = {
    "bench_overhead": ["--steps", "300", "--repeat", "3"],
    "bench_analysis": ["--repeat", "1"],
    "bench_variants": ["--repeat", "3"],
    "bench_scaling": ["--sizes", "1,10,100,1000"],
    "bench_buffers": [],
    "bench_real": [],
    "bench_load": ["--functions", "2000", "--leaves", "55"],
    "bench_reports": ["--sizes", "405,1000,5000,20000"],
    "bench_remat": ["--repeat", "3"],
    "bench_short": ["--repeat", "3"],
    "bench_plan": ["--memory", "200MiB", "--verify"],
    "bench_fit_frameworks": ["--memory", "512MiB", "--repeat", "3"],
}
SMALL = ["--size", "small"]
#: ... and of a quick one: the small size, where a benchmark takes a model's size
QUICK = {
    "bench_overhead": ["--steps", "1", "--repeat", "1"],
    "bench_analysis": [*SMALL, "--repeat", "1"],
    "bench_variants": [*SMALL, "--repeat", "1"],
    "bench_scaling": ["--sizes", "1,2", "--calls", "1"],
    "bench_buffers": [*SMALL, "--repeat", "1"],
    "bench_real": [*SMALL, "--steps", "2", "--compile-layers", "1"],
    "bench_load": ["--functions", "3", "--leaves", "2"],
    "bench_reports": ["--sizes", "50", "--repeat", "1"],
    "bench_remat": [*SMALL, "--repeat", "1"],
    "bench_short": ["--only", "eqx_mlp.py", "--repeat", "1"],
    "bench_plan": [*SMALL, "--memory", "2MiB", "--verify"],
    "bench_fit_frameworks": [*SMALL, "--memory", "2MiB"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check they run")
    args = parser.parse_args()
    failed = []
    for name, options in (QUICK if args.quick else FULL).items():
        command = [sys.executable, "-m", f"benchmarks.{name}", *options]
        print(f"$ python -m benchmarks.{name} {' '.join(options)}", flush=True)
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            failed.append(name)
        print(flush=True)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
