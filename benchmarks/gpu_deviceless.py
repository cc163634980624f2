"""On a machine with an NVIDIA GPU: ``--target gpu:<this GPU>`` (XLA:GPU's compile
without the device, as memscope makes it on a machine without one) held to the
device's own compile of the same programs.

* ``config``: the device's own description as XLA:GPU reads it from the device
  (the ``gpu_target_config.pbtxt`` XLA dumps beside a compile) beside the one
  memscope ships for its model (:mod:`memscope.compiled.targets.gpu_devices`),
  field by field;
* ``samples``: every bundled sample and the real-sized transformer, each run
  three ways (``--no-advice``: the program as written), and per function the
  figures (argument, output, alias, temp, XLA's peak, memscope's peak):

  - ``device``: ``memscope run`` on the GPU (XLA:GPU with its autotuner);
  - ``untuned``: the same with ``--xla_gpu_autotune_level=0``;
  - ``deviceless``: ``memscope run --target gpu:MODEL`` (the program run on the
    CPU, compiled for the model's description, without the device).

    python -m benchmarks.gpu_deviceless OUT_DIR [config] [samples]

Writes ``OUT_DIR/deviceless.json`` and ``OUT_DIR/deviceless.md``. The runs go
beside each other (``--jobs``, 6 by default), each GPU run growing its memory
as it needs (``XLA_PYTHON_CLIENT_PREALLOCATE=false``): the figures are the
compiler's, which the allocator does not change.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLES = ROOT / "sample_programs"
MEMSCOPE = [sys.executable, "-m", "memscope"]
FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "xla_peak_bytes",
           "peak_bytes")
#: samples with the arguments that make them short; multi_process starts processes
#: of its own (a coordinator), which a comparison of compiles does not need
PROGRAMS = {p.stem: [str(p)] for p in sorted(SAMPLES.glob("[!_]*.py"))
            if p.stem not in ("multi_process", "transformer_adam")}
PROGRAMS["transformer_adam"] = [str(SAMPLES / "transformer_adam.py"), "--steps", "2"]

DEVICE_CONFIG = """
import glob, json, os, sys, tempfile
folder = tempfile.mkdtemp()
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_dump_to=" + folder
import jax, jax.numpy as jnp
jax.jit(lambda x: x @ x)(jnp.ones((128, 128))).block_until_ready()
(found,) = glob.glob(folder + "/*gpu_target_config.pbtxt")[:1]
d = jax.devices()[0]
print(json.dumps({"device_kind": d.device_kind, "config": open(found).read(),
                  "bytes_limit": (d.memory_stats() or {}).get("bytes_limit")}))
"""


def text_fields(text: str) -> dict[str, str]:
    """``key: value`` lines of a text proto, nested keys joined by dots (a repeated
    field keeps its last value; tests/test_gpu_target.py reads descriptions with it)."""
    out: dict[str, str] = {}
    path: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.endswith("{"):
            path.append(line[:-1].strip())
        elif line == "}":
            path.pop()
        elif ":" in line:
            key, value = line.split(":", 1)
            out[".".join([*path, key.strip()])] = value.strip()
    return out


def config(out: Path) -> dict:
    from memscope.compiled.targets import gpu
    from memscope.compiled.targets.gpu_devices import MODELS

    done = subprocess.run([sys.executable, "-c", DEVICE_CONFIG], capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    device = json.loads(done.stdout.strip().splitlines()[-1])
    (out / "device_target_config.pbtxt").write_text(device["config"])
    kind = device["device_kind"]
    model = next((m for m in MODELS if m.device_kind == kind), None)
    matched = "device_kind"
    if model is None:  # memscope's name for this GPU differs: by the model's family
        words = kind.lower().replace("nvidia", "").split()
        model = next((m for m in MODELS if words and m.name.split("-")[0] == words[0]), None)
        matched = "family"
    result = {"device_kind": kind, "bytes_limit": device["bytes_limit"],
              "model": model.name if model else None, "matched_by": matched,
              "memscope_device_kind": model.device_kind if model else None}
    if model is not None:
        ours = gpu.target_config(model)
        (out / "memscope_target_config.pbtxt").write_text(ours)
        theirs, mine = text_fields(device["config"]), text_fields(ours)
        result["differ"] = {k: [theirs.get(k), mine.get(k)]
                            for k in sorted(set(theirs) | set(mine))
                            if theirs.get(k) != mine.get(k)}
        result["budget"] = gpu.room_here(model).bytes
    return result


def _run(kind: str, name: str, args: list[str], model: str, out: Path) -> dict:
    report = out / f"{name}.{kind}.json"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    command = [*MEMSCOPE, "run", "-q", "--no-advice", "-o", str(report)]
    if kind == "untuned":
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_gpu_autotune_level=0".strip()
    if kind == "deviceless":
        command += ["--target", f"gpu:{model}"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([*command, *args], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=600)
    seconds = time.perf_counter() - start
    if not report.exists():
        return {"kind": kind, "name": name, "error": done.stderr[-1500:], "seconds": seconds}
    data = json.loads(report.read_text())
    functions = {}
    for f in data["functions"]:
        key = f"{f['name']}({f['signature']})" if isinstance(f.get("signature"), str) \
            else f["name"]
        functions[key] = {k: (f.get("memory") or {}).get(k) for k in FIGURES}
        functions[key]["rule"] = (f.get("memory") or {}).get("peak_rule")
    return {"kind": kind, "name": name, "functions": functions, "seconds": seconds,
            "exit": done.returncode, "backend": data["environment"].get("backend")}


def samples(out: Path, model: str, jobs: int, done: list[dict], save) -> list[dict]:
    """Every run, appended to ``done`` and saved as each ends (a time limit keeps
    what finished)."""
    tasks = [(kind, name, args) for name, args in PROGRAMS.items()
             for kind in ("device", "untuned", "deviceless")]
    with ThreadPoolExecutor(jobs) as pool:
        for future in as_completed([pool.submit(_run, *t, model, out) for t in tasks]):
            done.append(future.result())
            save()
    return done


def _table(runs: list[dict]) -> list[str]:
    by = {(r["name"], r["kind"]): r for r in runs}
    lines = ["| program | function | figure | device | untuned | deviceless |",
             "|---|---|---|---|---|---|"]
    for name in PROGRAMS:
        device = by.get((name, "device"), {})
        for function in device.get("functions") or {}:
            for figure in FIGURES:
                row = [by.get((name, k), {}).get("functions", {}).get(function, {}).get(figure)
                       for k in ("device", "untuned", "deviceless")]
                mark = "" if len(set(row)) == 1 else " **differs**"
                lines.append(f"| {name} | {function[:60]} | {figure}{mark} | "
                             + " | ".join(f"{v:,}" if isinstance(v, int) else str(v)
                                          for v in row) + " |")
    return lines


#: ``fit``'s programs (as benchmarks/gpu_figures.py fits them on the device)
FITS = {
    "transformer_adam": ["--function", "train_step", "--batch", "batch",
                         str(SAMPLES / "transformer_adam.py"), "--steps", "2", "--width", "512",
                         "--seq", "256"],
    "nnx_step": [str(ROOT / "tests" / "programs" / "frameworks" / "nnx_step.py"), "128", "4096"],
}


def fits(model: str) -> dict:
    """``memscope fit --target gpu:MODEL`` on the CPU (``JAX_PLATFORMS=cpu``): the
    answer for the model's default budget without the device, to hold against
    ``fit`` on the device (benchmarks/gpu_figures.py ``fit_transformer``, ``fit_nnx``)."""
    result = {}
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    for name, args in FITS.items():
        started = time.time()
        done = subprocess.run([sys.executable, "-m", "memscope", "fit", "--format", "json",
                               "--target", f"gpu:{model}", *args], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=600)
        if not done.stdout.strip():
            result[name] = {"exit": done.returncode, "stderr": done.stderr[-2000:]}
            continue
        f = json.loads(done.stdout)
        result[name] = {k: f.get(k) for k in ("budget_bytes", "memory_bytes", "largest",
                                              "advised_largest", "compiles", "rows")}
        result[name]["seconds"] = round(time.time() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("parts", nargs="*", default=["config", "samples"])
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--model", default=None)
    parser.add_argument("--only", nargs="*", default=None, help="these programs only")
    a = parser.parse_args()
    for name in list(PROGRAMS):
        if a.only is not None and name not in a.only:
            del PROGRAMS[name]
    a.out.mkdir(parents=True, exist_ok=True)
    result: dict = {}

    def save() -> None:
        (a.out / "deviceless.json").write_text(json.dumps(result, indent=1))
        lines = [f"model: {model}", "", "```", json.dumps(result.get("config"), indent=1),
                 "```", ""]
        lines += _table(result.get("samples") or [])
        (a.out / "deviceless.md").write_text("\n".join(lines) + "\n")

    model = a.model or "h100"
    if "config" in a.parts:
        result["config"] = config(a.out)
        model = a.model or result["config"].get("model") or model
        save()
    if "fit" in a.parts:
        result["fit"] = fits(model)
        save()
    if "samples" in a.parts:
        result["samples"] = []
        samples(a.out, model, a.jobs, result["samples"], save)
    save()
    print((a.out / "deviceless.md").read_text())


if __name__ == "__main__":
    main()
