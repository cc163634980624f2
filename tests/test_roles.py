"""What a peak is made of (memory by role), and why a peak moved (diffs and
checks explained by the buffers that changed).

The programs are written as users write them, and the roles are held to sizes
known by construction (each array's ``nbytes``) and to the schedule's peak,
which the roles add up to, to the byte.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from memscope.analysis import roles
from memscope.check.compare import compare_reports
from memscope.check.judge import check_report
from memscope.check.peak import peak_changes
from memscope.flow import analyze
from memscope.report import (
    InputBuffer,
    LiveAtPeak,
    LiveBuffer,
    OutputBuffer,
    PeakPart,
    load_report,
)
from memscope.views.roles_text import package_path, roles_line
from tests.support.records import report

SIZES = (512, 1024, 1024, 256)
BATCH = 128


def _init(key):
    params = []
    for a, b in itertools.pairwise(SIZES):
        key, k = jax.random.split(key)
        params.append({"w": jax.random.normal(k, (a, b)) * 0.01, "b": jnp.zeros(b)})
    return params


def _loss(params, batch):
    x, y = batch
    for p in params[:-1]:
        x = jax.nn.relu(x @ p["w"] + p["b"])
    return jnp.mean((x @ params[-1]["w"] + params[-1]["b"] - y) ** 2)


_OPT = optax.adam(1e-3)


def _step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(_loss)(params, batch)
    updates, opt_state = _OPT.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _nbytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("numpy_batch", [False, True], ids=["jax-batch", "numpy-batch"])
def test_an_mlp_with_adam_has_its_parameters_optimizer_and_batch_to_the_byte(numpy_batch):
    params = _init(jax.random.key(0))
    opt_state = _OPT.init(params)
    batch = (np.ones((BATCH, SIZES[0]), np.float32), np.ones((BATCH, SIZES[-1]), np.float32))
    if not numpy_batch:
        batch = jax.tree.map(jnp.asarray, batch)
    fn = analyze(jax.jit(_step), params, opt_state, batch)
    live = fn.live_at_peak
    assert live is not None and fn.memory_timeline is not None
    # Without donation the new parameters and optimizer state are outputs held
    # beside the arguments for the whole call: each role is twice its arguments.
    assert live.role_bytes("parameters") == 2 * _nbytes(params)
    assert live.role_bytes("optimizer") == 2 * _nbytes(opt_state)
    assert live.role_bytes("batch") == _nbytes(batch)
    assert sum(r.bytes for r in live.roles) == live.bytes == fn.memory_timeline.peak_bytes
    assert sum(p.bytes for p in live.parts) == live.bytes
    assert live.role_bytes("unknown") == 0
    assert {b.role for b in live.buffers} <= {r.role for r in live.roles}
    line = roles_line(live)
    assert line is not None and "optimizer state" in line and "parameters" in line


def _sin_layers(checkpoint: bool, act=jnp.sin):
    def layer(w, x):
        return act(x @ w)  # the layers' line

    def loss(ws, x):
        f = jax.checkpoint(layer) if checkpoint else layer
        for w in ws:
            x = f(w, x)
        return jnp.sum(x ** 2)

    def step(ws, x):
        g = jax.grad(loss)(ws, x)
        return [w - 0.1 * gw for w, gw in zip(ws, g, strict=True)]

    ws = [jnp.ones((256, 256)) * 0.01 for _ in range(16)]
    return analyze(jax.jit(step), ws, jnp.ones((512, 256)))


@pytest.fixture(scope="module")
def checkpointed():
    return _sin_layers(False), _sin_layers(True)


def _needs_remat(plain, remat) -> None:
    """XLA:CPU of JAX 0.7 keeps the matmul outputs under jax.checkpoint too
    (both compiles have one peak): what the tests below explain is absent."""
    if remat.memory_timeline.peak_bytes == plain.memory_timeline.peak_bytes:
        (diff,) = compare_reports(report(plain), report(remat))
        assert sum(c.change for c in diff.peak_changes or ()) == 0
        pytest.skip(f"jax {jax.__version__}: jax.checkpoint lowers no peak here")


def test_a_backward_pass_keeps_the_forward_values_it_reads_as_activations(checkpointed):
    plain, remat = checkpointed
    # 15 layers' matmul outputs (sin' needs them) and 15 layers' sin outputs
    # (the next layer's matmul needs them) are kept for the backward pass.
    layer_output = 512 * 256 * 4
    assert plain.live_at_peak.role_bytes("activations") == 30 * layer_output
    for fn in checkpointed:
        assert fn.live_at_peak.role_bytes("parameters") == 2 * 16 * 256 * 256 * 4
        assert fn.live_at_peak.role_bytes("unknown") == 0
    _needs_remat(plain, remat)
    # Under jax.checkpoint only the layers' inputs are kept; the matmul is recomputed.
    assert remat.live_at_peak.role_bytes("activations") <= 16 * layer_output


def test_diff_names_the_line_whose_buffers_went_and_the_changes_sum_to_the_peak(checkpointed):
    plain, remat = checkpointed
    _needs_remat(plain, remat)
    (diff,) = compare_reports(report(plain), report(remat))
    assert diff.peak_changes is not None
    assert sum(c.change for c in diff.peak_changes) == diff.peak_after - diff.peak_before
    assert diff.peak_after - diff.peak_before == (remat.memory_timeline.peak_bytes
                                                  - plain.memory_timeline.peak_bytes)
    top = diff.peak_changes[0]
    assert (top.role, top.op, top.kind) == ("activations", "dot_general", "went")
    assert top.where == f"tests/test_roles.py:{_line_of('# the layers' + chr(39) + ' line')}"
    assert top.change == -15 * 512 * 256 * 4 == -int(7.5 * 2**20)
    assert "-7.5 MiB activations" in top.text()


def test_on_every_jax_a_diff_says_which_kept_values_went_and_which_came(checkpointed):
    # sin' needs the matmul's output, tanh' only tanh's own: 15 layers' matmul
    # outputs (7.5 MiB) are no longer kept, and tanh's outputs replace sin's.
    plain, _ = checkpointed
    tanh = _sin_layers(False, act=jnp.tanh)
    (diff,) = compare_reports(report(plain), report(tanh))
    line = f"tests/test_roles.py:{_line_of('# the layers' + chr(39) + ' line')}"
    changes = {(c.role, c.where, c.op): c.change for c in diff.peak_changes}
    kept = 15 * 512 * 256 * 4
    assert changes[("activations", line, "dot_general")] == -kept
    assert changes[("activations", line, "sin")] == -kept
    assert changes[("activations", line, "tanh")] == kept
    assert sum(changes.values()) == diff.peak_after - diff.peak_before == (
        tanh.memory_timeline.peak_bytes - plain.memory_timeline.peak_bytes)
    result = check_report(report(plain), report(tanh))  # sin against a tanh baseline: it grew
    (problem,) = [p for p in result.functions[0].problems if p.startswith("peak grew")]
    assert f"+7.5 MiB activations: {line} dot_general appeared" in problem


def test_a_failing_check_names_the_buffers_that_grew(checkpointed):
    plain, remat = checkpointed
    _needs_remat(plain, remat)
    result = check_report(report(plain), report(remat))
    assert result.failed
    (verdict,) = result.functions
    (problem,) = [p for p in verdict.problems if p.startswith("peak grew")]
    assert "grew: +7.5 MiB activations" in problem
    assert f":{_line_of('# the layers' + chr(39) + ' line')} dot_general appeared" in problem


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


# --- the rules, on plain records ---------------------------------------------------


def _in(path, shape=(4,), donated=False, fate="not_donated"):
    return InputBuffer(path, shape, "float32", 16, donated, fate)


def _out(path, shape=(4,)):
    return OutputBuffer(path, shape, "float32", 16, "new")


def test_results_pair_with_the_arguments_they_give_back():
    inputs = [_in("params['w']"), _in("params['b']", (2,)), _in("opt_state[0].mu['w']"),
              _in("opt_state[0].mu['b']", (2,)), _in("x")]
    outputs = [_out("result[0]['w']"), _out("result[0]['b']", (2,)),
               _out("result[1][0].mu['w']"), _out("result[1][0].mu['b']", (2,)),
               _out("result[2]", ())]
    assert roles.paired_results(inputs, outputs) == {
        0: "params['w']", 1: "params['b']", 2: "opt_state[0].mu['w']",
        3: "opt_state[0].mu['b']"}
    assert roles.argument_roles(inputs, outputs) == {
        "params['w']": "parameters", "params['b']": "parameters",
        "opt_state[0].mu['w']": "optimizer", "opt_state[0].mu['b']": "optimizer",
        "x": "batch"}


def test_a_written_back_leaf_pairs_by_name_and_a_lone_array_never_by_shape():
    inputs = [_in("model.layers[0].kernel"), _in("lr", ())]
    outputs = [_out("model.layers[0].kernel (written back)"), _out("result", ())]
    assert roles.paired_results(inputs, outputs) == {0: "model.layers[0].kernel"}


def test_state_whose_name_says_nothing_cannot_be_told_and_is_not_guessed():
    inputs = [_in("a[0]"), _in("a[1]"), _in("c")]
    outputs = [_out("result[0]"), _out("result[1]")]
    assert roles.argument_roles(inputs, outputs) == {
        "a[0]": "unknown", "a[1]": "unknown", "c": "batch"}


def _temp(op_name, opcode="fusion"):
    return LiveBuffer("temporary", 64, "f32[4,4]", "f32", "fusion.1", opcode,
                      op_name.rsplit("/", 1)[-1] if op_name else opcode, op_name=op_name)


@pytest.mark.parametrize(("op_name", "opcode", "readers", "role"), [
    ("jit(f)/jvp()/dot_general", "fusion", ["jit(f)/transpose(jvp())/dot_general"],
     "activations"),
    ("jit(f)/jvp()/dot_general", "fusion", ["jit(f)/jvp()/sin"], "temporaries"),
    ("jit(f)/transpose(jvp())/dot_general", "fusion", ["jit(f)/sub"], "gradients"),
    ("jit(f)/transpose(jvp())/dot_general", "fusion", ["jit(f)/transpose(jvp())/add_any"],
     "temporaries"),
    ("jit(f)/psum", "all-reduce", [], "collectives"),
    (None, "copy", ["jit(f)/jvp()/sin"], "unknown"),
])
def test_a_temporarys_role_comes_from_its_op_and_its_readers(op_name, opcode, readers, role):
    step_ops = ["jit(f)/jvp()/sin", *readers]
    start = roles.backward_start(step_ops)
    got = roles.temporary_role(_temp(op_name, opcode), 0, range(1, len(step_ops)), step_ops,
                               start)
    assert got == role


def test_installed_packages_pair_across_environments():
    assert package_path("/a/env/lib/python3.12/site-packages/optax/_src/update.py:42") == \
        package_path("/b/venv/lib/python3.11/site-packages/optax/_src/update.py:42") == \
        "optax/_src/update.py:42"
    then = LiveAtPeak(bytes=10, parts=(PeakPart(
        "optimizer", "/a/site-packages/optax/u.py:4", "add", 10, 1),))
    now = LiveAtPeak(bytes=12, parts=(PeakPart(
        "optimizer", "/b/site-packages/optax/u.py:4", "add", 12, 1),))
    (change,) = peak_changes(then, now)
    assert (change.kind, change.change) == ("grew", 2)
    assert peak_changes(LiveAtPeak(bytes=10), now) is None  # a report made before roles


def test_a_buffer_that_lost_its_source_line_is_no_change():
    # JAX 0.9.1 named this broadcast by flax's line; a later XLA dropped the
    # metadata: the same buffer, not one that went and one that appeared
    line = "/a/site-packages/flax/nnx/nn/linear.py:1319"
    then = LiveAtPeak(bytes=3072, parts=(
        PeakPart("temporaries", line, "broadcast_in_dim", 2048, 1, "f32[8,64]"),
        PeakPart("temporaries", "model.py:3", "mul", 1024, 2, "f32[4,64]")))
    now = LiveAtPeak(bytes=3328, parts=(
        PeakPart("temporaries", None, "broadcast_in_dim", 2048, 1, "f32[8,64]"),
        PeakPart("temporaries", "model.py:3", "mul", 1280, 2, "f32[5,64]"),
        PeakPart("unknown", None, "copy", 0, 0, "f32[2]")))
    changes = peak_changes(then, now)
    assert [(c.op, c.change) for c in changes] == [("mul", 256)]
    assert sum(c.change for c in changes) == now.bytes - then.bytes
    assert changes[0].text() == ("+256 B other temporaries: model.py:3 mul grew 1.0 KiB -> "
                                 "1.2 KiB (largest f32[5,64])")
    unnamed = peak_changes(LiveAtPeak(bytes=0, parts=(PeakPart("unknown", None, "copy", 0, 0),)),
                           LiveAtPeak(bytes=512, parts=(
                               PeakPart("unknown", None, "copy", 512, 2, "bf16[4,64]"),)))
    assert unnamed[0].text() == ("+512 B role cannot be told: copy (no source line) appeared "
                                 "(2 buffers, largest bf16[4,64])")


# --- the frameworks users write, and the command line -----------------------------


@pytest.mark.parametrize("sample", ["flax_train", "equinox_train"])
def test_framework_steps_have_their_parameters_and_optimizer_state(sample, tmp_path):
    out = tmp_path / "r.json"
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MEMSCOPE_CACHE": "off"}
    done = subprocess.run([sys.executable, "-m", "memscope", "run", "-o", str(out),
                           f"sample_programs/{sample}.py"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (fn,) = load_report(out).functions
    live = fn.live_at_peak
    assert sum(r.bytes for r in live.roles) == live.bytes == fn.memory_timeline.peak_bytes
    # The step donates its model and optimizer: each is held once, where XLA
    # wrote the new value in place, twice where the new value is a new buffer.
    def held(arguments, results):
        return (sum(b.bytes for b in fn.inputs if b.path.startswith(arguments))
                + sum(b.bytes for b in fn.outputs
                      if b.path.startswith(results) and b.fate != "reuses_input"))
    model = held("model.", ("model.", "result[0]."))
    assert live.role_bytes("parameters") == model > 0
    optimizer = held(("optimizer.", "opt_state"), ("optimizer.", "result[1]"))
    assert live.role_bytes("optimizer") == optimizer > 0
    assert live.role_bytes("unknown") < 0.05 * live.bytes
    assert "peak made of: " in done.stdout


def test_memscope_diff_explains_two_reports(tmp_path, checkpointed):
    from memscope.report import save_report
    plain, remat = checkpointed
    _needs_remat(plain, remat)
    save_report(report(plain), tmp_path / "old.json")
    save_report(report(remat), tmp_path / "new.json")
    done = subprocess.run([sys.executable, "-m", "memscope", "diff", "-o",
                           str(tmp_path / "diff.json"), str(tmp_path / "old.json"),
                           str(tmp_path / "new.json")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "at the peak: 24.5 MiB -> 17.0 MiB live (-7.5 MiB)" in done.stdout
    assert "-7.5 MiB activations" in done.stdout
    import json
    (saved,) = json.loads((tmp_path / "diff.json").read_text())["functions"]
    assert sum(c["after"] - c["before"] for c in saved["peak_changes"]) == \
        saved["peak_after"] - saved["peak_before"]



# --- the framework's own types decide before names -------------------------------


def test_an_equinox_step_with_names_that_say_nothing_has_its_roles_by_type():
    import equinox as eqx

    opt = optax.adam(1e-3)
    model = eqx.nn.MLP(16, 4, 32, 2, key=jax.random.key(0))
    state = opt.init(eqx.filter(model, eqx.is_array))

    def step(a, b, c):
        g = eqx.filter_grad(lambda m: jnp.sum(jax.vmap(m)(c) ** 2))(a)
        u, b = opt.update(g, b, eqx.filter(a, eqx.is_array))
        return eqx.apply_updates(a, u), b

    fn = analyze(eqx.filter_jit(step), model, state, np.ones((8, 16), np.float32))
    live = fn.live_at_peak
    # optax's state holds a copy of the model's structure (Equinox modules):
    # optax's type decides it is the optimizer's, the modules alone parameters.
    assert live.role_bytes("parameters") == 2 * _nbytes(eqx.filter(model, eqx.is_array))
    assert live.role_bytes("optimizer") == 2 * _nbytes(state)
    assert live.role_bytes("batch") == 8 * 16 * 4
    assert live.role_bytes("unknown") == 0
    assert sum(r.bytes for r in live.roles) == live.bytes == fn.memory_timeline.peak_bytes


def test_an_nnx_step_with_names_that_say_nothing_has_its_roles_by_variable_type():
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self):
            self.a = nnx.Linear(16, 32, rngs=nnx.Rngs(0))
            self.b = nnx.Linear(32, 4, rngs=nnx.Rngs(1))

        def __call__(self, x):
            return self.b(jax.nn.relu(self.a(x)))

    model = Model()
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def step(u, v, c):
        v.update(u, nnx.grad(lambda m: jnp.sum(m(c) ** 2))(u))

    fn = analyze(step, model, optimizer, np.ones((8, 16), np.float32))
    live = fn.live_at_peak
    params = _nbytes(nnx.state(model, nnx.Param))
    # Adam's mu and nu (each the parameters' size), its count, the optimizer's step
    optimizer_state = 2 * params + 4 + 4
    assert sum(b.bytes for b in fn.inputs if b.path.startswith("v.")) == optimizer_state
    # not donated: the new values are written back from outputs held beside them
    assert live.role_bytes("parameters") == 2 * params
    assert live.role_bytes("optimizer") == 2 * optimizer_state
    assert live.role_bytes("unknown") == 0


def test_type_roles_put_the_variable_first_then_optax_then_equinox():
    from memscope._frameworks import type_role

    def kind(module, name, base=object):
        return type(name, (base,), {"__module__": module})

    module = kind("equinox._module", "Module")
    linear = kind("equinox.nn._linear", "Linear", module)
    adam = kind("optax._src.transform", "ScaleByAdamState")
    param = kind("flax.nnx.variablelib", "Param")
    opt_state = kind("flax.nnx.training.optimizer", "OptState")
    nnx_optimizer = kind("flax.nnx.training.optimizer", "Optimizer")
    assert type_role([tuple, adam, dict, linear]) == "optimizer"
    assert type_role([linear]) == "parameters"
    assert type_role([nnx_optimizer, param]) == "parameters"  # the model, reached through it
    assert type_role([nnx_optimizer, opt_state]) == "optimizer"
    assert type_role([tuple, dict]) is None


# --- the Perfetto trace (the HTML role bar: tests/test_html_roles.py) ---------------


@pytest.fixture(scope="module")
def mlp_report():
    params = _init(jax.random.key(0))
    opt_state = _OPT.init(params)
    batch = (jnp.ones((BATCH, SIZES[0])), jnp.ones((BATCH, SIZES[-1])))
    return report(analyze(jax.jit(_step), params, opt_state, batch))


def test_the_trace_counts_each_role_at_the_peak(mlp_report):
    from memscope.render.trace import trace_events
    from memscope.report import CallSpan, RunMemory, Runtime

    (fn,) = mlp_report.functions
    run = RunMemory(devices=("cpu:0",), points=(), high_water=None, calls=1, sampled=0,
                    how="", sample_seconds=0.0,
                    spans=(CallSpan(call=1, function=0, start=0.5, end=0.75),))
    events = trace_events(dataclasses.replace(
        mlp_report, runtime=Runtime(run_memory=run)))["traceEvents"]
    counters = [e for e in events if e["name"] == f"peak by role: {fn.name}"]
    assert [e["ts"] for e in counters] == [500_000, 750_000]
    assert counters[0]["args"] == {r.role: r.bytes for r in fn.live_at_peak.roles}
    assert sum(counters[0]["args"].values()) == fn.live_at_peak.bytes
    assert set(counters[1]["args"].values()) == {0}


def test_a_short_leaf_name_says_parameters_only_in_state():
    inputs = [_in("ps[0]['w']"), _in("ps[0]['b']", (2,)), _in("b", (3,))]
    outputs = [_out("result[0]['w']"), _out("result[0]['b']", (2,))]
    assert roles.argument_roles(inputs, outputs) == {
        "ps[0]['w']": "parameters", "ps[0]['b']": "parameters", "b": "batch"}
