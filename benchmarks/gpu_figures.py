"""memscope's figures on a real accelerator, each beside the device's own truth.

Every part runs in its own process, so each starts with a fresh allocator
(``memory_stats()['peak_bytes_in_use']`` is a process's peak so far):

* ``samples``: ``memscope run`` on the bundled samples; per function the peak by
  memscope's rule and XLA's ``peak_memory_in_bytes``, the schedule's peak and the
  heap-simulator trace's, the measured ``memory_stats()`` and the donations
  confirmed by buffer address.
* ``direct``: the real-sized transformer step compiled directly
  (``memory_analysis()``) beside ``memscope.analyze``; one call's growth of
  ``peak_bytes_in_use`` beside what the compiled program allocates
  (output - alias + temp); the donated step's inputs ``is_deleted()`` and its
  outputs at their inputs' ``unsafe_buffer_pointer()``.
* ``oom``: an induced out-of-memory under ``memscope run`` and its post-mortem.
* ``fit``: ``memscope fit`` with the device's own limit, then the program run at
  the answer and at the next size up.

    python -m benchmarks.gpu_figures OUT_DIR     # OUT_DIR/figures.json and .md

It needs no GPU to run (``fit`` then needs a budget and is skipped), but its
figures mean most on one; docs/performance.md (GPU) reports them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLES = ROOT / "sample_programs"
PROGRAMS = ROOT / "tests" / "programs"
QUIET = {**os.environ, "PYTHONWARNINGS": "ignore"}
MEMSCOPE = [sys.executable, "-m", "memscope"]

#: sample -> its arguments (small runs: the figures are per compiled program)
RUNS = {
    "donated.py": ("--steps", "3"),
    "forgot_to_donate.py": ("--steps", "3"),
    "passthrough_copy.py": (),
    "unusable_donation.py": (),
    "activations.py": (),
    "two_shapes.py": (),
    "equinox_train.py": (),
    "flax_train.py": (),
    "transformer_adam.py": ("--steps", "3"),
}


def _run(cmd: list[str], timeout: int = 600,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env={**QUIET, **(env or {})},
                          timeout=timeout, cwd=ROOT)


def part_samples(out: Path) -> list[dict]:
    rows = []
    for name, args in RUNS.items():
        report = out / f"{Path(name).stem}.json"
        started = time.time()
        done = _run([*MEMSCOPE, "run", "-q", "-o", str(report), str(SAMPLES / name), *args])
        if done.returncode != 0 or not report.exists():
            rows.append({"sample": name, "error": (done.stderr or done.stdout)[-2000:]})
            continue
        r = json.loads(report.read_text())
        for fn in r["functions"]:
            m, t, b = fn.get("memory") or {}, fn.get("memory_timeline") or {}, fn.get("buffers") or {}
            observed = [i.get("observed") for i in fn.get("inputs", [])]
            rows.append({
                "sample": name, "function": fn["name"], "seconds": round(time.time() - started, 1),
                "argument": m.get("argument_bytes"), "output": m.get("output_bytes"),
                "alias": m.get("alias_bytes"), "temp": m.get("temp_bytes"),
                "peak": m.get("peak_bytes"), "peak_rule": m.get("peak_rule"),
                "xla_peak": m.get("xla_peak_bytes"),
                "timeline_rule": t.get("rule"), "timeline_peak": t.get("peak_bytes"),
                "schedule_peak": t.get("schedule_peak_bytes"), "trace_note": t.get("trace_note"),
                "replayed_peak": b.get("replayed_peak"), "timeline_note": b.get("timeline_note"),
                "measured": fn.get("measured"),
                "confirmed": observed.count("confirmed"),
                "not_reused": observed.count("not_reused"),
                "findings": fn.get("findings") or fn.get("runtime_findings"),
            })
        samples = (r.get("runtime") or {}).get("device_memory")
        rows.append({"sample": name, "function": "(run)", "device_memory_samples":
                     None if samples is None else len(samples), "outcome": r.get("outcome")})
    return rows


DIRECT = r'''
import importlib.util, json, sys
import jax, jax.numpy as jnp
spec = importlib.util.spec_from_file_location("transformer_adam", "sample_programs/transformer_adam.py")
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)
import memscope

def stats():
    s = jax.local_devices()[0].memory_stats() or {}
    return {k: s.get(k) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")}

params = t.init_params(jax.random.key(0), 8, 128, 64)
opt_state = t.optimizer.init(params)
batch = t.make_batch(jax.random.key(1), 8, 64)
step = t.train_step
ma = step.lower(params, opt_state, batch).compile().memory_analysis()
direct = {k: getattr(ma, k, None) for k in ("argument_size_in_bytes", "output_size_in_bytes",
          "alias_size_in_bytes", "temp_size_in_bytes", "peak_memory_in_bytes",
          "generated_code_size_in_bytes", "host_temp_size_in_bytes")}
jax.block_until_ready((params, opt_state, batch))
before = stats()
out = step(params, opt_state, batch)
jax.block_until_ready(out)
after = stats()
fr = memscope.analyze(step, params, opt_state, batch, advise=False)
m, tl, b = fr.memory, fr.memory_timeline, fr.buffers
seen = {"peak": m.peak_bytes, "peak_rule": m.peak_rule, "xla_peak": m.xla_peak_bytes,
        "argument": m.argument_bytes, "output": m.output_bytes, "alias": m.alias_bytes,
        "temp": m.temp_bytes, "timeline_rule": tl.rule if tl else None,
        "timeline_peak": tl.peak_bytes if tl else None,
        "schedule_peak": tl.schedule_peak_bytes if tl else None,
        "replayed_peak": b.replayed_peak if b else None}
del out
# donation, by JAX's own ground truth
donating = jax.jit(t.train_step.__wrapped__ if hasattr(t.train_step, "__wrapped__") else t.step,
                   donate_argnums=(0, 1))
p2 = jax.tree.map(lambda x: x + 0, params); s2 = jax.tree.map(lambda x: x + 0, opt_state)
jax.block_until_ready((p2, s2))
ptr = [x.unsafe_buffer_pointer() for x in jax.tree.leaves((p2, s2))]
leaves_in = jax.tree.leaves((p2, s2))
np2, ns2, _ = donating(p2, s2, batch)
jax.block_until_ready((np2, ns2))
deleted = sum(x.is_deleted() for x in leaves_in)
out_ptr = [x.unsafe_buffer_pointer() for x in jax.tree.leaves((np2, ns2))]
same = sum(a == b for a, b in zip(ptr, out_ptr))
fr2 = memscope.analyze(donating, np2, ns2, batch, advise=False)
obs = [i.observed for i in fr2.inputs]
print(json.dumps({"direct": direct, "memscope": seen, "stats_before": before,
                  "stats_after": after, "donated_leaves": len(ptr), "deleted": int(deleted),
                  "same_address": int(same), "memscope_confirmed": obs.count("confirmed"),
                  "memscope_not_reused": obs.count("not_reused"),
                  "device": str(jax.devices()[0]), "jax": jax.__version__}))
'''


def part_direct(autotune: bool = True) -> dict:
    """The transformer step, direct. ``autotune=False`` compiles with XLA:GPU's
    autotuner off, whose scratch memory otherwise sets the process's peak before
    the call (seen on an H100), so that the call's own growth shows."""
    env = dict(QUIET)
    if not autotune:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_gpu_autotune_level=0".strip()
    done = subprocess.run([sys.executable, "-c", DIRECT], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)
    if done.returncode != 0:
        return {"error": done.stderr[-3000:]}
    r = json.loads(done.stdout.splitlines()[-1])
    d, b, a = r["direct"], r["stats_before"], r["stats_after"]
    if a.get("peak_bytes_in_use") is not None:
        r["call_growth"] = a["peak_bytes_in_use"] - b["bytes_in_use"]
        r["compiled_growth"] = (d["output_size_in_bytes"] - d["alias_size_in_bytes"]
                                + d["temp_size_in_bytes"])
    return r


def part_oom(out: Path) -> list[dict]:
    rows = []
    size = str(1 << 40)  # 1 TiB: more than any one device
    for label, extra in (("call", ()), ("pending", ("--pending",))):
        report = out / f"oom-{label}.json"
        plain = _run([sys.executable, str(PROGRAMS / "oom_async.py"), size, *extra])
        done = _run([*MEMSCOPE, "run", "-q", "-o", str(report), str(PROGRAMS / "oom_async.py"),
                     size, *extra])
        row = {"case": label, "python_exit": plain.returncode, "memscope_exit": done.returncode,
               "same_stdout": plain.stdout == done.stdout, "python_stdout": plain.stdout,
               "memscope_stdout": done.stdout, "memscope_stderr_tail": done.stderr[-1500:],
               "error_tail": plain.stderr.strip().splitlines()[-1:] if plain.stderr else None}
        if report.exists():
            r = json.loads(report.read_text())
            for fn in r["functions"]:
                o = fn.get("out_of_memory")
                if o:
                    row.update({"function": fn["name"], "failed_in": o.get("failed_in"),
                                "requested": o.get("requested_bytes"),
                                "output": (fn.get("memory") or {}).get("output_bytes"),
                                "largest": (o.get("largest_buffers") or [None])[0],
                                "error_head": (o.get("error") or "")[:300]})
        rows.append(row)
    # a real-sized OOM: the transformer at a batch whose activations exceed the device
    report = out / "oom-transformer.json"
    done = _run([*MEMSCOPE, "run", "-q", "--no-advice", "-o", str(report),
                 str(SAMPLES / "transformer_adam.py"), "--batch", "40000", "--steps", "2"])
    row = {"case": "transformer --batch 40000", "memscope_exit": done.returncode,
           "stderr_tail": done.stderr.strip().splitlines()[-3:]}
    if report.exists():
        for fn in json.loads(report.read_text())["functions"]:
            o = fn.get("out_of_memory")
            if o:
                row.update({"function": fn["name"], "failed_in": o.get("failed_in"),
                            "requested": o.get("requested_bytes"),
                            "temp": (fn.get("memory") or {}).get("temp_bytes"),
                            "peak": (fn.get("memory") or {}).get("peak_bytes"),
                            "largest": (o.get("largest_buffers") or [])[:3],
                            "error_head": (o.get("error") or "")[:600]})
    rows.append(row)
    return rows


#: the allocator settings ``fit`` and the runs at its answer are tried under:
#: JAX's default (preallocating 75% of the device) and growing as needed
ALLOCATORS = {"default": {}, "no_prealloc": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}


def _fit_and_run(fit_args: list[str], run_args: Callable[[int], list[str]],
                 keys: tuple[str, ...], allocators: tuple[str, ...] = ("default",)) -> dict:
    """``memscope fit`` with the device's own limit (its default budget), then the
    program run at the answer and at the next size up (``run_args(batch)``):
    does the answer run, and the next size not? Once per allocator setting."""
    result: dict = {}
    for allocator in allocators:
        env = ALLOCATORS[allocator]
        started = time.time()
        done = _run([*MEMSCOPE, "fit", "--format", "json", *fit_args], timeout=900, env=env)
        if done.returncode != 0 or not done.stdout.strip():
            result[allocator] = {"exit": done.returncode, "stderr": done.stderr[-2000:]}
            continue
        f = json.loads(done.stdout)
        got = {k: f.get(k) for k in keys}
        got["fit_seconds"] = round(time.time() - started, 1)
        step = f.get("step") or 1
        for label, batch in (("answer", f.get("largest")), ("next", (f.get("largest") or 0)
                                                            + step)):
            if not batch:
                continue
            ran = _run([sys.executable, *run_args(batch)], env=env)
            got[f"run_{label}"] = {"batch": batch, "exit": ran.returncode,
                                   "oom": "RESOURCE_EXHAUSTED" in ran.stderr
                                   or "Out of memory" in ran.stderr,
                                   "stdout": ran.stdout.strip().splitlines()[-1:],
                                   "stderr": ran.stderr.strip().splitlines()[-1:]}
        result[allocator] = got
    return result


FIT_KEYS = ("memory_bytes", "budget_bytes", "held_bytes", "held_note", "compile_note",
            "argument", "step", "largest", "advised_largest", "linear", "note", "compiles", "seconds", "rows")


def part_fit() -> dict:
    mlp = str(PROGRAMS / "fit_mlp.py")
    return _fit_and_run([mlp, "--batch", "32"], lambda batch: [mlp, "--batch", str(batch)],
                        FIT_KEYS)


#: the transformer sample at a width users train (130 MB an example at batch 8):
#: the device's limit is met at hundreds, not millions, of examples
TRANSFORMER = [str(SAMPLES / "transformer_adam.py"), "--steps", "2", "--width", "512",
               "--seq", "256"]


def part_fit_transformer() -> dict:
    """``fit`` on the transformer sample at the device's own limit, under both
    allocator settings, and the program run at its answer and one size up."""
    return _fit_and_run(["--function", "train_step", "--batch", "batch", *TRANSFORMER],
                        lambda batch: [*TRANSFORMER, "--batch", str(batch)], FIT_KEYS,
                        tuple(ALLOCATORS))


#: a Flax NNX step fed NumPy batches (tests/programs/frameworks), 4096 wide
NNX = [str(PROGRAMS / "frameworks" / "nnx_step.py")]


def part_fit_nnx() -> dict:
    """``fit`` on a Flax NNX step (``nnx.jit``, ``nnx.Optimizer``, NumPy batches)
    at the device's own limit, no ``--batch`` given, and the program run at its
    answer and one size up."""
    return _fit_and_run([*NNX, "128", "4096"], lambda batch: [*NNX, str(batch), "4096"],
                        FIT_KEYS)


def part_repeat() -> dict:
    """The transformer sample twice under python and once under ``memscope run``,
    and once each with the autotuner off: whether its printed loss is the same
    from process to process on this device (XLA:GPU's autotuner may pick other
    kernels in another process), and under memscope where the kernels are fixed."""
    args = [str(SAMPLES / "transformer_adam.py"), "--steps", "3"]
    untuned = {"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_autotune_level=0"}
    runs = {"python_1": _run([sys.executable, *args]), "python_2": _run([sys.executable, *args]),
            "memscope": _run([*MEMSCOPE, "run", "-q", "-o", "/dev/null", *args]),
            # with the autotuner off, every process runs the same kernels
            "python_untuned": _run([sys.executable, *args], env=untuned),
            "memscope_untuned": _run([*MEMSCOPE, "run", "-q", "-o", "/dev/null", *args],
                                     env=untuned)}
    return {name: done.stdout.strip().splitlines()[-1:] for name, done in runs.items()}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-figures")
    out.mkdir(parents=True, exist_ok=True)
    parts = sys.argv[2:] or ["direct", "direct_untuned", "samples", "oom", "repeat", "fit"]
    figures: dict = {}
    for part in parts:
        started = time.time()
        try:
            if part in ("samples", "oom"):
                figures[part] = {"samples": part_samples, "oom": part_oom}[part](out)
            else:
                figures[part] = {"direct": part_direct, "fit": part_fit, "repeat": part_repeat,
                                 "fit_transformer": part_fit_transformer,
                                 "fit_nnx": part_fit_nnx,
                                 "direct_untuned": lambda: part_direct(autotune=False)}[part]()
        except Exception as e:  # one part's failure must not lose the others
            figures[part] = {"error": f"{type(e).__name__}: {e}"}
        print(f"{part}: {time.time() - started:.0f} s", flush=True)
        (out / "figures.json").write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
