"""memscope fix on a Flax NNX step (issue 66): nnx.jit writes the donated model
and optimizer back into the same objects, so the loop passing them again is no
reason to refuse; the edited program prints what it printed before."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.end_to_end

PROGRAM = Path(__file__).resolve().parent / "programs" / "nnx_fix_step.py"


def _python(script: Path) -> str:
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          check=True, timeout=300).stdout


def test_fix_writes_nnx_jit_donation_and_the_program_runs_the_same(tmp_path: Path) -> None:
    script = tmp_path / "step.py"
    shutil.copy(PROGRAM, script)
    before = _python(script)
    done = subprocess.run([sys.executable, "-m", "memscope", "fix", "--write", str(script)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused" not in done.stdout + done.stderr
    edited = script.read_text()
    assert '@nnx.jit(donate_argnames=("model", "optimizer"))' in edited
    # the edit is the decorator's keyword alone
    assert edited.replace('@nnx.jit(donate_argnames=("model", "optimizer"))', "@nnx.jit") \
        == PROGRAM.read_text()
    assert "all 8 advised leaves aliased" in done.stdout
    assert _python(script) == before
