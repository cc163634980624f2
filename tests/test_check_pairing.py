"""``check`` and ``diff OLD NEW``: one rule for both, and a function followed across signatures."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from memscope.check.compare import compare_reports
from memscope.check.judge import check_report
from memscope.check.pairing import pair_functions, signature_changes
from memscope.cli import cli
from memscope.report import FunctionReport, InputBuffer, Memory, load_report
from memscope.report.units import format_bytes
from tests.support.records import mem, report
from tests.support.truth import expected_peak


def leaf(path: str, *shape: int, dtype: str = "float32") -> InputBuffer:
    return InputBuffer(path, shape, dtype, 4 * max(1, len(shape)), False, "not_donated")


def sig(*leaves: InputBuffer) -> str:
    return "(" + ", ".join(f"{b.dtype}[{','.join(map(str, b.shape))}]" for b in leaves) + ")"


def fn(*leaves: InputBuffer, name: str = "sgd_step", peak: int = 1000,
       source: str = "train.py:8", signature: str | None = None,
       memory: Memory | None = None) -> FunctionReport:
    return FunctionReport(name=name, source=source, calls=1,
                          signature=signature or sig(*leaves),
                          memory=memory or mem(peak), inputs=leaves)


def test_a_function_is_followed_when_its_batch_grows() -> None:
    base = report(fn(leaf("w", 256), leaf("x", 32, 256), peak=1000))
    now = report(fn(leaf("w", 256), leaf("x", 512, 256), peak=4000, source="train.py:9"))
    result = check_report(now, base)
    (v,) = result.functions
    assert v.status == "fail" and result.failed
    assert v.baseline_signature == "(float32[256], float32[32,256])"
    assert v.signature_change == ("x: float32[32,256] -> float32[512,256]",)
    assert v.problems[0].startswith("peak grew by +2.9 KiB (+300.0%) to 3.9 KiB")
    # the baseline's signature abbreviated per argument (in full: v.baseline_signature)
    assert v.notes == ("paired with its baseline signature (w: float32[256]; x: float32[32,256]); "
                       "its signature changed: x: float32[32,256] -> float32[512,256]",)
    assert result.summary == "FAIL: 1 of 1 checked function failed (sgd_step)"
    (d,) = compare_reports(base, now)
    assert d.verdict == "worse" and d.problems == v.problems
    assert "x: float32[32,256] -> float32[512,256]" in d.notes[0]


def test_a_lower_peak_passes_though_temp_grew_and_diff_agrees() -> None:
    base = report(fn(leaf("w", 256), memory=mem(1000, temp=100)))
    now = report(fn(leaf("w", 256), memory=mem(600, temp=107)))
    (v,) = check_report(now, base).functions
    assert v.status == "pass"
    assert v.notes == ("temp grew by +7 B (+7.0%) to 107 B, over the baseline 100 B; "
                       "reported, not gated (--max-increase temp=PCT gates it)",)
    (d,) = compare_reports(base, now)
    assert d.verdict == "better" and d.problems == () and d.notes == v.notes


def test_several_signatures_pair_by_the_leaves_they_share() -> None:
    base = report(fn(leaf("x", 32), leaf("y", 8), peak=100),
                  fn(leaf("x", 64), leaf("z", 8), peak=200))
    now = report(fn(leaf("x", 128), leaf("z", 8), peak=300),
                 fn(leaf("x", 48), leaf("y", 8), peak=100))
    pairing = pair_functions(now.functions, base.functions)
    assert [(a.signature, b.signature if b else None) for a, b in pairing.pairs] == [
        ("(float32[128], float32[8])", "(float32[64], float32[8])"),
        ("(float32[48], float32[8])", "(float32[32], float32[8])")]
    assert pairing.vanished == [] and pairing.unpaired == {}
    assert [v.status for v in check_report(now, base).functions] == ["fail", "pass"]


def test_what_cannot_be_paired_is_said_and_fails() -> None:
    base = report(fn(leaf("x", 32)), fn(leaf("x", 64)))
    now = report(fn(leaf("x", 16)), fn(leaf("x", 128)), fn(leaf("x", 256)))
    result = check_report(now, base)
    assert [(v.signature, v.status) for v in result.functions] == [
        ("(float32[16])", "fail"), ("(float32[128])", "fail"), ("(float32[256])", "fail"),
        ("(float32[32])", "vanished"), ("(float32[64])", "vanished")]
    assert result.functions[0].problems == (
        "could not be paired with a baseline signature of sgd_step: 2 baseline signatures "
        "left for 3 now, none sharing its argument leaves unambiguously (--update-baseline "
        "takes the new signatures in)",)
    assert [d.verdict for d in compare_reports(base, now)] == ["worse"] * 3 + ["gone"] * 2


def test_other_functions_stay_new_and_vanished() -> None:
    base = report(fn(leaf("x", 32), name="old_eval"), fn(leaf("w", 8), name="step"))
    now = report(fn(leaf("x", 32), name="new_eval"), fn(leaf("w", 8), name="step"))
    assert [v.status for v in check_report(now, base).functions] == ["new", "pass", "vanished"]


def test_a_function_whose_file_moved_is_paired_by_name() -> None:
    base = report(fn(leaf("x", 32), name="train_step", source="train.py:8", peak=1000))
    now = report(fn(leaf("x", 64), name="train_step", source="train_v2.py:9", peak=2000))
    result = check_report(now, base)
    (v,) = result.functions
    assert v.status == "fail" and v.paired_by == "paired by name (train.py -> train_v2.py)"
    assert v.notes[0] == "paired by name (train.py -> train_v2.py)"
    assert v.signature_change == ("x: float32[32] -> float32[64]",)
    assert result.summary == ("FAIL: 1 of 1 checked function failed (train_step); "
                              "1 paired across files")
    (d,) = compare_reports(base, now)
    assert d.verdict == "worse" and d.notes[0] == "paired by name (train.py -> train_v2.py)"
    # the same signature in another file pairs as before, and says the file moved
    same = report(fn(leaf("x", 32), name="train_step", source="train_v2.py:9", peak=1000))
    (v,) = check_report(same, base).functions
    assert (v.status, v.paired_by) == (
        "pass", "paired by name and signature (train.py -> train_v2.py)")


def test_a_name_two_files_define_is_not_paired_by_name() -> None:
    base = report(fn(leaf("x", 32), name="step", source="a.py:3"),
                  fn(leaf("w", 8), name="keep"))
    now = report(fn(leaf("x", 64), name="step", source="b.py:3"),
                 fn(leaf("x", 16), name="step", source="c.py:3"), fn(leaf("w", 8), name="keep"))
    result = check_report(now, base)
    assert [v.status for v in result.functions] == ["new", "new", "pass", "vanished"]
    assert not result.failed and result.nothing_compared is None
    # and the other way round: two baseline files, one now
    twice = report(fn(leaf("x", 32), name="step", source="a.py:3"),
                   fn(leaf("x", 16), name="step", source="c.py:3"))
    once = report(fn(leaf("x", 64), name="step", source="b.py:3"))
    assert [v.status for v in check_report(once, twice, allow_empty=True).functions] == [
        "new", "vanished", "vanished"]


def test_a_check_that_compares_nothing_fails_unless_allowed() -> None:
    base = report(fn(leaf("x", 32), name="train_step"), fn(leaf("x", 8), name="eval_step"))
    now = report(fn(leaf("x", 32), name="step", source="other.py:3"))
    result = check_report(now, base)
    assert [v.status for v in result.functions] == ["new", "vanished", "vanished"]
    assert result.failed and result.empty_failed
    assert result.summary == (
        "FAIL: nothing was compared with the baseline: its 2 functions (train_step, "
        "eval_step) vanished and none of the 1 called now (step) pairs with them; check that "
        "the baseline is this program's, retake it with --update-baseline, or pass "
        "--allow-empty")
    allowed = check_report(now, base, allow_empty=True)
    assert not allowed.failed
    assert allowed.summary == (
        "PASS: 0 functions checked, none failed; nothing was compared with the baseline "
        "(--allow-empty); 1 new, 2 vanished (--update-baseline takes new functions in)")
    # an empty baseline, or one that compared something, is not this case
    assert check_report(now, report()).nothing_compared is None
    assert check_report(base, base).nothing_compared is None


def test_a_static_argument_change_is_named() -> None:
    then = fn(leaf("x", 4), signature="(float32[4], lr=0.1)")
    now = fn(leaf("x", 4), signature="(float32[4], lr=0.2)")
    assert signature_changes(then, now) == ("lr=0.1 -> lr=0.2",)
    many = fn(*(leaf(f"p{i}", i + 2) for i in range(8)))
    grown = fn(*(leaf(f"p{i}", i + 3) for i in range(8)))
    changes = signature_changes(many, grown)
    assert changes[0] == "p0: float32[2] -> float32[3]" and changes[-1] == "and 3 more"


SGD = '''\
import argparse
from functools import partial
import jax, jax.numpy as jnp


@partial(jax.jit, donate_argnums=(0,))
def sgd_step(w, x, y):
    grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.1 * grad


parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
rows = parser.parse_args().batch
w = sgd_step(jnp.zeros((256, 4)), jnp.ones((rows, 256)), jnp.ones((rows, 4)))
print(float(w.sum()))
'''


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="memscope", catch_exceptions=False)


def _stats(rows: int):
    step = jax.jit(lambda w, x, y: w - 0.1 * jax.grad(
        lambda w: jnp.mean((x @ w - y) ** 2))(w), donate_argnums=(0,))
    return step.lower(jnp.zeros((256, 4)), jnp.ones((rows, 256)),
                      jnp.ones((rows, 4))).compile().memory_analysis()


def test_check_fails_a_program_whose_batch_grew(tmp_path: Path) -> None:
    script = tmp_path / "sgd.py"
    script.write_text(SGD, encoding="utf-8")
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    made = _invoke("check", "--update-baseline", "--baseline", str(base), str(script))
    assert made.exit_code == 0, made.output
    result = _invoke("check", "--baseline", str(base), "-o", str(new), str(script),
                     "--batch", "512")
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "x: float32[32,256] -> float32[512,256]" in text
    assert "y: float32[32,4] -> float32[512,4]" in text
    before, after = expected_peak(_stats(32)), expected_peak(_stats(512))
    assert f"peak grew by +{format_bytes(after - before)}" in text
    assert "FAIL: 1 of 1 checked function failed (sgd_step)" in text
    (fn_now,) = load_report(str(new)).functions
    assert fn_now.memory is not None and fn_now.memory.peak_bytes == after
    diff = _invoke("diff", str(base), str(new))
    assert "worse" in diff.output and "x: float32[32,256] -> float32[512,256]" in " ".join(
        diff.output.split())


@pytest.mark.parametrize("rows", [32])
def test_the_same_program_passes_its_own_baseline(tmp_path: Path, rows: int) -> None:
    script = tmp_path / "sgd.py"
    script.write_text(SGD, encoding="utf-8")
    base = tmp_path / "base.json"
    assert _invoke("check", "--update-baseline", "--baseline", str(base), str(script),
                   "--batch", str(rows)).exit_code == 0
    result = _invoke("check", "--baseline", str(base), str(script), "--batch", str(rows))
    assert result.exit_code == 0, result.output
    assert "PASS: 1 function checked, none failed" in result.output


def test_a_renamed_script_is_compared_by_name(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SGD, encoding="utf-8")
    (tmp_path / "train_v2.py").write_text(SGD, encoding="utf-8")
    assert _invoke("check", "--update-baseline", "--baseline", "base.json",
                   "train.py").exit_code == 0
    same = _invoke("check", "--baseline", "base.json", "train_v2.py")
    assert same.exit_code == 0, same.output
    text = " ".join(same.output.split())
    assert "note paired by name and signature (train.py -> train_v2.py)" in text
    assert "PASS: 1 function checked, none failed; 1 paired across files" in text
    grown = _invoke("check", "--baseline", "base.json", "train_v2.py", "--batch", "512")
    assert grown.exit_code == 1, grown.output
    text = " ".join(grown.output.split())
    assert "note paired by name (train.py -> train_v2.py)" in text
    assert "x: float32[32,256] -> float32[512,256]" in text
    assert "FAIL: 1 of 1 checked function failed (sgd_step); 1 paired across files" in text


def test_a_run_that_compares_nothing_with_its_baseline_exits_1_unless_allowed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SGD, encoding="utf-8")
    (tmp_path / "other.py").write_text(SGD.replace("sgd_step", "step"), encoding="utf-8")
    assert _invoke("check", "--update-baseline", "--baseline", "base.json",
                   "train.py").exit_code == 0
    empty = _invoke("check", "--baseline", "base.json", "--junit-xml", "junit.xml", "other.py")
    assert empty.exit_code == 1, empty.output
    assert " ".join(empty.output.split()).endswith(
        "FAIL: nothing was compared with the baseline: its 1 function (sgd_step) vanished and "
        "none of the 1 called now (step) pairs with it; check that the baseline is this "
        "program's, retake it with --update-baseline, or pass --allow-empty")
    assert 'name="baseline"' in (tmp_path / "junit.xml").read_text(encoding="utf-8")
    allowed = _invoke("check", "--baseline", "base.json", "--allow-empty", "other.py")
    assert allowed.exit_code == 0, allowed.output
    assert ("PASS: 0 functions checked, none failed; nothing was compared with the baseline "
            "(--allow-empty); 1 new, 1 vanished") in " ".join(allowed.output.split())
