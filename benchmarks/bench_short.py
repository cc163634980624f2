"""What ``memscope run`` costs short, compile-bound programs: the kind people run
in CI and in notebooks, where memscope's own compiles cannot hide behind
training steps.

Runs each program of ``benchmarks/short/`` (written for this benchmark, a few
seconds each: an MLP with optax, DP-SGD with per-example gradients, a Flax NNX
CNN, an Equinox MLP, a short transformer LM run, a scanned LM's two steps: the
step bench_target.py compiles for targets) plainly and under ``memscope
run`` with its default options, interleaved, in one invocation: a first run
(memscope's cache of its variants' compiles empty, a new one for each run: what
a program run for the first time costs) and a run again (the cache holding the
program's variants from a run before it: memscope.compiled.cache). Prints, per
program, the median wall time of each and the ratios, the XLA compiles memscope
added in a first run (its advised donations), how long the report waited after
the program ended, and memscope's analysis time; then a markdown table for
docs/performance.md.

    python -m benchmarks.bench_short              # 3 runs each, interleaved
    python -m benchmarks.bench_short --repeat 5

Both commands run with ``JAX_PLATFORMS=cpu`` (an installed libtpu would start
its TPU client in each). No figure here is asserted by the test suite;
tests/test_benchmarks.py runs it once on one program.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._cache import first_run_env

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p.name for p in (HERE / "short").glob("*.py"))


def _run(command: list[str], cache: str | None = None) -> float:
    """Seconds of ``command``; memscope's cache in ``cache``, else a new, empty one."""
    env = first_run_env(cache, JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - started


def measure(program: str, repeat: int, folder: str) -> dict[str, object]:
    memscope = shutil.which("memscope") or str(Path(sys.executable).with_name("memscope"))
    path = str(HERE / "short" / program)
    report, again_report = (os.path.join(folder, f"{program}{s}.json") for s in ("", "-again"))
    warm = os.path.join(folder, f"{program}-cache")
    _run([memscope, "run", "-q", "-o", again_report, path], warm)  # fills the cache
    plain, under, again = [], [], []
    overhead: dict[str, float] = {}
    for _ in range(repeat):  # interleaved: a change in the machine's load hits all three
        plain.append(_run([sys.executable, path]))
        under.append(_run([memscope, "run", "-q", "-o", report, path]))
        again.append(_run([memscope, "run", "-q", "-o", again_report, path], warm))
        with open(report) as f:
            overhead = json.load(f)["runtime"]["overhead"]
    with open(again_report) as f:
        hits = json.load(f)["runtime"]["overhead"].get("variant_cache_hits", 0)
    python_s, memscope_s, again_s = (statistics.median(x) for x in (plain, under, again))
    return {"program": program, "python_s": python_s, "memscope_s": memscope_s,
            "ratio": memscope_s / python_s, "again_s": again_s, "again_ratio": again_s / python_s,
            "variant_compiles": overhead["variant_compiles"], "cache_hits": hits,
            "after_exit_s": overhead["after_exit_seconds"],
            "analysis_s": overhead["analysis_seconds"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", action="append", choices=PROGRAMS,
                        help="run only this program (repeatable)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for program in args.only or PROGRAMS:
            row = measure(program, args.repeat, folder)
            rows.append(row)
            print(f"{program:<20} python {row['python_s']:6.2f} s  memscope run "
                  f"{row['memscope_s']:6.2f} s  ratio {row['ratio']:.2f}  again "
                  f"{row['again_s']:6.2f} s  ratio {row['again_ratio']:.2f}", flush=True)
    print()
    print(f"| program | python s | memscope run s | ratio | again s | ratio again | "
          f"advised compiles | read from the cache again | report waited s | analysis s |"
          f"  (median of {args.repeat}, interleaved)")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| `{r['program']}` | {r['python_s']:.2f} | {r['memscope_s']:.2f} | "
              f"{r['ratio']:.2f} | {r['again_s']:.2f} | {r['again_ratio']:.2f} | "
              f"{r['variant_compiles']} | {r['cache_hits']} | {r['after_exit_s']:.2f} | "
              f"{r['analysis_s']:.2f} |")


if __name__ == "__main__":
    main()
