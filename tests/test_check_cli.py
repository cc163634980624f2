"""``memscope check`` end to end: a baseline from a sample program, edits that regress it.

One baseline per module (the unedited ``donated.py``); each test runs an edited
copy through click's runner and checks the exit code and the function named.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memscope.cli import cli
from memscope.report import load_report
from memscope.report.units import format_bytes
from tests.support.cli import assert_one_line_error, run_installed
from tests.support.samples import SAMPLES


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["check", *args], prog_name="memscope",
                              catch_exceptions=False, env=env)


def edited(project: Path, name: str, *edits: tuple[str, str]) -> str:
    """A copy of donated.py in ``project`` with each (old, new) replaced; its path."""
    text = (SAMPLES / "donated.py").read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = project / name
    path.write_text(text, encoding="utf-8")
    return str(path)


#: Returns one more array: the peak (and argument+output) grows, the signature does not.
EXTRA_OUTPUT = (("    return params, momentum, loss\n",
                 "    return params, momentum, loss, jnp.tanh(x @ x.T)\n"),
                ("params, momentum, loss = train_step", "params, momentum, loss, _ = train_step"))
#: Stops donating the momentum: its leaves lose their alias.
NO_MOMENTUM_DONATION = (('donate_argnames=("params", "momentum")', 'donate_argnames=("params",)'),)
#: Donates the targets too, which no output can take: an unusable donation.
DONATE_Y = (('donate_argnames=("params", "momentum")',
             'donate_argnames=("params", "momentum", "y")'),)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with donated.py, its data module and ``base.json`` taken from it."""
    folder = tmp_path_factory.mktemp("project")
    for name in ("donated.py", "_data.py"):
        shutil.copy(SAMPLES / name, folder / name)
    result = invoke("--update-baseline", "--baseline", str(folder / "base.json"),
                    str(folder / "donated.py"), "--steps", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(f"memscope: wrote the baseline {folder / 'base.json'} "
                                  "(1 function)\n")
    return folder


@pytest.fixture(scope="module")
def baseline(project: Path) -> str:
    return str(project / "base.json")


def test_the_baseline_is_a_report(baseline: str) -> None:
    (fn,) = load_report(baseline).functions
    assert fn.name == "train_step" and fn.calls == 2
    assert {b.fate for b in fn.inputs if b.donated} == {"aliased"}


def test_unchanged_program_passes(project: Path, baseline: str) -> None:
    result = invoke("--baseline", baseline, str(project / "donated.py"), "--steps", "2")
    assert result.exit_code == 0, result.output
    assert "final loss" in result.stdout  # the script's own output
    # a long temporary path wraps onto its own line: compare the words
    words = " ".join(result.stdout.split())
    assert f"memscope check against baseline {baseline}" in words
    assert "| train_step" in result.stdout
    assert result.stdout.rstrip().endswith("PASS: 1 function checked, none failed")


def test_raised_peak_fails_naming_the_function(project: Path, baseline: str) -> None:
    script = edited(project, "extra_output.py", *EXTRA_OUTPUT)
    result = invoke("--baseline", baseline, script, "--steps", "2")
    assert result.exit_code == 1, result.output
    assert "FAIL: 1 of 1 checked function failed (train_step)" in result.stdout
    assert "peak grew by +" in result.stdout
    assert "argument+output grew by +" in result.stdout


def test_growth_within_tolerance_passes(project: Path, baseline: str) -> None:
    script = edited(project, "extra_output.py", *EXTRA_OUTPUT)
    result = invoke("--baseline", baseline, "--max-increase", "300%", script, "--steps", "2")
    assert result.exit_code == 0, result.output
    result = invoke("--baseline", baseline, "--max-increase-bytes", "1 MiB", script)
    assert result.exit_code == 0, result.output
    # both limits hold: 1 MiB is enough, 1% is not
    result = invoke("--baseline", baseline, "--max-increase-bytes", "1 MiB",
                    "--max-increase", "peak=1%", script)
    assert result.exit_code == 1, result.output
    assert "peak grew" in result.stdout and "argument+output grew" not in result.stdout


def test_dropped_donation_fails_naming_the_leaves(project: Path, baseline: str) -> None:
    script = edited(project, "no_momentum.py", *NO_MOMENTUM_DONATION)
    result = invoke("--baseline", baseline, "--max-increase", "100%", script, "--steps", "2")
    assert result.exit_code == 1, result.output
    assert ("4 leaves lost their alias (now not_donated): momentum[0]['b'], momentum[0]['w'], "
            "momentum[1]['b'], momentum[1]['w']") in " ".join(result.stdout.split())
    assert "(train_step)" in result.stdout


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_gained_unusable_donation_fails(project: Path, baseline: str) -> None:
    script = edited(project, "donate_y.py", *DONATE_Y)
    result = invoke("--baseline", baseline, "--format", "markdown", script, "--steps", "2")
    assert result.exit_code == 1, result.output
    assert "### memscope check: FAIL" in result.stdout
    assert ("- **FAIL** gained an unusable donation: y (float32\\[128,1\\], 512 B) is donated "
            "but no output can take the buffer") in result.stdout


def test_saved_report_junit_summary_and_annotations(project: Path, baseline: str,
                                                    tmp_path: Path) -> None:
    script = edited(project, "no_momentum.py", *NO_MOMENTUM_DONATION)
    current = tmp_path / "current.json"
    result = invoke("--baseline", baseline, "-o", str(current), script, "--steps", "2")
    assert result.exit_code == 1
    assert load_report(str(current)).functions[0].name == "train_step"

    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    junit = tmp_path / "junit.xml"
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"}
    result = invoke("--report", str(current), "--baseline", baseline, "--max-increase", "50%",
                    "--junit-xml", str(junit), env=env)
    assert result.exit_code == 1
    assert "final loss" not in result.stdout  # nothing ran
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n### memscope check: FAIL\n")
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::")]
    inputs = load_report(str(current)).functions[0].inputs
    state = format_bytes(sum(b.bytes for b in inputs if b.path.startswith("params")))
    assert annotations == [
        f"::error file={script},line=18,title=memscope check%3A train_step::train_step "
        f"(params: 4 arrays, {state}; momentum: 4 arrays, {state}; x: float32[128,32]; "
        "y: float32[128,1]; lr=0.01) [paired by name and signature "
        f"({project / 'donated.py'} -> {script})]: 4 leaves lost their alias (now "
        "not_donated): momentum[0]['b'], momentum[0]['w'], momentum[1]['b'], momentum[1]['w']"]
    xml = junit.read_text(encoding="utf-8")
    assert '<testsuites tests="1" failures="1"' in xml
    assert 'classname="memscope.train_step"' in xml


def test_budgets_from_pyproject_without_baseline(project: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.memscope.functions.train_step]
        max_peak = "1 KiB"
        forbid_unusable_donation = true
        require_aliased = ["params", "momentum"]

        [tool.memscope.functions.eval_step]
        max_peak = "1 GiB"
    """), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = invoke(str(project / "donated.py"), "--steps", "1")
    assert result.exit_code == 1, result.output
    out = " ".join(result.stdout.split())
    assert "memscope check against budgets from pyproject.toml" in out
    peak = load_report(str(project / "base.json")).functions[0].memory.peak_bytes  # type: ignore[union-attr]
    assert f"peak {format_bytes(peak)} is over max_peak 1.0 KiB" in out
    assert "eval_step FAIL has a budget in pyproject.toml but was never called" in out
    assert "require_aliased" not in out  # params and momentum are aliased


def test_budgets_from_config_file_combine_with_baseline(project: Path, baseline: str,
                                                        tmp_path: Path) -> None:
    config = tmp_path / "memscope.toml"
    config.write_text('[functions.train_step]\nmax_peak = "1 GiB"\n'
                      'require_aliased = ["x"]\n', encoding="utf-8")
    result = invoke("--config", str(config), "--baseline", baseline,
                    str(project / "donated.py"), "--steps", "1")
    assert result.exit_code == 1, result.output
    assert "require_aliased 'x': x is not_donated" in result.stdout
    assert f"baseline {baseline}, budgets from {config}" in " ".join(result.stdout.split())


def test_environment_difference_warns_and_strict_env_fails(project: Path, baseline: str,
                                                           tmp_path: Path) -> None:
    data = json.loads(Path(baseline).read_text(encoding="utf-8"))
    flags_now = data["environment"]["xla_flags"] or "unset"
    data["environment"]["jax"] = "0.9.0"
    data["environment"]["xla_flags"] = "--xla_cpu_use_thunk_runtime=false"
    other = tmp_path / "other-env.json"
    other.write_text(json.dumps(data), encoding="utf-8")
    current = str(Path(baseline))  # the baseline's own functions: nothing regressed
    result = invoke("--report", current, "--baseline", str(other))
    assert result.exit_code == 0, result.output
    assert ("The environment differs from the baseline's, so the figures may not be "
            "comparable: jax 0.9.0 -> ") in " ".join(result.stdout.split())
    assert f"XLA_FLAGS --xla_cpu_use_thunk_runtime=false -> {flags_now}" in " ".join(
        result.stdout.split())
    result = invoke("--strict-env", "--report", current, "--baseline", str(other))
    assert result.exit_code == 1
    assert "FAIL: 1 function checked, none failed; the environment differs" in result.stdout


def test_target_that_fails_exits_3_and_still_saves_the_report(tmp_path: Path,
                                                              baseline: str) -> None:
    script = tmp_path / "raises.py"
    script.write_text("import jax, jax.numpy as jnp\njax.jit(lambda x: x + 1)(jnp.ones(3))\n"
                      "raise ValueError('diverged')\n", encoding="utf-8")
    out = tmp_path / "r.json"
    result = invoke("--baseline", baseline, "-o", str(out), str(script))
    assert result.exit_code == 3
    assert result.stderr.splitlines()[-1] == (
        f"memscope: {script} failed (exit code 1): ValueError: diverged; nothing was checked")
    assert load_report(str(out)).run.outcome == "failed"  # type: ignore[union-attr]
    assert "memscope check against" not in result.stdout


def test_update_baseline_refuses_a_failed_run(tmp_path: Path) -> None:
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(5)\n", encoding="utf-8")
    result = invoke("--update-baseline", "--baseline", str(tmp_path / "b.json"), str(script))
    assert result.exit_code == 3
    assert "exits.py failed (exit code 5); nothing was checked" in result.stderr
    assert not (tmp_path / "b.json").exists()


# --- exit 2: usage and input errors, one line --------------------------------------------


def check_error(*args: str) -> str:
    result = invoke(*args)
    return assert_one_line_error(result.exit_code, result.stdout, result.stderr)


def test_malformed_baseline(tmp_path: Path, project: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "memscope.report/1", "functions": 3}', encoding="utf-8")
    message = check_error("--baseline", str(bad), str(project / "donated.py"))
    assert message == f"{bad}: report: missing field 'memscope_version'"


def test_missing_baseline_says_how_to_make_one(tmp_path: Path, project: Path) -> None:
    path = tmp_path / "none.json"
    message = check_error("--baseline", str(path), str(project / "donated.py"))
    assert message == (f"no baseline at {path}; make one with --update-baseline "
                       f"--baseline {path}")


def test_malformed_config_names_the_key(tmp_path: Path, baseline: str) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.memscope.functions.train_step]\nmax_peak = "2 GiBs"\n',
                      encoding="utf-8")
    message = check_error("--config", str(config), "--report", baseline)
    assert message.startswith(f"{config}: [tool.memscope.functions.train_step] max_peak: "
                              "not a size: '2 GiBs'")


@pytest.mark.parametrize(("args", "message"), [
    ((), "give a SCRIPT to run or --report REPORT.json, not both or neither"),
    (("--update-baseline", "--report", "r.json"),
     "--update-baseline needs --baseline FILE.json to write"),
    (("--baseline", "b.json", "--max-increase", "5", "--report", "r.json"),
     "--max-increase: not a percentage: '5' (write e.g. \"5%\")"),
    (("-m", "--report", "r.json"), "-m needs a MODULE to run"),
])
def test_usage_errors(args: tuple[str, ...], message: str) -> None:
    assert check_error(*args) == message


def test_nothing_to_check_against(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  baseline: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_error("--report", baseline).startswith("nothing to check against: give "
                                                        "--baseline FILE.json")


def test_options_after_the_script_go_to_it_and_the_error_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path) -> None:
    monkeypatch.chdir(tmp_path)
    message = check_error(str(project / "donated.py"), "--baseline", "b.json")
    assert message.endswith("(--baseline came after SCRIPT, so it went to the script: "
                            "memscope's options go before SCRIPT, as in memscope check "
                            "--baseline FILE.json SCRIPT [ARGS]...)")


def test_script_without_jit_exits_2(tmp_path: Path, baseline: str) -> None:
    script = tmp_path / "plain.py"
    script.write_text("print('hi')\n", encoding="utf-8")
    assert check_error("--baseline", baseline, str(script)) == (
        f"{script} called no jitted function; nothing to check")


# --- the installed command ----------------------------------------------------------------


def test_installed_check_exit_codes(project: Path, baseline: str, tmp_path: Path) -> None:
    proc = run_installed("check", "--report", baseline, "--baseline", baseline, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "PASS: 1 function checked, none failed" in proc.stdout
    data = json.loads(Path(baseline).read_text(encoding="utf-8"))
    data["functions"][0]["memory"]["peak_bytes"] += 1
    grown = tmp_path / "grown.json"
    grown.write_text(json.dumps(data), encoding="utf-8")
    proc = run_installed("check", "--report", str(grown), "--baseline", baseline, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "FAIL: 1 of 1 checked function failed (train_step)" in proc.stdout
    proc = run_installed("check", "--report", str(grown), cwd=tmp_path)
    assert proc.returncode == 2


def test_unwritable_step_summary_is_one_line_error(baseline: str) -> None:
    result = invoke("--report", baseline, "--baseline", baseline,
                    env={"GITHUB_STEP_SUMMARY": "/nonexistent_dir/summary.md"})
    message = assert_one_line_error(result.exit_code, "", result.stderr)
    assert message == "cannot write /nonexistent_dir/summary.md: No such file or directory"
