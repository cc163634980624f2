"""The Perfetto trace's memory by role: a real run's step, its peak by role as
counters and in its calls' slices, held to the function's report, which adds
up to the peak to the byte (tests/test_roles.py holds the roles themselves)."""

from __future__ import annotations

import gc
import json
import textwrap

import pytest
from click.testing import CliRunner

from memscope.cli import cli
from memscope.flow import run_and_report
from memscope.program.runner import Script
from memscope.report import ROLES, FunctionReport, Report

#: A two-layer MLP trained with optax's adam under jax.jit, nothing donated.
MLP = """
import jax, jax.numpy as jnp, optax

def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (256, 512)) * 0.01, "b1": jnp.zeros(512),
            "w2": jax.random.normal(k2, (512, 128)) * 0.01, "b2": jnp.zeros(128)}

def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)

opt = optax.adam(1e-3)

@jax.jit
def step(params, opt_state, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

params = init(jax.random.key(0))
opt_state = opt.init(params)
x, y = jnp.ones((64, 256)), jnp.ones((64, 128))
for _ in range(3):
    params, opt_state, value = step(params, opt_state, x, y)
print(float(value))
"""


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, list[dict]]:
    """The MLP's report from ``memscope run``'s flow, and its trace as ``memscope
    show --trace`` writes it from the saved report."""
    tmp = tmp_path_factory.mktemp("mlp")
    script = tmp / "mlp.py"
    script.write_text(textwrap.dedent(MLP))
    gc.collect()
    report = run_and_report(Script(str(script), ()))
    saved, trace = tmp / "report.json", tmp / "run.trace.json"
    saved.write_text(report.to_json())
    result = CliRunner().invoke(cli, ["show", "--trace", str(trace), str(saved)])
    assert result.exit_code == 0, result.output
    return report, json.loads(trace.read_text())["traceEvents"]


def _step(report: Report) -> FunctionReport:
    (fn,) = [f for f in report.functions if f.name == "step"]
    assert fn.live_at_peak is not None and fn.live_at_peak.roles
    return fn


def test_the_role_series_add_up_to_the_peak_live_at_the_first_call(mlp_run):
    report, events = mlp_run
    live = _step(report).live_at_peak
    slices = [e for e in events if e["ph"] == "X" and e["name"] == "step"]
    assert len(slices) == 3
    counters = [e for e in events if e["name"] == "peak by role: step"]
    assert [e["ph"] for e in counters] == ["C", "C"]
    up, down = counters
    # one series per role with bytes, in the report's order, largest first
    assert list(up["args"]) == [r.role for r in live.roles]
    assert set(up["args"]) <= set(ROLES) and all(v > 0 for v in up["args"].values())
    assert all(isinstance(v, int) for v in up["args"].values())
    assert sum(up["args"].values()) == live.bytes
    assert live.bytes == sum(r.bytes for r in live.roles) > 0
    # over the first call: up at its start, every series back to 0 after it
    first = min(slices, key=lambda e: e["ts"])
    assert up["ts"] == first["ts"]
    assert first["ts"] < down["ts"] <= max(first["ts"] + first["dur"], first["ts"] + 1)
    assert down["args"] == dict.fromkeys(up["args"], 0)


def test_every_call_of_the_step_carries_its_peak_by_role(mlp_run):
    report, events = mlp_run
    live = _step(report).live_at_peak
    for e in events:
        if e["ph"] == "X" and e["name"] == "step":
            assert e["args"]["peak_by_role"] == {r.role: r.bytes for r in live.roles}
            assert sum(e["args"]["peak_by_role"].values()) == live.bytes


def test_the_high_water_mark_has_its_calls_peak_by_role(mlp_run):
    report, events = mlp_run
    live = _step(report).live_at_peak
    high = report.runtime.run_memory.high_water
    assert high is not None and high.function == "step"
    (mark,) = [e for e in events if e["name"] == "high-water mark"]
    # the step's call: its own peak by role is the step's
    assert mark["args"]["call roles"] == {r.role: r.bytes for r in live.roles}
    assert sum(mark["args"]["call roles"].values()) == live.bytes
