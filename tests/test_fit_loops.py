"""``memscope fit`` on steps that loop over what it resizes, and on a peak that is
not linear in the batch (issue 66).

A ``lax.map`` over the examples, an LSTM scanned over time: XLA's
``cost_analysis()`` counts a ``while`` body once, so their FLOPs do not grow
with the batch, and fit must not take that for a step that computes on part of
its input. Each answer is held to the step's own compile (``jax.jit(step)``
lowered and compiled at the answer and one size up): it fits the budget, one
more does not.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from tests.support.cli import MEMSCOPE
from tests.support.samples import sample_module
from tests.support.truth import expected_peak

PROGRAMS = Path(__file__).parent / "programs"
QUIET = {**os.environ, "PYTHONWARNINGS": "ignore"}


def _fit(*args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([MEMSCOPE, "fit", "--format", "json", *args], capture_output=True,
                          text=True, env=QUIET, timeout=300)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def _f32(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _own(name: str, shapes: Any) -> tuple[int, float]:
    """The step's own compile for ``shapes``: its peak (memscope's rule from
    XLA's figures) and XLA's FLOPs."""
    program = sample_module(name, PROGRAMS / f"{name}.py")
    params = jax.eval_shape(program.init, jax.random.key(0))
    compiled = program.train_step.lower(params, *shapes).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return expected_peak(compiled.memory_analysis()), cost["flops"]


def _held_at_the_answer(f: dict[str, Any], peak: Any) -> None:
    largest, step, budget = f["largest"], f["step"], f["budget_bytes"]
    assert largest is not None and largest > f["batch"] and f["confirmed"]
    rows = {r["batch"]: r["peak_bytes"] for r in f["rows"]}
    assert rows[largest] == peak(largest) <= budget
    assert rows[largest + step] == peak(largest + step) > budget


def test_a_map_over_the_examples_is_answered_held_to_its_own_compile():
    def own(batch: int) -> tuple[int, float]:
        return _own("fit_map_examples", (_f32(batch, 32), _f32(batch, 4)))

    # The ground truth of why the guard would refuse: XLA's FLOPs do not grow.
    assert own(16)[1] == own(64)[1]
    code, f, err = _fit("--memory", "1MiB", str(PROGRAMS / "fit_map_examples.py"))
    assert code == 0, err[-2000:]
    assert (f["argument"], f["axis"], f["batch_note"]) == ("x, y", 0, None)
    # A loop that carries nothing from one element to the next: a map, as over examples.
    assert f["choice_note"].endswith("; the step maps over this axis (a loop that carries "
                                     "nothing from one element to the next, as lax.map "
                                     "over examples)")
    _held_at_the_answer(f, lambda b: own(b)[0])


def test_an_lstm_scanned_over_time_is_answered_along_the_axis_given():
    def peak(batch: int) -> int:
        return _own("fit_lstm", (_f32(12, batch, 8), _f32(12, batch, 4)))[0]

    code, f, err = _fit("--memory", "1MiB", "--batch", "x:1", "--batch", "y:1",
                        str(PROGRAMS / "fit_lstm.py"))
    assert code == 0, err[-2000:]
    assert (f["choice_note"], f["batch_note"]) == ("x, y, axis 1 (given)", None)
    _held_at_the_answer(f, peak)


def test_an_inferred_axis_the_step_loops_over_says_so_and_which_to_give():
    """Axis 0 of the LSTM's x and y is time: fit says why it chose it, that the
    step carries state along it (a recurrence, as over time), and the --batch
    that names the examples' axis. The rule stays (the loss's mean over time and
    batch together says nothing of which is the examples): --batch chooses."""
    def peak(time: int) -> int:
        return _own("fit_lstm", (_f32(time, 8, 8), _f32(time, 8, 4)))[0]

    code, f, err = _fit("--memory", "1MiB", str(PROGRAMS / "fit_lstm.py"))
    assert code == 0, err[-2000:]
    note = f["choice_note"]
    assert note.startswith("x, y, axis 0 (inferred: the leading axis of the arguments that "
                           "are not state; state, returned by the step: params)")
    assert "the step carries state along this axis from one step to the next" in note
    assert note.endswith(
        "give the examples' axis with --batch x:1 --batch y:1")
    _held_at_the_answer(f, peak)


def test_a_peak_not_linear_in_the_batch_prints_no_line():
    """The contrastive loss's batch x batch matrix: the peak grows with the
    batch's square. No line is printed as the peak; the answer is compiled."""
    def peak(batch: int) -> int:
        return _own("fit_contrastive", (_f32(batch, 16),))[0]

    script = str(PROGRAMS / "fit_contrastive.py")
    code, f, err = _fit("--memory", "4MiB", script)
    assert code == 0, err[-2000:]
    assert f["linear"] is False and "not linear" in f["note"]
    _held_at_the_answer(f, peak)
    text = subprocess.run([MEMSCOPE, "fit", "--memory", "4MiB", script], capture_output=True,
                          text=True, env=QUIET, timeout=300).stdout
    assert "per example" not in text
    assert ("peak: not linear in the batch (no line through the sizes compiled holds within "
            "1% at each): read it off the table") in text.splitlines()
    # A peak that is linear keeps its line, within the tolerance at each size compiled.
    code, f, err = _fit("--memory", "1MiB", str(PROGRAMS / "fit_map_examples.py"))
    assert code == 0 and f["linear"], err[-2000:]
    rows = [(r["batch"], r["peak_bytes"]) for r in f["rows"] if r["peak_bytes"] is not None]
    assert all(abs(p - f["fixed_bytes"] - f["per_example_bytes"] * b) <= 0.01 * p
               for b, p in rows)


def test_a_loop_that_does_not_run_over_the_batch_is_no_excuse(tmp_path):
    """A step that slices its data to a configured batch (as MaxText's loss does)
    and scans over a fixed number of layers: the loop's trips do not grow with
    what is resized, so fit still says the batch counts input bytes (exit 2)."""
    script = tmp_path / "sliced_layers.py"
    script.write_text(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "CONFIGURED = 8\n"
        "def loss(w, x):\n"
        "    h, _ = jax.lax.scan(lambda h, wl: (jnp.tanh(h @ wl), None), x, w)\n"
        "    return h.sum()\n"
        "@jax.jit\n"
        "def step(w, data):\n"
        "    return w - 0.1 * jax.grad(loss)(w, data[:CONFIGURED])\n"
        "w = jnp.ones((3, 64, 64)) / 64\n"
        "for _ in range(3):\n"
        "    w = step(w, np.ones((16, 64), np.float32))\n")
    code, f, err = _fit("--memory", "2MiB", str(script))
    assert code == 2, err[-2000:]
    assert "computes on only part of what was resized" in f["batch_note"]


def test_fit_plan_answers_a_map_over_the_examples():
    done = subprocess.run([MEMSCOPE, "fit", "--plan", "--format", "json", "--memory", "1MiB",
                           str(PROGRAMS / "fit_map_examples.py")], capture_output=True,
                          text=True, env=QUIET, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert plan["batch_note"] is None
    written = next(r for r in plan["rows"] if r["setting"] == "as written")
    code, f, err = _fit("--memory", "1MiB", str(PROGRAMS / "fit_map_examples.py"))
    assert code == 0 and written["largest"] == f["largest"] is not None, err[-2000:]
