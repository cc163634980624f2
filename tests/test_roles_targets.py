"""The roles of a step's results on every target, and the first screen's figures
adding up (docs/roles.md, docs/report-format.md).

On XLA:TPU the new parameters and optimizer state of an adam step are output
buffers of fusions that XLA names after the backward pass's dot it fused them
into; each buffer is named by the instruction inside the fusion that makes its
value, so they read as on CPU. A step that returns gradients still reads
gradients. Held to JAX's own pytrees (the leaf counts) and compiles (the
closed-over arrays' bytes, the peak's parts); the TPU and GPU runs skip
without their compilers (``memscope install-compiler tpu|gpu``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jax
import pytest

from memscope.compiled.targets import gpu, tpu
from memscope.report import LiveAtPeak, Memory, RoleBytes, hbm_peak_rule
from memscope.report.units import format_bytes
from memscope.views.roles_text import roles_line
from tests.support.samples import sample_module

PROGRAM = Path(__file__).resolve().parent / "programs" / "roles_mlp.py"
ROOT = PROGRAM.parent.parent.parent
TARGETS = [
    pytest.param(None, id="here"),
    pytest.param("tpu:v5e:2x2", id="tpu", marks=pytest.mark.skipif(
        not tpu.available(), reason=f"libtpu is not installed ({tpu.libtpu_install_line()})")),
    pytest.param("gpu:h100", id="gpu", marks=pytest.mark.skipif(
        not gpu.available(),
        reason=f"XLA:GPU's compiler is not installed ({gpu.cuda_install_line()})")),
]


@pytest.fixture(scope="module")
def program():
    return sample_module("roles_mlp", PROGRAM)


@pytest.fixture(scope="module", params=TARGETS)
def report(request, tmp_path_factory) -> dict:
    """``memscope run [--target T] -o r.json roles_mlp.py``: its functions by name."""
    cwd = tmp_path_factory.mktemp("roles")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    target = ["--target", request.param] if request.param else []
    done = subprocess.run([sys.executable, "-m", "memscope", "run", *target, "-o", "r.json",
                           str(PROGRAM)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((cwd / "r.json").read_text())
    return {"functions": {fn["name"]: fn for fn in data["functions"]}, "screen": done.stdout,
            "target": request.param}


def _result_roles(fn: dict) -> Counter:
    live = fn["live_at_peak"]
    assert live["more_buffers"] == 0
    return Counter(b["role"] for b in live["buffers"] if b["kind"] == "output")


def test_new_state_takes_the_role_of_the_argument_it_gives_back(report, program) -> None:
    params = program.init(jax.random.key(0))
    opt_state = program.opt.init(params)
    fn = report["functions"]["train"]
    roles = _result_roles(fn)
    assert roles["parameters"] == len(jax.tree.leaves(params))
    assert roles["optimizer"] == len(jax.tree.leaves(opt_state))
    assert roles["gradients"] == 0
    live = fn["live_at_peak"]
    gradients = sum(r["bytes"] for r in live["roles"] if r["role"] == "gradients")
    assert gradients <= 0.05 * live["bytes"]


def test_returned_gradients_stay_gradients(report, program) -> None:
    params = program.init(jax.random.key(0))
    roles = _result_roles(report["functions"]["grads"])
    assert roles["gradients"] == len(jax.tree.leaves(params))
    assert roles["parameters"] == 0


def test_a_closed_over_dataset_is_said_held_for_the_call(report, program) -> None:
    fn = report["functions"]["closed"]
    live = fn["live_at_peak"]
    constants = sum(r["bytes"] for r in live["roles"] if r["role"] == "constants")
    assert constants >= program.data_x.nbytes + program.data_y.nbytes
    screen = " ".join(report["screen"].split())
    assert "the arrays the function closes over and its literals, held for the call" in screen
    peak = fn["memory"]["peak_bytes"]
    if live["bytes"] > peak:  # the peak leaves the constants out: said, with their bytes
        assert fn["memory"]["peak_rule"] == "sum"
        assert (f"with {format_bytes(constants)} of constants the peak leaves out" in screen)


def test_the_closed_steps_figures_are_jaxs_own(report, program) -> None:
    """Here, the closed step's figures are JAX's own compile's; what is live at
    its busiest step exceeds its peak by no more than the constants."""
    if report["target"] is not None:
        pytest.skip("JAX's compile here")
    params = program.init(jax.random.key(0))
    stats = program.closed_step.lower(params, program.opt.init(params), 0).compile(
    ).memory_analysis()
    fn = report["functions"]["closed"]
    memory = fn["memory"]
    assert (memory["argument_bytes"], memory["output_bytes"], memory["temp_bytes"]) == (
        stats.argument_size_in_bytes, stats.output_size_in_bytes, stats.temp_size_in_bytes)
    live = fn["live_at_peak"]
    constants = sum(r["bytes"] for r in live["roles"] if r["role"] == "constants")
    assert live["bytes"] - memory["peak_bytes"] <= constants


def test_the_tpu_peak_line_adds_its_parts_up(report) -> None:
    if report["target"] != "tpu:v5e:2x2":
        pytest.skip("the HBM rule is XLA:TPU's")
    for fn in report["functions"].values():
        memory = fn["memory"]
        text = memory["peak_rule_text"]
        assert text.startswith(f"peak {format_bytes(memory['peak_bytes'])} = arguments ")
        if memory["temp_bytes"] != 0:
            assert "the temp column is XLA:TPU's temp_size_in_bytes" in text


def test_the_hbm_rule_names_its_parts_exactly() -> None:
    memory = Memory(argument_bytes=100, output_bytes=50, alias_bytes=0, temp_bytes=0,
                    xla_peak_bytes=400)
    got = hbm_peak_rule(memory, 168, 240, {"parameter": 100, "output": 50, "temporary": 16,
                                           "thread_local": 2})
    assert (got.peak_rule_text or "").startswith(
        "peak 168 B = arguments 100 B + outputs 50 B + the temporary block 16 B + "
        "thread-local 2 B: XLA:TPU's HBM allocations in its buffer assignment, held for "
        "the call; the temp column is XLA:TPU's temp_size_in_bytes (0 B), not this HBM "
        "temporary block")


@pytest.mark.parametrize(("peak", "rule", "lead"), [
    (1000, "sum", "peak made of: "),
    (1003, "sum", "peak made of: "),  # within half a percent: no share reads otherwise
    (2000, "hbm", "peak made of (shares of the 1000 B live at its busiest step; the peak's "
                  "other 1000 B is allocated for the call but holds no buffer live then): "),
    (500, "sum", "peak made of (shares of the 1000 B live at its busiest step, with 600 B of "
                 "constants the peak leaves out: the arrays the function closes over and "
                 "its literals, held for the call): "),
])
def test_the_roles_line_says_what_its_shares_are_of(peak: int, rule: str, lead: str) -> None:
    live = LiveAtPeak(bytes=1000, roles=(RoleBytes("constants", 600, 1),
                                         RoleBytes("parameters", 400, 2)))
    memory = Memory(peak_bytes=peak, peak_rule=rule)  # type: ignore[arg-type]
    line = roles_line(live, 0, memory)
    assert line is None  # a peak this small is not worth the first screen
    big = LiveAtPeak(bytes=live.bytes << 20, roles=tuple(
        RoleBytes(r.role, r.bytes << 20, r.buffers) for r in live.roles))
    line = roles_line(big, 0, Memory(peak_bytes=peak << 20, peak_rule=rule))  # type: ignore[arg-type]
    assert line is not None
    expected = lead.replace(" B", " MiB").replace("1000 MiB", "1000.0 MiB").replace(
        "600 MiB", "600.0 MiB")
    assert line.startswith(expected), line
