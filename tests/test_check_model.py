"""The check as pure functions: sizes, tolerances, matching, verdicts, budgets, config files."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from memscope.check.config import find_pyproject, load_config, parse_config, with_options
from memscope.check.judge import (
    budget_problems,
    check_report,
    environment_differences,
    limit_problems,
    program_failure,
)
from memscope.check.pairing import match_functions
from memscope.check.records import Budget, Config, FigureChange, Tolerance, Tolerances, split_source
from memscope.errors import MemscopeError
from memscope.report import (
    Device,
    FunctionReport,
    InputBuffer,
    Memory,
    OutputBuffer,
    RunInfo,
)
from memscope.report.units import format_change, parse_percent, parse_size
from tests.support.records import ENVIRONMENT, mem, report

KiB, MiB, GiB = 1024, 1024**2, 1024**3

# --- sizes and percentages -----------------------------------------------------------


@pytest.mark.parametrize(("text", "n"), [
    ("512", 512), ("512 B", 512), ("0", 0), ("1KiB", 1024), ("1 KB", 1000),
    ("2 GiB", 2 * GiB), ("2 GB", 2_000_000_000), ("16MiB", 16 * MiB), ("16 MB", 16_000_000),
    ("1 TiB", 1024**4), ("1 TB", 10**12), ("1.5 KiB", 1536), ("0.5MB", 500_000),
    ("  3 mib ", 3 * MiB), (".5 KiB", 512),
])
def test_parse_size_binary_and_decimal_units(text: str, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "MiB", "-1 MiB", "2 GiBs", "2 Mb/s", "5%", "1e3",
                                  "two GiB", "1 PB", "1,5 MiB"])
def test_parse_size_rejects_anything_else_naming_it(text: str) -> None:
    with pytest.raises(MemscopeError) as e:
        parse_size(text)
    assert str(e.value).startswith(f"not a size: {text!r}")


@pytest.mark.parametrize(("text", "pct"), [("5%", 5.0), ("0%", 0.0), ("12.5 %", 12.5)])
def test_parse_percent(text: str, pct: float) -> None:
    assert parse_percent(text) == pct


@pytest.mark.parametrize("text", ["5", "5 MiB", "-5%", "%", "five%"])
def test_parse_percent_needs_a_number_and_percent_sign(text: str) -> None:
    with pytest.raises(MemscopeError, match="not a percentage"):
        parse_percent(text)


def test_format_change() -> None:
    assert format_change(None) == "n/a"
    assert format_change(0, 0.0) == "0 B"
    assert format_change(1536, 12.5) == "+1.5 KiB (+12.5%)"
    assert format_change(-512, -50.0) == "-512 B (-50.0%)"
    assert format_change(100, None) == "+100 B"


# --- tolerances ----------------------------------------------------------------------


def test_tolerance_without_limits_allows_no_growth() -> None:
    assert Tolerance().allowed(1000) == 1000


def test_tolerance_with_both_limits_keeps_the_tighter() -> None:
    assert Tolerance(percent=5).allowed(1000) == 1050
    assert Tolerance(bytes=16).allowed(1000) == 1016
    assert Tolerance(percent=5, bytes=16).allowed(1000) == 1016
    assert Tolerance(percent=1, bytes=16).allowed(1000) == 1010


def test_tolerances_fall_back_figure_by_figure() -> None:
    config = Tolerances(peak=Tolerance(5, 100), temp=Tolerance(20))
    cli = Tolerances(peak=Tolerance(percent=1))
    merged = cli.over(config)
    assert merged.peak == Tolerance(1, 100)
    assert merged.temp == Tolerance(20)
    assert merged.io == Tolerance()


# --- hand-built reports --------------------------------------------------------------


def buf(path: str, fate: str, output: str | None = None, nbytes: int = 512) -> InputBuffer:
    return InputBuffer(path, (128,), "float32", nbytes, fate != "not_donated", fate,  # type: ignore[arg-type]
                       output=output)


def fn(name: str = "train_step", peak: int = 10 * KiB, *, sig: str = "(float32[128])",
       source: str | None = "train.py:18", inputs: tuple[InputBuffer, ...] = (),
       memory: Memory | bool | None = True, **kw: object) -> FunctionReport:
    m = mem(peak) if memory is True else memory
    return FunctionReport(name=name, source=source, calls=1, signature=sig,
                          memory=m if isinstance(m, Memory) else None, inputs=inputs, **kw)  # type: ignore[arg-type]


STATE = (buf("state['w']", "aliased", "result[0]['w']"),
         buf("state['b']", "aliased", "result[0]['b']"), buf("x", "not_donated"))


def test_unchanged_report_passes() -> None:
    base = report(fn(inputs=STATE))
    result = check_report(base, base)
    assert not result.failed
    (v,) = result.functions
    assert v.status == "pass" and v.problems == ()
    assert v.figure("peak") == FigureChange("peak", 10 * KiB, 10 * KiB)
    assert result.summary == "PASS: 1 function checked, none failed"


def test_peak_growth_beyond_tolerance_fails_naming_figure_and_limit() -> None:
    base = report(fn(peak=100 * KiB))
    now = report(fn(peak=110 * KiB))
    tol = Config(tolerances=Tolerances(peak=Tolerance(percent=5)))
    (v,) = check_report(now, base, tol).functions
    assert v.status == "fail"
    assert v.problems == ("peak grew by +10.0 KiB (+10.0%) to 110.0 KiB, over the limit of "
                          "105.0 KiB (baseline 100.0 KiB + 5%)",)
    loose = Config(tolerances=Tolerances(peak=Tolerance(percent=10)))
    assert check_report(now, base, loose).functions[0].status == "pass"


def test_growth_with_no_tolerance_fails_and_says_how_to_allow_it() -> None:
    base = report(fn(peak=100))
    now = report(fn(peak=101))
    (v,) = check_report(now, base).functions
    assert v.problems == ("peak grew by +1 B (+1.0%) to 101 B, over the baseline 100 B (no "
                          "growth allowed without --max-increase or --max-increase-bytes)",)


def test_temp_and_argument_output_are_reported_and_gated_only_when_named() -> None:
    base = report(fn(memory=mem(1000, temp=100, arg=100, out=100)))
    now = report(fn(memory=mem(1000, temp=200, arg=100, out=150)))
    (v,) = check_report(now, base).functions
    assert v.status == "pass" and v.problems == ()
    assert v.notes == (
        "temp grew by +100 B (+100.0%) to 200 B, over the baseline 100 B; reported, not "
        "gated (--max-increase temp=PCT gates it)",
        "argument+output grew by +50 B (+25.0%) to 250 B, over the baseline 200 B; "
        "reported, not gated (--max-increase io=PCT gates it)")
    assert v.figure("io") == FigureChange("io", 200, 250)
    # A value for every figure sets their tolerance but gates only the peak.
    every = Config(tolerances=with_options(Config(), ["10%"], []).tolerances)
    assert check_report(now, base, every).functions[0].status == "pass"
    named = Config(tolerances=with_options(Config(), ["temp=50%"], []).tolerances)
    (v,) = check_report(now, base, named).functions
    assert [p.split(" grew")[0] for p in v.problems] == ["temp"]
    assert v.problems[0].endswith("over the limit of 150 B (baseline 100 B + 50%)")


def test_shrinking_passes() -> None:
    result = check_report(report(fn(peak=50)), report(fn(peak=100)))
    assert not result.failed
    assert result.functions[0].figure("peak").percent == -50.0


def test_gaining_an_unusable_donation_fails_naming_the_leaf() -> None:
    base = report(fn(inputs=STATE))
    now = report(fn(inputs=(*STATE[:2], buf("x", "unusable"))))
    (v,) = check_report(now, base).functions
    assert v.problems == ("gained an unusable donation: x (float32[128], 512 B) is donated "
                          "but no output can take the buffer",)


def test_an_unusable_donation_already_in_the_baseline_is_no_regression() -> None:
    same = report(fn(inputs=(*STATE[:2], buf("x", "unusable"))))
    assert not check_report(same, same).failed


def test_losing_an_alias_fails_naming_the_leaves() -> None:
    base = report(fn(inputs=STATE))
    now = report(fn(inputs=(buf("state['w']", "not_donated"), buf("state['b']", "not_donated"),
                            buf("x", "not_donated"))))
    (v,) = check_report(now, base).functions
    assert v.problems == ("2 leaves lost their alias (now not_donated): state['w'], "
                          "state['b']",)


def test_a_leaf_that_moved_in_the_pytree_lost_its_alias() -> None:
    base = report(fn(inputs=STATE))
    now = report(fn(inputs=(buf("state[0]", "aliased", "result[0]"),
                            buf("state['b']", "aliased", "result[0]['b']"),
                            buf("x", "not_donated"))))
    (v,) = check_report(now, base).functions
    assert v.problems == ("1 leaf lost its alias (no longer an argument leaf): state['w']",)


def test_new_and_vanished_are_listed_but_do_not_fail() -> None:
    base = report(fn("train_step"), fn("old_eval"))
    now = report(fn("train_step"), fn("new_eval"))
    result = check_report(now, base)
    assert [(v.name, v.status) for v in result.functions] == [
        ("train_step", "pass"), ("new_eval", "new"), ("old_eval", "vanished")]
    assert not result.failed
    assert result.summary == ("PASS: 1 function checked, none failed; 1 new, 1 vanished "
                              "(--update-baseline takes new functions in)")


def test_unmeasured_figures_now_fail_and_unmeasured_baseline_is_a_note() -> None:
    base = report(fn(memory=None))
    now = report(fn(memory=None, error="could not read the compiled program: boom"))
    (v,) = check_report(now, base).functions
    assert v.problems == ("its memory figures could not be read now: could not read the "
                          "compiled program: boom",)
    (v,) = check_report(report(fn()), base).functions
    assert v.status == "pass"
    assert v.notes == ("the baseline has no memory figures for it; they were not compared",)
    assert v.figure("peak").change is None


def test_matching_by_name_and_signature() -> None:
    base = report(fn(sig="(float32[48])", peak=100), fn(sig="(float32[32])", peak=80))
    now = report(fn(sig="(float32[32])", peak=80), fn(sig="(float32[48])", peak=100))
    pairs, vanished = match_functions(now.functions, base.functions)
    assert [(a.signature, b.signature if b else None) for a, b in pairs] == [
        ("(float32[32])", "(float32[32])"), ("(float32[48])", "(float32[48])")]
    assert vanished == []


def test_matching_falls_back_on_the_file_when_name_and_signature_repeat() -> None:
    base = report(fn(source="a.py:3", peak=1), fn(source="b.py:9", peak=2))
    # lines moved, and the order changed
    now = report(fn(source="b.py:12", peak=2), fn(source="a.py:5", peak=1))
    pairs, vanished = match_functions(now.functions, base.functions)
    assert [(a.source, b.source if b else None) for a, b in pairs] == [
        ("b.py:12", "b.py:9"), ("a.py:5", "a.py:3")]
    assert vanished == []
    assert not check_report(now, base).failed


def test_split_source() -> None:
    assert split_source("train.py:18") == ("train.py", 18)
    assert split_source("C:/x/train.py:7") == ("C:/x/train.py", 7)
    assert split_source("<string>") == ("<string>", None)
    assert split_source(None) == (None, None)


# --- budgets -------------------------------------------------------------------------


def test_max_peak_budget_without_baseline() -> None:
    config = Config(source="pyproject.toml", budgets=(Budget("train_step", max_peak=8 * KiB),))
    (v,) = check_report(report(fn(peak=10 * KiB)), None, config).functions
    assert v.status == "fail"
    assert v.problems == ("peak 10.0 KiB is over max_peak 8.0 KiB (by 2.0 KiB); largest "
                          "buffers: none",)
    assert check_report(report(fn(peak=8 * KiB)), None, config).functions[0].status == "pass"


def test_budgets_apply_to_every_signature_of_the_function() -> None:
    config = Config(budgets=(Budget("train_step", max_peak=100),))
    result = check_report(report(fn(sig="(a)", peak=50), fn(sig="(b)", peak=150)), None, config)
    assert [v.status for v in result.functions] == ["pass", "fail"]


def test_forbid_unusable_donation() -> None:
    config = Config(budgets=(Budget("train_step", forbid_unusable_donation=True),))
    now = report(fn(inputs=(buf("y", "unusable"),)))
    (v,) = check_report(now, None, config).functions
    assert v.problems == ("has an unusable donation (forbid_unusable_donation): "
                          "y (float32[128], 512 B)",)


def test_require_aliased_by_argument_name_and_path_prefix() -> None:
    inputs = (buf("state['w']", "aliased", "result[0]"), buf("state['b']", "donor"),
              buf("statement", "not_donated"), buf("x", "not_donated"))
    config = Config(budgets=(Budget("train_step", require_aliased=("state", "state['w']",
                                                                   "opt")),))
    (v,) = check_report(report(fn(inputs=inputs)), None, config).functions
    assert v.problems == (
        "require_aliased 'state': state['b'] is donor",
        "require_aliased 'opt': no argument leaf is opt or under it",
    )


def test_a_budget_for_a_function_never_called_fails() -> None:
    config = Config(source="pyproject.toml", budgets=(Budget("eval_step", max_peak=1),))
    result = check_report(report(fn()), None, config)
    assert [(v.name, v.status) for v in result.functions] == [
        ("train_step", "unchecked"), ("eval_step", "not_called")]
    assert result.functions[1].problems == (
        "has a budget in pyproject.toml but was never called",)
    assert result.failed
    assert result.summary == ("FAIL: 1 of 1 checked function failed (eval_step); 1 unchecked")


def test_budgets_and_baseline_combine() -> None:
    config = Config(budgets=(Budget("train_step", max_peak=100),))
    (v,) = check_report(report(fn(peak=150)), report(fn(peak=150)), config).functions
    assert v.problems == ("peak 150 B is over max_peak 100 B (by 50 B); largest buffers: "
                          "none",)


# --- environment and the run ---------------------------------------------------------


def test_environment_differences_and_strict_env() -> None:
    other = dataclasses.replace(ENVIRONMENT, jax="0.10.1", xla_flags="--xla_force_host_platform_device_count=2",
                                devices=(Device(0, "cpu", "cpu"), Device(1, "cpu", "cpu")))
    diffs = environment_differences(other, ENVIRONMENT)
    assert [(d.field, d.baseline, d.now) for d in diffs] == [
        ("jax", "0.10.1", "0.10.2"), ("device count", "2", "1"),
        ("XLA_FLAGS", "--xla_force_host_platform_device_count=2", "unset")]
    base, now = report(fn(), env=other), report(fn())
    assert not check_report(now, base).failed
    strict = check_report(now, base, strict_env=True)
    assert strict.failed
    assert strict.summary == ("FAIL: 1 function checked, none failed; the environment differs "
                              "from the baseline's (--strict-env)")


def test_target_failure() -> None:
    ok = RunInfo(program="t.py", argv=(), outcome="completed", exit_code=0)
    assert program_failure(report(run=ok)) is None
    assert program_failure(report()) is None
    raised = RunInfo(program="t.py", argv=(), outcome="failed", exit_code=1,
                     error="ValueError: bad")
    assert program_failure(report(run=raised)) == "t.py failed (exit code 1): ValueError: bad"


# --- the pytest marker's check -------------------------------------------------------


def test_limit_problems_names_function_peak_and_largest_buffers() -> None:
    big = fn(peak=3 * MiB, inputs=(buf("params", "aliased", "result[0]", nbytes=MiB),
                                   buf("x", "not_donated", nbytes=2 * MiB)),
             outputs=(OutputBuffer("result[0]", (128,), "float32", MiB, "reuses_input",
                                   "params"),))
    small = fn("eval_step", peak=KiB)
    assert limit_problems([big, small], 2 * MiB) == [
        "train_step (train.py:18, signature params: float32[128]; x: float32[128]): peak "
        "3.0 MiB exceeds the limit 2.0 MiB; largest buffers: x 2.0 MiB (input, not_donated), params 1.0 MiB "
        "(input, aliased), result[0] 1.0 MiB (output, reuses_input)"]
    assert limit_problems([big, small], 2 * MiB, function="eval_step") == []
    unusable = fn(inputs=(buf("y", "unusable"),))
    assert limit_problems([unusable], GiB, forbid_unusable_donation=True) == [
        "train_step (train.py:18, signature y: float32[128]): unusable donation: "
        "y (float32[128], 512 B)"]


# --- the config file -----------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_config_from_pyproject(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", """\
        [project]
        name = "x"

        [tool.memscope]
        max_increase = {peak = "5%", temp = "20%"}
        max_increase_bytes = "16 MiB"

        [tool.memscope.functions.train_step]
        max_peak = "2 GiB"
        forbid_unusable_donation = true
        require_aliased = ["state"]

        [tool.memscope.functions.eval_step]
        max_peak = 1048576
    """)
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)
    assert find_pyproject(str(sub)) == str(tmp_path / "pyproject.toml")
    config = load_config(start=str(sub))
    assert config.budgets == (Budget("train_step", 2 * GiB, True, ("state",)),
                              Budget("eval_step", MiB))
    assert config.tolerances == Tolerances(peak=Tolerance(5, 16 * MiB, gated=True),
                                           temp=Tolerance(20, 16 * MiB, gated=True),
                                           io=Tolerance(None, 16 * MiB))
    assert [config.tolerances.gated(f) for f in ("peak", "temp", "io")] == [True, True, False]


def test_pyproject_without_memscope_table_is_no_config(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    assert load_config(start=str(tmp_path)) == Config()


def test_config_file_with_top_level_table(tmp_path: Path) -> None:
    path = write(tmp_path / "memscope.toml", """\
        max_increase = "5%"
        [functions.train_step]
        max_peak = "64 MB"
    """)
    config = load_config(str(path))
    assert config.budgets == (Budget("train_step", 64_000_000),)
    assert config.tolerances.temp == Tolerance(5.0)


@pytest.mark.parametrize(("body", "message"), [
    ('max_peek = "1 GiB"', "[tool.memscope] has an unknown key 'max_peek' (known: "
                           "max_increase, max_increase_bytes, functions, max_live_growth, max_run_peak)"),
    ('max_live_growth = "lots"', "[tool.memscope] max_live_growth: not a size: 'lots'"),
    ('[tool.memscope.functions.f]\nforbid_recompiles = 1',
     "[tool.memscope.functions.f] forbid_recompiles must be true or false, not 1"),
    ('[tool.memscope.functions.f]\nmax_peak = "2 GiBs"',
     "[tool.memscope.functions.f] max_peak: not a size: '2 GiBs'"),
    ('[tool.memscope.functions.f]\nmax_temp = "2 GiB"',
     "[tool.memscope.functions.f] has an unknown key 'max_temp'"),
    ('[tool.memscope.functions.f]\nforbid_unusable_donation = "yes"',
     "[tool.memscope.functions.f] forbid_unusable_donation must be true or false, not 'yes'"),
    ('[tool.memscope.functions.f]\nrequire_aliased = "state"',
     "[tool.memscope.functions.f] require_aliased must be a list"),
    ('[tool.memscope.functions.f]\nmax_peak = true',
     "[tool.memscope.functions.f] max_peak: expected a size such as \"2 GiB\", not True"),
    ('max_increase = "5"', "[tool.memscope] max_increase: not a percentage: '5'"),
    ('max_increase = {peek = "5%"}', "[tool.memscope] max_increase: unknown figure 'peek'"),
    ('functions = 3', "[tool.memscope] functions must be a table of functions"),
])
def test_malformed_config_names_file_and_key(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path / "pyproject.toml", "[tool.memscope]\n" + body + "\n")
    with pytest.raises(MemscopeError) as e:
        load_config(str(path))
    assert str(e.value).startswith(f"{path}: {message}"), str(e.value)


def test_invalid_toml_and_missing_config(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.toml", "[tool.memscope\n")
    with pytest.raises(MemscopeError, match=r"bad.toml: not valid TOML"):
        load_config(str(path))
    with pytest.raises(MemscopeError, match=r"cannot read config .*missing.toml"):
        load_config(str(tmp_path / "missing.toml"))


def test_parse_config_rejects_a_non_table() -> None:
    with pytest.raises(MemscopeError, match="must be a table"):
        parse_config([], source="x.toml")


def test_command_line_tolerances_override_the_config() -> None:
    config = Config(tolerances=Tolerances(peak=Tolerance(5), temp=Tolerance(5),
                                          io=Tolerance(5)))
    merged = with_options(config, ["10%", "temp=50%"], ["peak=1MiB"])
    assert merged.tolerances == Tolerances(peak=Tolerance(10, MiB, gated=True),
                                           temp=Tolerance(50, gated=True),
                                           io=Tolerance(10))
    with pytest.raises(MemscopeError, match="--max-increase peek=5%: unknown figure 'peek'"):
        with_options(config, ["peek=5%"], [])
    with pytest.raises(MemscopeError, match="--max-increase-bytes: not a size: '16 MiBs'"):
        with_options(config, [], ["16 MiBs"])


def test_failure_messages_stay_short_at_any_leaf_count() -> None:
    many = tuple(buf(f"state['layer_{i}']['w']", "unusable") for i in range(300))
    (problem,) = limit_problems([fn(inputs=many)], GiB, forbid_unusable_donation=True)
    assert problem.endswith(
        "unusable donation: 300 leaves, 150.0 KiB: "
        "state['layer_0']['w'], state['layer_1']['w'], state['layer_2']['w'] and 297 more")
    assert len(problem) < 300
    budget = Budget("train_step", require_aliased=("state",), forbid_unusable_donation=True)
    problems = budget_problems(fn(inputs=many), budget)
    assert all(len(p) < 300 for p in problems), problems
    assert "300 of 300 leaves are not aliased (300 unusable)" in problems[1]

