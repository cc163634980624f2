"""``memscope fix`` end to end: each jit spelling and each sample program with advice.

For each: the diff is the donation keyword alone (and ``partial``'s import for a
bare ``@jax.jit``), the edited program prints what the original printed, and a
fresh capture of it shows every advised leaf ``aliased`` at the peak the advice
predicted, with JAX's own runtime evidence: the input deleted by the call and
the output written at its old address (``observed == "confirmed"``).
"""

from __future__ import annotations

import difflib
import hashlib
import io
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from memscope.cli import cli
from memscope.errors import EXIT_FIX_REFUSED, EXIT_FIX_UNVERIFIED, EXIT_PROGRAM_FAILED
from memscope.fix import plan as fix
from memscope.flow import run_and_report
from memscope.program.runner import Script
from memscope.render.fix import render_checks, render_problems
from memscope.report import load_report, save_report
from memscope.report.units import format_bytes

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_programs"

STATE = """\
def init():
    params = {"w": jnp.ones((32, 16)), "b": jnp.zeros(16)}
    return params, {"m": jnp.zeros((32, 16)), "v": jnp.zeros(16)}
"""

LOOP = """\
def main():
    params, opt_state = init()
    for i in range(3):
        x = jnp.linspace(0.0, 1.0, 32) + i
        params, opt_state, loss = train_step(params, opt_state, x)
    print(f"loss {float(loss):.6f}")


main()
"""

BODY = """\
    g = x @ params["w"] + params["b"]
    opt_state = {"m": opt_state["m"] * 0.9 + 0.1, "v": opt_state["v"] + g}
    params = {"w": params["w"] - 0.01 * opt_state["m"], "b": params["b"] - 0.01 * g}
    return params, opt_state, g.sum()
"""

#: each spelling: the program, and the one line the fix changes (before, after)
SPELLINGS = {
    "bare_jit": (
        "import jax\nimport jax.numpy as jnp\n\n" + STATE
        + "\n\n@jax.jit  # the step\ndef train_step(params, opt_state, x):\n" + BODY
        + "\n\n" + LOOP,
        ("@jax.jit  # the step",
         '@partial(jax.jit, donate_argnames=("params", "opt_state"))  # the step')),
    "partial_jit": (
        "from functools import partial\n\nimport jax\nimport jax.numpy as jnp\n\n" + STATE
        + "\n\n@partial(jax.jit, static_argnames=('scale',))\n"
        "def train_step(params, opt_state, x, scale=1.0):\n" + BODY + "\n\n" + LOOP,
        ("@partial(jax.jit, static_argnames=('scale',))",
         "@partial(jax.jit, static_argnames=('scale',), "
         'donate_argnames=("params", "opt_state"))')),
    "functools_partial_argnums": (
        "import functools\n\nimport jax\nimport jax.numpy as jnp\n\n" + STATE
        + "\n\n@functools.partial(jax.jit, donate_argnums=0)\n"
        "def train_step(params, opt_state, x):\n" + BODY + "\n\n" + LOOP,
        ("@functools.partial(jax.jit, donate_argnums=0)",
         "@functools.partial(jax.jit, donate_argnums=(0, 1))")),
    "assignment": (
        "import jax\nimport jax.numpy as jnp\n\n" + STATE
        + "\n\ndef step(params, opt_state, x):\n" + BODY
        + "\n\ntrain_step = jax.jit(step)\n\n\n" + LOOP,
        ("train_step = jax.jit(step)",
         'train_step = jax.jit(step, donate_argnames=("params", "opt_state"))')),
    "equinox": (
        "import equinox as eqx\nimport jax.numpy as jnp\n\n" + STATE
        + "\n\n@eqx.filter_jit\ndef train_step(params, opt_state, x):\n" + BODY
        + "\n\n" + LOOP,
        ("@eqx.filter_jit", '@eqx.filter_jit(donate="all")')),
    "nnx": (
        "import jax.numpy as jnp\nfrom flax import nnx\n\n" + STATE
        + "\n\n@nnx.jit\ndef train_step(params, opt_state, x):\n" + BODY + "\n\n" + LOOP,
        ("@nnx.jit", '@nnx.jit(donate_argnames=("params", "opt_state"))')),
}


def _python(script: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, script.name, *args], cwd=script.parent,
                          capture_output=True, text=True, timeout=300, check=True)
    return done.stdout


def _changed(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines())
            if line.startswith(("- ", "+ "))]


def _fix_and_measure(script: Path, *args: str) -> tuple[fix.FixPlan, object, object]:
    """Capture, plan and write the fix, then capture the edited program afresh."""
    target = Script(script.name, args)
    before = fix.measure_script(target, stop_after=fix.DEFAULT_STOP_AFTER, advice="advised")
    plan = fix.plan_fix(before)
    assert plan.refusals == () and plan.notes == ()
    fix.apply(plan.changes)
    after = fix.measure_script(target, stop_after=fix.DEFAULT_STOP_AFTER, advice="off")
    return plan, before, after


def _assert_as_advised(plan: fix.FixPlan, before, after) -> None:
    for item in plan.functions:
        advised = next(f for f in before.functions if f.name == item.name)
        now = next(f for f in after.functions if f.name == item.name
                   and f.signature == item.signature)
        assert advised.advice is not None and item.leaves
        assert now.memory.peak_bytes == advised.advice.peak_after
        fates = {b.path: b for b in now.inputs}
        for leaf in item.leaves:
            assert fates[leaf].fate == "aliased", leaf
            # JAX's own evidence at the first call: deleted, output at its address
            assert fates[leaf].deleted is True and fates[leaf].observed == "confirmed"
        assert all(c.as_advised for c in fix.verify(plan.functions, after))


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_each_spelling(spelling, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source, (old, new) = SPELLINGS[spelling]
    script = tmp_path / "train.py"
    script.write_text(source)
    printed = _python(script)
    plan, before, after = _fix_and_measure(script)
    edited = script.read_text()
    expected = [f"- {old}", f"+ {new}"]
    if spelling == "bare_jit":  # JAX 0.7's jax.jit is no decorator factory
        expected[:0] = ["+ from functools import partial", "+ "]  # a section of its own
    assert _changed(source, edited) == expected
    assert sorted(line for line in plan.diff.splitlines() if line[:1] in "+-"
                  and line[:3] not in ("+++", "---")) == sorted(e[0] + e[2:] for e in expected)
    assert _python(script) == printed
    _assert_as_advised(plan, before, after)


@pytest.mark.parametrize(("sample", "args"), [
    ("forgot_to_donate.py", ("--steps", "3")),
    ("passthrough_copy.py", ()),
    ("transformer_adam.py", ("--steps", "2")),
])
def test_sample_programs_with_advice(sample, args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in (sample, "_data.py"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    script = tmp_path / sample
    source = script.read_text()
    printed = _python(script, *args)
    plan, before, after = _fix_and_measure(script, *args)
    assert [c.path for c in plan.changes] == [sample]
    decorator = next(line for line in source.splitlines() if line.startswith("@jax.jit"))
    setting = next(f.advice.setting for f in before.functions if f.advice)
    assert _changed(source, script.read_text()) == [
        "+ from functools import partial", f"- {decorator}",
        f"+ @partial(jax.jit, {setting})"]
    assert _python(script, *args) == printed
    _assert_as_advised(plan, before, after)
    # every candidate leaf (the whole training state, not the batch) is now aliased
    [advised] = [f for f in before.functions if f.advice]
    assert set(plan.functions[0].leaves) == {b.path for b in advised.inputs if b.candidate}


def _program(tmp_path: Path, text: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    return script


READ_AFTER = """\
    import jax
    import jax.numpy as jnp


    @jax.jit
    def step(params, x):
        return params * 2.0 + x


    params = jnp.ones(64)
    new = step(params, jnp.ones(64))
    print(float(params.sum()), float(new.sum()))
"""


def _cli(tmp_path: Path, *args: str):
    return CliRunner().invoke(cli, ["fix", *args], prog_name="memscope",
                              catch_exceptions=False)


def test_cli_diff_by_default_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source, _ = SPELLINGS["assignment"]
    script = _program(tmp_path, source)
    result = _cli(tmp_path, "train.py")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    assert script.read_text() == source


def test_cli_write_measures_again_and_keeps_the_edit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("forgot_to_donate.py", "_data.py"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    report = fix.measure_script(Script("forgot_to_donate.py", ("--steps", "3")), stop_after=10,
                         advice="advised")
    [f] = report.functions
    result = _cli(tmp_path, "--write", "forgot_to_donate.py", "--steps", "3")
    assert result.exit_code == 0, result.output
    leaves = sum(b.candidate for b in f.inputs)
    assert result.stdout == (
        f"train_step ({f.jit_site}): peak {format_bytes(f.advice.peak_before)} -> "
        f"{format_bytes(f.advice.peak_after)} (advice predicted "
        f"{format_bytes(f.advice.peak_after)}); all {leaves} advised leaves aliased\n"
        "memscope fix: wrote forgot_to_donate.py\n")
    assert f"@partial(jax.jit, {f.advice.setting})" in (tmp_path / "forgot_to_donate.py"
                                                        ).read_text()


def test_refused_read_after_the_call(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = _program(tmp_path, READ_AFTER)
    before = script.read_text()
    result = _cli(tmp_path, "--write", "train.py")
    assert result.exit_code == EXIT_FIX_REFUSED
    assert result.stderr.splitlines() == [
        "memscope fix: refused: step: params is donated at train.py:11 but is read again "
        "at line 12",
        "memscope fix: nothing written (an edit was refused)"]
    assert script.read_text() == before


def test_a_read_it_could_not_check_fails_the_verifying_run_and_is_undone(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = _program(tmp_path, """\
        import types

        import jax
        import jax.numpy as jnp


        @jax.jit
        def step(p):
            return p * 2.0


        box = types.SimpleNamespace(p=jnp.ones(64))
        new = step(box.p)
        print(float(box.p.sum()), float(new.sum()))
    """)
    before = script.read_text()
    result = _cli(tmp_path, "--write", "train.py")
    assert result.stderr.splitlines()[0] == (
        "memscope fix: note: step: could not check that the donated arguments are not read "
        "after the call: train.py:13 passes p as box.p, which this check cannot follow")
    assert result.exit_code == EXIT_PROGRAM_FAILED
    assert "deleted" in result.stderr.lower()
    assert script.read_text() == before


def test_refused_when_the_file_changed_since_the_capture(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source, _ = SPELLINGS["assignment"]
    script = _program(tmp_path, source)
    report = fix.measure_script(Script("train.py", ()), stop_after=3, advice="advised")
    script.write_text(source + "# edited meanwhile\n")
    plan = fix.plan_fix(report)
    assert plan.refusals == ("train.py changed since memscope ran it (or could not be "
                             "read); run memscope fix again",)
    assert plan.changes == ()


def test_refused_dynamic_jit_and_nothing_written_unless_all_apply(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helpers.py").write_text(textwrap.dedent("""\
        import jax


        def fast(fn):
            return jax.jit(fn)
    """))
    script = _program(tmp_path, """\
        import jax
        import jax.numpy as jnp
        from helpers import fast


        def double(a):
            return a * 2.0


        @jax.jit
        def step(params):
            return params + 1.0


        d = fast(double)
        a = d(jnp.ones(64))
        params = step(jnp.ones(64))
        print(float(a.sum()), float(params.sum()))
    """)
    before = script.read_text()
    result = _cli(tmp_path, "--write", "train.py")
    assert result.exit_code == EXIT_FIX_REFUSED
    assert ("memscope fix: refused: double: helpers.py:5: the jit call is built dynamically "
            "(it jits fn, not double by name); edit it by hand") in result.stderr
    assert script.read_text() == before  # step's edit would apply, yet nothing is written
    limited = _cli(tmp_path, "--function", "step", "train.py")
    assert limited.exit_code == 0, limited.output
    assert '+@partial(jax.jit, donate_argnames=("params",))\n' in limited.stdout
    assert "helpers.py" not in limited.stdout


def test_equinox_donating_an_argument_the_loop_reads_again_is_never_advised(tmp_path,
                                                                          monkeypatch):
    """eqx.filter_jit donates all arguments but the first or none: donating the
    others would donate ``x`` too, which the loop passes again, the very same
    array. The run sees it passed again at the second call, so no advice donates
    it and there is nothing for fix to write (before, the advice did, and fix
    refused it from the loop's source)."""
    monkeypatch.chdir(tmp_path)
    source = SPELLINGS["equinox"][0].replace(
        "    for i in range(3):\n        x = jnp.linspace(0.0, 1.0, 32) + i\n",
        "    x = jnp.linspace(0.0, 1.0, 32)\n    for i in range(3):\n")
    _program(tmp_path, source)
    report = fix.measure_script(Script("train.py", ()), stop_after=3, advice="advised")
    step = next(f for f in report.functions if f.name == "train_step")
    assert [b.passed_again for b in step.inputs if b.path == "x"] == [2]
    assert step.advice is None
    plan = fix.plan_fix(report)
    assert plan.changes == () and plan.refusals == ()


def test_measurement_that_differs_restores_the_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source, _ = SPELLINGS["assignment"]
    script = _program(tmp_path, source)
    target = Script("train.py", ())
    report = fix.measure_script(target, stop_after=3, advice="advised")
    plan = fix.plan_fix(report)
    # The edited program called with another shape: the function it measures
    # is not the one advised, so the measurement cannot agree.
    fix.apply(plan.changes)
    script.write_text(script.read_text().replace("(32, 16)", "(32, 8)").replace(
        "zeros(16)", "zeros(8)"))
    after = fix.measure_script(target, stop_after=3, advice="off")
    checks = fix.verify(plan.functions, after)
    assert [c.as_advised for c in checks] == [False]
    assert checks[0].error == "the edited program did not call it"
    fix.restore(plan.changes)
    assert script.read_text() == source


def test_cli_measurement_that_differs_exits_6_and_restores(tmp_path, monkeypatch):
    """A program whose second run differs from its first (a flag file) measures
    unlike its advice: the edit is undone."""
    monkeypatch.chdir(tmp_path)
    source = SPELLINGS["assignment"][0].replace(
        "def main():\n", "def main():\n    import os\n    if os.path.exists('ran'):\n"
        "        return print('second run')\n    open('ran', 'w').close()\n")
    script = _program(tmp_path, source)
    result = _cli(tmp_path, "--write", "train.py")
    assert result.exit_code == EXIT_FIX_UNVERIFIED, result.output
    assert result.stdout.startswith("step (train.py:")
    assert "the edited program did not call it" in result.stdout
    assert result.stderr.endswith("the measurement differs from the advice; restored "
                                  "train.py\n")
    assert script.read_text() == source


def test_a_failing_script_is_one_line_exit_3(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _program(tmp_path, "raise ValueError('bad input')\n")
    result = _cli(tmp_path, "train.py")
    assert result.exit_code == EXIT_PROGRAM_FAILED
    assert result.stderr == ("memscope: error: train.py failed under memscope run (failed "
                             "(exit code 1): ValueError: bad input); nothing was changed\n")


def test_options_after_the_script_are_the_scripts_and_the_error_says_so(tmp_path,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    _program(tmp_path, "import sys\nif sys.argv[1:]:\n    raise SystemExit(2)\n")
    result = _cli(tmp_path, "train.py", "--write")
    assert result.exit_code == EXIT_PROGRAM_FAILED
    assert result.stderr == (
        "memscope: error: train.py failed under memscope run (failed (exit code 2)); "
        "nothing was changed (--write came after SCRIPT, so it went to the script: "
        "memscope's options go before SCRIPT, as in memscope fix --write train.py "
        "--steps 5)\n")


def test_capture_records_the_jit_site_its_hash_and_the_call_site(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source, _ = SPELLINGS["assignment"]
    script = _program(tmp_path, source)
    report = run_and_report(Script(str(script), ()), advise="off")
    [f] = report.functions
    lines = source.splitlines()
    assert f.jit_site == f"train.py:{lines.index('train_step = jax.jit(step)') + 1}"
    assert f.jit_file_sha256 == hashlib.sha256(script.read_bytes()).hexdigest()
    call = next(i for i, line in enumerate(lines, 1) if "= train_step(" in line)
    assert f.call_site == f"train.py:{call}"
    saved = tmp_path / "r.json"
    save_report(report, str(saved))
    assert load_report(str(saved)).functions[0].jit_site == f.jit_site


def test_every_refusal_and_note_is_one_line():
    plan = fix.FixPlan((), (), ("a: why\nnot", "b: x"), ("c: note",), "")
    out = io.StringIO()
    render_problems(plan, out)
    assert out.getvalue().splitlines() == [
        "memscope fix: refused: a: why\\nnot", "memscope fix: refused: b: x",
        "memscope fix: note: c: note"]


def test_render_checks_exact_lines():
    item = fix.Advised(name="step", signature="(f32[4])", source="t.py:5", jit_site="t.py:4",
                       setting='donate_argnames=("p",)', leaves=("p['a']", "p['b']"),
                       peak_before=2048, peak_predicted=1024)
    out = io.StringIO()
    render_checks([
        fix.Check(item, 1024, 2, ()),
        fix.Check(item, 2048, 1, (("p['b']", "donor"),), why="XLA did not use it."),
        fix.Check(item, None, 0, (("p['a']", "missing"), ("p['b']", "missing")),
                  error="the edited program did not call it"),
    ], out)
    head = "step (t.py:4): peak 2.0 KiB -> {} (advice predicted 1.0 KiB)"
    assert out.getvalue().splitlines() == [
        head.format("1.0 KiB") + "; all 2 advised leaves aliased",
        head.format("2.0 KiB") + "; 1 of 2 advised leaves aliased; not aliased: p['b'] "
        "(donor); p['b']: XLA did not use it.",
        head.format("n/a") + "; the edited program did not call it"]
