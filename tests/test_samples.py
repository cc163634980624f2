"""The installed ``memscope`` command on every sample program, checked against JAX itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memscope.report import load_report
from tests.support.cli import MEMSCOPE, run_memscope
from tests.support.samples import SAMPLES
from tests.support.versions import NO_SAME_SIZE_DONORS, SAME_SIZE_DONORS


def _fates(fn) -> dict[str, tuple[str, str | None]]:
    out = {b.path: (b.fate, b.output) for b in fn.inputs}
    out.update({b.path: (b.fate, b.input) for b in fn.outputs})
    return out


def _state_paths(name: str) -> list[str]:
    return [f"{name}[{i}]['{k}']" for i in range(2) for k in ("b", "w")]


def _jax_alias_map(sample: str, call: str) -> set[tuple[int, int]]:
    """(parameter, output) pairs of JAX's own compiled program, read in a fresh python.

    ``call`` is code that sets ``lowered`` from the sample module ``m``.
    """
    code = "\n".join([
        "import sys, re, warnings", f"sys.path.insert(0, {str(SAMPLES)!r})",
        "warnings.simplefilter('ignore')", "import jax, jax.numpy as jnp",
        f"import {sample} as m", call,
        "header = lowered.compile().as_text().splitlines()[0]",
        r"print(re.findall(r'\{(\d*)\}: \((\d+), \{\}', header))",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    return {(int(p), int(o or 0)) for o, p in ast.literal_eval(out)}


def test_forgot_to_donate(tmp_path):
    result = run_memscope("run", "-o", str(tmp_path / "r.json"),
                  "sample_programs/forgot_to_donate.py", "--steps", "3")
    assert result.returncode == 0, result.stderr
    assert "final loss" in result.stdout
    (fn,) = load_report(str(tmp_path / "r.json")).functions
    fates = _fates(fn)
    assert fn.name == "train_step" and fn.calls == 3
    assert fn.source == "sample_programs/forgot_to_donate.py:18"
    for path in _state_paths("params") + _state_paths("momentum") + ["x", "y"]:
        assert fates[path] == ("not_donated", None)
    assert fates["step"] == ("pruned", None)
    assert all(b.fate == "new" for b in fn.outputs)
    assert fn.memory is not None and fn.memory.alias_bytes == 0


def test_donated(tmp_path):
    result = run_memscope("run", "-o", str(tmp_path / "r.json"),
                  "sample_programs/donated.py", "--steps", "3", "--lr", "0.02")
    assert result.returncode == 0, result.stderr
    (fn,) = load_report(str(tmp_path / "r.json")).functions
    fates = _fates(fn)
    for i, path in enumerate(_state_paths("params")):
        assert fates[path] == ("aliased", f"result[0][{i // 2}]['{'bw'[i % 2]}']")
    for path in _state_paths("momentum"):
        assert fates[path][0] == "aliased"
    assert fn.signature.endswith("lr=0.02)")
    assert fn.memory is not None
    state_bytes = sum(b.bytes for b in fn.inputs if b.donated)
    assert fn.memory.alias_bytes == state_bytes
    # JAX's own compiled program aliases exactly these parameters.
    pairs = _jax_alias_map("donated", "\n".join([
        "p = m.init_params(jax.random.key(0))",
        "mo = jax.tree.map(jnp.zeros_like, p)",
        "x, y = m.batch(jax.random.key(1))",
        "lowered = m.train_step.lower(p, mo, x, y, lr=0.02)"]))
    assert {p for p, _ in pairs} == {b.parameter for b in fn.inputs if b.fate == "aliased"}


def _unusable_donation(tmp_path: Path) -> tuple[Any, Any]:
    result = run_memscope("run", "-o", str(tmp_path / "r.json"),
                  "sample_programs/unusable_donation.py", "--steps", "2")
    assert result.returncode == 0, result.stderr
    (fn,) = load_report(str(tmp_path / "r.json")).functions
    assert all(_fates(fn)[p][0] == "aliased" for p in _state_paths("params"))
    return result, fn


@SAME_SIZE_DONORS
def test_unusable_donation(tmp_path):
    result, fn = _unusable_donation(tmp_path)
    # JAX's own warning still reaches the user, and memscope names the leaf.
    assert "Some donated buffers were not usable: float32[128,1]" in result.stderr
    assert "That is: y." in result.stdout
    fates = _fates(fn)
    assert fates["y"] == ("unusable", None)
    assert fates["x"][0] == "donor"
    assert [b.path for b in fn.inputs if b.in_warning] == ["y"]


@NO_SAME_SIZE_DONORS
def test_unusable_donation_before_jax_0_8(tmp_path):
    result, fn = _unusable_donation(tmp_path)
    # No element-count pass: the float32 batch has no bfloat16 output to be a donor for.
    assert ("Some donated buffers were not usable: float32[128,32], float32[128,1]"
            in result.stderr)
    assert "That is: x, y." in result.stdout
    fates = _fates(fn)
    assert fates["x"] == fates["y"] == ("unusable", None)
    assert [b.path for b in fn.inputs if b.in_warning] == ["x", "y"]


def test_passthrough_copy(tmp_path):
    result = run_memscope("run", "-o", str(tmp_path / "r.json"),
                  "sample_programs/passthrough_copy.py", "--steps", "2")
    assert result.returncode == 0, result.stderr
    (fn,) = load_report(str(tmp_path / "r.json")).functions
    fates = _fates(fn)
    assert fates["frozen"] == ("not_donated", None)
    assert fates["result[1]"] == ("copy_of_input", "frozen")


def test_two_shapes(tmp_path):
    result = run_memscope("run", "-o", str(tmp_path / "r.json"),
                  "sample_programs/two_shapes.py", "--steps", "4")
    assert result.returncode == 0, result.stderr
    functions = load_report(str(tmp_path / "r.json")).functions
    assert [(f.name, f.calls) for f in functions] == [("train_step", 8), ("train_step", 4)]
    assert [f.inputs[4].shape for f in functions] == [(48, 32), (32, 32)]
    assert functions[0].memory.argument_bytes != functions[1].memory.argument_bytes


def test_show_renders_a_saved_report_again(tmp_path):
    report = tmp_path / "r.json"
    ran = run_memscope("run", "-q", "-o", str(report), "sample_programs/passthrough_copy.py",
               "--steps", "1")
    assert ran.returncode == 0 and "memscope report" not in ran.stdout
    shown = run_memscope("show", str(report))
    assert shown.returncode == 0
    assert "copy_of_input" in shown.stdout and "passthrough_copy.py" in shown.stdout
    assert "\x1b[" not in shown.stdout  # not a terminal: plain text


def test_python_dash_m_memscope_and_module_targets(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        "import sys, jax, jax.numpy as jnp\n"
        "print('args', sys.argv[1:])\n"
        "jax.jit(lambda x: x * 2)(jnp.ones(3))\n"
        "sys.exit(3)\n")
    result = subprocess.run(
        [sys.executable, "-m", "memscope", "run", "-m", "pkg.train", "--steps", "2", "-v"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 3
    assert "args ['--steps', '2', '-v']" in result.stdout
    assert "failed (exit code 3)" in result.stdout
    assert "<lambda>" in result.stdout


def test_a_failing_target_still_reports_what_was_captured(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "jax.jit(lambda x: x + 1, donate_argnums=0)(jnp.ones(3))\n"
        "raise RuntimeError('diverged at step 7')\n")
    result = run_memscope("run", "-o", str(tmp_path / "r.json"), str(script))
    assert result.returncode == 1
    assert "RuntimeError: diverged at step 7" in result.stderr
    assert "Traceback" in result.stderr and "memscope/program/runner.py" not in result.stderr
    report = load_report(str(tmp_path / "r.json"))
    assert report.run is not None
    assert (report.run.outcome, report.run.exit_code) == ("failed", 1)
    assert report.run.error == "RuntimeError: diverged at step 7"
    assert report.functions[0].inputs[0].fate == "aliased"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_interrupts_and_still_reports(tmp_path):
    import signal
    import time

    script = tmp_path / "loop.py"
    script.write_text(
        "import pathlib, time, jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x: x + 1)\n"
        "x = f(jnp.ones(3))\n"
        f"pathlib.Path({str(tmp_path / 'ready')!r}).write_text('ok')\n"
        "while True:\n    x = f(x); time.sleep(0.01)\n")
    # A shell without job control starts background commands with SIGINT ignored,
    # and children inherit that (python then ignores Ctrl-C too). A small python
    # restores the default and execs memscope, whatever ran this suite (a
    # preexec_fn would fork this JAX process, which JAX warns against).
    with_default_sigint = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                           "os.execv(sys.argv[1], sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", with_default_sigint, MEMSCOPE, "run", "-o",
                             str(tmp_path / "r.json"), str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "interrupted (exit code 130)" in stdout
    report = load_report(str(tmp_path / "r.json"))
    assert report.run is not None and report.run.outcome == "interrupted"
    assert report.functions[0].calls >= 1
