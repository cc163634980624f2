"""Advice is self-consistent: it never donates what its own measured variant shows
``unusable``, and a program that follows it passes ``check`` against the program
as written.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from memscope.assemble.function import function_report
from memscope.capturing import capture
from memscope.check.judge import check_report
from memscope.flow import analyze, run_and_report
from memscope.program.runner import Script
from memscope.report import FunctionReport, Report
from tests.support.cli import run_memscope
from tests.support.samples import SAMPLES
from tests.support.truth import expected_peak


def step(state, batch):
    """``batch['x']`` could be reused by an output; ``batch['tokens']`` by none."""
    w = state["w"] - 0.1 * batch["x"].sum()
    return {"w": w}, batch["x"] * 2.0, batch["tokens"].sum()


def _args():
    return ({"w": jnp.ones((256, 256))},
            {"x": jnp.ones((64, 32)), "tokens": jnp.ones((8, 64), jnp.int32)})


def test_an_argument_the_variant_shows_unusable_is_left_out_and_re_measured():
    fn = analyze(jax.jit(step), *_args())
    every = fn.variant("all")
    assert every is not None  # donating batch leaves batch['tokens'] unusable: measured
    assert [b.path for b in every.inputs if b.fate == "unusable"] == ["batch['tokens']"]
    fixed = fn.variant("advised")
    assert fixed is not None and fixed.setting == 'donate_argnames=("state",)'
    assert not [b for b in fixed.inputs if b.fate == "unusable"]
    assert fn.advice is not None and fn.advice.setting == fixed.setting
    assert fn.advice.caveat.startswith(
        "The advice leaves out batch: donating it leaves batch['tokens'] unusable")
    stats = (jax.jit(step, donate_argnames=("state",)).lower(*_args()).compile()
             .memory_analysis())
    assert fn.advice.peak_after == expected_peak(stats) == fixed.memory.peak_bytes
    # what it saves is what the setting donates: state['w'], not batch['x']
    assert fn.advice.candidate_bytes == 256 * 256 * 4


class _Model(eqx.Module):
    w: jax.Array


def test_equinox_keeps_what_it_cannot_leave_out_and_says_why():
    def train(model, tokens):
        return _Model(model.w * 2.0 + tokens.sum())

    with capture(advise=True) as session:
        jitted = eqx.filter_jit(train)  # made inside the capture, as in a run
        jitted(_Model(jnp.ones((64, 64))), jnp.ones((8, 16), jnp.int32))
    (fn,) = [function_report(e) for e in session.entries]
    fixed = fn.variant("advised")
    assert fixed is not None and fn.advice is not None
    # eqx.filter_jit donates the first argument's arrays with all the others' or alone
    # never: its nearest setting also donates tokens, which no output can take.
    assert fixed.setting == 'eqx.filter_jit(donate="all")'
    assert [b.path for b in fixed.inputs if b.fate == "unusable"] == ["tokens"]
    assert ('tokens stays unusable (no output can take it): eqx.filter_jit(donate="all") '
            "cannot leave out tokens.") in fn.advice.caveat


#: Each sample (but multi_process, which takes two processes) with small arguments.
SAMPLE_ARGS = {
    "forgot_to_donate": ("--steps", "2"), "donated": ("--steps", "2"),
    "unusable_donation": ("--steps", "2"), "passthrough_copy": ("--steps", "2"),
    "two_shapes": ("--steps", "2"), "equinox_train": ("--steps", "2"),
    "flax_train": ("--steps", "2"), "data_parallel": ("--steps", "2"),
    "model_parallel": ("--steps", "2"), "transformer_adam": ("--steps", "2"),
}


def _advised(report: Report) -> Report:
    """``report`` as the program would measure with each function's advice applied:
    the advised variant is that program, compiled with the advised setting."""
    def follow(fn: FunctionReport) -> FunctionReport:
        v = fn.variant("advised")
        if fn.advice is None or v is None or v.memory is None:
            return fn
        return dataclasses.replace(fn, memory=v.memory, inputs=v.inputs, outputs=v.outputs,
                                   setting=v.setting, variants=(), advice=None, buffers=None)
    return dataclasses.replace(report, functions=tuple(follow(f) for f in report.functions))


@pytest.mark.skipif(jax.device_count() < 8, reason="the sharded samples need 8 devices")
@pytest.mark.parametrize("sample", sorted(SAMPLE_ARGS))
def test_every_sample_advised_variant_is_usable_and_passes_check(sample):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        report = run_and_report(Script(str(SAMPLES / f"{sample}.py"), SAMPLE_ARGS[sample]),
                                advise=True)
    assert report.run is not None and report.run.exit_code == 0, report.run
    for fn in report.functions:
        fixed = fn.variant("advised")
        if fixed is None:
            continue
        written = {b.path: b.fate for b in fn.inputs}
        assert not [b.path for b in fixed.inputs
                    if b.fate == "unusable" and written.get(b.path) != "unusable"], fn.name
    result = check_report(_advised(report), report)
    assert not result.failed, [v.problems for v in result.functions]


@pytest.mark.parametrize(("sample", "function"), [("transformer_adam", "train_step"),
                                                  ("passthrough_copy", "train_step")])
def test_applying_the_printed_advice_passes_check(tmp_path: Path, sample: str,
                                                   function: str):
    """Edit the sample as the advice says, run it afresh, and check it against the
    report of the program as written."""
    base = tmp_path / "base.json"
    args = SAMPLE_ARGS[sample]
    ran = run_memscope("run", "-q", "-o", str(base), f"sample_programs/{sample}.py", *args)
    assert ran.returncode == 0, ran.stderr
    from memscope.report import load_report

    (fn,) = [f for f in load_report(str(base)).functions if f.name == function]
    assert fn.advice is not None
    text = (SAMPLES / f"{sample}.py").read_text(encoding="utf-8")
    assert text.count("@jax.jit\n") == 1
    edited = tmp_path / f"{sample}.py"
    edited.write_text("import functools\n" + text.replace(
        "@jax.jit\n", f"@functools.partial(jax.jit, {fn.advice.setting})\n"),
        encoding="utf-8")
    for helper in SAMPLES.glob("_*.py"):
        (tmp_path / helper.name).write_text(helper.read_text(encoding="utf-8"))
    new = tmp_path / "new.json"
    result = run_memscope("check", "--baseline", str(base), "-o", str(new), str(edited), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    (now,) = [f for f in load_report(str(new)).functions if f.name == function]
    assert not [b for b in now.inputs if b.fate == "unusable"]
    assert now.memory is not None and now.memory.peak_bytes == fn.advice.peak_after
    assert now.memory.peak_bytes < fn.memory.peak_bytes
