"""What ``memscope run`` costs on this machine's accelerator, beside python, in
one invocation: wall time, the device memory the process held at its peak, and
memscope's compiles in a first run and in a run again (its cache).

Each program runs four times, interleaved, each in a process of its own:
python, ``memscope run`` with an empty cache, python again, ``memscope run``
again on that cache. Every process is given the same ``sitecustomize`` (a
folder of this script's making on ``PYTHONPATH``), which, at the process's
very end (after memscope's report is written, as it is the first exit handler
registered), writes ``memory_stats()`` of the first device: its
``peak_bytes_in_use`` is the most the process's allocator held at once, the
program's arrays and memscope's work alike. So "memscope adds none" reads as
the same peak under python and under memscope.

    python -m benchmarks.gpu_cost OUT_DIR     # OUT_DIR/cost.json, and a table printed

It runs without a GPU too (the peak is then ``None``, CPU has no allocator
statistics); its figures mean what they say on one (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_programs"

#: name -> the program and its arguments
PROGRAMS = {
    "transformer_adam (20 steps)": [str(SAMPLES / "transformer_adam.py"), "--steps", "20"],
    "forgot_to_donate (3 steps)": [str(SAMPLES / "forgot_to_donate.py"), "--steps", "3"],
}

_HOOK = '''\
import atexit, json, os

def _memscope_bench_peak():
    try:
        import jax
        stats = jax.devices()[0].memory_stats() or {}
        with open(os.environ["MEMSCOPE_BENCH_PEAK"], "w") as f:
            json.dump({k: stats.get(k) for k in ("peak_bytes_in_use", "bytes_in_use",
                                                  "bytes_limit")}, f)
    except Exception as e:
        with open(os.environ["MEMSCOPE_BENCH_PEAK"], "w") as f:
            json.dump({"error": repr(e)}, f)

atexit.register(_memscope_bench_peak)
'''


def _run(command: list[str], hook: Path, peak: Path, cache: Path) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMSCOPE_BENCH_PEAK": str(peak),
           "MEMSCOPE_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(hook),
                                                       os.environ.get("PYTHONPATH")]))}
    env.pop("MEMSCOPE_CACHE", None)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    seconds = time.perf_counter() - started
    row: dict = {"seconds": round(seconds, 2), "exit": done.returncode,
                 "stdout": done.stdout.strip().splitlines()[-1:]}
    if done.returncode:
        row["stderr"] = done.stderr[-1500:]
    try:
        row.update(json.loads(peak.read_text()))
    except (OSError, ValueError):
        row["peak_bytes_in_use"] = None
    return row


def measure(name: str, program: list[str], work: Path) -> list[dict]:
    hook = work / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_HOOK)
    cache = work / f"cache-{len(list(work.glob('cache-*')))}"
    rows = []
    python = [sys.executable, *program]
    for label in ("python", "memscope run", "python", "memscope run again"):
        report = work / "report.json"
        command = python if label == "python" else [
            sys.executable, "-m", "memscope", "run", "-q", "-o", str(report), *program]
        row = {"program": name, "command": label,
               **_run(command, hook, work / "peak.json", cache)}
        if label != "python":
            try:
                runtime = json.loads(report.read_text())["runtime"]
                overhead = runtime.get("overhead") or {}
                row.update({k: overhead.get(k) for k in (
                    "analysis_seconds", "after_exit_seconds", "variant_compiles",
                    "variant_cache_hits", "dump_compiles", "dump_cache_hits")})
            except (OSError, ValueError, KeyError) as e:
                row["report_error"] = repr(e)
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = [r["seconds"] for r in rows if r["command"] == "python"]
    for r in rows:
        r["ratio"] = round(r["seconds"] / min(base), 2) if base else None
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| program | command | wall s | ratio | peak_bytes_in_use | variant compiles "
             "| from cache | dump compiles | from cache |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| {program} | {command} | {seconds} | {ratio} | {peak} | {vc} | {vh} "
                     "| {dc} | {dh} |".format(
                         program=r["program"], command=r["command"], seconds=r["seconds"],
                         ratio=r["ratio"], peak=r.get("peak_bytes_in_use"),
                         vc=r.get("variant_compiles", ""), vh=r.get("variant_cache_hits", ""),
                         dc=r.get("dump_compiles", ""), dh=r.get("dump_cache_hits", "")))
    return "\n".join(lines)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-cost")
    out.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(PROGRAMS)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="memscope-cost-") as folder:
        for name in names:
            rows += measure(name, PROGRAMS[name], Path(folder))
            (out / "cost.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
