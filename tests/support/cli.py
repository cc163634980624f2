"""memscope's command line in the tests: click's runner in-process, the installed
command in a subprocess, and what a one-line error looks like."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memscope.cli import cli
from tests.support.samples import ROOT

#: the installed ``memscope`` command (the console script beside this python)
MEMSCOPE = shutil.which("memscope") or str(Path(sys.executable).with_name("memscope"))
#: the environment the end-to-end tests start programs in: JAX on the CPU, no
#: Python warnings in their stderr
PROGRAM_ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "JAX_PLATFORMS": "cpu"}

#: a program whose matmul (its line 7) holds most of its memory, run by the
#: --buffers and live-at-the-peak tests as prog.py
MATMUL_PROGRAM = """\
import jax
import jax.numpy as jnp


@jax.jit
def forward(x, w):
    y = x @ w
    z = jnp.tanh(y) @ w.T
    return (z * 2).sum() + y.sum()


forward(jnp.ones((64, 128)), jnp.ones((128, 256)))
"""


def invoke(*args: str) -> Result:
    """``memscope ARGS`` through click's runner, in this process."""
    # catch_exceptions=False: an exception that escapes the CLI fails the test
    # with its traceback instead of turning into exit code 1.
    return CliRunner().invoke(cli, list(args), prog_name="memscope", catch_exceptions=False)


def assert_one_line_error(exit_code: int, stdout: str, stderr: str) -> str:
    """Exit 2, exactly one stderr line ``memscope: error: ...``, no traceback; the message."""
    assert exit_code == 2, (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert stderr.endswith("\n")
    assert lines[0].startswith("memscope: error: "), stderr
    assert "Traceback" not in stdout + stderr
    return lines[0].removeprefix("memscope: error: ")


def cli_error(*args: str) -> str:
    """The one-line error message of ``memscope ARGS`` (asserted to be one)."""
    result = invoke(*args)
    return assert_one_line_error(result.exit_code, result.stdout, result.stderr)


def write(path: Path, text: str) -> Path:
    """Write ``text``, dedented, to ``path``; returns the path."""
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def memscope_executable() -> str:
    """The installed command; skips the test where it is not installed."""
    if not os.access(MEMSCOPE, os.X_OK):
        pytest.skip("the memscope console script is not installed")
    return MEMSCOPE


def run_installed(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed ``memscope ARGS`` in ``cwd``, JAX on the CPU (120 s at most)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([memscope_executable(), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def run_memscope(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The installed ``memscope ARGS`` at 120 columns, from the checkout's root by
    default (300 s at most)."""
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([MEMSCOPE, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
