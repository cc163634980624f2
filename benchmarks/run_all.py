"""Run every benchmark in turn and print what each measured (ratios, side by side).

    python benchmarks/run_all.py            # the sizes docs/performance.md reports
    python benchmarks/run_all.py --quick    # tiny sizes: checks that they all run

Each benchmark is its own script (run one alone for its options); this only runs
them one after another, in fresh interpreters, so one's caches do not help another.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = {
    "bench_overhead.py": ["--steps", "300", "--repeat", "3"],
    "bench_analysis.py": ["--layers", "24", "--repeat", "1"],
    "bench_variants.py": ["--layers", "8", "--repeat", "3"],
    "bench_scaling.py": ["--sizes", "1,10,100,1000"],
    "bench_buffers.py": [],
    "bench_real.py": [],
    "bench_load.py": ["--functions", "2000", "--leaves", "55"],
    "bench_reports.py": ["--sizes", "405,1000,5000,20000"],
    "bench_remat.py": ["--layers", "8", "--repeat", "3"],
    "bench_short.py": ["--repeat", "3"],
    "bench_plan.py": ["--memory", "200MiB", "--verify"],
    "bench_fit_frameworks.py": ["--layers", "8", "--width", "1024", "--memory", "512MiB",
                                "--repeat", "3"],
}
QUICK = {
    "bench_overhead.py": ["--steps", "1", "--repeat", "1"],
    "bench_analysis.py": ["--layers", "1", "--width", "32", "--repeat", "1"],
    "bench_variants.py": ["--layers", "1", "--width", "32", "--repeat", "1"],
    "bench_scaling.py": ["--sizes", "1,2", "--calls", "1"],
    "bench_buffers.py": ["--layers", "2", "--width", "8", "--repeat", "1"],
    "bench_real.py": ["--steps", "2", "--layers", "1", "--width", "32",
                      "--compile-layers", "1"],
    "bench_load.py": ["--functions", "3", "--leaves", "2"],
    "bench_reports.py": ["--sizes", "50", "--repeat", "1"],
    "bench_remat.py": ["--layers", "1", "--width", "32", "--repeat", "1"],
    "bench_short.py": ["--only", "eqx_mlp.py", "--repeat", "1"],
    "bench_plan.py": ["--layers", "1", "--width", "32", "--seq", "16", "--memory", "2MiB",
                      "--verify"],
    "bench_fit_frameworks.py": ["--layers", "1", "--width", "32", "--memory", "2MiB"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check they run")
    args = parser.parse_args()
    failed = []
    for script, options in (QUICK if args.quick else FULL).items():
        command = [sys.executable, str(HERE / script), *options]
        print(f"$ python benchmarks/{script} {' '.join(options)}", flush=True)
        if subprocess.run(command).returncode != 0:
            failed.append(script)
        print(flush=True)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
