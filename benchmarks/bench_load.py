"""How long reading a large saved report takes, next to parsing its JSON alone.

Generates a report of N functions with L input leaves each (every leaf with a
variant of its own, as `memscope run` writes with the advisor on), saves it,
then times, each in a fresh interpreter: ``json.loads`` of the file (the floor),
``load_report`` (JSON plus decoding and checking every field), and the
commands ``memscope show`` and ``memscope check --report`` on it; and reports
each one's peak resident memory next to the file's size.

Run:  python -m benchmarks.bench_load [--functions N] [--leaves L]

A runnable script, not a test: no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._cache import first_run_env
from memscope.report import (
    Device,
    Environment,
    FunctionReport,
    InputBuffer,
    Memory,
    OutputBuffer,
    Report,
    RunInfo,
    Variant,
    save_report,
)

BODIES = {
    "json.loads": "import json, sys; json.loads(open(sys.argv[1]).read())",
    "load_report": "import sys; from memscope.report import load_report; "
                   "load_report(sys.argv[1])",
}

ROOT = Path(__file__).resolve().parent.parent


def make_report(functions: int, leaves: int) -> Report:
    def inputs(i: int) -> tuple[InputBuffer, ...]:
        return tuple(InputBuffer(path=f"params['layer_{i}']['w_{j}']", shape=(64, 64),
                                 dtype="float32", bytes=16384, donated=j % 2 == 0,
                                 fate="aliased" if j % 2 == 0 else "not_donated",
                                 output=f"result[{j}]" if j % 2 == 0 else None,
                                 parameter=j, sharding="cpu:0")
                     for j in range(leaves))

    def outputs() -> tuple[OutputBuffer, ...]:
        return tuple(OutputBuffer(path=f"result[{j}]", shape=(64, 64), dtype="float32",
                                  bytes=16384, fate="reuses_input", input=f"arg{j}")
                     for j in range(leaves))

    memory = Memory(argument_bytes=leaves * 16384, output_bytes=leaves * 16384,
                    alias_bytes=0, temp_bytes=4096, peak_bytes=leaves * 32768 + 4096)
    fns = tuple(
        FunctionReport(name=f"step_{i}", source=f"train.py:{i + 1}", calls=3,
                       signature=f"(float32[64,64] x {leaves})", memory=memory,
                       inputs=inputs(i), outputs=outputs(),
                       variants=(Variant(name="all", setting="donate_argnums=(0,)",
                                         memory=memory, inputs=inputs(i),
                                         outputs=outputs()),))
        for i in range(functions))
    return Report(memscope_version="bench", run=RunInfo("train.py", (), "completed", 0),
                  environment=Environment(jax="0", jaxlib="0", backend="cpu",
                                          devices=(Device(0, "cpu", "cpu"),)),
                  functions=fns)


def measure(command: list[str]) -> tuple[float, int]:
    """Seconds and peak resident bytes of a fresh interpreter running ``command``."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=first_run_env(PYTHONPATH=str(ROOT)))
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.stderr is not None
    error = child.stderr.read().decode()
    if child.returncode != 0:
        print(f"{command[-2:]} exited {child.returncode}: {error.strip()[-300:]}")
    return elapsed, usage.ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=2000)
    parser.add_argument("--leaves", type=int, default=55,
                        help="input leaves per function (2000 x 55 give about 200 MB)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "big.json")
        save_report(make_report(args.functions, args.leaves), path)
        size = os.path.getsize(path)
        print(f"report: {args.functions} functions x {args.leaves} leaves, "
              f"{size / 2**20:.1f} MiB of JSON")
        rows = {name: measure([sys.executable, "-c", body, path])
                for name, body in BODIES.items()}
        memscope = [sys.executable, "-m", "memscope"]
        rows["memscope show"] = measure([*memscope, "show", path])
        rows["memscope check --report"] = measure(
            [*memscope, "check", "--report", path, "--baseline", path])
        floor = rows["json.loads"][0]
        print(f"{'step':<26}{'s':>9}{'x json.loads':>14}{'peak RSS / file':>17}")
        for name, (seconds, rss) in rows.items():
            print(f"{name:<26}{seconds:>9.2f}{seconds / floor:>14.2f}{rss / size:>17.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
