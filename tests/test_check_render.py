"""The check renderers: hand-built verdicts, exact text (terminal at 80 columns)."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import pytest

from memscope.check.records import CheckResult, EnvDifference, FigureChange, FunctionVerdict
from memscope.render.check import render_check
from memscope.render.github import MAX_ANNOTATIONS, render_check_annotations
from memscope.render.junit import render_check_junit
from memscope.render.markdown import render_check_markdown


def figures(baseline: int | None, now: int | None) -> tuple[FigureChange, ...]:
    return (FigureChange("peak", baseline, now), FigureChange("temp", 100, 100),
            FigureChange("io", 2000, 2000))


def sample_result(*, strict_env: bool = False) -> CheckResult:
    functions = (
        FunctionVerdict(
            "train_step", "(float32[128,32], lr=0.01)", "train.py:18", "fail",
            figures(1048576, 1179648),
            problems=("peak grew by +128.0 KiB (+12.5%) to 1.1 MiB, over the limit of 1.1 MiB "
                      "(baseline 1.0 MiB + 5%)",
                      "1 leaf lost its alias (now not_donated): momentum['w']")),
        FunctionVerdict("eval_step", "(float32[128,32])", "train.py:40", "pass",
                        figures(4096, 4096)),
        FunctionVerdict("predict", "(float32[1,32])", "serve.py:7", "new", figures(None, 2048)),
        FunctionVerdict("old_step", "(float32[64])", "train.py:60", "vanished",
                        figures(512, None),
                        notes=("the baseline has no memory figures for it; they were not "
                               "compared",)),
        FunctionVerdict("loss_fn", None, None, "not_called",
                        problems=("has a budget in pyproject.toml but was never called",)),
    )
    return CheckResult(
        functions, (EnvDifference("jax", "0.10.1", "0.10.2"),), strict_env, True, "base.json",
        "pyproject.toml",
        summary="FAIL: 2 of 3 checked functions failed (train_step, loss_fn); 1 new, 1 vanished")


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_terminal_table_at_80_columns() -> None:
    out = io.StringIO()
    render_check(sample_result(), out, width=80, plain=True)
    assert lines(out.getvalue()) == TERMINAL
    assert "\x1b" not in out.getvalue()


TERMINAL = [
    "memscope check against baseline base.json, budgets from pyproject.toml",
    "The environment differs from the baseline's, so the figures may not be",
    "  comparable: jax 0.10.1 -> 0.10.2; memscope check --bisect names the JAX",
    "  release between the two that moved what failed",
    "Peak bytes per device",
    "+------------------------------------------------------------------------------+",
    "| function               | baseline |     now |              change | verdict  |",
    "|------------------------+----------+---------+---------------------+----------|",
    "| train_step             |  1.0 MiB | 1.1 MiB | +128.0 KiB (+12.5%) | FAIL     |",
    # a long cell is shortened in the middle, never split over lines (whole: below)
    "| (float32[1... lr=0.01) |          |         |                     |          |",
    "| eval_step              |  4.0 KiB | 4.0 KiB |                 0 B | pass     |",
    "| (float32[128,32])      |          |         |                     |          |",
    "| predict                |      n/a | 2.0 KiB |                 n/a | new      |",
    "| (float32[1,32])        |          |         |                     |          |",
    "| old_step               |    512 B |     n/a |                 n/a | vanished |",
    "| (float32[64])          |          |         |                     |          |",
    "| loss_fn                |      n/a |     n/a |                 n/a | FAIL     |",
    "+------------------------------------------------------------------------------+",
    "",
    "train_step  (float32[128,32], lr=0.01)  train.py:18",
    "  FAIL peak grew by +128.0 KiB (+12.5%) to 1.1 MiB, over the limit of 1.1 MiB",
    "       (baseline 1.0 MiB + 5%)",
    "  FAIL 1 leaf lost its alias (now not_donated): momentum['w']",
    "",
    "old_step  (float32[64])  train.py:60",
    "  note the baseline has no memory figures for it; they were not compared",
    "",
    "loss_fn",
    "  FAIL has a budget in pyproject.toml but was never called",
    "",
    "FAIL: 2 of 3 checked functions failed (train_step, loss_fn); 1 new, 1 vanished",
]


def test_terminal_width_follows_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    render_check(sample_result(), out)
    assert lines(out.getvalue()) == TERMINAL


def test_markdown() -> None:
    out = io.StringIO()
    render_check_markdown(sample_result(), out)
    assert out.getvalue() == "".join(MARKDOWN)


MARKDOWN = (
    "### memscope check: FAIL\n"
    "\n"
    "Checked against baseline `base.json`, budgets from `pyproject.toml`.\n"
    "\n"
    "> **The environment differs from the baseline's, so the figures may not be comparable: jax 0.10.1 -> 0.10.2; memscope check --bisect names the JAX release between the two that moved what failed**\n"
    "\n"
    "| function | signature | peak baseline | peak now | change | verdict |\n"
    "|---|---|---:|---:|---:|---|\n"
    "| `train_step` | `(float32[128,32], lr=0.01)` | 1.0 MiB | 1.1 MiB | +128.0 KiB (+12.5%) | **FAIL** |\n"
    "| `eval_step` | `(float32[128,32])` | 4.0 KiB | 4.0 KiB | 0 B | pass |\n"
    "| `predict` | `(float32[1,32])` | n/a | 2.0 KiB | n/a | new |\n"
    "| `old_step` | `(float32[64])` | 512 B | n/a | n/a | vanished |\n"
    "| `loss_fn` |  | n/a | n/a | n/a | **FAIL** |\n"
    "\n"
    "**train\\_step** `(float32[128,32], lr=0.01)` at `train.py:18`\n"
    "\n"
    "- **FAIL** peak grew by +128.0 KiB (+12.5%) to 1.1 MiB, over the limit of 1.1 MiB (baseline 1.0 MiB + 5%)\n"
    "- **FAIL** 1 leaf lost its alias (now not\\_donated): momentum\\['w'\\]\n"
    "\n"
    "**old\\_step** `(float32[64])` at `train.py:60`\n"
    "\n"
    "- note: the baseline has no memory figures for it; they were not compared\n"
    "\n"
    "**loss\\_fn**\n"
    "\n"
    "- **FAIL** has a budget in pyproject.toml but was never called\n"
    "\n"
    "**FAIL: 2 of 3 checked functions failed (train\\_step, loss\\_fn); 1 new, 1 vanished**\n"
)


def test_markdown_escapes_pipes_in_cells() -> None:
    result = CheckResult((FunctionVerdict("f", "(a='x|y')", None, "pass", figures(1, 1)),),
                         summary="PASS")
    out = io.StringIO()
    render_check_markdown(result, out)
    assert "| `f` | `(a='x\\|y')` | 1 B | 1 B | 0 B | pass |" in out.getvalue()


def test_junit_xml() -> None:
    out = io.StringIO()
    render_check_junit(sample_result(), out)
    assert out.getvalue() == "".join(JUNIT)
    root = ET.fromstring(out.getvalue().split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None and len(suite.findall("testcase")) == 6


JUNIT = (
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
    "<testsuites tests=\"6\" failures=\"2\" errors=\"0\" skipped=\"2\">\n"
    "  <testsuite name=\"memscope check\" tests=\"6\" failures=\"2\" errors=\"0\" skipped=\"2\">\n"
    "    <testcase classname=\"memscope.train_step\" name=\"train_step (float32[128,32], lr=0.01)\" file=\"train.py\" line=\"18\">\n"
    "      <failure message=\"peak grew by +128.0 KiB (+12.5%) to 1.1 MiB, over the limit of 1.1 MiB (baseline 1.0 MiB + 5%)\" type=\"fail\">peak grew by +128.0 KiB (+12.5%) to 1.1 MiB, over the limit of 1.1 MiB (baseline 1.0 MiB + 5%)\n"
    "1 leaf lost its alias (now not_donated): momentum['w']</failure>\n"
    "    </testcase>\n"
    "    <testcase classname=\"memscope.eval_step\" name=\"eval_step (float32[128,32])\" file=\"train.py\" line=\"40\" />\n"
    "    <testcase classname=\"memscope.predict\" name=\"predict (float32[1,32])\" file=\"serve.py\" line=\"7\">\n"
    "      <skipped message=\"new: not in the baseline\" />\n"
    "    </testcase>\n"
    "    <testcase classname=\"memscope.old_step\" name=\"old_step (float32[64])\" file=\"train.py\" line=\"60\">\n"
    "      <skipped message=\"vanished: in the baseline only\" />\n"
    "      <system-out>the baseline has no memory figures for it; they were not compared</system-out>\n"
    "    </testcase>\n"
    "    <testcase classname=\"memscope.loss_fn\" name=\"loss_fn\">\n"
    "      <failure message=\"has a budget in pyproject.toml but was never called\" type=\"not_called\">has a budget in pyproject.toml but was never called</failure>\n"
    "    </testcase>\n"
    "    <testcase classname=\"memscope.environment\" name=\"environment\">\n"
    "      <system-out>the environment differs from the baseline's: jax 0.10.1 -&gt; 0.10.2</system-out>\n"
    "    </testcase>\n"
    "  </testsuite>\n"
    "</testsuites>\n"
)


def test_junit_environment_fails_under_strict_env() -> None:
    out = io.StringIO()
    render_check_junit(sample_result(strict_env=True), out)
    root = ET.fromstring(out.getvalue().split("\n", 1)[1])
    assert root.get("failures") == "3"
    env = root.find("testsuite/testcase[@name='environment']/failure")
    assert env is not None and env.get("message") == (
        "the environment differs from the baseline's: jax 0.10.1 -> 0.10.2")


def test_github_annotations() -> None:
    out = io.StringIO()
    render_check_annotations(sample_result(), out)
    assert out.getvalue() == "".join(ANNOTATIONS)


ANNOTATIONS = (
    "::warning title=memscope check::The environment differs from the baseline's, so the figures may not be comparable: jax 0.10.1 -> 0.10.2; memscope check --bisect names the JAX release between the two that moved what failed\n"
    "::error file=train.py,line=18,title=memscope check%3A train_step::train_step (float32[128,32], lr=0.01): peak grew by +128.0 KiB (+12.5%25) to 1.1 MiB, over the limit of 1.1 MiB (baseline 1.0 MiB + 5%25)%0A1 leaf lost its alias (now not_donated): momentum['w']\n"
    "::error title=memscope check%3A loss_fn::loss_fn: has a budget in pyproject.toml but was never called\n"
)


def test_github_annotations_are_at_most_ten() -> None:
    failing = tuple(FunctionVerdict(f"f{i}", "()", f"m.py:{i + 1}", "fail", problems=("x",))
                    for i in range(15))
    out = io.StringIO()
    render_check_annotations(CheckResult(failing, strict_env=True,
                                         environment=(EnvDifference("jax", "a", "b"),)), out)
    got = out.getvalue().splitlines()
    assert len(got) == MAX_ANNOTATIONS == 10
    assert got[0].startswith("::error title=memscope check::FAIL (--strict-env)")
    assert got[1] == "::error file=m.py,line=1,title=memscope check%3A f0::f0 (): x"


EMPTY = ("nothing was compared with the baseline: its 1 function (train_step) vanished and "
         "none of the 1 called now (step) pairs with it; check that the baseline is this "
         "program's, retake it with --update-baseline, or pass --allow-empty")


def empty_result(*, allow_empty: bool = False) -> CheckResult:
    functions = (
        FunctionVerdict("step", "(float32[8])", "other.py:3", "new", figures(None, 64)),
        FunctionVerdict("train_step", "(float32[8])", "train.py:8", "vanished",
                        figures(64, None)))
    return CheckResult(functions, has_baseline=True, baseline_source="base.json",
                       summary=f"FAIL: {EMPTY}", nothing_compared=EMPTY,
                       allow_empty=allow_empty)


def test_a_check_that_compared_nothing_fails_in_junit_and_annotations() -> None:
    out = io.StringIO()
    render_check_junit(empty_result(), out)
    root = ET.fromstring(out.getvalue().split("\n", 1)[1])
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "1", "2")
    case = root.find("testsuite/testcase[@name='baseline']/failure")
    assert case is not None and case.get("message") == EMPTY
    out = io.StringIO()
    render_check_annotations(empty_result(), out)
    assert out.getvalue() == f"::error title=memscope check::{EMPTY}\n"
    # --allow-empty: no failing case, no annotation
    out = io.StringIO()
    render_check_junit(empty_result(allow_empty=True), out)
    assert 'failures="0"' in out.getvalue()
    out = io.StringIO()
    render_check_annotations(empty_result(allow_empty=True), out)
    assert out.getvalue() == ""


def test_a_function_paired_by_name_says_so_in_every_format() -> None:
    moved = "paired by name (train.py -> train_v2.py)"
    result = CheckResult((FunctionVerdict(
        "train_step", "(float32[16])", "train_v2.py:8", "fail", figures(64, 128),
        problems=("peak grew by +64 B (+100.0%) to 128 B, over the baseline 64 B",),
        notes=(moved,), paired_by=moved),), has_baseline=True, baseline_source="base.json",
        summary="FAIL: 1 of 1 checked function failed (train_step); 1 paired across files")
    out = io.StringIO()
    render_check(result, out, width=80, plain=True)
    assert "  note paired by name (train.py -> train_v2.py)" in lines(out.getvalue())
    out = io.StringIO()
    render_check_markdown(result, out)
    assert "- note: paired by name (train.py -\\> train\\_v2.py)" in out.getvalue()
    out = io.StringIO()
    render_check_junit(result, out)
    assert f"<system-out>{moved.replace('>', '&gt;')}</system-out>" in out.getvalue()
    out = io.StringIO()
    render_check_annotations(result, out)
    assert out.getvalue() == (
        "::error file=train_v2.py,line=8,title=memscope check%3A train_step::train_step "
        "(float32[16]) [paired by name (train.py -> train_v2.py)]: peak grew by +64 B "
        "(+100.0%25) to 128 B, over the baseline 64 B\n")


def test_the_verdict_is_never_cut_whatever_the_figures_and_names() -> None:
    """Wide figures (a large change) and a long name: the name gives way, the
    header and every verdict are whole (``verdi…`` was seen at 80 columns)."""
    name = "a_very_long_function_name_of_a_trainer_" * 2
    result = CheckResult(
        (FunctionVerdict(name, "(float32[8192,8192], bfloat16[64,8192,8192])", "t.py:1",
                         "unchecked", figures(3 << 30, 1_234_567_890_123)),
         FunctionVerdict("step", None, "t.py:9", "vanished", figures(512, None))),
        (), False, True, "base.json", None, summary="FAIL")
    out = io.StringIO()
    render_check(result, out, width=80, plain=True)
    table = [line for line in lines(out.getvalue()) if line.startswith("|")]
    assert all(len(line) <= 80 for line in table)
    assert table[0].split("|")[-2].strip() == "verdict"
    assert [row.split("|")[-2].strip() for row in table[2:] if row.split("|")[-2].strip()] == [
        "unchecked", "vanished"]
    assert "…" not in "".join(row.split("|")[-2] for row in table)
