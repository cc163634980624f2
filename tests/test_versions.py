"""The supported JAX range: a clear refusal outside it, and a loud failure when a
compiled program cannot be read (never an empty report with exit 0).

The installed JAX is one of the supported series (CI runs this suite on each);
the refusal is exercised by giving memscope another version string, the one
thing an unsupported installation changes for it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jax
import pytest
from click.testing import CliRunner, Result

from memscope import _compat
from memscope.cli import cli
from memscope.errors import EXIT_UNREADABLE, EXIT_USAGE

SAMPLES = Path(__file__).resolve().parent.parent / "sample_programs"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="memscope", catch_exceptions=False)


def test_installed_jax_is_supported_and_matches_pyproject():
    assert _compat.support_problem() is None
    assert _compat.series(jax.__version__) in _compat.SUPPORTED_SERIES
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    low, high = _compat.SUPPORTED_SERIES[0], _compat.SUPPORTED_SERIES[-1]
    for name in ("jax", "jaxlib"):
        assert f'"{name}>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}"' in text


@pytest.mark.parametrize(("jax_version", "jaxlib_version", "refused"), [
    ("0.7.0", "0.7.0", None), ("0.8.3", "0.8.3", None), ("0.9.2", "0.9.2", None),
    ("0.10.2", "0.10.2", None), ("0.10.0.dev20260101", "0.10.0", None),
    ("0.6.2", "0.6.2", "JAX 0.6.2"), ("0.4.38", "0.4.38", "JAX 0.4.38"),
    ("0.11.0", "0.11.0", "JAX 0.11.0"), ("1.0.0", "1.0.0", "JAX 1.0.0"),
    ("0.7.2", "0.6.2", "jaxlib 0.6.2"), ("unknown", "0.7.2", "JAX unknown"),
])
def test_support_problem_names_the_version_and_the_range(jax_version, jaxlib_version,
                                                         refused):
    problem = _compat.support_problem(jax_version, jaxlib_version)
    if refused is None:
        assert problem is None
        return
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"{refused} is not supported: ")
    assert "0.7 to 0.10" in problem and "was not changed" in problem


def _writes_marker(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        open({str(marker)!r}, "w").close()
        print(jax.jit(lambda x: x * 2)(jnp.ones(3)))
    """), encoding="utf-8")
    return script, marker


@pytest.mark.parametrize("command", [["run"], ["check", "--update-baseline", "--baseline",
                                               "b.json"]])
def test_unsupported_jax_is_refused_in_one_line_before_the_target_runs(
        tmp_path, monkeypatch, command):
    monkeypatch.setattr(_compat, "JAX_VERSION", "0.6.2")
    monkeypatch.delenv(_compat.ALLOW_UNSUPPORTED_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    script, marker = _writes_marker(tmp_path)
    result = invoke(*command, str(script))
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.splitlines() == [
        f"memscope: error: {_compat.support_problem()}"]
    assert result.stdout == ""
    assert not marker.exists()  # the target never started


def test_unsupported_jax_runs_when_allowed_and_the_report_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(_compat, "JAX_VERSION", "0.11.0")
    monkeypatch.setenv(_compat.ALLOW_UNSUPPORTED_ENV, "1")
    script, marker = _writes_marker(tmp_path)
    result = invoke("run", "-q", "-o", str(tmp_path / "r.json"), str(script))
    assert result.exit_code == 0, result.stderr
    assert marker.exists()
    assert result.stderr.splitlines() == [
        "memscope: warning: JAX 0.11.0 is not supported; running anyway, figures unverified"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["notes"] == [f"JAX 0.11.0 is not supported: the figures are unverified "
                               f"({_compat.ALLOW_UNSUPPORTED_ENV} is set)"]
    assert len(report["functions"]) == 1


@pytest.fixture
def unreadable(monkeypatch):
    """A JAX whose lowered module memscope cannot read, as jaxlib 0.7 and 0.8
    were for memscope's OpAttributeMap.get (the failure the issue reported)."""
    def broken(lowered):
        raise AttributeError("'OpAttributeMap' object has no attribute 'get'")
    monkeypatch.setattr(_compat, "main_signature", broken)


def test_an_unreadable_program_is_said_loudly_and_fails_strict(tmp_path, unreadable):
    script = SAMPLES / "donated.py"
    plain = invoke("run", "-o", str(tmp_path / "r.json"), str(script), "--steps", "1")
    line = ("memscope: could not read the compiled program of 1 function on JAX "
            f"{jax.__version__}: train_step (could not read the compiled program: "
            "AttributeError: 'OpAttributeMap' object has no attribute 'get'); their figures "
            "are missing from the report")
    assert plain.exit_code == 0  # the target's own exit code, as without --strict
    assert line in plain.stderr.splitlines()
    assert "could not read the compiled program: AttributeError" in plain.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    (fn,) = report["functions"]
    assert fn["memory"] is None and "OpAttributeMap" in fn["error"]

    strict = invoke("run", "-q", "--strict", str(script), "--steps", "1")
    assert strict.exit_code == EXIT_UNREADABLE
    assert line in strict.stderr.splitlines()

    check = invoke("check", "--report", str(tmp_path / "r.json"), "--baseline",
                   str(tmp_path / "r.json"))
    assert check.exit_code == EXIT_UNREADABLE
    assert check.stderr.splitlines() == [f"{line}; nothing was checked"]


def test_a_failing_target_keeps_its_exit_code_under_strict(tmp_path, unreadable):
    script = tmp_path / "fails.py"
    script.write_text("import jax, jax.numpy as jnp, sys\n"
                      "jax.jit(lambda x: x + 1)(jnp.ones(2))\nsys.exit(3)\n")
    result = invoke("run", "-q", "--strict", str(script))
    assert result.exit_code == 3
