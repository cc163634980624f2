"""``memscope fit``: every peak it prints is memory_analysis() of the function
compiled at that size directly (with memscope's peak rule), and its answer fits
while the next size up does not, both compiled here independently."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from memscope.cli import cli
from memscope.errors import MemscopeError
from memscope.report import peak_rule
from memscope.variants.donation import Argument
from memscope.variants.fit import KeptCall, choose_batch
from tests.support.cli import MEMSCOPE
from tests.support.samples import SAMPLES, sample_module
from tests.support.terminal import run_in_terminal, screen

MLP = Path(__file__).parent / "programs" / "fit_mlp.py"
QUIET = {**os.environ, "PYTHONWARNINGS": "ignore"}


def _module(path: Path):
    return sample_module(path.stem, path)


def _peak(jitted, *args) -> int:
    """The peak of ``jitted`` compiled for ``args`` (ShapeDtypeStructs), by memscope's rule."""
    stats = jitted.lower(*args).compile().memory_analysis()
    xla = getattr(stats, "peak_memory_in_bytes", None)
    return peak_rule(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                     stats.alias_size_in_bytes, stats.temp_size_in_bytes, xla)[0]


def _fit(*args: str) -> tuple[int, dict]:
    done = subprocess.run([MEMSCOPE, "fit", "--format", "json", *args], capture_output=True,
                          text=True, env=QUIET, timeout=900)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}


def _mlp_args(batch: int):
    mlp = _module(MLP)
    params = jax.eval_shape(mlp.init, jax.random.key(0))
    return mlp, (params, jax.ShapeDtypeStruct((batch, 64), jnp.float32),
                 jax.ShapeDtypeStruct((batch, 10), jnp.float32))


def test_mlp_forecast_equals_memory_analysis_at_every_size():
    code, f = _fit("--memory", "8MiB", str(MLP), "--batch", "32")
    assert code == 0, f
    assert f["schema"] == "memscope.fit/1" and f["function"] == "step"
    assert (f["argument"], f["axis"], f["batch"], f["inferred"]) == ("x, y", 0, 32, True)
    mlp, _ = _mlp_args(1)
    for row in f["rows"]:
        if row["peak_bytes"] is not None:
            assert row["peak_bytes"] == _peak(mlp.train_step, *_mlp_args(row["batch"])[1])
        if row["advised_peak_bytes"] is not None:
            donating = jax.jit(mlp.step, donate_argnames=("params",))
            assert row["advised_peak_bytes"] == _peak(donating, *_mlp_args(row["batch"])[1])
    budget, largest = f["budget_bytes"], f["largest"]
    assert budget == f["memory_bytes"] - (f["held_bytes"] or 0) and budget <= 8 << 20
    assert _peak(mlp.train_step, *_mlp_args(largest)[1]) <= budget
    assert _peak(mlp.train_step, *_mlp_args(largest + 1)[1]) > budget
    assert f["advised_setting"] == 'donate_argnames=("params",)'
    assert f["advised_largest"] >= largest


def test_transformer_forecast_is_verified_at_the_answer_and_one_above():
    code, f = _fit("--memory", "1GiB", str(SAMPLES / "transformer_adam.py"))
    assert code == 0, f
    assert f["function"] == "train_step" and (f["argument"], f["axis"]) == ("batch", 0)
    tf = _module(SAMPLES / "transformer_adam.py")
    params = jax.eval_shape(functools.partial(tf.init_params, layers=8, width=128, seq=64),
                            jax.random.key(0))
    opt_state = jax.eval_shape(tf.optimizer.init, params)

    def peak(batch: int) -> int:
        data = {"tokens": jax.ShapeDtypeStruct((batch, 64), jnp.int32),
                "mask": jax.ShapeDtypeStruct((batch, 64), jnp.float32)}
        return _peak(tf.train_step, params, opt_state, data)

    rows = {r["batch"]: r["peak_bytes"] for r in f["rows"]}
    largest, budget = f["largest"], f["budget_bytes"]
    for batch in (f["batch"], largest, largest + f["step"]):
        assert rows[batch] == peak(batch)
    assert rows[largest] <= budget < rows[largest + 1]
    # cheap: the line proposes, two compiles confirm (12 here; 13 on an H100)
    assert f["compiles"] <= 13


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    for args, words in ((["--memory", "1GiB", "--function", "nope"],
                         "no jitted function called 'nope'"),
                        (["--memory", "1GiB", "--batch", "z"], "--batch z: no argument 'z'"),
                        *([([], "reports no device memory limit: give the budget with "
                                 "--memory")] if jax.default_backend() == "cpu" else []),
                        (["--memory", "lots"], "not a size: 'lots'")):
        result = runner.invoke(cli, ["fit", *args, str(MLP)])
        assert result.exit_code == 2, result.output
        said = result.output
        if "nope" in args:  # the program runs on, waiting for nope: its own prints come first
            program, said = said.split("\n", 1)
            assert program == "done True"
        assert words in said and said.count("\n") == 1
    result = runner.invoke(cli, ["fit", "--memory", "1KiB", str(MLP)])
    assert result.exit_code == 1 and "Largest batch that fits" in result.output


def test_fit_shows_its_compiles_on_a_terminal_only():
    # stdout and stderr on one real terminal, as a user runs it: each compile is
    # shown while it runs, and the line is gone before the answer is printed (the
    # screen holds the answer alone); piped, or with -q, not a byte of it
    fit = [sys.executable, "-m", "memscope", "fit"]
    args = ["--memory", "8MiB", str(MLP), "--batch", "32"]
    env = {**QUIET, "COLUMNS": "120"}
    piped = subprocess.run([*fit, *args], capture_output=True, text=True, env=env,
                           timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""  # as before there was a progress line

    shown = run_in_terminal([*fit, *args], env=env, timeout=300)
    assert shown.returncode == 0, shown.terminal[-2000:]
    said = re.sub(r"\x1b\[[0-9;]*m", "", shown.terminal)  # (colours)
    assert re.search(r"compiling step as written at batch 64 for this machine "
                     r"0 of 2 done, \d+ s", said), said[-2000:]
    assert re.search(r"compiling step with the advised donation at batch \d+ for this "
                     r"machine 1 of 2 done, \d+ s", said), said[-2000:]
    assert _timeless(screen(shown.terminal)) == _timeless(piped.stdout.splitlines())

    quiet = run_in_terminal([*fit, "-q", *args], env=env, stdout_on_terminal=False,
                            timeout=300)
    assert quiet.returncode == 0, quiet.terminal[-2000:]
    assert quiet.terminal == ""
    assert _timeless(quiet.stdout.splitlines()) == _timeless(piped.stdout.splitlines())


def _timeless(lines: list[str]) -> list[str]:
    """``lines`` less their trailing blanks and how long the compiles took."""
    return [re.sub(r"compiles in [\d.]+ s", "compiles in _ s", line.rstrip()) for line in lines]


def test_several_batch_arguments_are_resized_together():
    # In a process of its own: the budget is 8 MiB less what the process holds,
    # which in this one would count arrays earlier tests left alive.
    code, f = _fit("--memory", "8MiB", "--batch", "x", "--batch", "y:0", str(MLP))
    assert code == 0, f
    assert (f["argument"], f["axis"], f["batch"], f["inferred"]) == ("x, y", 0, 32, False)
    assert f["choice_note"] == "x, y, axis 0 (given)"
    mlp, _ = _mlp_args(1)
    rows = {r["batch"]: r["peak_bytes"] for r in f["rows"]}
    largest, budget = f["largest"], f["budget_bytes"]
    assert rows[largest] == _peak(mlp.train_step, *_mlp_args(largest)[1]) <= budget
    assert rows[largest + 1] == _peak(mlp.train_step, *_mlp_args(largest + 1)[1]) > budget


def test_a_batch_that_leaves_out_an_argument_of_its_size_is_one_line():
    """``y`` has the batch size too: resizing ``x`` alone breaks the step's own
    broadcasting, which JAX says in a traceback; memscope says it in one line."""
    result = CliRunner().invoke(cli, ["fit", "--memory", "8MiB", "--batch", "x", str(MLP)],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "memscope: error: step does not trace at batch 64 with only x resized: y shares "
        "the batch axis (y:0 is 32 too); pass --batch x --batch y, or leave --batch out "
        "(inferred: x:0, y:0)\n")
    assert result.stdout == ""
    # no argument shares the size: JAX's own reason, in one line
    result = CliRunner().invoke(cli, ["fit", "--memory", "8MiB", "--batch", "y:1", str(MLP)],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "memscope: error: step does not trace at batch 20 with y resized (y:1): TypeError: "
        "mul got incompatible shapes for broadcasting: (32, 10), (32, 20).\n")


def test_batch_arguments_of_different_sizes_or_named_twice_are_refused():
    runner = CliRunner()
    for args, line in ((["--batch", "x:1", "--batch", "y"],
                        "--batch x:1 --batch y: x:1 is 64, y:0 is 32; the arguments resized "
                        "together must have one batch size"),
                       (["--batch", "x", "--batch", "1"],
                        "--batch 1: x is named twice; give each argument once")):
        result = runner.invoke(cli, ["fit", "--memory", "8MiB", *args, str(MLP)])
        assert result.exit_code == 2, result.output
        assert result.stderr == f"memscope: error: {line}\n"


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A recorded call as choose_batch reads it: the call in shapes."""

    call: KeptCall
    name: str = "step"
    source: str | None = None
    facts: None = None
    variants: tuple = ()


def _entry(**arguments) -> _Entry:
    values = tuple(arguments.values())
    leaves = [len(jax.tree_util.tree_leaves(v)) for v in values]
    starts = [sum(leaves[:k]) for k in range(len(values))]
    return _Entry(KeptCall(None, values, {}, tuple(
        Argument(k, name, True, tuple(range(start, start + n)))
        for k, (name, start, n) in enumerate(zip(arguments, starts, leaves, strict=True)))))


def _f32(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


ENTRY = _entry(x=_f32(32, 64), y=_f32(32, 10), mixed={"a": _f32(8, 3), "b": _f32(8)},
               counted={"a": _f32(8, 3), "n": _f32()}, v=_f32(5),
               pair=(_f32(8, 3), _f32(8, 4)))


@pytest.mark.parametrize(("specs", "axes", "size", "note"), [
    (("x:-1",), (1,), 64, "x, axis 1 (given; x:-1 is axis 1)"),
    (("x:-2", "y:-2"), (0, 0), 32, "x, y, axis 0 (given; x:-2 is axis 0, y:-2 is axis 0)"),
    (("1:-1",), (1,), 10, "y, axis 1 (given; y:-1 is axis 1)"),
    # a scalar has no axis: the rank is the other arrays'
    (("counted:-1",), (1,), 3, "counted, axis 1 (given; counted:-1 is axis 1)"),
    (("x:0",), (0,), 32, "x, axis 0 (given)"),
])
def test_a_negative_batch_axis_counts_from_the_end(specs, axes, size, note):
    choice = choose_batch(ENTRY, specs)
    assert (choice.axes, choice.size, choice.note) == (axes, size, note)
    # what is resized is the axis counted from 0
    spelled = choose_batch(ENTRY, [f"{a.name}:{axis}"
                                   for a, axis in zip(choice.arguments, axes, strict=True)])
    assert (spelled.arguments, spelled.axes, spelled.size) == (choice.arguments, axes, size)


@pytest.mark.parametrize(("spec", "message"), [
    ("x:-3", "--batch x:-3: x has 2 axes, so AXIS is 0 to 1 or -2 to -1"),
    ("v:-2", "--batch v:-2: v has 1 axis, so AXIS is 0 or -1"),
    ("counted:-3", "--batch counted:-3: counted's arrays (scalars aside) have 2 axes, so "
                   "AXIS is 0 to 1 or -2 to -1"),
    ("pair:-3", "--batch pair:-3: pair's arrays have 2 axes, so AXIS is 0 to 1 or -2 to -1"),
    ("mixed:-1", "--batch mixed:-1: mixed's arrays have 1 and 2 axes, so -1 would be another "
                 "axis in each; give AXIS counted from 0"),
    ("x:2", "--batch x:2: x has no array with an axis 2"),
])
def test_a_batch_axis_out_of_range_is_refused(spec, message):
    with pytest.raises(MemscopeError) as e:
        choose_batch(ENTRY, [spec])
    assert str(e.value) == message


def test_fit_takes_a_negative_batch_axis_and_refuses_one_out_of_range():
    code, f = _fit("--memory", "8MiB", "--batch", "x:-2", "--batch", "y:-2", str(MLP))
    assert code == 0, f  # (in a process of its own, as above)
    assert (f["argument"], f["axis"], f["batch"], f["inferred"]) == ("x, y", 0, 32, False)
    assert f["choice_note"] == "x, y, axis 0 (given; x:-2 is axis 0, y:-2 is axis 0)"
    mlp, _ = _mlp_args(1)
    largest, budget = f["largest"], f["budget_bytes"]
    assert _peak(mlp.train_step, *_mlp_args(largest)[1]) <= budget
    assert _peak(mlp.train_step, *_mlp_args(largest + 1)[1]) > budget
    refused = CliRunner().invoke(cli, ["fit", "--memory", "8MiB", "--batch", "x:-3", str(MLP)])
    assert (refused.exit_code, refused.stdout, refused.stderr) == (
        2, "", "memscope: error: --batch x:-3: x has 2 axes, so AXIS is 0 to 1 or -2 to -1\n")


@pytest.mark.gpu
def test_on_a_gpu_the_budget_is_the_device_limit_less_what_is_held():
    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU")
    code, f = _fit(str(MLP), "--batch", "32")
    assert code == 0, f
    limit = jax.local_devices()[0].memory_stats()["bytes_limit"]
    assert f["memory_bytes"] == limit  # the same device, the same allocator settings
    assert f["budget_bytes"] == limit - f["held_bytes"]
    mlp, _ = _mlp_args(1)
    assert _peak(mlp.train_step, *_mlp_args(f["largest"])[1]) <= f["budget_bytes"]
    assert _peak(mlp.train_step, *_mlp_args(f["largest"] + 1)[1]) > f["budget_bytes"]
