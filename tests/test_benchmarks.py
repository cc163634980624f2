"""Smoke tests: the benchmark runners run and print their ratios (nothing timed is asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_overhead_benchmark_runs_and_prints_ratios():
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_overhead",
                           "--steps", "1", "--repeat", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[:3] == ["command", "median", "s"]
    rows = {line.rsplit(None, 4)[0]: line.split()[-4:] for line in lines[2:]}
    assert set(rows) == {"python", "memscope run --no-advice", "memscope run"}
    assert rows["python"][1] == "1.00" and rows["python"][3] == "1.00"
    assert all(float(value) > 0 for row in rows.values() for value in row)


def test_bench_buffers_prints_the_ratio_at_a_tiny_size():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_buffers", "--size", "small", "--repeat", "1"],
        capture_output=True, text=True, timeout=120, env=env, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^optimized module: \d+ instructions", result.stdout, re.M)
    assert "reconciled with XLA: True" in result.stdout
    assert re.search(r"^ratio decode / compile: \d+\.\d{4} ", result.stdout, re.M), result.stdout
    assert re.search(r"^ratio liveness / compile: \d+\.\d{4} ", result.stdout, re.M)


def _bench(name: str, *options: str) -> str:
    """``python -m benchmarks.NAME OPTIONS`` from the checkout's root: its output."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *options],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_analysis_benchmark_prints_its_ratio_to_the_compile():
    out = _bench("bench_analysis", "--size", "small", "--repeat", "1")
    assert re.search(r"^transformer training step: 1 layers, width 32, \d+ HLO instructions",
                     out, re.M)
    assert re.search(r"^ratio analysis / compile +\d+\.\d{4}$", out, re.M), out


def test_variants_benchmark_counts_the_advisors_compiles():
    out = _bench("bench_variants", "--size", "small", "--repeat", "1")
    assert re.search(r"speed-up \d+\.\d\d\)$", out, re.M), out
    # one compile of the program's own; the advisor adds "donate all" and "advised"
    assert out.rstrip().endswith("advisor off 1 (the program's own), advisor on 3")
    # the checkpoint policies add one compile each (4, and the offloading one on a
    # JAX whose CPU compiles host memory), and one of the advised policy with the
    # advised donation where a policy saves within the FLOPs budget (XLA's figures
    # decide: on JAX 0.12 one does here, on 0.10 none)
    assert re.search(r"with the checkpoint policies too: (7|8|9)$", out, re.M), out


def test_remat_benchmark_prints_each_piece_beside_the_compile():
    out = _bench("bench_remat", "--size", "small", "--repeat", "1")
    names = [line[:40].strip() for line in out.splitlines()[1:]]
    assert names[0] == "JAX's trace and compile of the step"
    assert names[1].startswith("residuals (") and names[-1] == "the whole analysis"
    assert [n.removeprefix("policy ") for n in names[2:-1]] == [
        "everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
        "nothing_saveable"]
    assert all(re.search(r"ratio +\d+\.\d\d$", line) for line in out.splitlines()[1:]), out


def test_scaling_benchmark_prints_one_row_per_size():
    out = _bench("bench_scaling", "--sizes", "1,2", "--calls", "1")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [row[0] for row in rows] == ["1", "2"]
    assert all(float(value) > 0 for row in rows for value in row[1:4])


def test_real_sized_benchmark_prints_python_and_memscope_side_by_side():
    out = _bench("bench_real", "--only", "training", "--steps", "2", "--size", "small")
    lines = out.splitlines()
    assert re.match(r"^training: --steps 2 --layers 1 --width 32 --batch 8 --seq 16; \d+ input leaves", lines[0])
    assert lines[1].split()[:3] == ["command", "wall", "s"]
    rows = {line[:26].strip(): line[26:].split() for line in lines[2:]}
    assert list(rows) == ["python", "memscope run --no-advice", "memscope run",
                          "memscope run --remat"]
    assert rows["python"][1] == "1.00" and rows["python"][3] == "0.00"
    # the advice adds one compile (the advised donation); --no-advice adds none
    compiles = {name: int(row[6]) for name, row in rows.items()}
    assert compiles["memscope run"] == compiles["python"] + 1
    assert compiles["memscope run --no-advice"] == compiles["python"]
    # the four checkpoint policies (and the offloading one where this JAX's CPU
    # compiles host memory), and the one advised measured with the donation where
    # one saves within the FLOPs budget (XLA's figures decide)
    assert compiles["memscope run --remat"] - compiles["memscope run"] in (4, 5, 6)


def test_load_benchmark_prints_one_row_per_step():
    out = _bench("bench_load", "--functions", "3", "--leaves", "2")
    rows = {line[:26].strip(): line[26:].split() for line in out.splitlines()[2:]}
    assert set(rows) == {"json.loads", "load_report", "memscope show",
                         "memscope check --report"}
    assert rows["json.loads"][1] == "1.00"
    assert all(float(value) > 0 for row in rows.values() for value in row)


def test_reports_benchmark_prints_one_row_per_size():
    out = _bench("bench_reports", "--sizes", "200,1000", "--repeat", "1")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [row[0] for row in rows] == ["200", "998"]
    # the default output does not grow with the leaf count
    assert rows[0][1] == rows[1][1]
    assert all(float(value) > 0 for row in rows for value in row[2:6])



def test_live_sampling_benchmark_prints_both_runs_and_the_samples():
    out = _bench("bench_live", "--steps", "3", "--size", "small")
    lines = out.splitlines()
    assert re.match(r"^transformer_adam: 1 layers, width 32, 3 steps, \d+ live arrays", lines[0])
    rows = {line[:22].strip(): line[22:].split() for line in lines[2:4]}
    assert list(rows) == ["python", "memscope capture"] and rows["python"][1] == "1.00"
    # calls 1 and 2 always (powers of two); call 3 when the time budget allows
    assert re.match(r"^samples before [23] of 3 calls and at the end; sampling and per-call records ", lines[4]), out


def test_short_programs_benchmark_prints_the_ratio_table():
    out = _bench("bench_short", "--only", "eqx_mlp.py", "--repeat", "1")
    assert "| `eqx_mlp.py` |" in out and "| program | python s | memscope run s | ratio" in out



def test_fit_frameworks_benchmark_forecasts_the_same_step_three_ways():
    out = _bench("bench_fit_frameworks", "--size", "small", "--memory", "2MiB")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert set(rows) == {"jax.jit", "nnx.jit", "eqx.filter_jit"}
    assert rows["jax.jit"][-1] == "1.00"
    # the same model written three ways: the same answer
    assert len({row[1] for row in rows.values()}) == 1 and rows["jax.jit"][1] != "None"


def test_roles_benchmark_prints_the_analysis_and_the_roles_share():
    out = _bench("bench_roles", "--repeat", "1", "--size", "small")
    lines = out.splitlines()
    assert re.match(r"^transformer_adam: 1 layers, width 32; \d+ parts at the peak", lines[0])
    rows = {line[:28].strip(): line[28:].split() for line in lines[2:]}
    assert list(rows) == ["analysis (analyze)", "roles", "diff of two reports"]
    assert rows["analysis (analyze)"][1] == "100.00%"
    assert all(float(row[0]) > 0 for row in rows.values())
