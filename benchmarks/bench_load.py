"""How long loading a large saved report takes, against reading its JSON alone.

A real report of one transformer training step (``analyze()`` with the advice,
so every leaf has its fate in the function and in each variant) is copied into
``--functions`` functions and saved; then, side by side in one run, the time and
peak Python memory of ``json.loads`` of that file and of ``load_report`` (what
``memscope show``, ``diff`` and ``check`` start with) are printed, with their
ratio.

    python benchmarks/bench_load.py [--functions 2000] [--layers 2]

No figure is asserted by the test suite; tests/test_benchmarks.py runs it tiny.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
from _models import train_step, transformer_step_args

from memscope.analysis import analyze, environment
from memscope.report import Report, load_report


def large_report(functions: int, layers: int) -> Report:
    """One analyzed training step, as ``functions`` functions of one report."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "donate all" leaves the batch unusable
        fn = analyze(jax.jit(train_step), *transformer_step_args(layers, 32), advise="full")
    copies = tuple(dataclasses.replace(fn, name=f"{fn.name}_{i}") for i in range(functions))
    return Report(memscope_version="bench", environment=environment(), run=None,
                  functions=copies)


def timed(load: Callable[[], Any]) -> tuple[float, int]:
    """Seconds of one ``load()``, and peak bytes of Python memory of another (timed
    apart: tracing every allocation slows the load several times)."""
    start = time.perf_counter()
    result = load()
    seconds = time.perf_counter() - start
    del result
    tracemalloc.start()
    result = load()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    report = large_report(args.functions, args.layers)
    leaves = sum(len(f.inputs) + len(f.outputs) for f in report.functions)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "report.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(report.to_json(indent=None))
        size = os.path.getsize(path)
        del report

        def read_json() -> Any:
            with open(path, encoding="utf-8") as f:
                return json.load(f)

        json_s, json_peak = timed(read_json)
        load_s, load_peak = timed(lambda: load_report(path))
    print(f"report: {args.functions} functions, {leaves} leaves, {size / 2**20:.1f} MiB of JSON")
    print(f"json.load      {json_s:8.2f} s  peak {json_peak / 2**20:8.1f} MiB")
    print(f"load_report    {load_s:8.2f} s  peak {load_peak / 2**20:8.1f} MiB")
    print(f"ratio load_report / json.load: time {load_s / json_s:.2f}, "
          f"memory {load_peak / json_peak:.2f}")


if __name__ == "__main__":
    main()
