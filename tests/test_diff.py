"""``memscope diff`` and ``--stop-after``, through click's runner, against JAX's own figures."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from memscope.check.compare import compare_reports
from memscope.report import (
    Environment,
    FunctionReport,
    Memory,
    Report,
    load_report,
    save_report,
)
from memscope.report.units import format_bytes
from tests.support.cli import cli_error, invoke, write
from tests.support.truth import expected_peak

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_programs"
FORGOT = str(SAMPLES / "forgot_to_donate.py")


def _forgot_to_donate_figures(**donation):
    """memory_analysis() of the sample's step jitted with ``donation``, computed directly."""
    sys.path.insert(0, str(SAMPLES))
    try:
        import forgot_to_donate as m
        from _data import batch, init_params
    finally:
        sys.path.remove(str(SAMPLES))
    params = init_params(jax.random.key(0))
    momentum = jax.tree.map(jnp.zeros_like, params)
    x, y = batch(jax.random.key(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (jax.jit(m.train_step.__wrapped__, **donation)
                .lower(params, momentum, x, y, jnp.int32(0)).compile().memory_analysis())


def test_diff_measures_the_requested_donation(tmp_path):
    out = tmp_path / "r.json"
    result = invoke("diff", "--donate", "params,momentum", "-o", str(out), FORGOT,
                    "--steps", "2")
    assert result.exit_code == 0, result.output
    expected = _forgot_to_donate_figures(donate_argnames=("params", "momentum"))
    before = _forgot_to_donate_figures()
    (fn,) = load_report(str(out)).functions
    variant = fn.variant("requested")
    assert variant.memory.peak_bytes == expected_peak(expected)
    assert variant.memory.xla_peak_bytes == expected.peak_memory_in_bytes
    assert variant.memory.temp_bytes == expected.temp_size_in_bytes
    assert fn.memory.peak_bytes == expected_peak(before)
    text = result.stdout
    assert "train_step  " in text and "  better" in text
    assert '--donate params,momentum: donate_argnames=("params", "momentum")' in text
    change = expected_peak(expected) - expected_peak(before)
    peak_row = next(line for line in text.splitlines() if line.startswith("| peak"))
    assert format_bytes(expected_peak(before)) in peak_row
    assert format_bytes(expected_peak(expected)) in peak_row
    assert format_bytes(change) in peak_row
    changed = [line for line in text.splitlines()
               if "| not_donated" in line and "| aliased result" in line]
    assert len(changed) == 8  # every params and momentum leaf
    assert "final loss" in text  # the script ran as itself


def test_diff_by_number_names_the_same_donation():
    result = invoke("diff", "--donate", "0,1", "--stop-after", "1", FORGOT)
    assert result.exit_code == 0, result.output
    assert '--donate 0,1: donate_argnames=("params", "momentum")' in result.stdout
    assert "final loss" not in result.stdout  # --stop-after ended it


def test_diff_donate_none_of_a_donating_function_is_worse():
    result = invoke("diff", "--donate", "none", "--stop-after", "1",
                    str(SAMPLES / "donated.py"))
    assert result.exit_code == 0, result.output
    assert "  worse" in result.stdout
    assert "| aliased result" in result.stdout and "| not_donated " in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--donate", "7"], "train_step: --donate 7: train_step takes 5 arguments here (0 to 4); "
                        "its arguments: params, momentum, x, y, step"),
    (["--donate", "moment"], "train_step: --donate moment: train_step has no argument "
                             "'moment'; its arguments: params, momentum, x, y, step"),
    (["--donate", "0", "--function", "trian_step"],
     "--function trian_step: no captured function has that name; captured: train_step"),
    (["--donate", "0,,1"], None),
])
def test_diff_requests_that_do_not_apply_exit_2(args, message):
    got = cli_error("diff", *args, "--stop-after", "1", FORGOT)
    if message is not None:
        assert got == message
    else:
        assert got.startswith("--donate '0,,1': give argument numbers or names")


def test_diff_static_argument_cannot_be_donated():
    got = cli_error("diff", "--donate", "lr", "--stop-after", "1", str(SAMPLES / "donated.py"))
    assert got.endswith("lr is a static argument of train_step; static arguments cannot be "
                        "donated")


def test_diff_without_donate_or_with_it_after_the_script():
    assert cli_error("diff", FORGOT).startswith("give the donation to compare with --donate")
    assert cli_error("diff", FORGOT, "--steps", "2", "--donate", "0").endswith(
        "(--donate came after SCRIPT, so it went to the script: memscope's options go before "
        "SCRIPT, as in memscope diff --donate 0 train.py --lr 3e-4)")


@pytest.fixture(scope="module")
def two_reports(tmp_path_factory):
    """The forgetful sample, then the same with donation, saved as reports."""
    folder = tmp_path_factory.mktemp("reports")
    old, new = folder / "old.json", folder / "new.json"
    assert invoke("run", "-q", "--no-advice", "-o", str(old), FORGOT,
                  "--steps", "1").exit_code == 0
    fixed = folder / "fixed.py"
    text = Path(FORGOT).read_text().replace(
        "@jax.jit\n", "@partial(jax.jit, donate_argnames=('params', 'momentum'))\n")
    fixed.write_text("from functools import partial\n" + text)
    (folder / "_data.py").write_text((SAMPLES / "_data.py").read_text())
    assert invoke("run", "-q", "--no-advice", "-o", str(new), str(fixed),
                  "--steps", "1").exit_code == 0
    return old, new


def test_diff_of_two_reports(two_reports):
    old, new = two_reports
    result = invoke("diff", str(old), str(new))
    assert result.exit_code == 0, result.output
    # a long temporary path wraps: the first line or two, compared word for word
    first = result.stdout.split("\n\n")[0]
    assert " ".join(first.split()).startswith(f"{old} -> {new}"), result.stdout
    assert "train_step  " in result.stdout and "  better" in result.stdout
    assert "old: no donation" in result.stdout
    assert 'new: donate_argnames=("params", "momentum")' in result.stdout
    same = invoke("diff", "--only-changed", str(old), str(old))
    assert same.exit_code == 0
    assert "Nothing to compare." in same.stdout


def test_diff_of_reports_rejects_script_options(two_reports):
    old, new = two_reports
    assert cli_error("diff", "--donate", "0", str(old), str(new)).startswith(
        "--donate and --stop-after apply to a script")
    assert cli_error("diff", str(old), str(new), "--only-changed") == (
        "memscope's options go before the reports, as in memscope diff --only-changed "
        "OLD.json NEW.json")
    assert cli_error("diff", str(old)) == ("give two reports to compare: memscope diff "
                                           "OLD.json NEW.json")
    assert cli_error("diff", "--function", "nope", str(old), str(new)).startswith(
        "--function nope: no captured function has that name; captured: train_step")


def test_diff_of_a_corrupt_report(tmp_path, two_reports):
    bad = write(tmp_path / "bad.json", "{}")
    assert cli_error("diff", str(two_reports[0]), str(bad)) == (
        f"{bad}: not a memscope report (it has no \"schema\" field)")


def _fn(name: str, peak: int | None, signature: str = "()", source: str = "t.py:1"
        ) -> FunctionReport:
    return FunctionReport(name=name, source=source, calls=1, signature=signature,
                          memory=Memory(peak_bytes=peak))


def _report(*functions: FunctionReport) -> Report:
    empty = Environment("j", "j", "cpu", ())
    return Report("0", empty, None, functions)


def test_compare_reports_marks_worse_better_same_new_and_gone():
    old = _report(_fn("a", 100), _fn("b", 100), _fn("c", 100), _fn("gone", 1))
    new = _report(_fn("a", 120), _fn("b", 80), _fn("c", 100), _fn("fresh", 1))
    verdicts = {d.name: d.verdict for d in compare_reports(old, new)}
    assert verdicts == {"a": "worse", "b": "better", "c": "same", "fresh": "new",
                        "gone": "gone"}


def test_compare_reports_tells_same_named_functions_apart_by_file():
    old = _report(_fn("step", 10, source="a.py:3"), _fn("step", 20, source="b.py:9"))
    new = _report(_fn("step", 10, source="a.py:4"), _fn("step", 30, source="b.py:9"))
    assert [d.verdict for d in compare_reports(old, new)] == ["same", "worse"]


def test_stop_after_ends_the_target_and_says_so(tmp_path):
    out = tmp_path / "r.json"
    script = write(tmp_path / "loop.py", """\
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: x * 2)
        x = jnp.ones(3)
        try:
            for i in range(100):
                x = f(x)
        except Exception:
            print("caught by the target")
        print("after the loop")
    """)
    result = invoke("run", "-q", "--no-advice", "--stop-after", "3", "-o", str(out),
                    str(script))
    assert result.exit_code == 0, result.output
    assert "caught by the target" not in result.stdout
    assert "after the loop" not in result.stdout
    report = load_report(str(out))
    assert (report.run.outcome, report.run.exit_code) == ("stopped", 0)
    assert [fn.calls for fn in report.functions] == [3]
    complete = invoke("run", "-q", "--no-advice", "--stop-after", "1000", "-o", str(out),
                      str(script))
    assert complete.exit_code == 0
    assert load_report(str(out)).run.outcome == "completed"


def test_stop_after_must_be_positive():
    result = invoke("run", "--stop-after", "0", FORGOT)
    assert result.exit_code == 2
    assert "0 is not in the range x>=1" in result.stderr


def test_saved_report_with_variants_renders_again(tmp_path):
    out = tmp_path / "r.json"
    assert invoke("run", "-q", "--stop-after", "1", "-o", str(out), FORGOT).exit_code == 0
    report = load_report(str(out))
    save_report(report, str(tmp_path / "again.json"))
    assert load_report(str(tmp_path / "again.json")) == report
    shown = invoke("show", "--detail", str(out))
    assert shown.exit_code == 0
    assert "Donation variants (each compiled and measured)" in shown.stdout
    assert 'Advice: jit train_step with donate_argnames=("params", "momentum")' in shown.stdout


def test_compare_reports_uses_checks_rules_for_donations():
    from dataclasses import replace

    from memscope.report import InputBuffer

    def leaf(path, fate):
        return InputBuffer(path, (4,), "float32", 16, True, fate)

    before = replace(_fn("step", 100), inputs=(leaf("a", "unusable"), leaf("b", "aliased")))
    # the same count of unusable leaves, but b is newly unusable and lost its alias
    after = replace(_fn("step", 100), inputs=(leaf("a", "aliased"), leaf("b", "unusable")))
    (d,) = compare_reports(_report(before), _report(after))
    assert d.verdict == "worse"
