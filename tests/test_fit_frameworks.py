"""``memscope fit``, ``fit --plan`` and ``analyze`` on the steps users write: Flax
NNX (``nnx.jit`` with ``nnx.Optimizer``), Equinox (``filter_jit(donate=...)``),
Flax linen's ``TrainState`` and Haiku's ``transform`` under ``jax.jit``, and a
plain ``jax.jit`` step, each fed NumPy batches, no ``--batch`` given.

Each answer is held to the framework's own compile of the step
(``step.lower(*args).compile()``, through the framework's own ``lower``) at the
answer and one size up: the answer fits the budget, one more does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import memscope
from tests.support.cli import MEMSCOPE
from tests.support.samples import SAMPLES, sample_module
from tests.support.truth import expected_peak

PROGRAMS = Path(__file__).parent / "programs" / "frameworks"
QUIET = {**os.environ, "PYTHONWARNINGS": "ignore"}

#: program -> (what the framework needs, the arguments resized, the state inferred)
CASES = {
    "nnx_step": ("flax.nnx", "batch", "model, optimizer"),
    "equinox_step": ("equinox", "x, y", "model, opt_state"),
    "jit_numpy_step": (None, "x, y", "params"),
    "linen_step": ("flax.linen", "images, labels", "state"),
    "haiku_step": ("haiku", "images, labels", "params, opt_state"),
}


def _fit(*args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([MEMSCOPE, "fit", "--format", "json", *args], capture_output=True,
                          text=True, env=QUIET, timeout=900)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def _peak(compiled: Any) -> int:
    """The peak of a compile, from XLA's own figures (tests/support/truth.py)."""
    compiled = getattr(compiled, "compiled", compiled)  # Equinox wraps JAX's Compiled
    return expected_peak(compiled.memory_analysis())


def _own_peak(name: str, batch: int) -> int:
    """The step's peak at ``batch``, compiled by its framework's own ``lower``."""
    program = sample_module(name, PROGRAMS / f"{name}.py")
    step, args = program.make(batch)
    with warnings.catch_warnings():  # JAX's own: Equinox donates the batch, unusable
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        return _peak(step.lower(*args).compile())


@pytest.mark.parametrize("name", list(CASES))
def test_fit_answers_each_framework_step_held_to_its_own_compile(name):
    needs, resized, state = CASES[name]
    if needs is not None:
        pytest.importorskip(needs)
    code, f, err = _fit("--memory", "24MiB", str(PROGRAMS / f"{name}.py"))
    assert code == 0, err[-2000:]
    assert (f["argument"], f["axis"], f["inferred"]) == (resized, 0, True)
    assert f"state, returned by the step: {state})" in f["choice_note"]
    assert f["batch_note"] is None
    largest, budget, step = f["largest"], f["budget_bytes"], f["step"]
    assert largest is not None and largest > f["batch"]
    rows = {r["batch"]: r["peak_bytes"] for r in f["rows"]}
    assert rows[largest] == _own_peak(name, largest) <= budget
    assert rows[largest + step] == _own_peak(name, largest + step) > budget
    assert "Some donated buffers" not in err  # the forecast's compiles warn nothing


def test_fit_plan_gives_rows_with_a_batch_on_an_nnx_step():
    pytest.importorskip("flax.nnx")
    done = subprocess.run([MEMSCOPE, "fit", "--plan", "--format", "json", "--memory", "24MiB",
                           str(PROGRAMS / "nnx_step.py")], capture_output=True, text=True,
                          env=QUIET, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    found = [r for r in plan["rows"] if r["largest"] is not None]
    assert len(found) >= 3, plan["rows"]
    written = next(r for r in plan["rows"] if r["setting"] == "as written")
    assert written["largest"] == _fit("--memory", "24MiB", str(PROGRAMS / "nnx_step.py"))[1][
        "largest"]
    # Every setting's code is written in the user's terms.
    assert all("jax.jit(..., nnx.jit" not in (r["code"] or "") for r in plan["rows"])
    assert any("nnx.value_and_grad(nnx.remat(loss_fn" in (r["code"] or "")
               for r in plan["rows"])


def test_a_donated_batch_shaped_like_a_weight_is_the_batch(tmp_path):
    """The batch is donated, and its shape is a weight's: state is what the step
    returns, so the batch is still the batch."""
    script = tmp_path / "step.py"
    script.write_text(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "def step(w, x):\n"
        "    g = jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)\n"
        "    return w - 0.1 * g, jnp.tanh(x @ w).mean()\n"
        "step = jax.jit(step, donate_argnums=(0, 1))\n"
        "w = jnp.ones((64, 64)) / 64\n"
        "for _ in range(3):\n"
        "    w, loss = step(w, np.ones((64, 64), np.float32))\n")
    code, f, err = _fit("--memory", "4MiB", str(script))
    assert code == 0, err[-2000:]
    assert (f["argument"], f["inferred"]) == ("x", True)
    assert "state, returned by the step: w" in f["choice_note"]


def test_a_batch_the_step_does_not_compute_on_gives_no_answer(tmp_path):
    """A step that slices its data to a configured batch (as MaxText's loss does):
    resizing the data grows the input bytes, not the compute. fit says so, in
    text and JSON, and presents no batch (exit 2)."""
    script = tmp_path / "sliced.py"
    script.write_text(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "CONFIGURED = 8\n"
        "@jax.jit\n"
        "def step(w, data):\n"
        "    x = data[:CONFIGURED]\n"
        "    g = jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)\n"
        "    return w - 0.1 * g\n"
        "w = jnp.ones((256, 256)) / 256\n"
        "for _ in range(3):\n"
        "    w = step(w, np.ones((16, 256), np.float32))\n")
    code, f, err = _fit("--memory", "8MiB", str(script))
    assert code == 2, err[-2000:]
    assert f["argument"] == "data" and f["batch_note"] is not None
    assert "FLOPs grow 1.00x" in f["batch_note"] and "input bytes, not examples" in f["batch_note"]
    text = subprocess.run([MEMSCOPE, "fit", "--memory", "8MiB", str(script)],
                          capture_output=True, text=True, env=QUIET, timeout=900)
    assert text.returncode == 2
    answer = text.stdout.splitlines()[1]
    assert answer.startswith("No batch answer for 8.0 MiB") and "Largest batch" not in text.stdout


def test_analyze_takes_framework_jits_and_matches_their_own_compile():
    eqx = pytest.importorskip("equinox")
    nnx = pytest.importorskip("flax.nnx")
    model = eqx.nn.MLP(4, 1, 16, 2, key=jax.random.PRNGKey(0))

    @eqx.filter_jit(donate="all-except-first")
    def step(model, x):
        return jax.vmap(model)(x).sum(), model

    x = np.ones((8, 4), np.float32)
    with warnings.catch_warnings():  # JAX's own: Equinox donates the batch, unusable
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        expected = _peak(step.lower(model, x).compile())
        report = memscope.analyze(step, model, x)
    assert report.name == "step" and report.memory.peak_bytes == expected
    assert {b.path for b in report.inputs} >= {"x", "model.layers[0].weight"}
    assert type(step._cached).__name__ != "MeasuredJit"  # the wrapper is left as it was

    linear = nnx.Linear(4, 2, rngs=nnx.Rngs(0))

    @nnx.jit
    def apply(m, x):
        return m(x).sum()

    expected = _peak(apply.lower(linear, jnp.ones((3, 4))).compile())
    report = memscope.analyze(apply, linear, jnp.ones((3, 4)))
    assert report.memory.peak_bytes == expected
    assert [b.path for b in report.inputs] == ["m.bias", "m.kernel", "x"]
    with pytest.raises(memscope.MemscopeError, match="runs the call: give it arrays"):
        memscope.analyze(apply, linear, jax.ShapeDtypeStruct((3, 4), jnp.float32))


@pytest.mark.parametrize("sample", ["flax_train", "equinox_train"])
def test_fit_and_plan_answer_on_the_framework_samples(sample):
    pytest.importorskip("flax.nnx" if sample == "flax_train" else "equinox")
    script = str(SAMPLES / f"{sample}.py")
    code, f, err = _fit("--memory", "16MiB", script)
    assert code == 0, err[-2000:]
    assert (f["argument"], f["inferred"]) == ("x, y", True) and f["largest"] > f["batch"]
    rows = {r["batch"]: r["peak_bytes"] for r in f["rows"]}
    assert rows[f["largest"]] <= f["budget_bytes"] < rows[f["largest"] + f["step"]]
    done = subprocess.run([MEMSCOPE, "fit", "--plan", "--format", "json", "--memory", "16MiB",
                           script], capture_output=True, text=True, env=QUIET, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    written = next(r for r in plan["rows"] if r["setting"] == "as written")
    assert written["largest"] == f["largest"]


EVAL_FIRST = """
import jax, jax.numpy as jnp, numpy as np
params = {"w1": jnp.ones((784, 256)) / 784, "b1": jnp.zeros(256),
          "w2": jnp.ones((256, 10)) / 256, "b2": jnp.zeros(10)}
def logits(params, x):
    return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
@jax.jit
def evaluate(params, data):  # returns no state: every argument looks like data
    return (logits(params, data["image"]).argmax(-1) == data["label"]).mean()
@jax.jit
def train_step(params, batch):
    def loss(p):
        return -jnp.mean(jax.nn.log_softmax(logits(p, batch["image"]))[:, 0])
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))
def batch_of(n):  # a batch of 256: the size of w1's columns and of w2's rows
    return {"image": np.ones((n, 784), np.float32), "label": np.zeros(n, np.int32)}
for _ in range(5):  # an evaluation loop before training, as Optax's examples do
    evaluate(params, batch_of(256))
for _ in range(3):
    params = train_step(params, batch_of(256))
"""


def test_fit_function_waits_for_that_function_past_an_evaluation_loop(tmp_path):
    """The evaluation loop repeats first: with --function train_step the capture
    goes on to train_step's own second call; left to choose, the evaluation's
    batch is its data, not the weights whose leading size is the batch's."""
    script = tmp_path / "eval_first.py"
    script.write_text(EVAL_FIRST)
    code, f, err = _fit("--memory", "16MiB", "--function", "train_step", str(script))
    assert code == 0, err[-2000:]
    assert (f["function"], f["argument"]) == ("train_step", "batch")
    assert "state, returned by the step: params" in f["choice_note"]
    code, f, err = _fit("--memory", "16MiB", str(script))
    assert code == 0, err[-2000:]
    assert (f["function"], f["argument"], f["batch"]) == ("evaluate", "data", 256)


def test_a_batch_given_on_an_argument_without_arrays_says_what_it_is(tmp_path):
    script = tmp_path / "scalar.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "@jax.jit\n"
        "def step(w, x, lr):\n"
        "    return w - lr * jax.grad(lambda w: (x @ w).sum())(w)\n"
        "w = jnp.ones((8, 8))\n"
        "for _ in range(3):\n"
        "    w = step(w, jnp.ones((4, 8)), 0.1)\n")
    done = subprocess.run([MEMSCOPE, "fit", "--memory", "1MiB", "--batch", "lr", str(script)],
                          capture_output=True, text=True, env=QUIET, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "memscope: error: --batch lr: lr holds no array (a float), so there is nothing to "
        "resize: name an argument the step gets arrays in (a jax.Array or a NumPy array)")
