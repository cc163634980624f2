"""A program that configures JAX through the environment before its own ``import
jax`` gets that configuration under ``memscope run``, as under python.

JAX reads ``JAX_ENABLE_X64``, ``JAX_PLATFORMS``, ``JAX_DEFAULT_MATMUL_PRECISION``
and its logging variables when it is imported; memscope imports no JAX before
the program does (``memscope.program.imports``), and sets its capture up inside
the program's own ``import jax``. Each program here runs as a fresh process
both ways, and prints what JAX made of its settings: the outputs must be equal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import MEMSCOPE

CONFIGURED = """
import os, sys
print("jax before the program's import:", "jax" in sys.modules)
os.environ["JAX_ENABLE_X64"] = "1"
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
import jax
import jax.numpy as jnp

print(jax.config.jax_enable_x64, jax.config.jax_platforms,
      jax.config.jax_default_matmul_precision, jax.default_backend())
x = jnp.arange(4.0)
print(x.dtype)
step = jax.jit(lambda v: (v * (1 + 1e-12)).sum() + jnp.float64(2) ** -40)
print(repr(float(step(x))), step(x).dtype)
"""


def _both(tmp_path: Path, source: str, *memscope_args: str,
          env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], ...]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("JAX_", "TF_CPP"))} | (env or {})
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=environment, cwd=tmp_path)
    under = subprocess.run([MEMSCOPE, "run", "-q", *memscope_args, str(script)],
                           capture_output=True, text=True, env=environment, cwd=tmp_path)
    return plain, under


def test_settings_the_program_makes_before_importing_jax_take_effect(tmp_path):
    plain, under = _both(tmp_path, CONFIGURED, "-o", str(tmp_path / "r.json"))
    assert plain.returncode == 0, plain.stderr
    assert under.returncode == 0, under.stderr
    assert under.stdout == plain.stdout
    assert plain.stdout.splitlines()[:3] == [
        "jax before the program's import: False", "True cpu highest cpu", "float64"]
    # ... and the function was captured, on the JAX the program configured.
    report = json.loads((tmp_path / "r.json").read_text())
    (fn,) = report["functions"]
    assert fn["signature"] == "(float64[4])"


def test_jax_s_own_logging_settings_are_read_as_under_python(tmp_path):
    """JAX_LOGGING_LEVEL set by the program before ``import jax``: JAX's own log
    lines (compiles, on stderr) appear under memscope as under python."""
    source = """
    import os
    os.environ["JAX_LOGGING_LEVEL"] = "DEBUG"
    import jax, jax.numpy as jnp
    print(jax.jit(lambda x: x + 1)(jnp.ones(3)))
    """
    plain, under = _both(tmp_path, source)
    assert under.returncode == plain.returncode == 0, under.stderr
    assert under.stdout == plain.stdout
    # Where each of JAX's log lines comes from (module:line), the time left out:
    # memscope's own compiles may add lines, the program's are all there.
    def sources(text: str) -> set[str]:
        return set(re.findall(r"^DEBUG:[\d-]+ [\d:,]+:([\w.]+:\d+):", text, re.M))

    assert "jax._src.dispatch" in " ".join(sources(plain.stderr))
    assert sources(plain.stderr) <= sources(under.stderr)


def test_a_program_that_never_imports_jax_runs_without_it(tmp_path):
    plain, under = _both(tmp_path, """
    import sys
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib")))
    """, "-o", str(tmp_path / "r.json"))
    assert plain.stdout == under.stdout == "[]\n"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["functions"] == [] and report["environment"]["backend"] is None
    assert under.returncode == 2  # nothing was called: said in one line
    assert under.stderr.strip().splitlines()[-1].startswith("memscope: ")


@pytest.mark.parametrize("command", ["run", "check", "diff", "fit"])
def test_memscope_s_own_start_imports_no_jax(command):
    """The command modules, and memscope's start, import no JAX (a subprocess,
    so that this test's own JAX does not count)."""
    code = (f"import sys, memscope.cli, memscope.cli.{command}; "
            "print([m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == "[]\n"
