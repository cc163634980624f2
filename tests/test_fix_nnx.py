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
    assert _python(script) == before
    # JAX's own word on the edit: one more call of the edited step deletes every
    # array of the model's and the optimizer's state (donated), and leaves the
    # objects holding live ones (written back), so the loop's next call is valid;
    # memscope's check found the same leaves aliased.
    with script.open("a") as f:
        f.write(PROBE)
    held, deleted, stale = _python(script).splitlines()[-1].split()
    assert held == deleted != "0" and stale == "False"
    assert f"all {held} advised leaves aliased" in done.stdout


PROBE = """
import jax
held = jax.tree.leaves(nnx.state((model, optimizer)))
train_step(model, optimizer, x, y)
now = jax.tree.leaves(nnx.state((model, optimizer)))
print(len(held), sum(a.is_deleted() for a in held), any(a.is_deleted() for a in now))
"""
