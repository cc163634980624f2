"""docs/ci.md, run as written: its baseline command, its config and test file, its workflow.

The example project is sample_programs/donated.py as ``train.py``. The workflow's
commands that call memscope or pytest run in order with the environment GitHub
Actions gives a step (``GITHUB_ACTIONS``, ``GITHUB_STEP_SUMMARY``); set-up
commands (pip, gh) are skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ci.md"


def code_blocks(language: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


def workflow_commands(workflow: str) -> list[str]:
    """The shell lines of every ``run:`` step, in order (``run: |`` blocks included)."""
    commands: list[str] = []
    lines = workflow.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)(?:- )?run: ?(.*)$", line)
        if not match:
            continue
        if match.group(2) != "|":
            commands.append(match.group(2))
            continue
        indent = len(match.group(1))
        for body in lines[i + 1:]:
            if body.strip() and len(body) - len(body.lstrip()) <= indent:
                break
            if body.strip():
                commands.append(body.strip())
    return commands


def runs_memscope_or_pytest(command: str) -> bool:
    return "memscope check" in command or command.startswith("python -m pytest")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ci_project")
    shutil.copy(ROOT / "sample_programs" / "donated.py", folder / "train.py")
    shutil.copy(ROOT / "sample_programs" / "_data.py", folder / "_data.py")
    (toml,) = code_blocks("toml")
    (folder / "pyproject.toml").write_text(toml, encoding="utf-8")
    (test,) = code_blocks("python")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_memory.py").write_text(test, encoding="utf-8")
    (baseline_command,) = code_blocks("sh")
    proc = shell(baseline_command, folder)
    assert proc.returncode == 0, proc.stderr
    assert "memscope: wrote the baseline memscope-baseline.json (1 function)" in proc.stdout
    return folder


def shell(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # The venv's python and memscope first on PATH, as after the workflow's install step.
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    full_env = {**os.environ, "PATH": path, "JAX_PLATFORMS": "cpu", **env}
    full_env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_workflow_uses_every_piece() -> None:
    (workflow,) = code_blocks("yaml")
    commands = " ".join(workflow_commands(workflow))
    for piece in ("memscope check", "--baseline", "--junit-xml", "--format markdown",
                  "-o memscope-report.json", "python -m pytest"):
        assert piece in commands, piece


def test_documented_commands_run_as_written(project: Path) -> None:
    (workflow,) = code_blocks("yaml")
    commands = [c for c in workflow_commands(workflow) if runs_memscope_or_pytest(c)]
    assert len(commands) == 3
    summary = project / "step-summary.md"
    for command in commands:
        proc = shell(command, project, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)

    gate = summary.read_text(encoding="utf-8")
    assert gate.startswith("### memscope check: PASS\n")
    assert gate.count("### memscope check") == 1  # the comment step wrote none
    assert ("Checked against baseline `memscope-baseline.json`, budgets from "
            "`pyproject.toml`.") in gate
    assert "| `train_step` |" in gate
    comment = (project / "memscope-comment.md").read_text(encoding="utf-8")
    assert comment == gate
    assert '<testcase classname="memscope.train_step"' in (
        project / "memscope-junit.xml").read_text(encoding="utf-8")
    junit = (project / "pytest-junit.xml").read_text(encoding="utf-8")
    assert 'tests="2"' in junit and 'failures="0"' in junit


def test_the_documented_gate_fails_on_a_regression(project: Path) -> None:
    (workflow,) = code_blocks("yaml")
    gate = next(c for c in workflow_commands(workflow) if c.startswith("memscope check"))
    shutil.copy(project / "train.py", project / "train.orig")
    try:
        source = (project / "train.py").read_text(encoding="utf-8")
        (project / "train.py").write_text(source.replace(
            'donate_argnames=("params", "momentum")', 'donate_argnames=("params",)'),
            encoding="utf-8")
        proc = shell(gate, project, GITHUB_ACTIONS="true")
    finally:
        shutil.move(project / "train.orig", project / "train.py")
    assert proc.returncode == 1, proc.stderr
    assert "::error file=train.py,line=18,title=memscope check%3A train_step::" in proc.stdout
    assert "lost their alias" in proc.stdout
